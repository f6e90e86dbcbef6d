/* ops.h: operator operations (src/ops.c): trigger, pause, resume, backfill,
 * replay, the runs listing and one run's history, and the jobs listing. The admin commands
 * (src/cli_*.c) and any other front end (a web page) share them: each works
 * on an open warren_store (warren_store_open) and hands its result back as a
 * struct for the caller to print; none prints or logs. Instants are warren_us
 * (microseconds since the epoch, UTC), "now" is always the database's clock. */
#ifndef WARREN_OPS_H
#define WARREN_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <warren/codec.h>
#include <warren/config.h>
#include <warren/error.h>
#include <warren/store.h>
#include <warren/timefmt.h>

/* Room for a run's state name ("succeeded", "cancelled", ...) and for a
 * job's misfire policy ("run_once", "catch_up"). */
#define WARREN_OPS_NAME_MAX 16

/* ---------------------------------------------------------------- trigger */

typedef struct warren_ops_trigger_result {
    int created;                      /* 1: a new run; 0: the key already had one */
    char run_key[WARREN_RUN_KEY_MAX]; /* the run's key */
    char state[WARREN_OPS_NAME_MAX];  /* created == 0: the existing run's state ("": unknown) */
    warren_us at;                     /* the run's scheduled (and due) instant */
} warren_ops_trigger_result;

/* Creates a one-shot run of job (origin "trigger", noted "triggered at ..."),
 * keyed JOB@at and due at `at`, and notifies the planners. at may be NULL:
 * now by the database's clock, cut to the second. payload (JSON object text,
 * e.g. from warren_json_object_check; NULL: the job's payload) is borrowed.
 * Triggering a key that already has a run creates nothing: created = 0 and
 * state says what the run is doing. *out is filled in (zeroed first).
 * Errors: WARREN_EINVAL (at has fractional seconds), WARREN_ENOENT (no such
 * job in the database), WARREN_EDB, WARREN_EDBCONN. */
int warren_ops_trigger(warren_store *st, const char *job, const warren_us *at, const char *payload,
                       warren_ops_trigger_result *out, warren_error *err);

/* ---------------------------------------------------------- pause, resume */

typedef struct warren_ops_pause_result {
    int was_paused; /* 1: the job already was paused */
    int cancelled;  /* its scheduled runs, not yet due nor started, now cancelled */
} warren_ops_pause_result;

/* Pauses job in one transaction: no more runs are planned, its scheduled runs
 * not yet due and not yet claimed are cancelled (noted; a message already in
 * a delay queue finds nothing to claim), planners notified. Pausing a paused
 * job is not an error (was_paused = 1). Errors: WARREN_ENOENT (no such job),
 * WARREN_EDB, WARREN_EDBCONN. */
int warren_ops_pause(warren_store *st, const char *job, warren_ops_pause_result *out,
                     warren_error *err);

typedef struct warren_ops_resume_result {
    int was_paused;                    /* 0: the job was not paused */
    int replanned;                     /* cancelled runs deleted to be planned again */
    char misfire[WARREN_OPS_NAME_MAX]; /* the job's misfire policy (run_once, skip, catch_up) */
    int removed;                       /* 1: the job is no longer in the config (sync keeps it
                                          paused) */
} warren_ops_resume_result;

/* Resumes job in one transaction: paused = false; the runs the pause
 * cancelled are deleted and the job's cursor moved back to the earliest of
 * them, so the planner plans them again (fire times missed by more than the
 * misfire threshold go through the job's misfire policy); planners notified.
 * Resuming a job that is not paused is not an error (was_paused = 0).
 * Errors: WARREN_ENOENT (no such job), WARREN_EDB, WARREN_EDBCONN. */
int warren_ops_resume(warren_store *st, const char *job, warren_ops_resume_result *out,
                      warren_error *err);

/* --------------------------------------------------------------- backfill */

/* Most fire times one backfill may cover. */
#define WARREN_OPS_BACKFILL_MAX 100000

typedef struct warren_ops_backfill_result {
    char job[WARREN_JOB_NAME_MAX + 1]; /* the job's name */
    warren_us *times;                  /* new: the n fire times in range, ascending */
    int *exists;                       /* new: exists[i] = 1 if times[i] had a run beforehand */
    size_t n;                          /* fire times in range */
    size_t existing;                   /* how many of them had a run beforehand */
    int inserted; /* runs written (0 on a dry run); the other n - inserted had one when written */
} warren_ops_backfill_result;
/* Frees times and exists and zeroes r; NULL allowed. */
void warren_ops_backfill_result_clear(warren_ops_backfill_result *r);

