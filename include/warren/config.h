/* config.h: the libconfig file (docs/design.md §8) loaded into plain structs, with
 * every validation error reported (file:line: job "NAME": setting ...). */
#ifndef WARREN_CONFIG_H
#define WARREN_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include <warren/error.h>
#include <warren/timefmt.h>

typedef enum { WARREN_SCHED_CRON, WARREN_SCHED_EVERY, WARREN_SCHED_AT } warren_sched_kind;
typedef enum {
    WARREN_MISFIRE_RUN_ONCE,
    WARREN_MISFIRE_SKIP,
    WARREN_MISFIRE_CATCH_UP
} warren_misfire;
typedef enum {
    WARREN_OVERLAP_SKIP,
    WARREN_OVERLAP_ALLOW,
    WARREN_OVERLAP_QUEUE,
    WARREN_OVERLAP_CANCEL_PREVIOUS
} warren_overlap;
typedef enum {
    WARREN_HANDLER_NONE, /* no handler: a worker in another language serves the queue */
    WARREN_HANDLER_EXEC,
    WARREN_HANDLER_SQL,
    WARREN_HANDLER_C /* registered in-process with warren_worker_register */
} warren_handler_kind;

/* Names as written in the config and stored in warren.jobs ("run_once", ...). */
const char *warren_misfire_name(warren_misfire m);
const char *warren_overlap_name(warren_overlap o);
const char *warren_sched_kind_name(warren_sched_kind k);
const char *warren_handler_kind_name(warren_handler_kind k);
/* Parse names back; 0 on success, WARREN_EINVAL if unknown. */
int warren_misfire_from_name(const char *s, warren_misfire *out);
int warren_overlap_from_name(const char *s, warren_overlap *out);
int warren_sched_kind_from_name(const char *s, warren_sched_kind *out);

typedef struct warren_job {
    char *name;             /* [A-Za-z0-9][A-Za-z0-9._-]{0,199}: a run-key component */
    int is_template;        /* template = true: no schedule (kind unset, schedule NULL); API
                               jobs are created from it (docs/api-jobs.md) */
    warren_sched_kind kind; /* exactly one of cron / every / at (not for a template) */
    char *schedule;         /* the text as written: cron expression, "90s", or RFC 3339;
                               NULL for a template */
    int64_t every_ms;       /* kind EVERY */
    warren_us at;           /* kind AT */
    char *timezone;         /* IANA name; default "UTC" */
    char *queue;            /* required; ready queue is "warren.ready.<queue>" */
    char *payload_json;     /* compact JSON object; "{}" when absent */
    warren_handler_kind handler;
    char **exec_argv;           /* HANDLER_EXEC: NULL-terminated argv (exec = "cmd" or ["cmd","a"]);
                                   an argv[0] with a '/' that is not absolute is made absolute
                                   relative to the config file's directory (bare names are left
                                   for PATH lookup; shell commands are left as written) */
    int exec_shell;             /* HANDLER_EXEC with shell = true: argv[0] run by /bin/sh -c */
    char *sql;                  /* HANDLER_SQL */
    char *c_handler;            /* HANDLER_C: registered name */
    warren_misfire misfire;     /* default run_once */
    int max_catch_up;           /* catch_up cap; 0 = no cap */
    warren_overlap overlap;     /* default skip */
    int64_t jitter_ms;          /* default 0 */
    int retry_max_attempts;     /* default 5 */
    int64_t retry_base_ms;      /* default 10s */
    int64_t retry_cap_ms;       /* default 10m */
    int64_t lease_ms;           /* default 30s */
    int64_t timeout_ms;         /* default 30m */
    int paused;                 /* default 0 */
    int max_running;            /* cap on its (and its API jobs') running runs; 0 = none */
    int max_running_per_tenant; /* the same per tenant; 0 = none */
    char *file;                 /* where it was defined (for messages; an @include'd file's path) */
    int line;
} warren_job;

