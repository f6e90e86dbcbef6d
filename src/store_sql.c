/* store_sql.c: the sql handler's transactions (docs/design.md §6.3): a run's
 * statement inside its completion's transaction (warren_store_complete_sql),
 * several runs' statements in one transaction with savepoints and one
 * pipeline (warren_store_complete_sql_batch), and taken runs claimed, run
 * and completed in one transaction (warren_store_take_sql_batch,
 * warren.take_many / finish_many, take.sql). The protocol calls these build
 * on (claim, heartbeat, complete) are store_work.c's. */
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

static int sql_statement(warren_store *st, warren_sql_run *r, int begin, int savepoint,
                         warren_error *err);

int warren_store_complete_sql(warren_store *st, const char *run_key, int attempt,
                              warren_us scheduled_at, const char *payload_json, const char *sql,
                              int64_t timeout_ms, const char *tag, const atomic_int *lost,
                              int *recorded, char **stmt_error, warren_error *err)
{
    char abuf[24];
    PGresult *res = NULL;
    int rc, b = 0;

    if (recorded != NULL)
        *recorded = 0;
    if (stmt_error != NULL)
        *stmt_error = NULL;
    if (st == NULL || run_key == NULL || sql == NULL || recorded == NULL || stmt_error == NULL)
        return warren_error_set(err, WARREN_EINVAL, "warren_store_complete_sql: bad arguments");
    if (lost != NULL && atomic_load(lost)) /* lost before it started */
        return 0;
    /* BEGIN, the settings and the statement in one pipeline (sql_statement).
     * The handler's timeout bounds the statement (statement_timeout, SET
     * LOCAL: milliseconds, 0 = none, at most INT_MAX ms, about 24.8 days);
     * application_name = tag (unchanged if NULL) lets
     * warren_store_cancel_tagged find it. The statement first, the
     * completion last: the run's row is locked only for the completion, not
     * while the statement runs (claims of the run or of its job's next run do
     * not wait on it, and the worker heartbeats the run meanwhile). The
     * statement comes from the config; explicit parameter types let it use
     * any subset of $1..$3. */
    {
        warren_sql_run r = {.run_key = run_key,
                            .scheduled_at = scheduled_at,
                            .payload_json = payload_json,
                            .sql = sql,
                            .timeout_ms = timeout_ms,
                            .tag = tag};
        rc = sql_statement(st, &r, 1, 0, err);
        if (rc == WARREN_EDBCONN) {
            warren__store_rollback(st);
            return rc;
        }
        if (rc != 0)
            goto fail; /* BEGIN or the settings refused */
        if (r.stmt_error != NULL) {
            warren__store_rollback(st);
            if (lost != NULL && atomic_load(lost)) {
                free(r.stmt_error);
                return 0; /* cancelled: the lease was lost, no effect, no completion */
            }
            *stmt_error = r.stmt_error;
            return 0;
        }
    }
    if (lost != NULL && atomic_load(lost)) { /* the lease was lost meanwhile: no effect */
        warren__store_rollback(st);
        return 0;
    }
    {
        const char *params[2] = {run_key, warren__store_int_param(attempt, abuf, sizeof(abuf))};
        rc = warren__store_exec_prepared(st, "work_complete_one", SQL_COMPLETE_ONE, 2, params, &res,
                                         "complete run", err);
    }
    if (rc != 0)
        goto fail;
    rc = warren__store_get_bool(res, 0, 0, &b);
    PQclear(res);
    res = NULL;
    if (rc != 0) {
        rc = warren_error_set(err, WARREN_EDB, "complete %s: unexpected result", run_key);
        goto fail;
    }
    if (!b) { /* stale: the effect is rolled back with it */
        warren__store_rollback(st);
        return 0;
    }
    if ((rc = warren__store_commit(st, err)) != 0)
        goto fail;
    *recorded = 1;
    return 0;
fail:
    warren__store_rollback(st);
    if (rc == WARREN_EDBCONN || rc == WARREN_ENOMEM)
        return rc; /* tried again: nothing committed, or a lost answer turns stale */
    /* Anything else (a deferred constraint at COMMIT, a refused setting) would
     * fail the same way every time: it is the attempt's error, recorded as a
     * retry through the ordinary completion. */
    *stmt_error = strdup(err != NULL && err->message[0] ? err->message : "sql handler failed");
    return *stmt_error ? 0 : warren_error_set(err, WARREN_ENOMEM, "out of memory");
}

/* The results of one query sent in pipeline mode, up to its terminating
 * NULL: the first non-success (kept in *bad, new) or none. 0, or
 * WARREN_EDBCONN if the connection ended before its results did. */
static int pipeline_results(PGconn *conn, PGresult **bad)
{
    PGresult *res;
    int got = 0;
    while ((res = PQgetResult(conn)) != NULL) {
        ExecStatusType t = PQresultStatus(res);
        got = 1;
        if (t != PGRES_COMMAND_OK && t != PGRES_TUPLES_OK && *bad == NULL) {
            *bad = res;
            continue;
        }
        PQclear(res);
    }
    return got || PQstatus(conn) == CONNECTION_OK ? 0 : WARREN_EDBCONN;
}

/* Out of pipeline mode whatever happened (results left unread after a
 * failure are read first, at most max of them), so the connection goes back
 * to the pool usable, or broken and then dropped. Returns rc, or
 * WARREN_EDBCONN (err set) if rc was 0 and the connection cannot leave. */
