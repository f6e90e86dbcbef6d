/* worker_sql.c: the sql handler's engine (docs/design.md §6.3), below the
 * handler kinds: its own PostgreSQL connections (kept here, not in the
 * worker: a thread left behind at shutdown still returns its connection
 * after the worker is freed), the cost table of statements, batch forming
 * (quick statements share one transaction, worker.sql_batch) and running a
 * batch (store_sql.c: in the completion's transaction, or taken). Any
 * thread; its own lock. */
#include <assert.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/store.h>

#include "store_work.h"
#include "internal.h"
#include "worker_int.h"

#define SQL_POOL_MAX 64
#define SQL_BATCH_MAX 64 /* worker.sql_batch at most (subtransactions: see config.md) */
/* An sql batch takes runs while their statements' expected times (the
 * cost table) add up to at most SQL_BATCH_BUDGET_US: a statement measured
 * taking that long runs alone, side by side with the others on their own
 * threads, instead of one after another in one transaction. A statement not
 * measured yet counts SQL_BATCH_UNKNOWN_US, so that at most 16 of them share
 * the first batch: with a quarter of the budget, the first 200 runs of a
 * fresh worker went in 50 transactions at once (each opening a connection)
 * and made their second's p99 2x (docs/benchmarks.md). */
#define SQL_BATCH_BUDGET_US WARREN_SQL_BATCH_BUDGET_US
#define SQL_BATCH_UNKNOWN_US (SQL_BATCH_BUDGET_US / 16)
#define SQL_COSTS 256 /* the cost table's entries (direct-mapped by the hash of the text) */

struct sqlengine {
    pthread_mutex_t mu; /* the cost table and the connections */
    int sql_batch;      /* at most this many sql runs share one transaction */
    /* Each sql statement's own time on the server (warren_sql_run.stmt_us),
     * smoothed: keyed by the hash of its text (many jobs share one text). */
    struct {
        uint64_t hash;
        int64_t est_us;
    } costs[SQL_COSTS];
    warren_store *pool[SQL_POOL_MAX];
    size_t npool;
};

sqlengine *warren__sql_new(int sql_batch)
{
    sqlengine *se = calloc(1, sizeof(*se));
    if (se == NULL)
        return NULL;
    pthread_mutex_init(&se->mu, NULL);
    se->sql_batch = sql_batch < 1 ? 1 : sql_batch > SQL_BATCH_MAX ? SQL_BATCH_MAX : sql_batch;
    return se;
}

void warren__sql_free(sqlengine *se)
{
    if (se == NULL)
        return;
    for (size_t i = 0; i < se->npool; i++)
        warren_store_free(se->pool[i]);
    pthread_mutex_destroy(&se->mu);
    free(se);
}

static warren_store *pool_get(sqlengine *se, const char *url, warren_error *err)
{
    warren_store *st = NULL;
    pthread_mutex_lock(&se->mu);
    if (se->npool > 0)
        st = se->pool[--se->npool];
    pthread_mutex_unlock(&se->mu);
    if (st != NULL)
        return st;
    if (warren_store_open(url, NULL, &st, err) != 0)
        return NULL;
    return st;
}

static void pool_put(sqlengine *se, warren_store *st)
{
    if (st == NULL)
        return;
    if (!warren_store_connected(st)) {
        warren_store_free(st);
        return;
    }
    pthread_mutex_lock(&se->mu);
    if (se->npool < SQL_POOL_MAX) {
        se->pool[se->npool++] = st;
        st = NULL;
    }
    pthread_mutex_unlock(&se->mu);
    warren_store_free(st);
}

int warren__sql_prefill(struct sqlengine *se, const char *url, int n, warren_error *err)
{
    warren_error warm = {0};
    if (n > SQL_POOL_MAX)
        n = SQL_POOL_MAX;
    for (int i = 0; i < n; i++) {
        warren_store *st = NULL;
        if (warren_store_open(url, NULL, &st, err) != 0)
            return err != NULL && err->code ? err->code : WARREN_EDBCONN;
        /* warm, so that the first runs do not pay for compiling the
         * protocol's functions in a dozen fresh backends at once; a
         * connection that fails it still serves (the first such error is
         * returned once every connection is open) */
        warren_error we = {0};
        if (warren_store_warm_up(st, &we) != 0 && warm.code == 0)
            warm = we;
        pool_put(se, st);
    }
    if (warm.code == 0)
        return 0;
    return warren_error_set(err, warm.code, "%s", warm.message);
}

