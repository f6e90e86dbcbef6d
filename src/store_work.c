/* store_work.c: the worker protocol's calls: warren.claim / claim_many /
 * reclaim_many, heartbeat, complete / complete_many from sql/functions/
 * (claim.sql, lease.sql, complete.sql), batched (one round trip for many
 * runs), run_states, refuse, the cancel of a tagged session and the run's
 * times for the report line. The sql handler's transactions (pipelines,
 * savepoints, take) are store_sql.c's; the operator's replay, runs and show
 * are ops.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "buf.h"
#include "store_int.h"
#include "store_work.h"

/* Type OIDs (pg_type.dat; stable across releases). */
#define OID_TEXT 25
#define OID_TIMESTAMPTZ 1184
#define OID_JSONB 3802

/* warren.claim_many: claimed rows come back keyed by run key. */
#define SQL_CLAIM_BATCH                                                                            \
    "SELECT run_key, attempt, job, scheduled_at, payload, lease_seconds, template "                \
    "FROM warren.claim_many($1::text[], $2::text)"

/* warren.reclaim_many: the same, for runs whose claim answer was lost. */
#define SQL_RECLAIM_BATCH                                                                          \
    "SELECT run_key, attempt, job, scheduled_at, payload, lease_seconds, template "                \
    "FROM warren.reclaim_many($1::text[], $2::text, $3::int)"

#define SQL_HEARTBEAT_BATCH                                                                        \
    "SELECT t.i, warren.heartbeat(t.k, t.a) "                                                      \
    "FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS t(k, a, i)"

#define SQL_COMPLETE_BATCH                                                                         \
    "SELECT t.i, warren.complete(t.k, t.a, t.o, t.e) "                                             \
    "FROM unnest($1::text[], $2::int[], $3::text[], $4::text[]) WITH ORDINALITY AS t(k, a, o, e, " \
    "i)"

#define SQL_RUN_STATES "SELECT run_key, state, due_at, db_now FROM warren.run_states($1::text[])"

#define SQL_REFUSE "SELECT warren.refuse($1::text, $2::text, $3::text)"

#define SQL_RUN_TIMES                                                                              \
    "SELECT state, scheduled_at, due_at, published_at, started_at, finished_at "                   \
    "FROM warren.runs WHERE run_key = $1"

/* ------------------------------------------------------------ arrays */

/* Appends one element of a text[] literal: NULL, or a quoted string. */
void warren__sb_elem(warren__buf *b, const char *s, int first)
{
    if (!first)
        warren__buf_add(b, ",", 1);
    if (s == NULL) {
        warren__buf_puts(b, "NULL");
        return;
    }
    warren__buf_add(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        if (*p == '"' || *p == '\\')
            warren__buf_add(b, "\\", 1);
        warren__buf_add(b, p, 1);
    }
    warren__buf_add(b, "\"", 1);
}

int warren__sb_done(warren__buf *b, warren_error *err)
{
    if (b->err) {
        int rc = b->err;
        warren__buf_close(b);
        return warren_error_set(err, rc, "%s building a query parameter",
                                rc == WARREN_ERANGE ? "PostgreSQL's 1 GB value limit reached"
                                                    : "out of memory");
    }
    return 0;
}

static void sb_int(warren__buf *b, int v, int first)
{
    char num[24];
    snprintf(num, sizeof(num), "%s%d", first ? "" : ",", v);
    warren__buf_puts(b, num);
}

/* Row index (1-based ordinality in column 0) -> 0-based position, or -1. */
static long row_index(const PGresult *res, int row, size_t n)
{
    int64_t i;
    if (warren__store_get_int64(res, row, 0, &i) != 0 || i < 1 || (uint64_t)i > n)
        return -1;
    return (long)(i - 1);
}

/* ------------------------------------------------------------ claim */

/* Result rows name their run key; a sorted index finds the batch entries
 * for a key in O(log n) (a linear search per row was O(n^2): 16 million
 * strcmp calls for a 4,096-run batch). */