/* Creates a run (state planned, origin "backfill", noted "backfill at ...")
 * for every fire time of job in [from, to], keyed and due as the planner
 * would key it (the job's jitter applies); fire times that already have a run
 * are left alone. Planners are notified when a run was written. dry_run != 0:
 * only finds the fire times and which of them have a run, writes nothing.
 * The job's schedule is read from the database. *out is filled in (zeroed
 * first; clear it with warren_ops_backfill_result_clear, also after an
 * error). Errors: WARREN_EINVAL (to < from), WARREN_ENOENT (no such job),
 * WARREN_ERANGE (more than WARREN_OPS_BACKFILL_MAX fire times), the
 * schedule's errors (WARREN_ECRON, WARREN_ETZ, ...), WARREN_ENOMEM,
 * WARREN_EDB, WARREN_EDBCONN. */
int warren_ops_backfill(warren_store *st, const char *job, warren_us from, warren_us to,
                        int dry_run, warren_ops_backfill_result *out, warren_error *err);

/* ----------------------------------------------------------------- replay */

/* Sends a dead run back to planned, due now, under the same run key
 * (warren.replay): its attempts and notes are kept, its retry budget starts
 * again. who (may be NULL) is written into the note ("... by WHO").
 * *replayed = 0 when the run is not dead (or unknown). Errors: WARREN_EDB,
 * WARREN_EDBCONN. */
int warren_ops_replay(warren_store *st, const char *run_key, const char *who, int *replayed,
                      warren_error *err);
/* Replays every dead run of job, oldest first; *count gets how many. */
int warren_ops_replay_dead(warren_store *st, const char *job, const char *who, int64_t *count,
                           warren_error *err);

/* -------------------------------------------------------------- runs, show */

/* One run (a row of warren.runs). Strings are new; lease_owner, last_error
 * and note may be NULL. Instants are 0 for SQL NULL. */
typedef struct warren_ops_run {
    char *run_key, *job, *state, *origin, *lease_owner, *last_error, *note;
    int attempt;
    int publish_count;
    warren_us scheduled_at, due_at, lease_until, published_at, started_at, finished_at, created_at;
} warren_ops_run;
/* Frees r's strings and zeroes it; NULL allowed. */
void warren_ops_run_clear(warren_ops_run *r);
/* Clears each of the n rows, then frees the array; NULL allowed. */
void warren_ops_runs_free(warren_ops_run *rows, size_t n);

/* 1 if state names a run state (planned, published, running, retrying,
 * succeeded, dead, skipped, cancelled). */
int warren_ops_state_valid(const char *state);

/* Runs, newest scheduled first (then by job); job and state may be NULL
 * (any); limit <= 0 means 50. *rows is new (warren_ops_runs_free(*rows, *n));
 * NULL when *n is 0. Errors: WARREN_ENOMEM, WARREN_EDB, WARREN_EDBCONN. */
int warren_ops_runs(warren_store *st, const char *job, const char *state, int limit,
                    warren_ops_run **rows, size_t *n, warren_error *err);

/* One attempt of a run (a row of warren.attempts). Strings are new; outcome
 * and error are NULL while it runs. */
typedef struct warren_ops_attempt {
    int attempt;
    char *worker, *outcome, *error;
    warren_us started_at, finished_at; /* 0: NULL */
} warren_ops_attempt;

/* A run and its attempts in attempt order. */
typedef struct warren_ops_run_detail {
    warren_ops_run run;
    warren_ops_attempt *attempts;
    size_t nattempts;
    char *job_broken_reason;    /* new; NULL unless the run's job is marked broken */
    warren_us job_broken_since; /* 0 unless it is */
} warren_ops_run_detail;
/* Frees everything d holds and zeroes it; NULL allowed. */
void warren_ops_run_detail_clear(warren_ops_run_detail *d);

/* Reads one run, its attempts and whether its job is broken (warren_ops_jobs)
 * into *out (zeroed first; on success clear it
 * with warren_ops_run_detail_clear; on error nothing is left to free).
 * Errors: WARREN_ENOENT (no run with that key), WARREN_ENOMEM, WARREN_EDB,
 * WARREN_EDBCONN. */