static int pipeline_leave(PGconn *conn, int rc, size_t max, warren_error *err)
{
    for (size_t i = 0; i < max && PQpipelineStatus(conn) != PQ_PIPELINE_OFF; i++) {
        if (PQexitPipelineMode(conn) == 1)
            break;
        PGresult *left = PQgetResult(conn);
        if (left == NULL && PQstatus(conn) != CONNECTION_OK)
            break;
        PQclear(left);
    }
    if (PQpipelineStatus(conn) != PQ_PIPELINE_OFF) {
        if (rc == 0)
            rc =
                warren_error_set(err, WARREN_EDBCONN, "sql handler: cannot leave pipeline mode: %s",
                                 PQerrorMessage(conn));
        /* unusable: broken for good, so that the pool drops it */
        shutdown(PQsocket(conn), SHUT_RDWR);
        PQconsumeInput(conn);
    }
    return rc;
}

/* Run r's statement: with begin the transaction's BEGIN, with savepoint
 * its savepoint (inside a batch's transaction), then its settings
 * (statement_timeout, application_name = its tag) and the statement, sent
 * together in one pipeline (one round trip instead of up to four: the
 * statement starts one network turn after the handler thread took the run).
 * 0 with r->stmt_error set if the statement failed (with savepoint: rolled
 * back to it, the other runs' effects stay; without: the caller rolls the
 * transaction back); WARREN_EDBCONN if the connection failed; WARREN_EDB if
 * BEGIN, the savepoint or the settings were refused. */
