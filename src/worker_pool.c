/* worker_pool.c: the C worker's handler pool (docs/design.md §6.2): persistent threads
 * that run in-process C handlers and sql handlers, one run per thread at a
 * time, and start exec handlers' processes (so the loop thread never waits
 * for a spawn); the sql handlers' PostgreSQL connections and cost table; and
 * the wake pipe through which a finished handler (or a started process)
 * wakes the worker's loop. Below the slots: it sees handler contexts, never
 * a slot or the worker. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

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

void warren__ctx_free(warren_handler_ctx *c)
{
    if (c == NULL)
        return;
    free(c->run_key);
    free(c->job);
    free(c->payload);
    free(c->sql);
    free(c->db_url);
    free(c->sql_stmt_error);
    free(c->worker);
    free(c->handler);
    warren_claim_clear(&c->take_claim);
    for (size_t i = 0; c->argv != NULL && c->argv[i] != NULL; i++)
        free(c->argv[i]);
    free(c->argv);
    for (size_t i = 0; c->pass_env != NULL && c->pass_env[i] != NULL; i++)
        free(c->pass_env[i]);
    free(c->pass_env);
    warren__exec_close(&c->ex);
    free(c);
}

/* The handler pool: threads that outlive the runs they execute (a thread
 * per run cost more CPU than a no-op handler's whole run: creation, stack
 * set-up, exit). Grown on demand up to the worker's concurrency, since every
 * running handler may block; idle threads wait on a condition variable. A
 * handler that ignores should_stop keeps its thread; at the end of
 * warren_worker_run such threads, and the pool with them, are left behind on
 * purpose (they only touch the pool and a duplicate of the wake pipe). */
typedef struct hpool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    warren_handler_ctx *head, *tail; /* queued, not yet taken */
    int nqueued, nidle, nthreads, nbusy, max, quit;
    int sql_batch; /* at most this many sql runs share one transaction */
    int held;      /* warren__hpool_hold: queued runs wait */
    /* Each sql statement's own time on the server (warren_sql_run.stmt_us),
     * smoothed: keyed by the hash of its text (many jobs share one text). */
    struct {
        uint64_t hash;
        int64_t est_us;
    } costs[SQL_COSTS];
    int nwaking;         /* signalled or started, not yet running: at most one */
    int wake_fd;         /* the loop's wake pipe (a duplicate of its write end) */
    int loop_waiting;    /* the loop sleeps in warren__wait_wake: write to wake_fd */
    uint64_t ndone;      /* handlers finished */
    uint64_t ndone_seen; /* ... as of the loop's last warren__wait_wake */
    /* sql handler connections, kept here rather than in the worker: a thread
     * left behind at shutdown still returns its connection after the worker
     * is freed. Under mu. */
    warren_store *pool[SQL_POOL_MAX];
    size_t npool;
} hpool;

static warren_store *pool_get(hpool *hp, const char *url, warren_error *err)
{
    warren_store *st = NULL;
    pthread_mutex_lock(&hp->mu);
    if (hp->npool > 0)
        st = hp->pool[--hp->npool];
    pthread_mutex_unlock(&hp->mu);
    if (st != NULL)
        return st;
    if (warren_store_open(url, NULL, &st, err) != 0)
        return NULL;
    return st;
}

static void pool_put(hpool *hp, warren_store *st)
{
    if (st == NULL)
        return;
    if (!warren_store_connected(st)) {
        warren_store_free(st);
        return;
    }
    pthread_mutex_lock(&hp->mu);
    if (hp->npool < SQL_POOL_MAX) {
        hp->pool[hp->npool++] = st;
        st = NULL;
    }
    pthread_mutex_unlock(&hp->mu);
    warren_store_free(st);
}

int warren__hpool_prefill(struct hpool *hp, const char *url, int n, warren_error *err)
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
        pool_put(hp, st);
    }
    if (warm.code == 0)
        return 0;
    return warren_error_set(err, warm.code, "%s", warm.message);
}

/* Frees a pool no thread uses any more. */
static void hpool_destroy(hpool *hp)
{
    for (size_t i = 0; i < hp->npool; i++)
        warren_store_free(hp->pool[i]);
    close(hp->wake_fd);
    pthread_cond_destroy(&hp->cv);
    pthread_mutex_destroy(&hp->mu);
    free(hp);
}