typedef struct warren_planner_config {
    int64_t horizon_ms;             /* default 2m30s: not a whole number of minutes */
    int64_t tick_ms;                /* default 1s */
    int64_t misfire_threshold_ms;   /* default 60s */
    int64_t reconcile_grace_ms;     /* default 30s */
    int partitions;                 /* default 64 */
    int publish_batch;              /* default 200: runs per relay batch */
    int delay_ring;                 /* 0 (default): classic queue per due second;
                                       N > 0: fixed ring of N delay queues */
    int64_t delay_queue_expires_ms; /* x-expires of per-second delay queues; default 10m */
    int delay_ring_type;            /* planner.delay_ring_type: WARREN_DELAY_RING_QUORUM
                                       (0, default) or WARREN_DELAY_RING_CLASSIC */
    int64_t event_defer_ms;         /* planner.event_defer, default 10s; 0: never hold
                                       events back (see warren_relay_outbox) */
    int64_t release_lead_ms;        /* planner.release_lead, default 3s, at most 10s: runs
                                       reach their ready queue this long before due; the
                                       worker and warren.claim wait for the due time */
} warren_planner_config;

/* planner.delay_ring_type values */
#define WARREN_DELAY_RING_QUORUM 0
#define WARREN_DELAY_RING_CLASSIC 1

typedef struct warren_worker_config {
    int concurrency;             /* default 4 */
    int64_t shutdown_grace_ms;   /* default 30s */
    int64_t heartbeat_margin_ms; /* default 5s */
    char *id;                    /* default NULL: hostname:pid */
    /* exec_env: names of the worker's environment variables exec handlers
     * also get, beyond the allow-list (docs/config.md); NULL-terminated,
     * NULL when none are named. */
    char **exec_env;
    /* ack_hold: an acknowledgement settled behind a delivery still open
     * waits up to this long for it (one multiple-ack for both); default 0 */
    int64_t ack_hold_ms;
    /* sql_batch: at most this many sql-handler runs share one transaction
     * (and at most 10 ms of their statements' measured time); default 32,
     * 1 = a transaction per run */
    int sql_batch;
    /* sql_take: sql-handler runs of uncapped allow jobs whose statement was
     * measured quick, due together, are claimed, run and completed in one
     * transaction (warren.take_many / finish_many: never seen running);
     * default 1 */
    int sql_take;
    /* prefetch: unacknowledged deliveries per consumer; default 0 = 2 x
     * concurrency up to 256 slots, concurrency above; never below concurrency */
    int prefetch;
} warren_worker_config;

typedef struct warren_config {
    char *path;
    char *database_url; /* default "postgresql://localhost/warren"; WARREN_DATABASE_URL overrides */
    char *amqp_url;     /* default "amqp://guest:guest@localhost:5672/%2f"; WARREN_AMQP_URL
                           overrides (both never NULL after a successful load) */
    int delivery_limit; /* broker.delivery_limit: x-delivery-limit of ready queues; default 5 */
    warren_planner_config planner;
    warren_worker_config worker;
    warren_job *jobs;
    size_t njobs;
    size_t *name_index; /* private: hash set of job index + 1 for warren_config_job */
    size_t name_index_cap;
} warren_config;

/* Every problem found while loading, in file order. */
typedef struct warren_diags {
    char **items;
    size_t count;
} warren_diags;
void warren_diags_free(warren_diags *d);

/* Loads and validates path. On success *out is new (free with
 * warren_config_free). On failure returns WARREN_ECONFIG, *out is NULL, diags
 * (may be NULL; new, free with warren_diags_free) holds every error in file
 * order ("FILE:LINE: job "NAME": setting "retry.base": "10x" is not a
 * duration (use e.g. "10s", "5m")"), and err gets the first with a count.
 * Also WARREN_EINVAL (path NULL or empty), WARREN_ENOMEM. @include paths are
 * relative to path's directory. Environment overrides are applied. Reads the
 * tz database (cron and timezone checks); no other I/O. docs/config.md is
 * the reference of settings and checks. */
int warren_config_load(const char *path, warren_config **out, warren_diags *diags,
                       warren_error *err);
void warren_config_free(warren_config *cfg);

/* Finds a job by name (borrowed) or NULL, in constant time. */
const warren_job *warren_config_job(const warren_config *cfg, const char *name);

/* The distinct queue names the jobs use, borrowed from the jobs; *n gets the
 * count. The array is new (free() it). */
const char **warren_config_queues(const warren_config *cfg, size_t *n);

#endif