static int sql_statement(warren_store *st, warren_sql_run *r, int begin, int savepoint,
                         warren_error *err)
{
    char tbuf[WARREN_TIME_BUF], setting[24];
    PGconn *conn = warren__store_conn(st);
    PGresult *bad[4] = {NULL, NULL, NULL, NULL}, *sync;
    int64_t timeout_ms = r->timeout_ms > INT32_MAX ? INT32_MAX : r->timeout_ms;
    int rc = 0, nq = 0, q_stmt;

    snprintf(setting, sizeof(setting), "%lld", (long long)(timeout_ms > 0 ? timeout_ms : 0));
    const char *set_params[2] = {setting, r->tag};
    const Oid types[3] = {OID_TEXT, OID_TIMESTAMPTZ, OID_JSONB};
    const char *params[3] = {r->run_key,
                             warren__store_us_param(r->scheduled_at, tbuf, sizeof(tbuf)),
                             r->payload_json ? r->payload_json : "{}"};
    if (begin)
        warren__store_end_open(st);
    if (PQenterPipelineMode(conn) != 1)
        return warren_error_set(err, WARREN_EDBCONN, "sql handler: cannot enter pipeline mode: %s",
                                PQerrorMessage(conn));
    int sent = (!begin || PQsendQueryParams(conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) == 1) &&
               (!savepoint || PQsendQueryParams(conn, "SAVEPOINT warren_run", 0, NULL, NULL, NULL,
                                                NULL, 0) == 1) &&
               PQsendQueryParams(conn,
                                 "SELECT set_config('statement_timeout', $1, true), "
                                 "set_config('application_name', coalesce($2, "
                                 "current_setting('application_name')), true)",
                                 2, NULL, set_params, NULL, NULL, 0) == 1 &&
               PQsendQueryParams(conn, r->sql, 3, types, params, NULL, NULL, 0) == 1 &&
               PQpipelineSync(conn) == 1;
    nq = (begin != 0) + (savepoint != 0) + 2;
    q_stmt = nq - 1;
    if (!sent) {
        rc = warren_error_set(err, WARREN_EDBCONN, "sql handler: lost connection: %s",
                              PQerrorMessage(conn));
        /* what was queued ends with a sync (and is flushed), so reading its
         * results below cannot wait for a server that was never asked */
        (void)PQpipelineSync(conn);
        goto out;
    }
    for (int q = 0; q < nq && rc == 0; q++)
        rc = pipeline_results(conn, &bad[q]);
    if (rc == 0) {
        /* the pipeline's end (a sync result), or the connection's */
        if ((sync = PQgetResult(conn)) == NULL || PQresultStatus(sync) != PGRES_PIPELINE_SYNC)
            rc = WARREN_EDBCONN;
        PQclear(sync);
    }
    if (rc != 0) {
        rc = warren_error_set(err, WARREN_EDBCONN, "sql handler: lost connection: %s",
                              PQerrorMessage(conn));
        goto out;
    }
    for (int q = 0; q < q_stmt; q++)
        if (bad[q] != NULL) {
            /* BEGIN, the savepoint or the settings: not the statement's fault */
            rc = warren__store_fail(st, bad[q], "set up the sql handler's statement", err);
            goto out;
        }
    if (bad[q_stmt] != NULL) {
        warren_error serr = {0};
        rc = warren__store_fail(st, bad[q_stmt], "sql handler", &serr);
        if (rc == WARREN_EDBCONN) {
            warren_error_set(err, rc, "%s", serr.message);
            goto out;
        }
        rc = 0;
        if ((r->stmt_error = strdup(serr.message)) == NULL)
            rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
out:
    for (int q = 0; q < 4; q++)
        PQclear(bad[q]);
    rc = pipeline_leave(conn, rc, 16, err);
    if (rc == 0 && r->stmt_error != NULL && savepoint)
        /* back to before this run: the others' effects stay */
        rc = warren__store_exec(st, "ROLLBACK TO SAVEPOINT warren_run", 0, NULL, NULL,
                                "roll back the sql handler's statement", err);
    if (rc != 0) {
        /* the caller gets the error, not the statement's */
        free(r->stmt_error);
        r->stmt_error = NULL;
    }
    return rc;
}

static int sql_run_lost(const warren_sql_run *r)
{
    return r->lost != NULL && atomic_load(r->lost);
}

/* The error of a run's own statement (bad, a fatal result) into *serr.
 * WARREN_EDBCONN (err set) if the connection itself is gone; a connection
 * error of the statement's own (dblink's, postgres_fdw's) on a connection
 * that is fine is the run's. */
static int run_stmt_error(warren_store *st, PGconn *conn, const PGresult *bad, warren_error *serr,
                          warren_error *err)
{
    const char *state = PQresultErrorField(bad, PG_DIAG_SQLSTATE);
    *serr = (warren_error){0};
    if (warren__store_fail(st, bad, "sql handler", serr) != WARREN_EDBCONN)
        return 0;
    if (PQstatus(conn) != CONNECTION_OK)
        return warren_error_set(err, WARREN_EDBCONN, "%s", serr->message);
    const char *primary = PQresultErrorField(bad, PG_DIAG_MESSAGE_PRIMARY);
    *serr = (warren_error){0};
    warren_error_set(serr, WARREN_EDB, "sql handler: %s (SQLSTATE %s)",
                     primary ? primary : "failed", state ? state : "?????");
    return 0;
}

/* What one try of the pipelined batch (sql_batch_fast) came to. */
enum { FAST_COMMITTED, FAST_SETTLED, FAST_SLOW };

/* A run's settings, and the server's clock (µs) just before its statement:
 * the next run's (or SQL_CLOCK_US after the last statement) minus this is
 * the statement's own time on the server (warren_sql_run.stmt_us), which
 * neither the network nor the batch's BEGIN and COMMIT are part of. */
#define SQL_CLOCK_US "(extract(epoch FROM clock_timestamp()) * 1000000)::int8"
#define SQL_SET_RUN                                                                                \
    "SELECT set_config('statement_timeout', $1, true), "                                           \
    "set_config('application_name', coalesce($2, current_setting('application_name')), "           \
    "true), " SQL_CLOCK_US

/* The common case of a batch, in one round trip and without savepoints:
 * BEGIN, each run's settings and statement, then the completions of all of
 * them (warren.complete_many), sent as one pipeline; when every statement
 * succeeded, every completion was recorded and no run was lost meanwhile,
 * COMMIT. The savepoint path (one round trip and one subtransaction per run)
 * took 16 round trips and 16 subtransactions for a batch of 16.
 * *outcome:
 * - FAST_COMMITTED: every run not done is done and recorded;
 * - FAST_SETTLED: nothing committed, and some runs were settled (done) for
 *   the caller to try again without them: the first statement that failed
 *   (the pipeline stops there: the runs before it succeeded, the ones after
 *   it never ran) is that run's error (so a slow statement that timed out
 *   is not run a second time); or the runs complete_many found stale, and
 *   those whose lease was lost meanwhile (no effect, not completed); or a
 *   batch of one whose COMMIT was refused (a deferred constraint: its error,
 *   as warren_store_complete_sql);
 * - FAST_SLOW: nothing committed; a refused setting or completion, a COMMIT
 *   of several runs refused, two runs of one key, a cancel that may have
 *   been meant for another run: the savepoint path sorts out whose it is.
 * Returns 0, or WARREN_EDBCONN / WARREN_ENOMEM (nothing committed, or the
 * COMMIT's answer lost). */
static int sql_batch_fast(warren_store *st, warren_sql_run *runs, size_t n, int *outcome,
                          warren_error *err)
{
    PGconn *conn = warren__store_conn(st);
    warren__buf ka = {0}, aa = {0};
    size_t *live = malloc(n * sizeof(*live)), m = 0, nq = 0;
    PGresult *bad = NULL, *cm = NULL; /* the first failure, complete_many's rows */
    size_t bad_q = 0;
    int missing = 0;
    int64_t *clock_us = NULL; /* [j]: before run j's statement; [m]: after the last */
    char(*tbuf)[WARREN_TIME_BUF] = NULL;
    char(*setting)[24] = NULL;
    warren_completion *cs = NULL;
    int rc = 0, sent = 0;

    *outcome = FAST_SLOW;
    if (live == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        if (!runs[i].done)
            live[m++] = i;
    if (m == 0) {
        free(live);
        *outcome = FAST_COMMITTED;
        return 0;
    }
    /* complete_many answers per key: two attempts of one key in a batch
     * would be told apart only by the savepoint path's passes */
    for (size_t a = 0; a < m; a++)
        for (size_t b = a + 1; b < m; b++)
            if (strcmp(runs[live[a]].run_key, runs[live[b]].run_key) == 0) {
                free(live);
                return 0; /* FAST_SLOW */
            }
    /* BEGIN, (settings, statement) per run, the clock, complete_many */
    nq = 3 + 2 * m;
    tbuf = malloc(m * sizeof(*tbuf));
    setting = malloc(m * sizeof(*setting));
    cs = malloc(m * sizeof(*cs));
    clock_us = malloc((m + 1) * sizeof(*clock_us));
    if (tbuf == NULL || setting == NULL || cs == NULL || clock_us == NULL) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t j = 0; j <= m; j++)
        clock_us[j] = -1;
    for (size_t j = 0; j < m; j++)
        cs[j] =
            (warren_completion){runs[live[j]].run_key, runs[live[j]].attempt, "succeeded", NULL};
    if ((rc = warren__completion_arrays(cs, NULL, m, &ka, &aa, err)) != 0)
        goto out;
    warren__store_end_open(st);
    if (PQenterPipelineMode(conn) != 1) {
        rc = warren_error_set(err, WARREN_EDBCONN, "sql handler: cannot enter pipeline mode: %s",
                              PQerrorMessage(conn));
        goto out;
    }
    sent = PQsendQueryParams(conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) == 1;
    for (size_t j = 0; j < m && sent; j++) {
        warren_sql_run *r = &runs[live[j]];
        int64_t timeout_ms = r->timeout_ms > INT32_MAX ? INT32_MAX : r->timeout_ms;
        snprintf(setting[j], sizeof(setting[j]), "%lld",
                 (long long)(timeout_ms > 0 ? timeout_ms : 0));
        const char *set_params[2] = {setting[j], r->tag};
        const Oid types[3] = {OID_TEXT, OID_TIMESTAMPTZ, OID_JSONB};
        const char *params[3] = {r->run_key,
                                 warren__store_us_param(r->scheduled_at, tbuf[j], sizeof(tbuf[j])),
                                 r->payload_json ? r->payload_json : "{}"};
        sent = PQsendQueryParams(conn, SQL_SET_RUN, 2, NULL, set_params, NULL, NULL, 0) == 1 &&
               PQsendQueryParams(conn, r->sql, 3, types, params, NULL, NULL, 0) == 1;
    }
    if (sent) {
        const char *params[2] = {ka.p, aa.p};
        sent = PQsendQueryParams(conn, "SELECT " SQL_CLOCK_US, 0, NULL, NULL, NULL, NULL, 0) == 1 &&
               PQsendQueryParams(conn, SQL_COMPLETE_MANY, 2, NULL, params, NULL, NULL, 0) == 1;
    }
    sent = sent && PQpipelineSync(conn) == 1;
    if (!sent) {
        rc = warren_error_set(err, WARREN_EDBCONN, "sql handler: lost connection: %s",
                              PQerrorMessage(conn));
        (void)PQpipelineSync(conn); /* what was queued ends with a sync, and is flushed */
        goto leave;
    }
    for (size_t q = 0; q < nq && rc == 0; q++) {
        PGresult *r;
        int got = 0;
        while ((r = PQgetResult(conn)) != NULL) { /* one result per query, then NULL */
            ExecStatusType t = PQresultStatus(r);
            int ok = t == PGRES_COMMAND_OK || t == PGRES_TUPLES_OK;
            if (!got && ok && q == nq - 1)
                cm = r;
            else if (!got && ok && q % 2 == 1 && q >= 1 && PQntuples(r) == 1 && PQnfields(r) >= 1) {
                /* a run's settings (q = 1 + 2j) or the clock after the
                 * last statement (q = 1 + 2m): its last column */
                const char *v = PQgetvalue(r, 0, PQnfields(r) - 1);
                if (v != NULL && *v != '\0')
                    clock_us[(q - 1) / 2] = strtoll(v, NULL, 10);
                PQclear(r);
            } else if (!got && !ok && bad == NULL) {
                bad = r;
                bad_q = q;
            } else
                PQclear(r);
            got = 1;
        }
        if (!got && PQstatus(conn) != CONNECTION_OK)
            rc = WARREN_EDBCONN;
        else if (!got)
            missing = 1; /* no answer to a query: not ours to judge (FAST_SLOW) */
    }
    if (rc == 0) {
        PGresult *sync = PQgetResult(conn);
        if (sync == NULL || PQresultStatus(sync) != PGRES_PIPELINE_SYNC)
            rc = WARREN_EDBCONN;
        PQclear(sync);
    }
    if (rc != 0)
        rc = warren_error_set(err, WARREN_EDBCONN, "sql handler: lost connection: %s",
                              PQerrorMessage(conn));
leave:
    rc = pipeline_leave(conn, rc, 2 * nq + 2, err);
    if (rc != 0)
        goto out;
    for (size_t j = 0; j < m; j++)
        if (clock_us[j] >= 0 && clock_us[j + 1] >= clock_us[j])
            runs[live[j]].stmt_us = clock_us[j + 1] - clock_us[j];
    if (missing)
        goto rollback;
    if (bad != NULL) {
        if (bad_q == 0 || bad_q == nq - 1 || bad_q % 2 != 0 ||
            PQresultStatus(bad) != PGRES_FATAL_ERROR)
            goto rollback; /* BEGIN, a setting or the completions refused: FAST_SLOW */
        /* the statement of run live[(bad_q - 2) / 2] */
        warren_error serr;
        warren_sql_run *r = &runs[live[(bad_q - 2) / 2]];
        const char *state = PQresultErrorField(bad, PG_DIAG_SQLSTATE);
        if ((rc = run_stmt_error(st, conn, bad, &serr, err)) != 0)
            goto out;
        if (state != NULL && strcmp(state, "57014") == 0 && !sql_run_lost(r) && r->timeout_ms > 0)
            r->stmt_us = r->timeout_ms * 1000; /* it ran until its timeout, at least */
        if (state != NULL && strcmp(state, "57014") == 0 && !sql_run_lost(r))
            for (size_t j = 0; j < m; j++)
                if (sql_run_lost(&runs[live[j]]))
                    goto rollback; /* a cancel meant for a lost run may have hit r:
                                      FAST_SLOW, which leaves the lost ones out */
        free(r->stmt_error);
        r->stmt_error = NULL;
        /* cancelled because its lease was lost: no effect, no completion,
         * not its error (as warren_store_complete_sql) */
        if (!sql_run_lost(r) && (r->stmt_error = strdup(serr.message)) == NULL) {
            rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
            goto out;
        }
        r->done = 1;
        *outcome = FAST_SETTLED;
        goto rollback;
    }
    {
        /* every run recorded and none lost meanwhile, else the stale and the
         * lost ones are settled and the rest go again */
        int settled = 0;
        if (cm == NULL || PQntuples(cm) != (int)m)
            goto rollback; /* FAST_SLOW */
        for (int row = 0; row < PQntuples(cm); row++) {
            const char *key = warren__store_get_text(cm, row, 0);
            int b = 0;
            if (key == NULL || warren__store_get_bool(cm, row, 1, &b) != 0)
                goto rollback;
            for (size_t j = 0; j < m && !b; j++)
                if (strcmp(runs[live[j]].run_key, key) == 0 && !runs[live[j]].done) {
                    runs[live[j]].done = 1; /* stale: no effect, not completed */
                    settled = 1;
                }
        }
        for (size_t j = 0; j < m; j++)
            if (!runs[live[j]].done && sql_run_lost(&runs[live[j]])) {
                runs[live[j]].done = 1;
                settled = 1;
            }
        if (settled) {
            *outcome = FAST_SETTLED;
            goto rollback;
        }
    }
    if ((rc = warren__store_commit(st, err)) != 0) {
        if (rc == WARREN_EDBCONN || rc == WARREN_ENOMEM || !warren_store_connected(st))
            goto out;
        rc = 0;
        if (m == 1) { /* a deferred constraint: the run's own error */
            warren_sql_run *r = &runs[live[0]];
            free(r->stmt_error);
            if ((r->stmt_error = strdup(
                     err != NULL && err->message[0] ? err->message : "COMMIT failed")) == NULL) {
                rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
                goto rollback;
            }
            r->done = 1;
            *outcome = FAST_SETTLED;
        }
        goto rollback; /* several: the savepoint path finds whose */
    }
    for (size_t j = 0; j < m; j++) {
        runs[live[j]].done = 1;
        runs[live[j]].recorded = 1;
    }
    *outcome = FAST_COMMITTED;
    goto out;
rollback:
    warren__store_rollback(st);
out:
    PQclear(bad);
    PQclear(cm);
    free(tbuf);
    free(setting);
    free(cs);
    free(clock_us);
    free(live);
    free(ka.p);
    free(aa.p);
    return rc;
}

int warren_store_complete_sql_batch(warren_store *st, warren_sql_run *runs, size_t n,
                                    warren_error *err)
{
    warren_completion *c = NULL;
    size_t *which = NULL;
    int *rec = NULL;
    int rc = 0;

    if (st == NULL || (n > 0 && runs == NULL))
        return warren_error_set(err, WARREN_EINVAL,
                                "warren_store_complete_sql_batch: bad arguments");
    for (size_t i = 0; i < n; i++) {
        runs[i].recorded = runs[i].done = 0;
        runs[i].stmt_error = NULL;
        runs[i].stmt_us = -1;
    }
    if (n == 0)
        return 0;
    c = calloc(n, sizeof(*c));
    which = calloc(n, sizeof(*which));
    rec = calloc(n, sizeof(*rec));
    if (c == NULL || which == NULL || rec == NULL) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
        goto out;
    }
    /* First the pipelined path, again without each statement that failed;
     * then, if it cannot tell whose a failure is, the savepoint path. */
    for (size_t tries = 0; tries <= n; tries++) {
        int outcome;
        for (size_t i = 0; i < n; i++)
            if (!runs[i].done && sql_run_lost(&runs[i]))
                runs[i].done = 1; /* lost before it started: no effect, not completed */
        if ((rc = sql_batch_fast(st, runs, n, &outcome, err)) != 0)
            goto fail;
        if (outcome == FAST_COMMITTED) {
            rc = 0;
            goto out;
        }
        if (outcome == FAST_SLOW)
            break; /* FAST_SETTLED: again without the runs it settled */
    }
    /* Each pass settles at least one run (a stale or lost one is left out of
     * the next), or all of them: at most n + 1 passes. */
    for (;;) {
        size_t m = 0, todo = 0;
        for (size_t i = 0; i < n; i++) {
            if (!runs[i].done && sql_run_lost(&runs[i]))
                runs[i].done = 1; /* lost before it started: no effect, not completed */
            todo += !runs[i].done;
        }
        if (todo == 0)
            break;
        int begin = 1; /* BEGIN goes with the first statement's pipeline */
        for (size_t i = 0; i < n; i++) {
            warren_sql_run *r = &runs[i];
            if (r->done)
                continue;
            free(r->stmt_error);
            r->stmt_error = NULL;
            rc = sql_statement(st, r, begin, 1, err);
            begin = 0;
            if (rc != 0)
                goto fail;
            if (r->stmt_error == NULL) {
                c[m] = (warren_completion){r->run_key, r->attempt, "succeeded", NULL};
                which[m++] = i;
            }
        }
        /* The completions last: the runs' rows are locked from here to COMMIT. */
        int again = 0;
        for (size_t j = 0; j < m; j++)
            if (sql_run_lost(&runs[which[j]])) {
                runs[which[j]].done = 1; /* its effect must not commit: again without it */
                again = 1;
            }
        if (!again && m > 0) {
            if ((rc = warren_store_complete_batch(st, c, m, rec, err)) != 0)
                goto fail;
            for (size_t j = 0; j < m; j++)
                if (!rec[j]) {
                    runs[which[j]].done = 1; /* stale: again without its effect */
                    again = 1;
                }
        }
        if (again) {
            warren__store_rollback(st);
            continue;
        }
        if ((rc = warren__store_commit(st, err)) != 0)
            goto fail;
        for (size_t i = 0; i < n; i++)
            if (!runs[i].done) {
                runs[i].done = 1;
                runs[i].recorded = runs[i].stmt_error == NULL;
            }
        break;
    }
    rc = 0;
    goto out;
fail:
    warren__store_rollback(st);
    /* nothing of this pass committed: its runs are not done; the caller
     * takes the error, not any run's statement error */
    for (size_t i = 0; i < n; i++) {
        free(runs[i].stmt_error);
        runs[i].stmt_error = NULL;
    }
out:
    free(c);
    free(which);
    free(rec);
    return rc;
}