typedef struct key_ix {
    const char *key;
    size_t i; /* position in the caller's batch */
} key_ix;

static int key_ix_cmp(const void *a, const void *b)
{
    const key_ix *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c != 0 ? c : (x->i > y->i) - (x->i < y->i);
}

/* Sorts ix[0..n) (keys filled in by the caller) by key, then position. */
static void key_ix_sort(key_ix *ix, size_t n)
{
    qsort(ix, n, sizeof(*ix), key_ix_cmp);
}

/* The first entry of ix with this key, or n. */
static size_t key_ix_first(const key_ix *ix, size_t n, const char *key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(ix[mid].key, key) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && strcmp(ix[lo].key, key) == 0 ? lo : n;
}

void warren_claim_clear(warren_claim *c)
{
    if (c == NULL)
        return;
    free(c->payload_json);
    memset(c, 0, sizeof(*c));
}

/* claim_many and reclaim_many: the same arguments and result rows. */
static int claim_rows(warren_store *st, const char *stmt, const char *sql, const char *fn,
                      const char *const *keys, size_t n, const char *worker, int64_t within_ms,
                      warren_claim *out, warren_error *err)
{
    char wbuf[24];
    warren__buf arr = {0};
    PGresult *res = NULL;
    int rc;

    if (st == NULL || worker == NULL || (n > 0 && (keys == NULL || out == NULL)))
        return warren_error_set(err, WARREN_EINVAL, "%s: bad arguments", fn);
    for (size_t i = 0; i < n; i++)
        memset(&out[i], 0, sizeof(out[i]));
    if (n == 0)
        return 0;
    warren__buf_puts(&arr, "{");
    for (size_t i = 0; i < n; i++)
        warren__sb_elem(&arr, keys[i], i == 0);
    warren__buf_puts(&arr, "}");
    if ((rc = warren__sb_done(&arr, err)) != 0)
        return rc;
    if (within_ms > INT32_MAX)
        within_ms = INT32_MAX;
    snprintf(wbuf, sizeof(wbuf), "%lld", (long long)within_ms); /* unused if < 0 */
    const char *params[3] = {arr.p, worker, wbuf};
    key_ix *ix = malloc(n * sizeof(*ix));
    if (ix == NULL) {
        free(arr.p);
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        ix[i] = (key_ix){keys[i], i};
    key_ix_sort(ix, n);
    rc = warren__store_exec_prepared(st, stmt, sql, within_ms < 0 ? 2 : 3, params, &res,
                                     n == 1 ? "claim run" : "claim runs", err);
    free(arr.p);
    if (rc != 0) {
        free(ix);
        return rc;
    }
    for (int r = 0; r < PQntuples(res) && rc == 0; r++) {
        const char *key = warren__store_get_text(res, r, 0);
        const char *job = warren__store_get_text(res, r, 2);
        const char *payload = warren__store_get_text(res, r, 4);
        const char *tmpl = warren__store_get_text(res, r, 6);
        if (key == NULL)
            continue;
        /* entries with this key in batch order: the first unclaimed one */
        for (size_t k = key_ix_first(ix, n, key); k < n && strcmp(ix[k].key, key) == 0; k++) {
            warren_claim *c = &out[ix[k].i];
            if (c->claimed)
                continue;
            if (warren__store_get_int(res, r, 1, &c->attempt) != 0 ||
                warren__store_get_us(res, r, 3, &c->scheduled_at) != 0 ||
                warren__store_get_int(res, r, 5, &c->lease_seconds) != 0 || job == NULL ||
                strlen(job) > WARREN_JOB_NAME_MAX ||
                (tmpl != NULL && strlen(tmpl) > WARREN_JOB_NAME_MAX)) {
                rc = warren_error_set(err, WARREN_EDB, "claim %s: unexpected row from warren.%s",
                                      key, fn);
                break;
            }
            snprintf(c->job, sizeof(c->job), "%s", job);
            snprintf(c->handler, sizeof(c->handler), "%s", tmpl != NULL ? tmpl : job);
            c->payload_json = strdup(payload ? payload : "{}");
            if (c->payload_json == NULL) {
                rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
                break;
            }
            c->claimed = 1;
            break; /* a key twice in the batch: only its first entry gets the claim */
        }
    }
    PQclear(res);
    free(ix);
    if (rc != 0)
        for (size_t i = 0; i < n; i++)
            warren_claim_clear(&out[i]);
    return rc;
}

int warren_store_claim_batch(warren_store *st, const char *const *keys, size_t n,
                             const char *worker, warren_claim *out, warren_error *err)
{
    return claim_rows(st, "work_claim_batch", SQL_CLAIM_BATCH, "claim_many", keys, n, worker, -1,
                      out, err);
}

int warren_store_reclaim_batch(warren_store *st, const char *const *keys, size_t n,
                               const char *worker, int64_t within_ms, warren_claim *out,
                               warren_error *err)
{
    if (within_ms < 0)
        within_ms = 0;
    return claim_rows(st, "work_reclaim_batch", SQL_RECLAIM_BATCH, "reclaim_many", keys, n, worker,
                      within_ms, out, err);
}

int warren_store_claim(warren_store *st, const char *run_key, const char *worker, warren_claim *out,
                       warren_error *err)
{
    return warren_store_claim_batch(st, &run_key, 1, worker, out, err);
}

/* ------------------------------------------------------------ heartbeat */

int warren_store_heartbeat_batch(warren_store *st, const char *const *keys, const int *attempts,
                                 size_t n, int *held, warren_error *err)
{
    warren__buf ka = {0}, aa = {0};
    PGresult *res = NULL;
    int rc;

    if (st == NULL || (n > 0 && (keys == NULL || attempts == NULL || held == NULL)))
        return warren_error_set(err, WARREN_EINVAL, "warren_store_heartbeat_batch: bad arguments");
    for (size_t i = 0; i < n; i++)
        held[i] = 0;
    if (n == 0)
        return 0;
    warren__buf_puts(&ka, "{");
    warren__buf_puts(&aa, "{");
    for (size_t i = 0; i < n; i++) {
        warren__sb_elem(&ka, keys[i], i == 0);
        sb_int(&aa, attempts[i], i == 0);
    }
    warren__buf_puts(&ka, "}");
    warren__buf_puts(&aa, "}");
    if (warren__sb_done(&ka, err) != 0 || warren__sb_done(&aa, err) != 0) {
        free(ka.p);
        free(aa.p);
        return WARREN_ENOMEM;
    }
    const char *params[2] = {ka.p, aa.p};
    rc = warren__store_exec_prepared(st, "work_heartbeat_batch", SQL_HEARTBEAT_BATCH, 2, params,
                                     &res, "heartbeat", err);
    free(ka.p);
    free(aa.p);
    if (rc != 0)
        return rc;
    for (int r = 0; r < PQntuples(res); r++) {
        long i = row_index(res, r, n);
        int b = 0;
        if (i >= 0 && warren__store_get_bool(res, r, 1, &b) == 0)
            held[i] = b;
    }
    PQclear(res);
    return 0;
}

int warren_store_heartbeat(warren_store *st, const char *run_key, int attempt, int *held,
                           warren_error *err)
{
    return warren_store_heartbeat_batch(st, &run_key, &attempt, 1, held, err);
}

/* ------------------------------------------------------------ complete */

/* warren.complete_many's parameters for c[idx[j]] (c[j] if idx is NULL),
 * j < m: the text[] of their keys in *ka, the int[] of their attempts in
 * *aa. 0, or the error (both freed). */
int warren__completion_arrays(const warren_completion *c, const size_t *idx, size_t m,
                              warren__buf *ka, warren__buf *aa, warren_error *err)
{
    int rc;
    warren__buf_puts(ka, "{");
    warren__buf_puts(aa, "{");
    for (size_t j = 0; j < m; j++) {
        warren__sb_elem(ka, c[idx ? idx[j] : j].run_key, j == 0);
        sb_int(aa, c[idx ? idx[j] : j].attempt, j == 0);
    }
    warren__buf_puts(ka, "}");
    warren__buf_puts(aa, "}");
    if ((rc = warren__sb_done(ka, err)) != 0 || (rc = warren__sb_done(aa, err)) != 0) {
        free(ka->p);
        free(aa->p);
        ka->p = aa->p = NULL;
    }
    return rc;
}

/* Successful completions in one statement (warren.complete_many). */
static int complete_succeeded(warren_store *st, const warren_completion *c, const size_t *idx,
                              size_t m, int *recorded, warren_error *err)
{
    warren__buf ka = {0}, aa = {0};
    PGresult *res = NULL;
    int rc;

    if ((rc = warren__completion_arrays(c, idx, m, &ka, &aa, err)) != 0)
        return rc;
    const char *params[2] = {ka.p, aa.p};
    key_ix *ix = malloc(m * sizeof(*ix));
    if (ix == NULL) {
        free(ka.p);
        free(aa.p);
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    for (size_t j = 0; j < m; j++)
        ix[j] = (key_ix){c[idx[j]].run_key, idx[j]};
    key_ix_sort(ix, m);
    rc = warren__store_exec_prepared(st, "work_complete_many", SQL_COMPLETE_MANY, 2, params, &res,
                                     m == 1 ? "complete run" : "complete runs", err);
    free(ka.p);
    free(aa.p);
    if (rc != 0) {
        free(ix);
        return rc;
    }
    for (int r = 0; r < PQntuples(res); r++) {
        const char *key = warren__store_get_text(res, r, 0);
        int b = 0;
        if (key == NULL || warren__store_get_bool(res, r, 1, &b) != 0)
            continue;
        for (size_t k = key_ix_first(ix, m, key); k < m && strcmp(ix[k].key, key) == 0; k++)
            recorded[ix[k].i] = b;
    }
    PQclear(res);
    free(ix);
    return 0;
}

int warren_store_complete_batch(warren_store *st, const warren_completion *c, size_t n,
                                int *recorded, warren_error *err)
{
    warren__buf ka = {0}, aa = {0}, oa = {0}, ea = {0};
    PGresult *res = NULL;
    size_t *idx = NULL, m = 0, others = 0;
    int rc;

    if (st == NULL || (n > 0 && (c == NULL || recorded == NULL)))
        return warren_error_set(err, WARREN_EINVAL, "warren_store_complete_batch: bad arguments");
    for (size_t i = 0; i < n; i++)
        recorded[i] = 0;
    if (n == 0)
        return 0;
    /* Successes (the common case) go through the set-based statement, the
     * rest (retry, failed: backoff, dead letters) through warren.complete. */
    if ((idx = malloc(n * sizeof(*idx))) == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (c[i].outcome != NULL && strcmp(c[i].outcome, "succeeded") == 0 && c[i].error == NULL)
            idx[m++] = i;
        else
            others++;
    }
    if (m > 0 && (rc = complete_succeeded(st, c, idx, m, recorded, err)) != 0) {
        free(idx);
        return rc;
    }
    free(idx);
    if (others == 0)
        return 0;
    warren__buf_puts(&ka, "{");
    warren__buf_puts(&aa, "{");
    warren__buf_puts(&oa, "{");
    warren__buf_puts(&ea, "{");
    for (size_t i = 0, k = 0; i < n; i++) {
        if (c[i].outcome != NULL && strcmp(c[i].outcome, "succeeded") == 0 && c[i].error == NULL)
            continue;
        warren__sb_elem(&ka, c[i].run_key, k == 0);
        sb_int(&aa, c[i].attempt, k == 0);
        warren__sb_elem(&oa, c[i].outcome, k == 0);
        warren__sb_elem(&ea, c[i].error, k == 0);
        k++;
    }
    warren__buf_puts(&ka, "}");
    warren__buf_puts(&aa, "}");
    warren__buf_puts(&oa, "}");
    warren__buf_puts(&ea, "}");
    if (warren__sb_done(&ka, err) != 0 || warren__sb_done(&aa, err) != 0 ||
        warren__sb_done(&oa, err) != 0 || warren__sb_done(&ea, err) != 0) {
        free(ka.p);
        free(aa.p);
        free(oa.p);
        free(ea.p);
        return WARREN_ENOMEM;
    }
    const char *params[4] = {ka.p, aa.p, oa.p, ea.p};
    rc = warren__store_exec_prepared(st, "work_complete_batch", SQL_COMPLETE_BATCH, 4, params, &res,
                                     others == 1 ? "complete run" : "complete runs", err);
    free(ka.p);
    free(aa.p);
    free(oa.p);
    free(ea.p);
    if (rc != 0)
        return rc;
    for (int r = 0; r < PQntuples(res); r++) {
        long k = row_index(res, r, others);
        int b = 0;
        if (k < 0 || warren__store_get_bool(res, r, 1, &b) != 0)
            continue;
        /* the k-th non-success */
        for (size_t i = 0, seen = 0; i < n; i++) {
            if (c[i].outcome != NULL && strcmp(c[i].outcome, "succeeded") == 0 &&
                c[i].error == NULL)
                continue;
            if ((long)seen++ == k) {
                recorded[i] = b;
                break;
            }
        }
    }
    PQclear(res);
    return 0;
}

int warren_store_complete(warren_store *st, const char *run_key, int attempt, const char *outcome,
                          const char *error, int *recorded, warren_error *err)
{
    warren_completion c = {run_key, attempt, outcome, error};
    return warren_store_complete_batch(st, &c, 1, recorded, err);
}

/* ------------------------------------------------------------ cancel */

#define SQL_CANCEL_TAGGED                                                                          \
    "SELECT count(*) FILTER (WHERE pg_cancel_backend(pid)) FROM pg_stat_activity "                 \
    "WHERE application_name = $1 AND pid <> pg_backend_pid()"

int warren_store_cancel_tagged(warren_store *st, const char *tag, int *cancelled, warren_error *err)
{
    PGresult *res = NULL;
    int64_t n = 0;
    int rc;

    if (cancelled != NULL)
        *cancelled = 0;
    if (st == NULL || tag == NULL || tag[0] == '\0')
        return warren_error_set(err, WARREN_EINVAL, "warren_store_cancel_tagged: bad arguments");
    const char *params[1] = {tag};
    rc = warren__store_exec_prepared(st, "work_cancel_tagged", SQL_CANCEL_TAGGED, 1, params, &res,
                                     "cancel an sql handler", err);
    if (rc != 0)
        return rc;
    if (warren__store_get_int64(res, 0, 0, &n) == 0 && cancelled != NULL)
        *cancelled = n > 0;
    PQclear(res);
    return 0;
}

/* ------------------------------------------------------------ run times */

static warren_us get_us0(const PGresult *res, int row, int col)
{
    warren_us t = 0;
    if (!PQgetisnull(res, row, col))
        warren__store_get_us(res, row, col, &t);
    return t;
}

int warren_store_run_times(warren_store *st, const char *run_key, warren_run_times *out,
                           warren_error *err)
{
    PGresult *res = NULL;
    const char *params[1] = {run_key};
    int rc;

    memset(out, 0, sizeof(*out));
    rc = warren__store_exec_prepared(st, "work_run_times", SQL_RUN_TIMES, 1, params, &res,
                                     "read run times", err);
    if (rc != 0)
        return rc;
    if (PQntuples(res) != 1) {
        PQclear(res);
        return warren_error_set(err, WARREN_ENOENT, "no run %s", run_key);
    }
    snprintf(out->state, sizeof(out->state), "%s", warren__store_get_text(res, 0, 0));
    out->scheduled_at = get_us0(res, 0, 1);
    out->due_at = get_us0(res, 0, 2);
    out->published_at = get_us0(res, 0, 3);
    out->started_at = get_us0(res, 0, 4);
    out->finished_at = get_us0(res, 0, 5);
    PQclear(res);
    return 0;
}

/* ------------------------------------------------------------ deliveries not claimed */

int warren_store_run_states(warren_store *st, const char *const *keys, size_t n,
                            warren_run_state *out, warren_us *db_now, warren_error *err)
{
    warren__buf arr = {0};
    PGresult *res = NULL;
    int rc;

    if (db_now != NULL)
        *db_now = 0;
    if (st == NULL || (n > 0 && (keys == NULL || out == NULL)))
        return warren_error_set(err, WARREN_EINVAL, "run_states: bad arguments");
    for (size_t i = 0; i < n; i++)
        memset(&out[i], 0, sizeof(out[i]));
    if (n == 0)
        return 0;
    warren__buf_puts(&arr, "{");
    for (size_t i = 0; i < n; i++)
        warren__sb_elem(&arr, keys[i], i == 0);
    warren__buf_puts(&arr, "}");
    if ((rc = warren__sb_done(&arr, err)) != 0)
        return rc;
    const char *params[1] = {arr.p};
    rc = warren__store_exec_prepared(st, "work_run_states", SQL_RUN_STATES, 1, params, &res,
                                     "read run states", err);
    free(arr.p);
    if (rc != 0)
        return rc;
    for (int r = 0; r < PQntuples(res); r++) {
        const char *key = warren__store_get_text(res, r, 0);
        const char *state = warren__store_get_text(res, r, 1);
        warren_us due = 0, now = 0;
        if (key == NULL || state == NULL || warren__store_get_us(res, r, 2, &due) != 0 ||
            warren__store_get_us(res, r, 3, &now) != 0) {
            PQclear(res);
            return warren_error_set(err, WARREN_EDB, "unexpected row from warren.run_states");
        }
        if (db_now != NULL)
            *db_now = now;
        for (size_t i = 0; i < n; i++)
            if (strcmp(keys[i], key) == 0) {
                out[i].found = 1;
                snprintf(out[i].state, sizeof(out[i].state), "%s", state);
                out[i].due_at = due;
            }
    }
    PQclear(res);
    return 0;
}

int warren_store_refuse(warren_store *st, const char *run_key, const char *worker,
                        const char *reason, char *state, size_t len, warren_error *err)
{
    PGresult *res = NULL;
    const char *params[3] = {run_key, worker, reason};
    int rc;

    if (st == NULL || run_key == NULL || worker == NULL || state == NULL || len == 0)
        return warren_error_set(err, WARREN_EINVAL, "refuse: bad arguments");
    state[0] = '\0';
    rc = warren__store_exec_prepared(st, "work_refuse", SQL_REFUSE, 3, params, &res, "refuse run",
                                     err);
    if (rc != 0)
        return rc;
    if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
        snprintf(state, len, "%s", PQgetvalue(res, 0, 0));
    PQclear(res);
    return 0;
}

int warren_store_warm_up(warren_store *st, warren_error *err)
{
    /* "@warm-up": a job name is never empty, so no run has this key */
    static const char *const calls[] = {
        /* bounded whatever the connection's own settings (a pool
         * connection has none): the ROLLBACK ends them */
        "SET LOCAL statement_timeout = '2s'",
        "SET LOCAL lock_timeout = '1s'",
        "SELECT count(*) FROM warren.claim_many(ARRAY['@warm-up'], 'warm-up')",
        "SELECT count(*) FROM warren.take_many(ARRAY['@warm-up'], 'warm-up')",
        "SELECT warren.finish_many('{}'::text[], 'warm-up', now())",
        "SELECT count(*) FROM warren.complete_many(ARRAY['@warm-up'], ARRAY[1])",
    };
    int rc = warren__store_begin(st, err);
    for (size_t i = 0; rc == 0 && i < sizeof(calls) / sizeof(calls[0]); i++)
        rc = warren__store_exec(st, calls[i], 0, NULL, NULL, "warm the connection up", err);
    warren__store_rollback(st);
    return rc;
}