int warren_ops_show(warren_store *st, const char *run_key, warren_ops_run_detail *out,
                    warren_error *err);

/* ----------------------------------------------------------------- grants */

/* Least privilege for the worker protocol (docs/worker-protocol.md,
 * "Privileges"): a login that is neither a superuser nor a member of the
 * schema's owner may claim, heartbeat, complete and reclaim only runs of the
 * queues granted to it in warren.worker_grants. */

/* What warren_ops_grant / warren_ops_revoke found out about the login. */
typedef struct warren_ops_grant_result {
    int changed;    /* grants added (grant) or removed (revoke) */
    int is_worker;  /* 1: the login is a member of warren_worker */
    int privileged; /* 1: a superuser or a member of the schema owner: grants do not limit it */
} warren_ops_grant_result;

/* Grants login (a role of the cluster) the n queues (each a valid queue name,
 * warren_name_valid); granting one it holds already changes nothing. *out is
 * filled in (zeroed first). Errors: WARREN_EINVAL (no queue, a bad queue
 * name, an empty login), WARREN_ENOENT (no role of that name), WARREN_EDB,
 * WARREN_EDBCONN. */
int warren_ops_grant(warren_store *st, const char *login, const char *const *queues, size_t n,
                     warren_ops_grant_result *out, warren_error *err);
/* Takes the n queues away from login (those it does not hold are ignored);
 * its calls on runs of those queues fail from its next call on, including
 * heartbeats and completions of runs it holds. The login need not exist any
 * more. Errors as warren_ops_grant, but never WARREN_ENOENT. */
int warren_ops_revoke(warren_store *st, const char *login, const char *const *queues, size_t n,
                      warren_ops_grant_result *out, warren_error *err);

/* One row of warren.worker_grants. Strings are new. */
typedef struct warren_ops_grant_row {
    char *login, *queue, *granted_by;
    warren_us granted_at;
} warren_ops_grant_row;
/* Frees the n rows and the array; NULL allowed. */
void warren_ops_grant_rows_free(warren_ops_grant_row *rows, size_t n);
/* The grants of login (NULL: of every login), by login then queue. *rows is
 * new (warren_ops_grant_rows_free); NULL when *n is 0. Errors: WARREN_ENOMEM,
 * WARREN_EDB, WARREN_EDBCONN. */
int warren_ops_grants(warren_store *st, const char *login, warren_ops_grant_row **rows, size_t *n,
                      warren_error *err);
/* ------------------------------------------------------------------- sync */

/* How long `warren sync` waits for any one lock by default (milliseconds). */
#define WARREN_OPS_SYNC_LOCK_TIMEOUT_MS 10000

typedef struct warren_ops_sync_options {
    /* Longest wait for any one lock (<= 0: WARREN_OPS_SYNC_LOCK_TIMEOUT_MS).
     * An application's open transaction that called the Job API holds locks
     * sync needs until it ends; past this, sync gives up with nothing
     * changed, naming the sessions that hold locks on warren's tables. */
    int64_t lock_timeout_ms;
    /* Names of config jobs that may take over a live API job of the same
     * name (borrowed): see warren_ops_sync. */
    const char *const *take_over;
    size_t ntake_over;
} warren_ops_sync_options;

/* One API job sync took over. Strings are new; template and created_by may
 * be NULL. */
typedef struct warren_ops_taken_over {
    char *name, *template, *created_by;
    int runs_cancelled; /* unclaimed runs cancelled (enqueued, triggered, retrying, waiting) */
    int runs_dropped;   /* future scheduled runs never claimed, dropped to be planned again */
} warren_ops_taken_over;

typedef struct warren_ops_sync_result {
    warren_sync_report report;
    warren_ops_taken_over *taken_over; /* new; NULL when ntaken_over is 0 */
    size_t ntaken_over;
} warren_ops_sync_result;
/* Frees everything r holds and zeroes it; NULL allowed. */
void warren_ops_sync_result_clear(warren_ops_sync_result *r);