/* ------------------------------------------------------------ take (one transaction) */

#define SQL_TAKE_MANY                                                                              \
    "SELECT run_key, attempt, job, scheduled_at, payload, lease_seconds, taken_at, template "      \
    "FROM warren.take_many($1::text[], $2)"
#define SQL_FINISH_MANY "SELECT warren.finish_many($1::text[], $2, $3::timestamptz)"

/* What one try of warren_store_take_sql_batch came to. */
enum { TAKE_COMMITTED, TAKE_NONE, TAKE_STMT_FAILED, TAKE_STMT_SLOW, TAKE_OTHER };

/* A taken statement runs with the run's row locked and the run not seen
 * running: it gets at most this long (its own timeout if shorter). One
 * that runs out of it is not the run's failure: it goes back and is claimed,
 * then runs with its own timeout (its cost, measured at this, keeps the next
 * ones from being taken). */
#define TAKE_TIMEOUT_MS 1000
/* The failed run's claim on its own: bounded (the pool's connection has no
 * lock_timeout of its own). */
#define TAKE_CLAIM_TIMEOUT "2000"

static int64_t take_timeout_ms(const warren_take_run *r)
{
    return r->timeout_ms > 0 && r->timeout_ms < TAKE_TIMEOUT_MS ? r->timeout_ms : TAKE_TIMEOUT_MS;
}

