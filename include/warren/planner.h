/* planner.h: the planner (docs/design.md §5): partition leases, materialising runs
 * from job schedules with misfire policies, the relay (publish with
 * confirms), the outbox and the reconciler, driven by a tick loop woken by
 * LISTEN/NOTIFY. Also the pure schedule helpers the planner and the
 * trigger/backfill commands share (fire times, deterministic jitter). */
#ifndef WARREN_PLANNER_H
#define WARREN_PLANNER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include <warren/config.h>
#include <warren/error.h>
#include <warren/log.h>
#include <warren/timefmt.h>
#include <warren/tz.h>

/* ---------------------------------------------------------------- schedules */

typedef struct warren_schedule warren_schedule;

/* A job's schedule as stored in warren.jobs: kind "cron" (expression in zone
 * tz), "every" (a duration such as "90s": fire times are the Unix epoch +
 * k * interval, so "90s" fires at instants divisible by 90 s since
 * 1970-01-01T00:00:00Z, whatever tz says) or "at" (one RFC 3339 instant).
 * job seeds cron's H forms. db is borrowed (zones are cached there) and must
 * outlive the schedule. *out is new; free with warren_schedule_free (NULL ok).
 * Errors: WARREN_EINVAL (unknown kind), WARREN_ECRON, WARREN_ENEVER,
 * WARREN_ETZ, WARREN_EPARSE (bad interval or instant). */
int warren_schedule_new(warren_tzdb *db, const char *job, const char *kind, const char *expr,
                        const char *tz, warren_schedule **out, warren_error *err);
void warren_schedule_free(warren_schedule *s);

/* The first fire instant strictly after `from`, in whole UTC seconds
 * (*next_s); *flags (may be NULL) gets WARREN_FIRE_* bits from cron.h (0 for
 * every/at). Returns WARREN_ENEVER when there is none (an "at" schedule after
 * its instant). */
int warren_schedule_next(const warren_schedule *s, warren_us from, int64_t *next_s, unsigned *flags,
                         warren_error *err);

/* The job's stable jitter in whole seconds: FNV-1a 64-bit of the job name
 * modulo ceil(jitter_ms / 1000); 0 when jitter_ms <= 0. due_at of a
 * scheduled run = scheduled_at + this. */
int64_t warren_jitter_offset_s(const char *job, int64_t jitter_ms);

/* ------------------------------------------------------------------ planner */

typedef struct warren_planner warren_planner;

/* Creates a planner: copies cfg->planner (cfg is not kept), connects to
 * PostgreSQL (store_url) and RabbitMQ (amqp_url), LISTENs on
 * WARREN_NOTIFY_CHANNEL and puts the channel in confirm mode. The planner's
 * id is "host:pid:start-µs" unless warren_planner_set_id changes it. Jobs are
 * read from warren.jobs (what `warren sync` wrote), not from cfg->jobs.
 * lg is borrowed (may be NULL) and must outlive the planner. *out is new;
 * free with warren_planner_free (NULL ok). Errors: WARREN_EDBCONN,
 * WARREN_EBROKERCONN, WARREN_ENOMEM. */
int warren_planner_new(const warren_config *cfg, const char *store_url, const char *amqp_url,
                       const warren_logger *lg, warren_planner **out, warren_error *err);
/* Releases nothing in the database (call warren_planner_release first for a
 * clean hand-over; warren_planner_run does), closes connections, frees. */
void warren_planner_free(warren_planner *p);

/* Sets the lease owner id (copied; at most 100 bytes). Call before the first tick. */
int warren_planner_set_id(warren_planner *p, const char *id, warren_error *err);
/* The lease owner id (borrowed, valid until the planner is freed). */
const char *warren_planner_id(const warren_planner *p);

/* Fault-test hook: sleep ms between publishing a relay batch and waiting for
 * its confirms (a kill -9 there leaves published-but-unmarked runs). 0 = off. */
void warren_planner_set_stall(warren_planner *p, int64_t ms);

/* What the planner did (cumulative since it was created). */
typedef struct warren_planner_stats {
    uint64_t ticks;
    uint64_t runs_inserted;    /* planned, misfire and skipped rows created */
    uint64_t runs_skipped;     /* of which state skipped (misfire policies) */
    uint64_t runs_published;   /* confirmed publishes marked published */
    uint64_t runs_unroutable;  /* returned as unroutable (recorded on the run) */
    uint64_t outbox_published; /* outbox rows published and deleted */
    uint64_t republished;      /* published runs sent back to planned by the reconciler */
    uint64_t leases_reaped;    /* expired worker leases handed to warren.reap_expired_leases */
    uint64_t reconnects;
    int partitions_owned;    /* at the last tick */
    uint64_t materialise_us; /* time spent materialising (wall, monotonic) */
    uint64_t relay_passes;   /* relay-only passes woken by an enqueue, release or replay */
    uint64_t helper_jobs;    /* of the jobs planned, those planned on the second connection
                                (a tick whose first batch is full uses two) */
    uint64_t full_scans;     /* ticks whose due-jobs scan started at '-infinity' (the first,
                                after a change of partitions or a failed tick, once a minute) */
    uint64_t below_floor;    /* due jobs such a scan found below the floor the planner had,
                                unmarked: each one a bug of the replan rule, logged (0) */
} warren_planner_stats;
void warren_planner_stats_get(const warren_planner *p, warren_planner_stats *out);

/* One tick: renew/take partition leases (fair share), materialise due jobs of
 * owned partitions (misfire policies applied), relay due runs and the outbox
 * with confirms, and every few ticks reconcile. Connection failures are
 * returned (WARREN_EDBCONN, WARREN_EBROKERCONN, WARREN_EDB, WARREN_EBROKER,
 * WARREN_ETIMEOUT); the caller reconnects (warren_planner_run does). */
int warren_planner_tick(warren_planner *p, warren_error *err);

/* Ticks until *stop becomes non-zero (set it from a signal handler), sleeping
 * between ticks on LISTEN (a NOTIFY wakes it at once: a whole tick for a
 * notification that needs planning, only the relay's pass for one whose runs
 * exist already, an enqueue, a cap's release or a replay, whose next whole
 * tick stays at its time; WARREN_NOTIFY_* in store.h). Lost connections are
 * re-established with capped exponential backoff (100 ms doubling to 10 s),
 * logged at warn; while RabbitMQ is unreachable the planner keeps
 * materialising (runs wait in the database). On stop: finishes the current batch, releases its
 * partition leases, returns 0. stop may be NULL (run forever). */
int warren_planner_run(warren_planner *p, volatile sig_atomic_t *stop, warren_error *err);

/* Gives up this planner's partition leases (other planners take them at
 * their next tick). */
int warren_planner_release(warren_planner *p, warren_error *err);

/* The next tick's due-jobs scan starts at '-infinity', as it does once a
 * minute (docs/delivery.md, "The scan floor"; for tests and benchmarks). */
void warren_planner_rescan(warren_planner *p);

#endif
