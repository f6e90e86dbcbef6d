/* planner.c: the planner's tick (docs/design.md §5): partition leases, materialising
 * fire times into runs with misfire policies, then the relay, the outbox and
 * the reconciler; and the loop that ticks, wakes on NOTIFY and reconnects.
 * docs/delivery.md explains the decisions. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <warren/broker.h>
#include <warren/cron.h>
#include <warren/duration.h>
#include <warren/backoff.h>
#include <warren/hash.h>
#include <warren/planner.h>
#include <warren/store.h>

#include "internal.h"
#include "relay.h"
#include "store_plan.h"

/* Jobs locked per materialise transaction. A tick whose first batch is full
 * (a backlog) materialises on a second connection too, in a helper thread:
 * the work is the server's (one backend runs one core flat out), and FOR
 * UPDATE SKIP LOCKED gives each connection its own jobs (materialise). */
#define JOB_BATCH 500
/* Runs one job may create in one tick (the cursor continues next tick). */
#define MAX_RUNS_PER_JOB 10000
/* Missed fire times looked at per job before the rest are coalesced. */
#define MAX_MISSED_SCAN 1000000
/* Skipped rows written per job and tick (the last one's note counts the rest). */
#define MAX_SKIPPED_ROWS 1000
/* The reconciler runs at most this often. */
#define RECONCILE_EVERY_MS 5000
/* The due-jobs scan starts at '-infinity' at least this often ("The scan
 * floor", before materialise). */
#define FULL_SCAN_EVERY_MS 60000
#define RECONCILE_LIMIT 1000
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 10000

/* ---------------------------------------------------------------- schedules */

enum { SCHED_CRON, SCHED_EVERY, SCHED_AT };

struct warren_schedule {
    int kind;
    warren_cron *cron;
    const warren_tz *tz;
    int64_t every_s;
    int64_t at_s;
};

int warren_schedule_new(warren_tzdb *db, const char *job, const char *kind, const char *expr,
                        const char *tz, warren_schedule **out, warren_error *err)
{
    warren_schedule *s;
    int rc = 0;

    *out = NULL;
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    if (strcmp(kind, "cron") == 0) {
        s->kind = SCHED_CRON;
        if ((rc = warren_tzdb_get(db, tz && *tz ? tz : "UTC", &s->tz, err)) != 0)
            goto fail;
        if ((rc = warren_cron_parse(expr, job, &s->cron, err)) != 0)
            goto fail;
    } else if (strcmp(kind, "every") == 0) {
        int64_t ms = 0;
        s->kind = SCHED_EVERY;
        if ((rc = warren_duration_parse(expr, &ms, err)) != 0)
            goto fail;
        if (ms <= 0) {
            rc = warren_error_set(err, WARREN_EPARSE, "interval \"%s\" must be positive", expr);
            goto fail;
        }
        s->every_s = (ms + 999) / 1000; /* run keys have whole seconds */
    } else if (strcmp(kind, "at") == 0) {
        warren_us at = 0;
        s->kind = SCHED_AT;
        if ((rc = warren_time_parse(expr, &at, err)) != 0)
            goto fail;
        s->at_s = warren_us_to_s(at);
    } else {
        rc = warren_error_set(err, WARREN_EINVAL, "unknown schedule kind \"%s\"", kind);
        goto fail;
    }
    *out = s;
    return 0;
fail:
    warren_schedule_free(s);
    return rc;
}