/* Reads the results of nq pipelined queries and the sync: res[q] (new) for
 * each, NULL where a query gave none. 0, or WARREN_EDBCONN. */
static int pipeline_collect(PGconn *conn, PGresult **res, size_t nq)
{
    for (size_t q = 0; q < nq; q++) {
        PGresult *r;
        int got = 0;
        while ((r = PQgetResult(conn)) != NULL) { /* one result per query, then NULL */
            if (!got)
                res[q] = r;
            else
                PQclear(r);
            got = 1;
        }
        if (!got && PQstatus(conn) != CONNECTION_OK)
            return WARREN_EDBCONN;
    }
    PGresult *sync = PQgetResult(conn);
    int ok = sync != NULL && PQresultStatus(sync) == PGRES_PIPELINE_SYNC;
    PQclear(sync);
    return ok ? 0 : WARREN_EDBCONN;
}

static int res_ok(const PGresult *r)
{
    return r != NULL &&
           (PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK);
}

/* One try: BEGIN and take_many(live keys) in one round trip; then, for the
 * runs taken, their settings and statements, finish_many and COMMIT in a
 * second. taken[j] = 1 for the live[j] take_many returned (their claim
 * filled). *failed: with TAKE_STMT_FAILED, the run whose statement failed
 * (its error in *ferr, new). */