/* warren_store_sync (store.h) with options, in one transaction: nothing is
 * changed unless all of it is. Every lock wait is bounded by
 * o->lock_timeout_ms: past it, WARREN_ETIMEOUT with a message naming the
 * sessions that held locks on warren's tables since before the sync (pid,
 * login, application, state, how long their transaction has been open, the
 * start of their query) and the fix.
 * A config job named like a live API job (an application's, made by
 * warren.upsert_job) is an error (WARREN_EINVAL naming the API job, its
 * template, the login that made it and the fix) unless its name is in
 * o->take_over: then the API job becomes the config's job: its future
 * scheduled runs never claimed are dropped (the config's schedule plans its
 * own), its other unclaimed runs (enqueued, triggered, retrying, waiting)
 * cancelled with a note, its history (runs started, attempts) kept, and the
 * job's note says who took it over when and from whom. A take_over name the
 * config lacks is WARREN_EINVAL; one that names no API job does nothing.
 * o may be NULL (defaults). *out is filled in (zeroed first; clear it with
 * warren_ops_sync_result_clear, also after an error). Errors as
 * warren_store_sync, and WARREN_ETIMEOUT. */
int warren_ops_sync(warren_store *st, const warren_config *cfg, const warren_ops_sync_options *o,
                    warren_ops_sync_result *out, warren_error *err);

/* ------------------------------------------------------- producer grants */

/* Least privilege for producers (docs/api-jobs.md, "Producer grants"): a
 * login that is neither a superuser nor a member of the schema's owner may
 * call the Job API in this database only when listed in
 * warren.producer_logins, and may use only the templates and config jobs
 * granted to it in warren.producer_grants (and only tenants starting with
 * its tenant prefix, when it has one). Both call owner-only SQL functions
 * (warren.grant_producer, warren.revoke_producer). */

/* What warren_ops_grant_producer / warren_ops_revoke_producer found out. */
typedef struct warren_ops_producer_result {
    int changed;     /* grant: grants added; revoke: grants removed (and the login's
                        entry, when everything was revoked) */
    int is_producer; /* 1: the login is a member of warren_producer */
    int privileged;  /* 1: a superuser or a member of the schema owner: not limited */
    int had_login;   /* revoke: 1 if the login had an entry in producer_logins */
} warren_ops_producer_result;

/* Grants login the nt templates (create API jobs from them, enqueue on them)
 * and the nj config jobs (enqueue on them); tenant_prefix (NULL: unchanged;
 * "": none, any tenant) binds the login to tenants starting with it. At least
 * one of templates, jobs or tenant_prefix is given. Granting what the login
 * holds already changes nothing. A name not in the database yet is granted
 * anyway (a WARNING reaches the store's logger). *out is filled in (zeroed
 * first). Errors: WARREN_EINVAL (nothing to grant, a bad name, a template
 * given as a job or the other way round, an API job, a bad prefix),
 * WARREN_ENOENT (no role of that name), WARREN_EDB, WARREN_EDBCONN. */
int warren_ops_grant_producer(warren_store *st, const char *login, const char *const *templates,
                              size_t nt, const char *const *jobs, size_t nj,
                              const char *tenant_prefix, warren_ops_producer_result *out,
                              warren_error *err);
/* Takes the nt templates and nj config jobs away from login (those it does
 * not hold are ignored); with nt == nj == 0, everything: its grants and its
 * tenant prefix, so it can no longer call the API in this database. The
 * login need not exist any more. Errors: WARREN_EINVAL (a bad name or
 * login), WARREN_EDB, WARREN_EDBCONN. */
int warren_ops_revoke_producer(warren_store *st, const char *login, const char *const *templates,
                               size_t nt, const char *const *jobs, size_t nj,
                               warren_ops_producer_result *out, warren_error *err);

/* One producer grant: a row of warren.producer_grants joined to its login's
 * warren.producer_logins row; a login with no grant left is one row with
 * kind and name NULL. Strings are new; tenant_prefix, kind and name may be
 * NULL. */
typedef struct warren_ops_producer_row {
    char *login, *tenant_prefix, *kind, *name, *granted_by;
    warren_us granted_at;
} warren_ops_producer_row;
/* Frees the n rows and the array; NULL allowed. */
void warren_ops_producer_rows_free(warren_ops_producer_row *rows, size_t n);
/* The producer grants of login (NULL: of every login), by login, kind, name.
 * *rows is new; NULL when *n is 0. Errors: WARREN_ENOMEM, WARREN_EDB,
 * WARREN_EDBCONN. */
int warren_ops_producer_grants(warren_store *st, const char *login, warren_ops_producer_row **rows,
                               size_t *n, warren_error *err);

/* ------------------------------------------------------------ tenant caps */