void warren_schedule_free(warren_schedule *s)
{
    if (s == NULL)
        return;
    warren_cron_free(s->cron);
    free(s);
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int warren_schedule_next(const warren_schedule *s, warren_us from, int64_t *next_s, unsigned *flags,
                         warren_error *err)
{
    if (flags)
        *flags = 0;
    switch (s->kind) {
    case SCHED_CRON:
        return warren_cron_next(s->cron, s->tz, from, next_s, flags, err);
    case SCHED_EVERY: {
        /* Anchor: the Unix epoch. The next multiple of every strictly after from. */
        int64_t k = floor_div(from, s->every_s * WARREN_US_PER_S);
        *next_s = (k + 1) * s->every_s;
        return 0;
    }
    default:
        if ((warren_us)s->at_s * WARREN_US_PER_S > from) {
            *next_s = s->at_s;
            return 0;
        }
        return warren_error_set(err, WARREN_ENEVER, "one-shot schedule already fired");
    }
}

int64_t warren_jitter_offset_s(const char *job, int64_t jitter_ms)
{
    int64_t n;

    if (jitter_ms <= 0 || job == NULL)
        return 0;
    n = (jitter_ms + 999) / 1000;
    return (int64_t)(warren_hash_fnv1a64(job) % (uint64_t)n);
}

/* ------------------------------------------------------------------ planner */

/* What one connection materialises with: its store, its zone cache (the
 * caches are not shared between threads) and its counters. */
typedef struct mat_ctx {
    warren_store *st;
    warren_tzdb *tzdb;
    uint64_t skipped;    /* runs recorded as skipped */
    uint64_t inserted;   /* runs inserted */
    size_t jobs;         /* jobs locked */
    int last_full;       /* the last batch was full */
    warren_plan_pos pos; /* this tick's batches got this far (store_plan.h) */
    /* The scan floor: phase 0 locks the jobs marked replan, phase 1 every due
     * job from pos on (started at the floor, or at '-infinity'). */
    int phase;
    int floor_none; /* phase 1 has nothing to find (the floor is past every cursor) */
    int floor_known;
    warren_us floor;
    int check;      /* a full scan with a floor known: say what it finds below it */
    int has_tmin;   /* a batch locked jobs: tmin is the smallest horizon edge */
    warren_us tmin; /* of those batches (now() + horizon; the helper starts with the main
                       connection's, its first batch's) */
    uint64_t below; /* jobs the check found below the floor, unmarked */
} mat_ctx;

/* The helper thread's share of a tick (materialise_helper). */
typedef struct mat_helper {
    struct warren_planner *p;
    mat_ctx m;
    int64_t start_ms, budget_ms;
    int rc;
    warren_error err;
} mat_helper;

struct warren_planner {
    warren_planner_config pc;
    char *store_url;
    char *amqp_url;
    const warren_logger *lg; /* &locked_lg, or NULL */
    warren_logger user_lg, locked_lg;
    pthread_mutex_t log_mu; /* the helper thread logs too: one message at a time */
    warren_store *st;
    warren_broker *b;
    warren_relay *relay;
    warren_tzdb *tzdb;
    mat_helper helper; /* its store is opened at the first backlog, kept */
    int helper_logged; /* a failure of the second connection was said */
    char id[128];
    int64_t stall_ms;
    int64_t last_reconcile_ms;
    int reap_missing_logged;
    int has_sync_state; /* migration 015: warren.sync_state holds the jobs' partition count */
    int cfg_partitions; /* planner.partitions of this planner's config (pc.partitions: in use) */
    /* The scan floor ("The scan floor", before materialise). */
    int floor_known; /* 0: the next tick scans from '-infinity' */
    int floor_none;  /* no unmarked job has a finite cursor at or above the floor */
    warren_us floor; /* every eligible job of our partitions has a cursor >= floor or replan */
    int64_t last_full_scan_ms;
    int rescan;       /* warren_planner_rescan: the next tick is a full scan */
    int floor_owned;  /* partitions owned at the last tick (a change drops the floor) */
    int last_tick_ok; /* the previous tick returned 0 (else: rescan) */
    volatile sig_atomic_t *stop;
    warren_planner_stats stats;
};

/* The program's logger, called under log_mu (a callback need not be
 * thread-safe). */
static void locked_log(void *ud, warren_log_level level, const char *msg)
{
    warren_planner *p = ud;
    pthread_mutex_lock(&p->log_mu);
    p->user_lg.fn(p->user_lg.ud, level, msg);
    pthread_mutex_unlock(&p->log_mu);
}

/* (Also read by the materialising helper thread: a volatile sig_atomic_t set
 * by a signal handler, or by another thread of a program that embeds the
 * planner, read at batch boundaries; a late read costs at most one batch.)
 * An atomic load: a plain read of a flag another thread stores is a data
 * race (ThreadSanitizer); that thread should store it with
 * __atomic_store_n(stop, 1, __ATOMIC_RELAXED). */
static int stopping(const warren_planner *p)
{
    return p->stop != NULL && __atomic_load_n(p->stop, __ATOMIC_RELAXED) != 0;
}

static int64_t lease_ms(const warren_planner *p)
{
    int64_t ms = p->pc.tick_ms * 10;
    return ms < 5000 ? 5000 : ms;
}

/* The relay publishes this far ahead: the horizon, but well inside the delay
 * queues' x-expires (an expired queue loses its messages). */
static int64_t relay_lead_ms(const warren_planner *p)
{
    int64_t lead = p->pc.horizon_ms;
    if (lead > p->pc.delay_queue_expires_ms / 2)
        lead = p->pc.delay_queue_expires_ms / 2;
    return lead;
}

static int connect_broker(warren_planner *p, warren_error *err)
{
    int rc;
    warren_broker_free(p->b);
    p->b = NULL;
    if ((rc = warren_broker_open(p->amqp_url, p->lg, &p->b, err)) != 0)
        return rc;
    if ((rc = warren_broker_confirm_select(p->b, err)) != 0) {
        warren_broker_free(p->b);
        p->b = NULL;
        return rc;
    }
    if (p->relay)
        warren_relay_set_broker(p->relay, p->b);
    return 0;
}

int warren_planner_new(const warren_config *cfg, const char *store_url, const char *amqp_url,
                       const warren_logger *lg, warren_planner **out, warren_error *err)
{
    warren_planner *p;
    char host[64] = "host";
    int rc;

    *out = NULL;
    if ((p = calloc(1, sizeof(*p))) == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory creating the planner");
    pthread_mutex_init(&p->log_mu, NULL);
    p->pc = cfg->planner;
    if (p->pc.tick_ms <= 0)
        p->pc.tick_ms = 1000;
    if (p->pc.horizon_ms <= 0)
        p->pc.horizon_ms = 150000; /* planner.horizon's default, "2m30s" */
    if (p->pc.misfire_threshold_ms <= 0)
        p->pc.misfire_threshold_ms = 60000;
    if (p->pc.reconcile_grace_ms <= 0)
        p->pc.reconcile_grace_ms = 30000;
    if (p->pc.partitions <= 0)
        p->pc.partitions = 64;
    p->cfg_partitions = p->pc.partitions;
    if (p->pc.publish_batch <= 0)
        p->pc.publish_batch = 200;
    if (p->pc.delay_queue_expires_ms <= 0)
        p->pc.delay_queue_expires_ms = 600000;
    if (lg != NULL) {
        p->user_lg = *lg;
        p->locked_lg.fn = lg->fn != NULL ? locked_log : NULL;
        p->locked_lg.ud = p;
        p->locked_lg.min_level = lg->min_level;
        p->lg = &p->locked_lg;
    }
    p->store_url = strdup(store_url ? store_url : "");
    p->amqp_url = strdup(amqp_url ? amqp_url : "");
    p->tzdb = warren_tzdb_new(NULL);
    if (!p->store_url || !p->amqp_url || !p->tzdb) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory creating the planner");
        goto fail;
    }
    gethostname(host, sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(p->id, sizeof(p->id), "%s:%ld:%lld", host, (long)getpid(),
                 (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000);
    }
    if (p->pc.delay_ring > 0 &&
        (rc = warren_broker_delay_ring_check(p->pc.delay_ring, relay_lead_ms(p), err)) != 0)
        goto fail;
    if ((rc = warren_store_open(p->store_url, p->lg, &p->st, err)) != 0)
        goto fail;
    if ((rc = warren_store_listen(p->st, err)) != 0)
        goto fail;
    if (p->pc.release_lead_ms > 0) {
        /* Before migration 009 warren.claim does not wait for the due time: a run
         * released early would start early. */
        if ((rc = warren_store_has_migration(p->st, 9, err)) < 0)
            goto fail;
        if (rc == 0) {
            warren_log(lg, WARREN_LOG_WARN,
                       "planner: migration 009 (claims wait for the due time) is not applied: "
                       "runs are released at their due time, not planner.release_lead before; "
                       "run `warren migrate` and restart the planner");
            p->pc.release_lead_ms = 0;
        }
    }
    /* Migrations the planner's queries need: 010 (the broken-job mark), 017
     * (the scan floor's replan mark). */
    {
        static const struct {
            int version;
            const char *what;
        } needs[] = {{10, "broken jobs"}, {17, "the planner's scan floor"}};
        for (size_t i = 0; i < sizeof(needs) / sizeof(needs[0]); i++) {
            if ((rc = warren_store_has_migration(p->st, needs[i].version, err)) < 0)
                goto fail;
            if (rc == 0) {
                rc = warren_error_set(err, WARREN_ECONFIG,
                                      "the database lacks migration %03d (%s), which this "
                                      "planner needs: run `warren migrate` first",
                                      needs[i].version, needs[i].what);
                goto fail;
            }
        }
    }
    if ((rc = warren_store_has_migration(p->st, 15, err)) < 0)
        goto fail;
    p->has_sync_state = rc;
    if ((rc = connect_broker(p, err)) != 0)
        goto fail;
    if ((rc = warren_relay_new(p->st, p->b, &p->pc, p->lg, &p->relay, err)) != 0)
        goto fail;
    *out = p;
    return 0;
fail:
    warren_planner_free(p);
    return rc;
}

void warren_planner_free(warren_planner *p)
{
    if (p == NULL)
        return;
    warren_relay_free(p->relay);
    warren_broker_free(p->b);
    warren_store_free(p->st);
    warren_tzdb_free(p->tzdb);
    warren_store_free(p->helper.m.st);
    warren_tzdb_free(p->helper.m.tzdb);
    pthread_mutex_destroy(&p->log_mu);
    free(p->store_url);
    free(p->amqp_url);
    free(p);
}

int warren_planner_set_id(warren_planner *p, const char *id, warren_error *err)
{
    if (id == NULL || id[0] == '\0' || strlen(id) > 100)
        return warren_error_set(err, WARREN_EINVAL, "planner id must be 1-100 bytes");
    snprintf(p->id, sizeof(p->id), "%s", id);
    return 0;
}

const char *warren_planner_id(const warren_planner *p)
{
    return p->id;
}

void warren_planner_set_stall(warren_planner *p, int64_t ms)
{
    p->stall_ms = ms;
    warren_relay_set_stall(p->relay, ms);
}

void warren_planner_stats_get(const warren_planner *p, warren_planner_stats *out)
{
    *out = p->stats;
}

/* ------------------------------------------------------------- materialise */

/* Rows to insert for one batch of jobs; notes are owned here. */
typedef struct runvec {
    warren_plan_run *v;
    char **notes;
    size_t n, cap;
} runvec;

static void runvec_free(runvec *rv)
{
    for (size_t i = 0; i < rv->n; i++)
        free(rv->notes[i]);
    free(rv->v);
    free(rv->notes);
    memset(rv, 0, sizeof(*rv));
}

/* Appends a row; note (copied) may be NULL. */
static int runvec_add(runvec *rv, const char *job, int64_t sched_s, int64_t jitter_s,
                      const char *state, const char *origin, const char *note, warren_error *err)
{
    char *copy = NULL;
    if (rv->n == rv->cap) {
        size_t cap = rv->cap ? rv->cap * 2 : 256;
        warren_plan_run *v = realloc(rv->v, cap * sizeof(*v));
        if (v == NULL)
            return warren_error_set(err, WARREN_ENOMEM, "out of memory planning runs");
        rv->v = v;
        char **notes = realloc(rv->notes, cap * sizeof(*notes));
        if (notes == NULL)
            return warren_error_set(err, WARREN_ENOMEM, "out of memory planning runs");
        rv->notes = notes;
        rv->cap = cap;
    }
    if (note != NULL && (copy = strdup(note)) == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory planning runs");
    warren_plan_run *r = &rv->v[rv->n];
    r->job = job;
    r->scheduled_at = sched_s * WARREN_US_PER_S;
    r->due_at = (sched_s + jitter_s) * WARREN_US_PER_S;
    r->state = state;
    r->origin = origin;
    r->note = copy;
    r->payload = NULL;
    rv->notes[rv->n] = copy;
    rv->n++;
    return 0;
}

static const char *dst_note(unsigned flags)
{
    if (flags & WARREN_FIRE_GAP_SHIFTED)
        return "DST: the local time fell in a spring-forward gap; fired at the first instant "
               "after it";
    if (flags & WARREN_FIRE_OVERLAP_SECOND)
        return "DST: the local time repeats (fall back); this is its second occurrence "
               "(interval-like schedule)";
    if (flags & WARREN_FIRE_OVERLAP_FIRST)
        return "DST: the local time repeats (fall back); fired once, at the first occurrence";
    return NULL;
}

static char *fmt_s(int64_t s, char *buf)
{
    return warren_time_format(s * WARREN_US_PER_S, buf, WARREN_TIME_BUF);
}

/* Drops the rows from index from on (a job's rows of this tick). */
static void runvec_truncate(runvec *rv, size_t from)
{
    while (rv->n > from)
        free(rv->notes[--rv->n]);
}

/* What plan_job decided for one job. */
typedef struct job_plan {
    warren_us cursor; /* the new next_fire_at */
    int never;        /* the schedule is exhausted: 'infinity' */
    int broken;       /* its fire times could not be computed: why */
    int has_cursor;   /* broken: set next_fire_at to cursor (else it stays) */
    char why[400];
} job_plan;

/* Marks jp broken: the cursor stays where it is, or, for a job never planned
 * (NULL cursor, "from now"), becomes now, so that the fire times from here on
 * are planned (through the misfire policy) once the cause is gone. A one-shot
 * job's NULL cursor already means "from the beginning". */
static void set_broken(const warren_plan_job *j, warren_us now, const char *why, job_plan *jp)
{
    jp->broken = 1;
    snprintf(jp->why, sizeof(jp->why), "%.*s", (int)sizeof(jp->why) - 1, why); /* cut to fit */
    jp->has_cursor = !j->has_next && strcmp(j->kind, "at") != 0;
    jp->cursor = now;
}

/* Fire times of one job from its cursor up to now + horizon, with the misfire
 * policy applied to those older than the threshold. jp gets the new cursor
 * (never = 1: the schedule is exhausted), or broken = 1 when the schedule
 * cannot be computed (an unreadable zone file, too many open files, an
 * expression this version cannot parse): then no fire time is skipped over,
 * the rows computed before the failure are kept only if they leave no gap,
 * and the caller marks the job broken. Returns nonzero only for errors that
 * end the batch (out of memory). */
static int plan_job(warren_planner *p, mat_ctx *m, const warren_plan_job *j, warren_us now,
                    runvec *rv, job_plan *jp, warren_error *err)
{
    warren_schedule *s = NULL;
    warren_error e = {0};
    int64_t t, jit, first = 0, last = 0, nmissed = 0, made = 0, last_ontime = 0;
    int64_t horizon_end = now + p->pc.horizon_ms * 1000;
    int64_t miss_before = now - p->pc.misfire_threshold_ms * 1000;
    unsigned flags = 0;
    int rc, exhausted = 0, deferred = 0, ontime = 0;
    size_t rv_start = rv->n;
    uint64_t skipped_before = m->skipped;
    char a[WARREN_TIME_BUF], b[WARREN_TIME_BUF], thr[32], note[1024], brk[600] = "";

    memset(jp, 0, sizeof(*jp));
    if (j->cursor_invalid) {
        set_broken(j, now,
                   "its cursor next_fire_at is -infinity, not an instant: set it to the first "
                   "fire time to plan, or to NULL (from now)",
                   jp);
        jp->has_cursor = 0;
        return 0;
    }
    if (strcmp(j->misfire, "run_once") != 0 && strcmp(j->misfire, "skip") != 0 &&
        strcmp(j->misfire, "catch_up") != 0) {
        snprintf(note, sizeof(note),
                 "unknown misfire policy \"%.100s\" (written by a newer warren? upgrade this "
                 "planner)",
                 j->misfire);
        set_broken(j, now, note, jp);
        return 0;
    }
    if ((rc = warren_schedule_new(m->tzdb, j->name, j->kind, j->expression, j->timezone, &s, &e)) !=
        0) {
        if (rc == WARREN_ENOMEM)
            return warren_error_set(err, rc, "%s", e.message);
        set_broken(j, now, e.message, jp);
        return 0;
    }
    if (j->broken_reason != NULL)
        /* planned again after a break: the notes of what it missed say why */
        snprintf(brk, sizeof(brk), "; the job was broken since %s: %.400s",
                 warren_time_format(j->broken_since, a, sizeof(a)), j->broken_reason);
    jit = warren_jitter_offset_s(j->name, j->jitter_ms);
    warren_duration_format(p->pc.misfire_threshold_ms, thr, sizeof(thr));
    /* The cursor is the first fire time not yet materialised (NULL: start
     * from now); tolerate a cursor that is not itself a fire time. */
    {
        /* A one-shot job synced after its instant still fires once (through
         * the misfire policy): its NULL cursor means "from the beginning". */
        warren_us from = j->has_next                  ? j->next_fire_at
                         : strcmp(j->kind, "at") == 0 ? INT64_MIN / 2
                                                      : now;
        rc = warren_schedule_next(s, from - 1, &t, &flags, &e);
    }

    /* Missed fire times: older than the misfire threshold. */
    int is_catch = strcmp(j->misfire, "catch_up") == 0;
    int is_skip = strcmp(j->misfire, "skip") == 0;
    int64_t cap = is_catch && j->max_catch_up > 0 ? j->max_catch_up : MAX_RUNS_PER_JOB;
    int64_t skipped_rows = 0;
    while (rc == 0 && t * WARREN_US_PER_S < miss_before) {
        if (is_catch && j->max_catch_up == 0 && made >= MAX_RUNS_PER_JOB) {
            deferred = 1; /* uncapped catch_up: continue from t next tick */
            break;
        }
        if (nmissed == 0)
            first = t;
        nmissed++;
        last = t;
        if (is_catch && nmissed <= cap) {
            snprintf(note, sizeof(note),
                     "misfire catch_up: fire time missed by more than %s; run late (planned at "
                     "%s)%s",
                     thr, warren_time_format(now, a, sizeof(a)), brk);
            if ((rc = runvec_add(rv, j->name, t, jit, "planned", "misfire", note, err)) != 0)
                goto out;
            made++;
        } else if ((is_skip || is_catch) && skipped_rows < MAX_SKIPPED_ROWS) {
            if (is_skip)
                snprintf(note, sizeof(note),
                         "misfire skip: fire time missed by more than %s (planner behind or job "
                         "paused); skipped%s",
                         thr, brk);
            else
                snprintf(note, sizeof(note),
                         "misfire catch_up: over max_catch_up (%d missed runs already run late); "
                         "skipped%s",
                         j->max_catch_up, brk);
            if ((rc = runvec_add(rv, j->name, t, jit, "skipped", "misfire", note, err)) != 0)
                goto out;
            skipped_rows++;
            m->skipped++;
        }
        if (nmissed >= MAX_MISSED_SCAN) {
            /* Coalesce the rest of a very long outage without enumerating it. */
            rc = warren_schedule_next(s, miss_before - 1, &t, &flags, &e);
            break;
        }
        rc = warren_schedule_next(s, t * WARREN_US_PER_S, &t, &flags, &e);
    }
    if (rc != 0 && rc != WARREN_ENEVER)
        goto failed; /* the misfire decision is incomplete: none of it */
    if (nmissed > 0 && !is_catch && !is_skip) {
        /* run_once: one run for the latest missed fire time. */
        snprintf(note, sizeof(note),
                 "misfire run_once: %lld missed fire time(s) from %s to %s (missed by more than "
                 "%s) coalesced into this run%s",
                 (long long)nmissed, fmt_s(first, a), fmt_s(last, b), thr, brk);
        if ((rc = runvec_add(rv, j->name, last, jit, "planned", "misfire", note, err)) != 0)
            goto out;
        made++;
    } else if (nmissed > skipped_rows + (is_catch ? (nmissed < cap ? nmissed : cap) : 0) &&
               (is_skip || is_catch)) {
        warren_log(p->lg, WARREN_LOG_WARN,
                   "job %s: %lld missed fire times from %s to %s; only %lld recorded as rows",
                   j->name, (long long)nmissed, fmt_s(first, a), fmt_s(last, b),
                   (long long)(skipped_rows + (is_catch ? (nmissed < cap ? nmissed : cap) : 0)));
    }
    if (nmissed > 0)
        warren_log(p->lg, WARREN_LOG_INFO, "job %s: %lld fire time(s) missed (%s to %s): %s",
                   j->name, (long long)nmissed, fmt_s(first, a), fmt_s(last, b), j->misfire);

    /* On time (or late by less than the threshold). */
    while (rc == 0 && !deferred && t * WARREN_US_PER_S <= horizon_end && made < MAX_RUNS_PER_JOB) {
        const char *dn = dst_note(flags);
        if (brk[0] != '\0' && t * WARREN_US_PER_S < now) {
            snprintf(note, sizeof(note), "%s%splanned late%s", dn ? dn : "", dn ? "; " : "", brk);
            dn = note;
        }
        if ((rc = runvec_add(rv, j->name, t, jit, "planned", "schedule", dn, err)) != 0)
            goto out;
        made++;
        ontime = 1;
        last_ontime = t;
        rc = warren_schedule_next(s, t * WARREN_US_PER_S, &t, &flags, &e);
    }
    if (rc == WARREN_ENEVER) {
        exhausted = 1;
        rc = 0;
    } else if (rc != 0) {
        goto failed;
    }
    jp->never = exhausted;
    jp->cursor = exhausted ? 0 : t * WARREN_US_PER_S;
    goto out;
failed:
    if (rc == WARREN_ENOMEM) {
        rc = warren_error_set(err, rc, "%s", e.message);
        goto out;
    }
    set_broken(j, now, e.message, jp);
    if (ontime) {
        /* Everything up to the last on-time row is decided: the cursor moves
         * just past it (the next fire time at or after a cursor is used). */
        jp->has_cursor = 1;
        jp->cursor = (last_ontime + 1) * WARREN_US_PER_S;
    } else {
        runvec_truncate(rv, rv_start);
        m->skipped = skipped_before;
    }
    rc = 0;
out:
    warren_schedule_free(s);
    return rc;
}

/* One transaction: lock a batch of due jobs, insert their runs, advance them.
 * *njobs gets the number of jobs locked. */
static int materialise_batch(warren_planner *p, mat_ctx *m, size_t *njobs, int *inserted,
                             warren_error *err)
{
    warren_plan_job *jobs = NULL;
    size_t n = 0, ngood = 0, nbroken = 0;
    warren_us now = 0;
    runvec rv = {0};
    job_plan *plans = NULL;
    const char **names = NULL, **bnames = NULL, **whys = NULL;
    warren_us *next = NULL, *bcursors = NULL;
    int *never = NULL, *bhas = NULL, *was = NULL;
    int rc, ins = 0;
    char a[WARREN_TIME_BUF], a2[WARREN_TIME_BUF];

    *njobs = 0;
    *inserted = 0;
    if ((rc = warren_plan_begin(m->st, err)) != 0)
        return rc;
    rc = warren_plan_lock_due_jobs(m->st, p->id, p->pc.horizon_ms, JOB_BATCH, m->phase == 0,
                                   &m->pos, &jobs, &n, &now, err);
    if (rc != 0 || n == 0)
        goto done;
    *njobs = n;
    if (!m->has_tmin || now + p->pc.horizon_ms * 1000 < m->tmin)
        m->tmin = now + p->pc.horizon_ms * 1000;
    m->has_tmin = 1;
    for (size_t i = 0; m->check && i < n; i++) {
        const warren_plan_job *j = &jobs[i];
        if (j->replan || (j->has_next && !m->floor_none && j->next_fire_at >= m->floor))
            continue; /* (floor_none: every unmarked cursor was past any time) */
        if (j->has_next && j->next_fire_at > m->tmin)
            continue; /* planned by this tick already, due again as the clock moved on */
        m->below++;
        warren_log(p->lg, WARREN_LOG_ERROR,
                   "planner %s: job %s (cursor %s) was below the scan floor %s without the "
                   "replan mark: the once-a-minute full scan found it, a scan from the floor "
                   "would not have; planned now. This is a bug in warren (please report it)",
                   p->id, j->name,
                   j->has_next ? warren_time_format(j->next_fire_at, a, sizeof(a)) : "(none)",
                   m->floor_none ? "(past every cursor)"
                                 : warren_time_format(m->floor, a2, sizeof(a2)));
    }
    plans = calloc(n, sizeof(*plans));
    names = calloc(n, sizeof(*names));
    next = calloc(n, sizeof(*next));
    never = calloc(n, sizeof(*never));
    bnames = calloc(n, sizeof(*bnames));
    whys = calloc(n, sizeof(*whys));
    bcursors = calloc(n, sizeof(*bcursors));
    bhas = calloc(n, sizeof(*bhas));
    was = calloc(n, sizeof(*was));
    if (!plans || !names || !next || !never || !bnames || !whys || !bcursors || !bhas || !was) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory planning runs");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        const warren_plan_job *j = &jobs[i];
        job_plan *jp = &plans[i];
        if ((rc = plan_job(p, m, j, now, &rv, jp, err)) != 0)
            goto done;
        if (jp->broken) {
            /* Said once per reason at error level (and as the event
             * job.broken.<job>); the retries after it at debug. */
            int again = j->broken_reason != NULL && strcmp(j->broken_reason, jp->why) == 0;
            warren_log(p->lg, again ? WARREN_LOG_DEBUG : WARREN_LOG_ERROR,
                       "job %s: cannot compute its fire times: %s; marked broken, not planned "
                       "(its cursor %s is kept; tried again with a backoff; `warren jobs` shows "
                       "it)",
                       j->name, jp->why,
                       jp->has_cursor || j->has_next
                           ? warren_time_format(jp->has_cursor ? jp->cursor : j->next_fire_at, a,
                                                sizeof(a))
                           : "(none yet)");
            bnames[nbroken] = j->name;
            whys[nbroken] = jp->why;
            bcursors[nbroken] = jp->cursor;
            bhas[nbroken] = jp->has_cursor;
            nbroken++;
            continue;
        }
        if (j->broken_reason != NULL)
            warren_log(p->lg, WARREN_LOG_INFO,
                       "job %s: its fire times can be computed again (broken since %s: %s); "
                       "what it missed goes through its misfire policy (%s)",
                       j->name, warren_time_format(j->broken_since, a, sizeof(a)), j->broken_reason,
                       j->misfire);
        names[ngood] = j->name;
        next[ngood] = jp->cursor;
        never[ngood] = jp->never;
        was[ngood] = j->broken_reason != NULL;
        ngood++;
    }
    /* Insert in chunks so one statement stays a reasonable size. Each
     * chunk's savepoint is a subtransaction kept until the commit: past 64
     * in one transaction PostgreSQL's per-backend cache of them overflows
     * and every other session's visibility checks look them up on disk, so
     * the chunks after the 32nd of a huge catch-up insert with ON CONFLICT
     * directly (the same outcome, no savepoint). */
    for (size_t off = 0; off < rv.n; off += 5000) {
        size_t cnt = rv.n - off < 5000 ? rv.n - off : 5000;
        int k = 0;
        if ((rc = off / 5000 < 32 ? warren_plan_insert_new_runs(m->st, rv.v + off, cnt, &k, err)
                                  : warren_plan_insert_runs(m->st, rv.v + off, cnt, &k, err)) != 0)
            goto done;
        ins += k;
    }
    if ((rc = warren_plan_advance(m->st, names, next, never, was, ngood, p->pc.horizon_ms, err)) !=
        0)
        goto done;
    if ((rc = warren_plan_mark_broken(m->st, bnames, whys, bcursors, bhas, nbroken, err)) != 0)
        goto done;
    if ((rc = warren_plan_commit(m->st, err)) != 0)
        goto done;
    *inserted = ins;
done:
    if (rc != 0 || n == 0)
        warren_plan_rollback(m->st);
    runvec_free(&rv);
    free(plans);
    free(names);
    free(next);
    free(never);
    free(bnames);
    free(whys);
    free(bcursors);
    free(bhas);
    free(was);
    warren_plan_jobs_free(jobs, n);
    return rc;
}

/* The jobs were placed in partitions by the last `warren sync`'s
 * planner.partitions (warren.sync_state; API jobs by warren.wp_job_partition
 * with it). A planner whose own config counts fewer would never plan the
 * jobs of the partitions it does not count, a silent miss, and planners
 * counting differently would not share them fairly: the database's count
 * wins, with a warning naming both and the fix. */
static int follow_sync_partitions(warren_planner *p, warren_error *err)
{
    int n = 0, rc;

    if (!p->has_sync_state)
        return 0;
    if ((rc = warren_plan_sync_partitions(p->st, &n, err)) != 0)
        return rc;
    if (n > 0 && n != p->pc.partitions) {
        if (n != p->cfg_partitions)
            warren_log(p->lg, WARREN_LOG_WARN,
                       "planner %s: planner.partitions is %d in this planner's config, but the "
                       "last `warren sync` placed the jobs in %d partitions: planning %d; give "
                       "every planner and `warren sync` the same planner.partitions",
                       p->id, p->cfg_partitions, n, n);
        else
            warren_log(p->lg, WARREN_LOG_INFO,
                       "planner %s: the last `warren sync` placed the jobs in %d partitions, as "
                       "this planner's config says: planning %d",
                       p->id, n, n);
        p->pc.partitions = n;
    }
    return 0;
}

/* Batches on m until one is not full (nothing more is due, or the rest is
 * locked by the other connection or another planner), the planner stops or
 * the tick's budget is spent. */
static int materialise_loop(warren_planner *p, mat_ctx *m, int64_t start_ms, int64_t budget_ms,
                            int *first_full, warren_error *err)
{
    while (!stopping(p)) {
        size_t n = 0;
        int k = 0, rc = materialise_batch(p, m, &n, &k, err);
        if (rc != 0)
            return rc;
        m->jobs += n;
        m->inserted += (uint64_t)k;
        m->last_full = n == JOB_BATCH;
        if (!m->last_full && m->phase == 0 && !m->floor_none) {
            /* the jobs marked replan are done: the rest from the floor */
            m->phase = 1;
            warren_plan_pos_from(&m->pos, m->floor);
            if (warren__mono_ms() - start_ms > budget_ms)
                break;
            continue;
        }
        if (!m->last_full || warren__mono_ms() - start_ms > budget_ms)
            break;
        if (first_full != NULL && *first_full == 0) {
            *first_full = 1;
            return 0; /* the caller starts the helper, then calls again */
        }
    }
    return 0;
}

static void *materialise_helper(void *arg)
{
    mat_helper *h = arg;
    h->rc = materialise_loop(h->p, &h->m, h->start_ms, h->budget_ms, NULL, &h->err);
    return NULL;
}

/* Where a connection's scan of a tick starts: with a floor, the jobs marked
 * replan first (phase 0), then from the floor; without, from '-infinity'. */
static void scan_start(mat_ctx *m, int floor_known, int floor_none, warren_us floor, int check)
{
    m->floor_known = floor_known;
    m->floor_none = floor_none;
    m->floor = floor;
    m->check = check;
    m->has_tmin = 0;
    m->tmin = 0;
    m->below = 0;
    m->phase = floor_known ? 0 : 1;
    warren_plan_pos_start(&m->pos);
}

/* Opens the second connection (once) and starts the helper thread; nonzero
 * if it cannot (the tick goes on with one connection: said once). */
static int helper_start(warren_planner *p, const mat_ctx *main, int64_t start_ms, int64_t budget_ms,
                        pthread_t *t)
{
    mat_helper *h = &p->helper;
    warren_error e = {0};
    int rc = 0;

    h->p = p;
    h->start_ms = start_ms;
    h->budget_ms = budget_ms;
    h->rc = 0;
    warren_error_clear(&h->err);
    h->m.skipped = h->m.inserted = 0;
    h->m.jobs = 0;
    h->m.last_full = 0;
    scan_start(&h->m, main->floor_known, main->floor_none, main->floor, main->check);
    h->m.has_tmin = main->has_tmin; /* the main connection's first batch: the earlier edge */
    h->m.tmin = main->tmin;
    if (h->m.tzdb == NULL && (h->m.tzdb = warren_tzdb_new(NULL)) == NULL)
        rc = warren_error_set(&e, WARREN_ENOMEM, "out of memory");
    if (rc == 0 && h->m.st == NULL)
        rc = warren_store_open(p->store_url, p->lg, &h->m.st, &e);
    if (rc == 0 && pthread_create(t, NULL, materialise_helper, h) != 0)
        rc = warren_error_set(&e, WARREN_ENOMEM, "cannot start a thread");
    if (rc != 0) {
        if (!p->helper_logged)
            warren_log(p->lg, WARREN_LOG_WARN,
                       "planner %s: materialising on one connection only (a second one: %s)", p->id,
                       e.message);
        p->helper_logged = 1;
        warren_store_free(h->m.st);
        h->m.st = NULL;
        return rc;
    }
    p->helper_logged = 0; /* a later failure is said again */
    return 0;
}

/* Waits for the helper and adds its counts; a failure of its connection is
 * logged and the connection dropped (its transaction rolled back: what it
 * had locked is planned by the next tick), never the tick's failure. */
static void helper_join(warren_planner *p, pthread_t t, mat_ctx *m)
{
    mat_helper *h = &p->helper;
    pthread_join(t, NULL);
    m->skipped += h->m.skipped;
    m->inserted += h->m.inserted;
    m->jobs += h->m.jobs;
    m->below += h->m.below;
    if (h->m.has_tmin && (!m->has_tmin || h->m.tmin < m->tmin)) {
        m->tmin = h->m.tmin;
        m->has_tmin = 1;
    }
    p->stats.helper_jobs += h->m.jobs;
    if (h->rc != 0) {
        warren_log(p->lg, WARREN_LOG_WARN,
                   "planner %s: the second materialising connection failed: %s; reopened at "
                   "the next backlog",
                   p->id, h->err.message);
        warren_plan_rollback(h->m.st);
        warren_store_free(h->m.st);
        h->m.st = NULL;
    }
}

/* The scan floor. Every cursor update leaves the job's old entry in index
 * jobs_due_at, dead until a vacuum, below the live cursors: a due-jobs scan
 * from '-infinity' steps over every cursor moved since the last vacuum (at
 * 1,000,000 jobs, several ms of every idle tick). So the planner keeps a
 * floor F with this rule: every eligible job of its partitions has a cursor
 * >= F, or is marked replan (warren.jobs.replan, migration 017). A tick then
 * locks the jobs marked replan (index jobs_replan) and the due jobs from F
 * on. The mark is set when a job is created, and by a trigger whenever an
 * UPDATE moves a cursor earlier, makes a job eligible again or moves it to
 * another partition; only the planner clears it, where it moves the cursor
 * past the batch's horizon edge (now() + horizon, >= tmin); broken jobs are
 * marked again. After the tick the new floor is the smallest cursor >= lo =
 * min(F, tmin) of an eligible unmarked job, read after the tick's commits:
 * below lo every job is marked (the rule held for F, the planner's own
 * cursors are past tmin, anyone else's earlier cursors are marked), and
 * whatever this tick did not plan (locked by a writer, the budget spent) is
 * still there to be counted. It holds for the partitions owned throughout,
 * so the floor is dropped (a scan from '-infinity') when the partitions
 * change, after a failed tick, and once a minute anyway; a job that such a
 * scan finds below the floor unmarked is logged as a bug. */
static int materialise(warren_planner *p, int64_t start_ms, int64_t budget_ms, size_t *jobs,
                       int *inserted, warren_error *err)
{
    mat_ctx m = {p->st, p->tzdb, 0, 0, 0, 0, {0}, 0, 0, 0, 0, 0, 0, 0, 0};
    pthread_t t;
    int first_full = 0, helper = 0, rc;
    int full =
        !p->floor_known || p->rescan || start_ms - p->last_full_scan_ms >= FULL_SCAN_EVERY_MS;

    if (full) {
        p->rescan = 0;
        p->last_full_scan_ms = start_ms;
        p->stats.full_scans++;
    }
    scan_start(&m, !full, p->floor_none, p->floor, full && p->floor_known);
    rc = materialise_loop(p, &m, start_ms, budget_ms, &first_full, err);
    if (rc == 0 && first_full) {
        helper = helper_start(p, &m, start_ms, budget_ms, &t) == 0;
        rc = materialise_loop(p, &m, start_ms, budget_ms, NULL, err);
    }
    if (helper) {
        helper_join(p, t, &m);
        if (rc == 0 && warren__mono_ms() - start_ms <= budget_ms)
            rc = materialise_loop(p, &m, start_ms, budget_ms, NULL, err);
    }
    p->stats.runs_skipped += m.skipped;
    p->stats.below_floor += m.below;
    *jobs = m.jobs;
    *inserted = (int)m.inserted;
    if (rc != 0)
        return rc;
    /* The new floor. Nothing locked: it stays (no cursor of ours moved;
     * anyone else's earlier one is marked), and the idle tick reads no more. */
    if (!full && !m.has_tmin)
        return 0;
    {
        /* from '-infinity' after a full scan; else from min(F, tmin) */
        int found = 0;
        warren_us lo = p->floor_none || m.tmin < p->floor ? m.tmin : p->floor, f = 0;
        rc = warren_plan_floor(p->st, p->id, !full, lo, &found, &f, err);
        if (rc != 0) {
            p->floor_known = 0;
            return rc;
        }
        p->floor_known = found >= 0;
        p->floor_none = found == 0;
        p->floor = found > 0 ? f : 0;
    }
    return 0;
}

int warren_planner_tick(warren_planner *p, warren_error *err)
{
    int rc, owned = 0, taken = 0, dropped = 0, live = 0, inserted = 0, published = 0,
            unroutable = 0, outbox = 0, republished = 0, reaped = 0;
    size_t jobs_seen = 0;
    int64_t start = warren__mono_ms(), budget = p->pc.tick_ms * 2 < 2000 ? 2000 : p->pc.tick_ms * 2;
    uint64_t skipped_before = p->stats.runs_skipped;

    p->stats.ticks++;
    if (!p->last_tick_ok)
        p->floor_known = 0; /* a failed tick, or the first: no floor */
    p->last_tick_ok = 0;
    {
        int before = p->pc.partitions;
        if ((rc = follow_sync_partitions(p, err)) != 0)
            return rc;
        if (p->pc.partitions != before)
            p->floor_known = 0;
    }
    if ((rc = warren_plan_heartbeat(p->st, p->id, lease_ms(p), p->pc.partitions, err)) != 0)
        return rc;
    if ((rc = warren_plan_leases(p->st, p->id, p->pc.partitions, lease_ms(p), &owned, &taken,
                                 &dropped, &live, err)) != 0)
        return rc;
    p->stats.partitions_owned = owned;
    if (taken || dropped || owned != p->floor_owned)
        p->floor_known = 0; /* other jobs are ours now: no floor for them */
    p->floor_owned = owned;
    if (taken || dropped)
        warren_log(p->lg, WARREN_LOG_INFO,
                   "planner %s: partitions: took %d, gave up %d, own %d of %d (%d live planners)",
                   p->id, taken, dropped, owned, p->pc.partitions, live);

    if (owned > 0 && !stopping(p)) {
        int64_t m0 = warren__mono_us();
        rc = materialise(p, start, budget, &jobs_seen, &inserted, err);
        p->stats.materialise_us += (uint64_t)(warren__mono_us() - m0);
        if (rc != 0)
            return rc;
    }
    p->stats.runs_inserted += (uint64_t)inserted;

    /* Without RabbitMQ (reconnecting) the planner keeps materialising: runs
     * wait in the database and go out when the broker is back. */
    if (p->b != NULL) {
        if ((rc = warren_relay_runs(p->relay, relay_lead_ms(p), budget, &published, &unroutable,
                                    err)) != 0)
            return rc;
        p->stats.runs_published += (uint64_t)published;
        p->stats.runs_unroutable += (uint64_t)unroutable;
        if ((rc = warren_relay_outbox(p->relay, budget, &outbox, err)) != 0)
            return rc;
        p->stats.outbox_published += (uint64_t)outbox;
    }

    if (warren__mono_ms() - p->last_reconcile_ms >= RECONCILE_EVERY_MS && !stopping(p)) {
        warren_error e = {0};
        p->last_reconcile_ms = warren__mono_ms();
        if ((rc = warren_plan_reconcile_published(p->st, p->pc.reconcile_grace_ms, RECONCILE_LIMIT,
                                                  &republished, err)) != 0)
            return rc;
        p->stats.republished += (uint64_t)republished;
        rc = warren_plan_reap(p->st, RECONCILE_LIMIT, &reaped, &e);
        if (rc == WARREN_ENOENT) {
            if (!p->reap_missing_logged)
                warren_log(p->lg, WARREN_LOG_WARN, "reconciler: %s", e.message);
            p->reap_missing_logged = 1;
        } else if (rc != 0) {
            return warren_error_set(err, rc, "%s", e.message);
        }
        p->stats.leases_reaped += (uint64_t)reaped;
        if (republished > 0 || reaped > 0)
            warren_log(p->lg, WARREN_LOG_INFO,
                       "reconciler: %d published run(s) not started %lld s after due sent back "
                       "to planned; %d expired worker lease(s) re-queued",
                       republished, (long long)(p->pc.reconcile_grace_ms / 1000), reaped);
    }
    if (inserted > 0 || published > 0 || unroutable > 0 || outbox > 0)
        warren_log(p->lg, WARREN_LOG_INFO,
                   "tick: %d run(s) planned (%llu skipped) from %zu job(s); %d published, %d "
                   "unroutable; %d outbox message(s)",
                   inserted, (unsigned long long)(p->stats.runs_skipped - skipped_before),
                   jobs_seen, published, unroutable, outbox);
    p->last_tick_ok = 1;
    return 0;
}

void warren_planner_rescan(warren_planner *p)
{
    p->rescan = 1; /* the floor is kept, for the full scan's check */
}

int warren_planner_release(warren_planner *p, warren_error *err)
{
    return warren_plan_release(p->st, p->id, err);
}

static int is_broker_error(int rc)
{
    return rc == WARREN_EBROKERCONN || rc == WARREN_EBROKER || rc == WARREN_ETIMEOUT;
}

static void sleep_unless_stopped(warren_planner *p, int64_t ms)
{
    for (int64_t slept = 0; slept < ms && !stopping(p); slept += 100)
        warren__sleep_ms(ms - slept < 100 ? ms - slept : 100);
}

/* The relay's pass alone, for a notification whose runs exist already (an
 * enqueue, a cap's release, a replay): an immediate run is published in one
 * short transaction, without the tick's lease renewals and planning (two
 * commits and a scan of the due jobs in front of it otherwise). */
static int relay_pass(warren_planner *p, warren_error *err)
{
    int published = 0, unroutable = 0, rc;
    int64_t budget = p->pc.tick_ms * 2 < 2000 ? 2000 : p->pc.tick_ms * 2;

    if (p->b == NULL)
        return 0;
    p->stats.relay_passes++;
    rc = warren_relay_runs(p->relay, relay_lead_ms(p), budget, &published, &unroutable, err);
    p->stats.runs_published += (uint64_t)published;
    p->stats.runs_unroutable += (uint64_t)unroutable;
    return rc;
}

int warren_planner_run(warren_planner *p, volatile sig_atomic_t *stop, warren_error *err)
{
    int64_t db_backoff = BACKOFF_MIN_MS, mq_backoff = BACKOFF_MIN_MS, mq_next = 0;
    int64_t last_tick = 0; /* monotonic: when the last whole tick started */
    int db_down = 0, woke = 0;

    p->stop = stop;
    while (!stopping(p)) {
        int64_t t0 = warren__mono_ms();
        warren_error e = {0};
        int rc;

        if (p->b == NULL && t0 >= mq_next) {
            if ((rc = connect_broker(p, &e)) == 0) {
                warren_log(p->lg, WARREN_LOG_INFO, "planner %s: reconnected to RabbitMQ", p->id);
                p->stats.reconnects++;
                mq_backoff = BACKOFF_MIN_MS;
            } else {
                warren_log(p->lg, WARREN_LOG_WARN, "planner %s: %s; retrying in %lld ms", p->id,
                           e.message, (long long)mq_backoff);
                mq_next = t0 + mq_backoff;
                mq_backoff = warren_backoff_next(mq_backoff, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
                warren_error_clear(&e);
            }
        }
        if (db_down) {
            warren_plan_rollback(p->st);
            if ((rc = warren_store_reconnect(p->st, &e)) != 0) {
                warren_log(p->lg, WARREN_LOG_WARN, "planner %s: %s; retrying in %lld ms", p->id,
                           e.message, (long long)db_backoff);
                sleep_unless_stopped(p, db_backoff);
                db_backoff = warren_backoff_next(db_backoff, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
                continue;
            }
            warren_log(p->lg, WARREN_LOG_INFO, "planner %s: reconnected to PostgreSQL", p->id);
            p->stats.reconnects++;
            db_down = 0;
            db_backoff = BACKOFF_MIN_MS;
        }
        /* Woken only for runs to publish, inside the tick: the relay alone;
         * the whole tick keeps its cadence (tick_ms after the last one). */
        if (woke == WARREN_NOTIFY_RELAY && last_tick != 0 && t0 - last_tick < p->pc.tick_ms) {
            rc = relay_pass(p, &e);
        } else {
            last_tick = t0;
            rc = warren_planner_tick(p, &e);
        }
        const char *what = woke == WARREN_NOTIFY_RELAY && last_tick != t0 ? "relay pass" : "tick";
        woke = 0;
        if (rc != 0) {
            warren_plan_rollback(p->st);
            if (rc == WARREN_EDBCONN || !warren_store_connected(p->st)) {
                warren_log(p->lg, WARREN_LOG_WARN, "planner %s: %s; reconnecting", p->id,
                           e.message);
                db_down = 1;
                continue;
            }
            if (is_broker_error(rc) || (p->b != NULL && !warren_broker_connected(p->b))) {
                warren_log(p->lg, WARREN_LOG_WARN,
                           "planner %s: %s; reconnecting to RabbitMQ (materialising meanwhile)",
                           p->id, e.message);
                warren_broker_free(p->b);
                p->b = NULL;
                warren_relay_set_broker(p->relay, NULL);
                mq_next = warren__mono_ms() + mq_backoff;
            } else {
                warren_log(p->lg, WARREN_LOG_ERROR, "planner %s: %s failed: %s", p->id, what,
                           e.message);
            }
        }
        /* Sleep out the tick on LISTEN: a NOTIFY (sync, trigger, pause,
         * resume, enqueue, ...) wakes us at once. */
        for (;;) {
            int64_t left = p->pc.tick_ms - (warren__mono_ms() - last_tick);
            int got = 0;
            if (left <= 0 || stopping(p))
                break;
            rc = warren_store_wait_notify(p->st, left > 250 ? 250 : (int)left, &got, &e);
            if (rc != 0 && rc != WARREN_EINTR) {
                db_down = 1;
                break;
            }
            if (got) {
                woke = got;
                break;
            }
        }
    }
    {
        warren_error e = {0};
        warren_plan_rollback(p->st);
        if (warren_planner_release(p, &e) != 0)
            warren_log(p->lg, WARREN_LOG_WARN,
                       "planner %s: could not release partition leases (they expire in %lld s): "
                       "%s",
                       p->id, (long long)(lease_ms(p) / 1000), e.message);
        else
            warren_log(p->lg, WARREN_LOG_INFO, "planner %s: stopped; partition leases released",
                       p->id);
    }
    (void)err;
    return 0;
}