static int take_try(warren_store *st, const char *worker, warren_take_run *runs, const size_t *live,
                    size_t m, int *taken, int *outcome, size_t *failed, char **ferr,
                    warren_error *err)
{
    PGconn *conn = warren__store_conn(st);
    warren__buf ka = {0}, tk = {0};
    PGresult *r1[2] = {NULL, NULL}, **r2 = NULL;
    size_t *tj = malloc(m * sizeof(*tj)), k = 0, nq = 0;
    char(*tbuf)[WARREN_TIME_BUF] = malloc(m * sizeof(*tbuf));
    char(*setting)[24] = malloc(m * sizeof(*setting));
    int64_t *clock_us = malloc((m + 1) * sizeof(*clock_us));
    char taken_at[64] = "";
    int rc = 0, sent;

    *outcome = TAKE_OTHER;
    if (tj == NULL || tbuf == NULL || setting == NULL || clock_us == NULL) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
        goto out;
    }
    warren__buf_puts(&ka, "{");
    for (size_t j = 0; j < m; j++) {
        taken[j] = 0;
        warren__sb_elem(&ka, runs[live[j]].run_key, j == 0);
    }
    warren__buf_puts(&ka, "}");
    if ((rc = warren__sb_done(&ka, err)) != 0)
        goto out;

    /* 1: BEGIN, take_many */
    warren__store_end_open(st);
    if (PQenterPipelineMode(conn) != 1) {
        rc = warren_error_set(err, WARREN_EDBCONN, "sql handler: cannot enter pipeline mode: %s",
                              PQerrorMessage(conn));
        goto out;
    }
    {
        const char *params[2] = {ka.p, worker};
        sent = PQsendQueryParams(conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) == 1 &&
               PQsendQueryParams(conn, SQL_TAKE_MANY, 2, NULL, params, NULL, NULL, 0) == 1 &&
               PQpipelineSync(conn) == 1;
    }
    if (!sent) {
        (void)PQpipelineSync(conn);
        rc = WARREN_EDBCONN;
    } else {
        rc = pipeline_collect(conn, r1, 2);
    }
    if (rc != 0)
        rc = warren_error_set(err, WARREN_EDBCONN, "sql handler: lost connection: %s",
                              PQerrorMessage(conn));
    if ((rc = pipeline_leave(conn, rc, 8, err)) != 0)
        goto out;
    if (!res_ok(r1[0]) || !res_ok(r1[1]) || PQnfields(r1[1]) < 8) {
        rc = warren__store_fail(st, res_ok(r1[0]) ? r1[1] : r1[0], "take runs", err);
        if (rc == 0)
            rc = warren_error_set(err, WARREN_EDB, "take runs: unexpected answer");
        goto rollback;
    }
    for (int row = 0; row < PQntuples(r1[1]); row++) {
        const char *key = warren__store_get_text(r1[1], row, 0);
        const char *job = warren__store_get_text(r1[1], row, 2);
        const char *payload = warren__store_get_text(r1[1], row, 4);
        const char *at = warren__store_get_text(r1[1], row, 6);
        const char *tmpl = warren__store_get_text(r1[1], row, 7);
        const char *handler = tmpl != NULL ? tmpl : job;
        for (size_t j = 0; key != NULL && j < m; j++) {
            warren_claim *c = &runs[live[j]].claim;
            if (taken[j] || strcmp(runs[live[j]].run_key, key) != 0)
                continue;
            /* The database says another config job's handler runs it (the
             * message named the wrong template): not taken here; its claim
             * then finds the right one, or refuses it (worker.c). */
            if (handler == NULL || runs[live[j]].handler == NULL ||
                strcmp(handler, runs[live[j]].handler) != 0)
                break;
            warren_claim_clear(c);
            if (warren__store_get_int(r1[1], row, 1, &c->attempt) != 0 ||
                warren__store_get_us(r1[1], row, 3, &c->scheduled_at) != 0 ||
                warren__store_get_int(r1[1], row, 5, &c->lease_seconds) != 0 || job == NULL ||
                strlen(job) > WARREN_JOB_NAME_MAX || at == NULL || strlen(at) >= sizeof(taken_at)) {
                rc = warren_error_set(err, WARREN_EDB,
                                      "take %s: unexpected row from "
                                      "warren.take_many",
                                      key);
                goto rollback;
            }
            snprintf(c->job, sizeof(c->job), "%s", job);
            snprintf(c->handler, sizeof(c->handler), "%s", handler);
            snprintf(taken_at, sizeof(taken_at), "%s", at);
            if ((c->payload_json = strdup(payload ? payload : "{}")) == NULL) {
                rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
                goto rollback;
            }
            c->claimed = 1;
            taken[j] = 1;
            tj[k++] = j;
            break; /* a key twice: only its first entry is taken */
        }
    }
    if (k == 0) {
        *outcome = TAKE_NONE;
        goto rollback;
    }

    /* 2: (settings, statement) per run taken, the clock, finish_many, COMMIT */
    warren__buf_puts(&tk, "{");
    for (size_t i = 0; i < k; i++)
        warren__sb_elem(&tk, runs[live[tj[i]]].run_key, i == 0);
    warren__buf_puts(&tk, "}");
    if ((rc = warren__sb_done(&tk, err)) != 0)
        goto rollback;
    nq = 2 * k + 3;
    if ((r2 = calloc(nq, sizeof(*r2))) == NULL) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
        goto rollback;
    }
    for (size_t i = 0; i <= k; i++)
        clock_us[i] = -1;
    if (PQenterPipelineMode(conn) != 1) {
        rc = warren_error_set(err, WARREN_EDBCONN, "sql handler: cannot enter pipeline mode: %s",
                              PQerrorMessage(conn));
        goto rollback;
    }
    sent = 1;
    for (size_t i = 0; i < k && sent; i++) {
        warren_take_run *r = &runs[live[tj[i]]];
        snprintf(setting[i], sizeof(setting[i]), "%lld", (long long)take_timeout_ms(r));
        const char *set_params[2] = {setting[i], r->tag};
        const Oid types[3] = {OID_TEXT, OID_TIMESTAMPTZ, OID_JSONB};
        const char *params[3] = {
            r->run_key, warren__store_us_param(r->claim.scheduled_at, tbuf[i], sizeof(tbuf[i])),
            r->claim.payload_json};
        sent = PQsendQueryParams(conn, SQL_SET_RUN, 2, NULL, set_params, NULL, NULL, 0) == 1 &&
               PQsendQueryParams(conn, r->sql, 3, types, params, NULL, NULL, 0) == 1;
    }
    if (sent) {
        const char *params[3] = {tk.p, worker, taken_at};
        sent = PQsendQueryParams(conn, "SELECT " SQL_CLOCK_US, 0, NULL, NULL, NULL, NULL, 0) == 1 &&
               PQsendQueryParams(conn, SQL_FINISH_MANY, 3, NULL, params, NULL, NULL, 0) == 1 &&
               PQsendQueryParams(conn, "COMMIT", 0, NULL, NULL, NULL, NULL, 0) == 1;
    }
    sent = sent && PQpipelineSync(conn) == 1;
    if (!sent) {
        (void)PQpipelineSync(conn);
        rc = WARREN_EDBCONN;
    } else {
        rc = pipeline_collect(conn, r2, nq);
    }
    if (rc != 0)
        rc = warren_error_set(err, WARREN_EDBCONN, "sql handler: lost connection: %s",
                              PQerrorMessage(conn));
    if ((rc = pipeline_leave(conn, rc, 2 * nq + 2, err)) != 0)
        goto out; /* the COMMIT's fate unknown: BACK (a committed run is found finished) */
    for (size_t q = 0; q + 1 < nq; q += 2) /* settings (q = 2i) and the clock (q = 2k) */
        if (res_ok(r2[q]) && PQntuples(r2[q]) == 1 && PQnfields(r2[q]) >= 1) {
            const char *v = PQgetvalue(r2[q], 0, PQnfields(r2[q]) - 1);
            if (v != NULL && *v != '\0')
                clock_us[q / 2] = strtoll(v, NULL, 10);
        }
    for (size_t i = 0; i < k; i++)
        if (clock_us[i] >= 0 && clock_us[i + 1] >= clock_us[i])
            runs[live[tj[i]]].stmt_us = clock_us[i + 1] - clock_us[i];
    {
        size_t bad = nq;
        /* The COMMIT's own answer decides: an earlier error skips it */
        if (res_ok(r2[nq - 1]) && strcmp(PQcmdStatus(r2[nq - 1]), "COMMIT") == 0) {
            *outcome = TAKE_COMMITTED;
            goto out; /* committed: no transaction left open */
        }
        for (size_t q = 0; q < nq && bad == nq; q++)
            if (!res_ok(r2[q]))
                bad = q;
        if (bad < 2 * k && bad % 2 == 1 && PQresultStatus(r2[bad]) == PGRES_FATAL_ERROR) {
            /* the statement of run live[tj[bad / 2]]: the run's own error */
            warren_error serr;
            warren_take_run *r = &runs[live[tj[bad / 2]]];
            const char *state = PQresultErrorField(r2[bad], PG_DIAG_SQLSTATE);
            if ((rc = run_stmt_error(st, conn, r2[bad], &serr, err)) != 0)
                goto out;
            *failed = live[tj[bad / 2]];
            if (state != NULL && strcmp(state, "57014") == 0) {
                /* it ran until its timeout, at least */
                r->stmt_us = take_timeout_ms(r) * 1000;
                if (r->timeout_ms <= 0 || r->timeout_ms > take_timeout_ms(r)) {
                    *outcome = TAKE_STMT_SLOW; /* the take's bound, not the run's */
                    goto rollback;
                }
            }
            if ((*ferr = strdup(serr.message)) == NULL) {
                rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
                goto rollback;
            }
            *outcome = TAKE_STMT_FAILED;
        } else {
            /* a setting, finish_many or the COMMIT refused (or no error on
             * record): BACK, with the reason for the worker's log */
            warren_error ferr2 = {0};
            if (bad < nq)
                warren__store_fail(
                    st, r2[bad], bad == nq - 1 ? "commit taken runs" : "finish taken runs", &ferr2);
            rc = warren_error_set(err, WARREN_EDB, "%s",
                                  ferr2.message[0] ? ferr2.message : "the take did not commit");
        }
    }