/* An operator's cap on the runs of one tenant running at once, over every
 * job and template (docs/delivery.md, "Caps"); set through the owner-only
 * warren.set_tenant_cap. */

/* Sets tenant's cap to max_running (>= 1), or removes it (max_running <= 0).
 * *had (may be NULL) gets the cap before (0: none). Errors: WARREN_EINVAL (a
 * bad tenant name), WARREN_EDB (e.g. the database lacks the tenant caps of
 * migration 019: run `warren migrate`), WARREN_EDBCONN. */
int warren_ops_set_tenant_cap(warren_store *st, const char *tenant, int max_running, int *had,
                              warren_error *err);

typedef struct warren_ops_tenant_cap {
    char *tenant; /* new */
    int max_running;
} warren_ops_tenant_cap;
/* Frees the n rows and the array; NULL allowed. */
void warren_ops_tenant_caps_free(warren_ops_tenant_cap *rows, size_t n);
/* The tenant caps (of tenant only, when not NULL), by tenant. *rows is new;
 * NULL when *n is 0. Errors: WARREN_ENOMEM, WARREN_EDB, WARREN_EDBCONN. */
int warren_ops_tenant_caps(warren_store *st, const char *tenant, warren_ops_tenant_cap **rows,
                           size_t *n, warren_error *err);

/* ------------------------------------------------------------------- jobs */

/* Which jobs warren_ops_jobs lists. Zeroed (or NULL), every job; each field's
 * zero value means "any", so filters can be added without changing callers. */
typedef struct warren_ops_jobs_query {
    int broken_only;      /* 1: only jobs the planner marked broken */
    int limit;            /* at most this many; <= 0: all */
    const char *template; /* only API jobs made from this template (borrowed; NULL: any) */
    const char *tenant;   /* only jobs of this tenant (borrowed; NULL: any) */
    const char *origin;   /* "config" (config jobs and templates) or "api" (NULL: any) */
    const char *name;     /* only this job (borrowed; NULL: any) */
} warren_ops_jobs_query;

/* One job (a row of warren.jobs) as an operator sees it. Strings are new;
 * broken_reason is NULL unless the job is broken. Instants are 0 for NULL. */
typedef struct warren_ops_job {
    char *name, *kind, *expression, *timezone, *queue, *misfire;
    warren_us next_fire_at; /* the planner's cursor: the first fire time not yet
                               materialised; 0: not planned yet (from now) */
    int exhausted;          /* the cursor is 'infinity': a one-shot that fired */
    int paused, removed;
    /* Broken: the planner cannot compute the job's fire times (an unreadable
     * zone file, an expression of a newer version); its cursor waits, and
     * what it misses goes through its misfire policy once the cause is gone
     * (docs/delivery.md, "Broken jobs"). */
    char *broken_reason;
    warren_us broken_since, broken_retry_at;
    /* Where it came from (docs/api-jobs.md): origin "config" (the config
     * file; is_template 1 for a template) or "api" (made by
     * warren.upsert_job from template). tenant, note (what happened to the
     * job itself), created_by and template may be NULL. */
    char *origin, *template, *tenant, *note, *created_by;
    int is_template;
    int paused_by_template;                  /* paused because its template was removed */
    int max_running, max_running_per_tenant; /* caps; 0: none */
    warren_us created_at, updated_at;
} warren_ops_job;
/* Clears each of the n rows, then frees the array; NULL allowed. */
void warren_ops_jobs_free(warren_ops_job *rows, size_t n);

/* Jobs by name, filtered by q (may be NULL). *rows is new
 * (warren_ops_jobs_free(*rows, *n)); NULL when *n is 0. Errors:
 * WARREN_ENOMEM, WARREN_EDB, WARREN_EDBCONN. */
int warren_ops_jobs(warren_store *st, const warren_ops_jobs_query *q, warren_ops_job **rows,
                    size_t *n, warren_error *err);

/* One job by name into *out (zeroed first; on success free its strings with
 * warren_ops_job_clear).
 * Errors: WARREN_ENOENT (no such job), WARREN_ENOMEM, WARREN_EDB,
 * WARREN_EDBCONN. */
int warren_ops_job_get(warren_store *st, const char *name, warren_ops_job *out, warren_error *err);
/* Frees j's strings and zeroes it; NULL allowed. */
void warren_ops_job_clear(warren_ops_job *j);

#endif