int warren__hpool_arm(hpool *hp)
{
    int ready;
    /* Handler threads write to the pipe only while loop_waiting is set;
     * what finished before that is seen through ndone. */
    pthread_mutex_lock(&hp->mu);
    ready = hp->ndone != hp->ndone_seen;
    hp->ndone_seen = hp->ndone;
    hp->loop_waiting = !ready;
    pthread_mutex_unlock(&hp->mu);
    return ready;
}

void warren__hpool_disarm(hpool *hp)
{
    pthread_mutex_lock(&hp->mu);
    hp->loop_waiting = 0;
    hp->ndone_seen = hp->ndone;
    pthread_mutex_unlock(&hp->mu);
}

static void c_run(warren_handler_ctx *c)
{
    c->outcome = c->fn(c, c->ud);
}

/* An exec handler's start (posix_spawn: 1-4 ms a process on this machine,
 * docs/benchmarks.md), here rather than on the loop thread, which meanwhile
 * claims, completes and heartbeats for the other slots. */
static void exec_spawn_run(warren_handler_ctx *c)
{
    warren_error e = {0};
    warren__exec_run run = {
        .run_key = c->run_key,
        .job = c->job,
        .scheduled_at = c->scheduled_at,
        .attempt = c->attempt,
        .due_at = c->due_at,
        .payload = c->payload,
        .pass_env = (const char *const *)c->pass_env,
    };
    if (atomic_load_explicit(&c->stop, memory_order_acquire)) {
        /* stopped (lease lost, timeout, shutdown) while queued: never started */
        c->exec_skipped = 1;
        return;
    }
    if ((c->exec_rc = warren__exec_start(&c->ex, c->argv, c->shell, &run, &e)) != 0) {
        snprintf(c->error, sizeof(c->error), "%s", e.message);
        c->has_error = 1;
    }
}

/* A started process nobody will take (the loop abandoned its spawn, at
 * shutdown or after a stop's grace): stopped at once, as a run left to its
 * lease must not go on. */
void warren__exec_abandoned(warren_handler_ctx *c)
{
    int status;
    if (c->kind != KIND_EXEC || c->ex.pid <= 0)
        return;
    warren__exec_kill(&c->ex, SIGKILL);
    while (!warren__exec_reap(&c->ex, &status))
        warren__sleep_ms(1);
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
    warren_store *st = pool_get(cs[0]->hp, cs[0]->db_url, &e);
    int rc;

    for (size_t i = 0; i < n; i++)
        stmt_us[i] = -1;

    if (st == NULL || runs == NULL) {
        for (size_t i = 0; i < n; i++) {
            cs[i]->sql_rc = st == NULL ? (e.code ? e.code : WARREN_EDBCONN) : WARREN_ENOMEM;
            snprintf(cs[i]->error, sizeof(cs[i]->error), "%s",
                     st == NULL ? e.message : "out of memory");
        }
        pool_put(cs[0]->hp, st);
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
    pool_put(cs[0]->hp, st);
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
    warren_store *st = runs != NULL ? pool_get(cs[0]->hp, cs[0]->db_url, &e) : NULL;

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
    pool_put(cs[0]->hp, st);
    free(runs);
}

static uint64_t sql_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a, 64 bits */
    for (; s != NULL && *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return h | 1; /* never 0: 0 is an empty entry */
}

/* The expected time of a run's statement: its entry's, or
 * SQL_BATCH_UNKNOWN_US when it was not measured yet. Under mu. */
static int64_t sql_cost(const hpool *hp, const warren_handler_ctx *c)
{
    uint64_t h = c->sql_hash;
    if (hp->costs[h % SQL_COSTS].hash != h)
        return SQL_BATCH_UNKNOWN_US;
    return hp->costs[h % SQL_COSTS].est_us;
}

/* What one batch measured of a statement (the median of its runs'
 * stmt_us in the batch: one run of a quick statement preempted, or
 * waiting for a WAL flush, for a few ms does not count as the
 * statement's time): the estimate moves half way towards it, so a
 * statement that turns slow runs alone from its second batch on, and one
 * that turns quick batches again as soon. Under mu. */
static void sql_cost_update(hpool *hp, uint64_t h, int64_t d)
{
    if (d < 0)
        return;
    if (hp->costs[h % SQL_COSTS].hash != h) {
        hp->costs[h % SQL_COSTS].hash = h;
        hp->costs[h % SQL_COSTS].est_us = d;
        return;
    }
    int64_t *e = &hp->costs[h % SQL_COSTS].est_us;
    *e += d > *e ? (d - *e + 1) / 2 : (d - *e) / 2;
}

/* The cost table after a batch: for each statement text in it, the median
 * of its runs' measured times (us[i], -1 not measured). Under mu. */
static void sql_costs_learn(hpool *hp, warren_handler_ctx **batch, const int64_t *us, size_t nb)
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
            sql_cost_update(hp, batch[i]->sql_hash, v[(nv - 1) / 2]);
    }
}