/* One or several sql runs in one transaction
 * (warren_store_complete_sql_batch); one by one on the same connection if
 * the batch fails for a reason that is not the connection's (a deferred
 * constraint at COMMIT, a refused completion): the single-run path knows
 * whose error it is. */
static void sql_run_batch(warren_handler_ctx **cs, size_t n, int64_t *stmt_us)
{
    warren_error e = {0};
    warren_sql_run *runs = calloc(n, sizeof(*runs));
    warren_store *st = pool_get(cs[0]->se, cs[0]->db_url, &e);
    int rc;

    for (size_t i = 0; i < n; i++)
        stmt_us[i] = -1;

    if (st == NULL || runs == NULL) {
        for (size_t i = 0; i < n; i++) {
            cs[i]->sql_rc = st == NULL ? (e.code ? e.code : WARREN_EDBCONN) : WARREN_ENOMEM;
            snprintf(cs[i]->error, sizeof(cs[i]->error), "%s",
                     st == NULL ? e.message : "out of memory");
        }
        pool_put(cs[0]->se, st);
        free(runs);
        return;
    }
    for (size_t i = 0; i < n; i++)
        runs[i] = (warren_sql_run){.run_key = cs[i]->run_key,
                                   .attempt = cs[i]->attempt,
                                   .scheduled_at = cs[i]->scheduled_at,
                                   .payload_json = cs[i]->payload,
                                   .sql = cs[i]->sql,
                                   .timeout_ms = cs[i]->timeout_ms,
                                   .tag = cs[i]->sql_tag,
                                   .lost = &cs[i]->lost};
    rc = warren_store_complete_sql_batch(st, runs, n, &e);
    for (size_t i = 0; i < n; i++) {
        warren_handler_ctx *c = cs[i];
        stmt_us[i] = runs[i].stmt_us;
        if (rc == 0) {
            c->sql_recorded = runs[i].recorded;
            c->sql_stmt_error = runs[i].stmt_error;
        } else if (rc == WARREN_EDBCONN || rc == WARREN_ENOMEM || !warren_store_connected(st)) {
            c->sql_rc = rc;
            snprintf(c->error, sizeof(c->error), "%s", e.message);
        } else {
            warren_error e1 = {0};
            c->sql_rc = warren_store_complete_sql(
                st, c->run_key, c->attempt, c->scheduled_at, c->payload, c->sql, c->timeout_ms,
                c->sql_tag, &c->lost, &c->sql_recorded, &c->sql_stmt_error, &e1);
            if (c->sql_rc != 0)
                snprintf(c->error, sizeof(c->error), "%s", e1.message);
        }
    }
    pool_put(cs[0]->se, st);
    free(runs);
}

/* Sql runs not claimed yet (ctx->take): taken, run and completed in one
 * transaction (warren_store_take_sql_batch). What the loop gets back: the
 * fate of each, the claim of those recorded or failed, the statement error
 * of those failed. A connection that cannot be had: every run back. */
static void sql_take_batch(warren_handler_ctx **cs, size_t n, int64_t *stmt_us)
{
    warren_error e = {0};
    warren_take_run *runs = calloc(n, sizeof(*runs));
    warren_store *st = runs != NULL ? pool_get(cs[0]->se, cs[0]->db_url, &e) : NULL;

    for (size_t i = 0; i < n; i++) {
        stmt_us[i] = -1;
        cs[i]->take_fate = WARREN_TAKE_BACK;
    }
    if (st == NULL) {
        snprintf(cs[0]->error, sizeof(cs[0]->error), "%s",
                 runs == NULL ? "out of memory" : e.message);
        free(runs);
        return;
    }
    for (size_t i = 0; i < n; i++)
        runs[i] = (warren_take_run){.run_key = cs[i]->run_key,
                                    .sql = cs[i]->sql,
                                    .tag = cs[i]->sql_tag,
                                    .handler = cs[i]->handler,
                                    .timeout_ms = cs[i]->timeout_ms};
    if (warren_store_take_sql_batch(st, cs[0]->worker, runs, n, &e) != 0)
        snprintf(cs[0]->error, sizeof(cs[0]->error), "%s", e.message); /* for the loop's log */
    for (size_t i = 0; i < n; i++) {
        warren_handler_ctx *c = cs[i];
        stmt_us[i] = runs[i].stmt_us;
        c->take_fate = runs[i].fate;
        c->take_back_unknown = runs[i].back_unknown;
        c->take_claim = runs[i].claim; /* takes payload_json */
        c->sql_stmt_error = runs[i].stmt_error;
        c->sql_recorded = runs[i].fate == WARREN_TAKE_RECORDED;
    }
    pool_put(cs[0]->se, st);
    free(runs);
}