rollback:
out:
    warren__store_rollback(st); /* whatever is left open (none after a COMMIT) */
    PQclear(r1[0]);
    PQclear(r1[1]);
    for (size_t q = 0; r2 != NULL && q < nq; q++)
        PQclear(r2[q]);
    free(r2);
    free(tj);
    free(tbuf);
    free(setting);
    free(clock_us);
    free(ka.p);
    free(tk.p);
    return rc;
}

/* claim_many of one key in a transaction of its own, bounded (the pool's
 * connections have no lock_timeout: a row held elsewhere must not keep the
 * handler thread). */
static int claim_bounded(warren_store *st, const char *key, const char *worker, warren_claim *cl,
                         warren_error *err)
{
    int rc = warren__store_begin(st, err);
    if (rc == 0)
        rc = warren__store_exec_simple(st,
                                       "SET LOCAL statement_timeout = " TAKE_CLAIM_TIMEOUT
                                       "; SET LOCAL lock_timeout = " TAKE_CLAIM_TIMEOUT,
                                       "bound the claim", err);
    if (rc == 0)
        rc = warren_store_claim_batch(st, &key, 1, worker, cl, err);
    if (rc == 0 && (rc = warren__store_commit(st, err)) != 0)
        warren_claim_clear(cl);
    if (rc != 0)
        warren__store_rollback(st);
    return rc;
}