int64_t warren__hpool_sql_cost(hpool *hp, const char *sql)
{
    uint64_t h = sql_hash(sql);
    int64_t v = -1;
    if (hp == NULL)
        return -1;
    pthread_mutex_lock(&hp->mu);
    if (hp->costs[h % SQL_COSTS].hash == h)
        v = hp->costs[h % SQL_COSTS].est_us;
    pthread_mutex_unlock(&hp->mu);
    return v;
}

static void *hpool_main(void *arg);

/* With queued work and no thread on its way: signal an idle thread, or start
 * one. One at a time: the thread that takes an item passes the baton on if
 * more are queued, so a burst of fast handlers is drained by the few threads
 * it needs instead of waking one thread per run (a context switch each),
 * while handlers that block still get a thread each, one wake-up apart.
 * Returns pthread_create's error, or 0. Called with mu held. */
static int hpool_wake_one(hpool *hp)
{
    if (hp->head == NULL || hp->nwaking > 0 || (hp->held && hp->nthreads > 0))
        return 0; /* held: but the first thread is started now (its failure is the submit's) */
    if (hp->nidle > 0) {
        pthread_cond_signal(&hp->cv);
        hp->nwaking++;
        return 0;
    }
    if (hp->nthreads >= hp->max)
        return 0; /* every thread busy: the first to finish takes it */
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    /* The thread starts with every asynchronous signal blocked (the
     * synchronous ones cannot be), so that a SIGTERM for the process
     * interrupts the loop's wait, not a handler thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int prc = pthread_create(&th, &at, hpool_main, hp);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&at);
    if (prc == 0) {
        hp->nthreads++;
        hp->nwaking++;
    }
    return prc;
}

static void *hpool_main(void *arg)
{
    hpool *hp = arg;
    pthread_mutex_lock(&hp->mu);
    if (hp->nwaking > 0)
        hp->nwaking--; /* started by hpool_wake_one */
    for (;;) {
        while ((hp->head == NULL || hp->held) && !hp->quit) {
            hp->nidle++;
            pthread_cond_wait(&hp->cv, &hp->mu);
            hp->nidle--;
            if (hp->nwaking > 0)
                hp->nwaking--;
        }
        if (hp->head == NULL)
            break; /* quit */
        /* One item, or for sql runs up to sql_batch of those queued next
         * whose statements' expected times fit the budget together: they
         * share one transaction (sql_run_batch). The first always goes;
         * the batch ends at the first that does not fit (in order). */
        warren_handler_ctx *batch[SQL_BATCH_MAX];
        size_t nb = 0;
        int64_t cost = 0;
        while (hp->head != NULL && nb < SQL_BATCH_MAX) {
            warren_handler_ctx *c = hp->head;
            int64_t cc = c->kind == KIND_SQL ? sql_cost(hp, c) : 0;
            if (nb > 0 &&
                (c->kind != KIND_SQL || batch[0]->kind != KIND_SQL || c->take != batch[0]->take ||
                 nb >= (size_t)hp->sql_batch || cost + cc > SQL_BATCH_BUDGET_US))
                break;
            hp->head = c->next;
            if (hp->head == NULL)
                hp->tail = NULL;
            hp->nqueued--;
            if (hp->quit && atomic_load_explicit(&c->done, memory_order_acquire) == 2) {
                /* left behind before it started: the worker is gone, do not run it */
                warren__ctx_free(c);
                continue;
            }
            batch[nb++] = c;
            cost += cc;
        }
        if (nb == 0)
            continue;
        hp->nbusy++;
        hpool_wake_one(hp); /* more queued: the next thread (failure: a busy one takes it) */
        pthread_mutex_unlock(&hp->mu);
        if (batch[0]->kind == KIND_SQL) {
            int64_t us[SQL_BATCH_MAX];
            if (batch[0]->take)
                sql_take_batch(batch, nb, us);
            else
                sql_run_batch(batch, nb, us);
            pthread_mutex_lock(&hp->mu);
            sql_costs_learn(hp, batch, us, nb);
            pthread_mutex_unlock(&hp->mu);
        } else if (batch[0]->kind == KIND_EXEC)
            exec_spawn_run(batch[0]);
        else
            c_run(batch[0]);
        /* each belongs to the loop from here on, unless the loop abandoned it
         * (done = 2: it stopped waiting for this handler). */
        for (size_t i = 0; i < nb; i++)
            if (atomic_exchange_explicit(&batch[i]->done, 1, memory_order_acq_rel) == 2) {
                warren__exec_abandoned(batch[i]);
                warren__ctx_free(batch[i]);
            }
        pthread_mutex_lock(&hp->mu);
        hp->ndone += nb;
        if (hp->loop_waiting && hp->quit != 2) {
            /* Only when the loop sleeps in warren__wait_wake (otherwise it polls the
             * slots anyway). Under the lock: once the pool is abandoned
             * (quit = 2, set under it) the loop may close the pipe's read
             * end, and a write then would raise SIGPIPE. */
            char x = 1;
            ssize_t n = write(hp->wake_fd, &x, 1); /* a full pipe is as good as a byte */
            (void)n;
        }
        hp->nbusy--;
    }
    hp->nthreads--;
    int last = hp->nthreads == 0 && hp->quit == 2; /* abandoned: the last one out frees it */
    pthread_mutex_unlock(&hp->mu);
    if (last)
        hpool_destroy(hp);
    return NULL;
}

