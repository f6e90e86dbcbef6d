/* codec.h: the run message contract (docs/design.md §4.3) and run keys. The body every
 * ready-queue message carries is the JSON object
 *   {"run_key": "JOB@2026-11-30T14:00:00Z", "job": "JOB",
 *    "scheduled_at": "2026-11-30T14:00:00Z", "due_at": "2026-11-30T14:00:07.250Z",
 *    "attempt": 0, "payload": {...}}
 * plus "template" (an API job's template) and "tenant" when they exist. An
 * enqueued run's key is JOB@KEY and its scheduled_at may have milliseconds.
 * Other languages rely on it: fields are only ever added, never renamed. */
#ifndef WARREN_CODEC_H
#define WARREN_CODEC_H

#include <stddef.h>

#include <warren/error.h>
#include <warren/timefmt.h>

/* Longest body decode accepts (bytes); longer bodies are malformed. */
#define WARREN_MSG_MAX_BODY (1024 * 1024)
/* Job names: [A-Za-z0-9][A-Za-z0-9._-]{0,199} (warren.jobs.name). */
#define WARREN_JOB_NAME_MAX 200
/* An enqueued run's key (the part after "JOB@"): at most 200 characters. */
#define WARREN_ENQUEUE_KEY_MAX 200
/* A run key is "JOB@YYYY-MM-DDTHH:MM:SSZ" (scheduled, triggered, backfilled
 * runs) or "JOB@KEY" (enqueued runs), at most 255 bytes (an AMQP short
 * string: it is the message_id); buffers hold that and the NUL. */
#define WARREN_RUN_KEY_LEN_MAX 255
#define WARREN_RUN_KEY_MAX (WARREN_RUN_KEY_LEN_MAX + 1)

/* 1 if s can be a queue or in-process handler name, a component of queue
 * names: [A-Za-z0-9][A-Za-z0-9._-]{0,62}. */
int warren_name_valid(const char *s);

/* 1 if s can be a job name: [A-Za-z0-9][A-Za-z0-9._-]{0,199}. */
int warren_job_name_valid(const char *s);

/* 1 if s can be an enqueued run's key (docs/worker-protocol.md, "Run keys"): 1-200 of
 * [A-Za-z0-9._:/=+@-], the first a letter or a digit, and not beginning with a
 * time of the form YYYY-MM-DDTHH:MM:SS (kept for scheduled runs' keys, so the
 * two can never collide). The whole JOB@KEY must also fit in 255 bytes. */
int warren_enqueue_key_valid(const char *s);

/* 1 if s is a tenant name: [A-Za-z0-9][A-Za-z0-9._:@-]{0,199}. */
int warren_tenant_valid(const char *s);

/* Writes "JOB@YYYY-MM-DDTHH:MM:SSZ" into buf (>= WARREN_RUN_KEY_MAX bytes).
 * scheduled_at must be whole seconds. Errors: WARREN_EINVAL (bad job name,
 * fractional seconds, buffer too small). */
int warren_run_key_build(const char *job, warren_us scheduled_at, char *buf, size_t len,
                         warren_error *err);

/* Splits a scheduled run key. job (may be NULL) gets the job name (needs
 * WARREN_JOB_NAME_MAX + 1 bytes); *scheduled_at (may be NULL) the instant.
 * Only the canonical form is accepted (what warren_run_key_build writes).
 * Errors: WARREN_EPARSE naming the key and what is wrong. */
int warren_run_key_parse(const char *key, char *job, size_t job_len, warren_us *scheduled_at,
                         warren_error *err);

/* Checks either form of run key: a scheduled one (as warren_run_key_parse)
 * or JOB@KEY of an enqueued run. job (may be NULL) gets the job name (needs
 * WARREN_JOB_NAME_MAX + 1 bytes); *enqueued (may be NULL) 1 for JOB@KEY.
 * Workers need not tell the two apart (run keys are opaque); the CLI checks
 * what an operator typed. Errors: WARREN_EPARSE naming the key and the rule. */
int warren_run_key_check(const char *key, char *job, size_t job_len, int *enqueued,
                         warren_error *err);

/* One run message. Strings are owned by the struct (see warren_run_msg_clear). */
typedef struct warren_run_msg {
    char *run_key; /* JOB@YYYY-MM-DDTHH:MM:SSZ, or JOB@KEY for an enqueued run */
    char *job;
    warren_us scheduled_at; /* whole seconds; milliseconds for an enqueued run */
    warren_us due_at;       /* encoded with milliseconds */
    int attempt;            /* the claim counter when published (0 for a first run) */
    char *payload_json;     /* a compact JSON object; NULL encodes as {} */
    char *template_name;    /* "template": an API job's template; NULL: none (not encoded) */
    char *tenant;           /* "tenant": the run's tenant; NULL: none (not encoded) */
} warren_run_msg;

/* Frees the strings of m (not m itself) and zeroes it; NULL allowed. */
void warren_run_msg_clear(warren_run_msg *m);

/* Encodes m as the body. run_key may be NULL (it is built from job and
 * scheduled_at); if given it is either that scheduled key or JOB@KEY of an
 * enqueued run (then scheduled_at may have milliseconds). scheduled_at is
 * written with whole seconds when it has none, else with milliseconds.
 * template and tenant are written when not NULL. *body is new (free()), NUL
 * terminated, *len (may be NULL) its length. Errors: WARREN_EINVAL (bad job,
 * template or tenant name, key mismatch or bad enqueue key, payload not a
 * JSON object, attempt < 0), WARREN_ENOMEM. */
int warren_run_msg_encode(const warren_run_msg *m, char **body, size_t *len, warren_error *err);

/* Decodes and validates a body (not necessarily NUL terminated). On success
 * *out is filled (clear it with warren_run_msg_clear); on failure *out is
 * zeroed and err says why in a line fit for a dead-letter reason, e.g.
 * `malformed run message: "attempt" must be a non-negative integer`.
 * Checks: valid UTF-8 JSON object, size cap, every field present with its
 * type, valid job name, RFC 3339 times within years 1-9999 (UTC), run_key starting with job + "@"
 * and then either the scheduled form equal to scheduled_at (whole seconds) or an enqueue key
 * (warren_enqueue_key_valid; scheduled_at at milliseconds at most), payload an object, the optional
 * "template" a job name and "tenant" a tenant name. Unknown fields are ignored (newer producers may
 * add some). Errors: WARREN_EMSG, WARREN_ENOMEM. */
int warren_run_msg_decode(const char *body, size_t len, warren_run_msg *out, warren_error *err);

/* Checks that text is a JSON object and writes its compact form to *compact
 * (new, free(); may be NULL to only check). For `warren trigger --payload`
 * and anything else that takes a payload from a user. Errors: WARREN_EPARSE
 * with jansson's line/column and reason. */
int warren_json_object_check(const char *text, char **compact, warren_error *err);

#endif