uint64_t warren__sql_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a, 64 bits */
    for (; s != NULL && *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h | 1; /* never 0: 0 is an empty entry */
}

/* The expected time of a run's statement: its entry's, or
 * SQL_BATCH_UNKNOWN_US when it was not measured yet. Under se->mu. */
static int64_t sql_cost(const sqlengine *se, const warren_handler_ctx *c)
{
    uint64_t h = c->sql_hash;
    if (se->costs[h % SQL_COSTS].hash != h)
        return SQL_BATCH_UNKNOWN_US;
    return se->costs[h % SQL_COSTS].est_us;
}

/* What one batch measured of a statement (the median of its runs'
 * stmt_us in the batch: one run of a quick statement preempted, or
 * waiting for a WAL flush, for a few ms does not count as the
 * statement's time): the estimate moves half way towards it, so a
 * statement that turns slow runs alone from its second batch on, and one
 * that turns quick batches again as soon. Under se->mu. */
static void sql_cost_update(sqlengine *se, uint64_t h, int64_t d)
{
    if (d < 0)
        return;
    if (se->costs[h % SQL_COSTS].hash != h) {
        se->costs[h % SQL_COSTS].hash = h;
        se->costs[h % SQL_COSTS].est_us = d;
        return;
    }
    int64_t *e = &se->costs[h % SQL_COSTS].est_us;
    *e += d > *e ? (d - *e + 1) / 2 : (d - *e) / 2;
}

/* The cost table after a batch: for each statement text in it, the median
 * of its runs' measured times (us[i], -1 not measured). Under se->mu. */
static void sql_costs_learn(sqlengine *se, warren_handler_ctx **batch, const int64_t *us, size_t nb)
{
    int seen[SQL_BATCH_MAX] = {0};
    for (size_t i = 0; i < nb; i++) {
        int64_t v[SQL_BATCH_MAX];
        size_t nv = 0;
        if (seen[i])
            continue;
        for (size_t j = i; j < nb; j++)
            if (!seen[j] && batch[j]->sql_hash == batch[i]->sql_hash) {
                seen[j] = 1;
                if (us[j] >= 0) {
                    size_t k = nv++; /* insertion sort: at most SQL_BATCH_MAX */
                    for (; k > 0 && v[k - 1] > us[j]; k--)
                        v[k] = v[k - 1];
                    v[k] = us[j];
                }
            }
        if (nv > 0)
            sql_cost_update(se, batch[i]->sql_hash, v[(nv - 1) / 2]);
    }
}

int64_t warren__sql_cost_of(sqlengine *se, const char *sql)
{
    uint64_t h = warren__sql_hash(sql);
    int64_t v = -1;
    if (se == NULL)
        return -1;
    pthread_mutex_lock(&se->mu);
    if (se->costs[h % SQL_COSTS].hash == h)
        v = se->costs[h % SQL_COSTS].est_us;
    pthread_mutex_unlock(&se->mu);
    return v;
}

size_t warren__sql_form(sqlengine *se, warren_handler_ctx *head, warren_handler_ctx **batch,
                        size_t max)
{
    /* Up to sql_batch of the runs queued next whose statements' expected
     * times fit the budget together: they share one transaction. The first
     * always goes; the batch ends at the first that does not fit (in
     * order). */
    size_t nb = 0;
    int64_t cost = 0;
    if (max > SQL_BATCH_MAX)
        max = SQL_BATCH_MAX;
    pthread_mutex_lock(&se->mu);
    for (warren_handler_ctx *c = head; c != NULL && nb < max; c = c->next) {
        int64_t cc = c->kind == KIND_SQL ? sql_cost(se, c) : 0;
        if (nb > 0 &&
            (c->kind != KIND_SQL || batch[0]->kind != KIND_SQL || c->take != batch[0]->take ||
             nb >= (size_t)se->sql_batch || cost + cc > SQL_BATCH_BUDGET_US))
            break;
        batch[nb++] = c;
        cost += cc;
    }
    pthread_mutex_unlock(&se->mu);
    return nb;
}

void warren__sql_run(sqlengine *se, warren_handler_ctx **batch, size_t nb)
{
    int64_t us[SQL_BATCH_MAX];
    assert(nb > 0 && nb <= SQL_BATCH_MAX);
    if (batch[0]->take)
        sql_take_batch(batch, nb, us);
    else
        sql_run_batch(batch, nb, us);
    pthread_mutex_lock(&se->mu);
    sql_costs_learn(se, batch, us, nb);
    pthread_mutex_unlock(&se->mu);
}