hpool *warren__hpool_new(int wake_fd, int max, int sql_batch, warren_error *err)
{
    hpool *hp = calloc(1, sizeof(*hp));
    if (hp == NULL) {
        warren_error_set(err, WARREN_ENOMEM, "out of memory");
        return NULL;
    }
    if ((hp->wake_fd = fcntl(wake_fd, F_DUPFD_CLOEXEC, 0)) < 0) {
        warren_error_set(err, WARREN_ESYS, "cannot duplicate the wake pipe: %s", strerror(errno));
        free(hp);
        return NULL;
    }
    pthread_mutex_init(&hp->mu, NULL);
    pthread_cond_init(&hp->cv, NULL);
    hp->max = max;
    hp->sql_batch = sql_batch < 1 ? 1 : sql_batch > SQL_BATCH_MAX ? SQL_BATCH_MAX : sql_batch;
    return hp;
}

void warren__hpool_hold(hpool *hp, int on)
{
    if (hp == NULL)
        return;
    pthread_mutex_lock(&hp->mu);
    hp->held = on;
    if (!on)
        (void)hpool_wake_one(hp); /* failure: a busy thread takes them when it is done */
    pthread_mutex_unlock(&hp->mu);
}

/* Queues c for a pool thread (hpool_wake_one). Fails only when there is no
 * thread at all and none can be started. */
int warren__hpool_submit(hpool *hp, warren_handler_ctx *c, warren_error *err)
{
    int rc = 0;
    if (c->kind == KIND_SQL)
        c->sql_hash = sql_hash(c->sql);
    pthread_mutex_lock(&hp->mu);
    c->next = NULL;
    if (hp->tail != NULL)
        hp->tail->next = c;
    else
        hp->head = c;
    hp->tail = c;
    hp->nqueued++;
    int prc = hpool_wake_one(hp);
    if (prc != 0 && hp->nthreads == 0) {
        /* nobody would ever take it: take it back (it is the only one queued) */
        hp->head = hp->tail = NULL;
        hp->nqueued = 0;
        rc = warren_error_set(err, WARREN_ESYS,
                              "cannot start a handler thread: %s (the run is retried; lower "
                              "worker.concurrency or raise the limit on threads, ulimit -u)",
                              strerror(prc));
    }
    pthread_mutex_unlock(&hp->mu);
    return rc;
}

/* Stops the pool: idle threads exit; busy ones (handlers ignoring
 * should_stop) are abandoned with the pool, which the last of them frees.
 * Returns how many were abandoned. Waits up to wait_ms for idle ones. */
int warren__hpool_free(hpool *hp, int wait_ms)
{
    int busy;
    if (hp == NULL)
        return 0;
    pthread_mutex_lock(&hp->mu);
    hp->quit = 1;
    pthread_cond_broadcast(&hp->cv);
    for (int i = 0; i < wait_ms && hp->nthreads > hp->nbusy; i++) {
        pthread_mutex_unlock(&hp->mu);
        warren__sleep_ms(1);
        pthread_mutex_lock(&hp->mu);
    }
    busy = hp->nthreads;
    if (busy > 0)
        hp->quit = 2; /* the last thread out frees the pool */
    pthread_mutex_unlock(&hp->mu);
    if (busy == 0)
        hpool_destroy(hp);
    return busy;
}