int warren_store_take_sql_batch(warren_store *st, const char *worker, warren_take_run *runs,
                                size_t n, warren_error *err)
{
    size_t *live = NULL;
    int *taken = NULL, *out_ = NULL; /* out_[i]: left out of further tries */
    int rc = 0;

    if (st == NULL || worker == NULL || (n > 0 && runs == NULL))
        return warren_error_set(err, WARREN_EINVAL, "warren_store_take_sql_batch: bad arguments");
    for (size_t i = 0; i < n; i++) {
        runs[i].fate = WARREN_TAKE_BACK;
        runs[i].back_unknown = 0;
        runs[i].stmt_error = NULL;
        runs[i].stmt_us = -1;
        memset(&runs[i].claim, 0, sizeof(runs[i].claim));
    }
    if (n == 0)
        return 0;
    live = malloc(n * sizeof(*live));
    taken = malloc(n * sizeof(*taken));
    out_ = calloc(n, sizeof(*out_));
    if (live == NULL || taken == NULL || out_ == NULL) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory");
        goto out;
    }
    /* Each try settles the batch, or one failed statement's run: at most n. */
    for (size_t tries = 0; tries < n; tries++) {
        size_t m = 0, failed = 0;
        int outcome;
        char *ferr = NULL;
        for (size_t i = 0; i < n; i++)
            if (!out_[i])
                live[m++] = i;
        if (m == 0)
            break;
        rc = take_try(st, worker, runs, live, m, taken, &outcome, &failed, &ferr, err);
        if (rc == 0 && outcome == TAKE_STMT_SLOW) {
            /* BACK, to be claimed, with every run of the same statement
             * (it would run out of the bound again); the others again */
            for (size_t j = 0; j < m; j++) {
                if (!taken[j] || live[j] == failed ||
                    strcmp(runs[live[j]].sql, runs[failed].sql) == 0)
                    out_[live[j]] = 1;
                warren_claim_clear(&runs[live[j]].claim);
            }
            continue;
        }
        if (rc != 0 || outcome != TAKE_STMT_FAILED) {
            for (size_t j = 0; j < m; j++) {
                warren_take_run *r = &runs[live[j]];
                if (rc == 0 && outcome == TAKE_COMMITTED && taken[j])
                    r->fate = WARREN_TAKE_RECORDED;
                else
                    warren_claim_clear(&r->claim);
            }
            break;
        }
        /* The failed run: claimed on its own, committed, to be completed as
         * a retry with its error (its statement is not run again). The runs
         * not taken this time stay BACK; the others go again. */
        for (size_t j = 0; j < m; j++) {
            if (!taken[j] || live[j] == failed)
                out_[live[j]] = 1;
            if (live[j] != failed)
                warren_claim_clear(&runs[live[j]].claim);
        }
        warren_take_run *f = &runs[failed];
        const char *key = f->run_key;
        warren_claim cl = {0};
        warren_claim_clear(&f->claim);
        rc = claim_bounded(st, key, worker, &cl, err);
        if (rc != 0) {
            f->back_unknown = rc == WARREN_EDBCONN; /* its COMMIT's answer may be lost */
            free(ferr);
            break;
        }
        if (cl.claimed) {
            f->claim = cl;
            f->stmt_error = ferr;
            f->fate = WARREN_TAKE_FAILED;
        } else {
            free(ferr); /* gone meanwhile: its ordinary claim settles it */
        }
    }
out:
    free(live);
    free(taken);
    free(out_);
    return rc;
}
