/* worker.c: the C worker (DESIGN §6). One thread owns the AMQP connection and
 * the PostgreSQL connection (neither library is thread-safe per connection)
 * and runs a loop: take deliveries, claim them in batches, start handlers in
 * free slots, heartbeat, collect finished handlers, complete them in batches,
 * and only then acknowledge. exec handlers are child processes in their own
 * process group, watched with waitpid and a pipe; in-process C handlers and
 * sql handlers run on a thread of their own per run (sql handlers with their
 * own PostgreSQL connection from a small pool) and report through atomics. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <warren/broker.h>
#include <warren/codec.h>
#include <warren/store.h>
#include "store_work.h"
#include <warren/worker.h>

#include "internal.h"

extern char **environ;

#define MAX_CONCURRENCY 4096 /* as worker.concurrency in the config */
#define ERROR_MAX 2000       /* bytes of handler error text kept */
#define TAIL_MAX 1500        /* bytes of exec output kept for the error */
#define IDLE_WAIT_MS 10      /* loop wait when nothing is pending */
#define BACKOFF_MIN_MS 100   /* reconnect / retry backoff: 100 ms doubling to 10 s */
#define BACKOFF_MAX_MS 10000
#define KILL_GRACE_MAX_MS 5000 /* SIGTERM -> SIGKILL */
#define DEADLETTER_CONFIRM_MS 5000
#define ACK_HOLD_MS 50 /* an ack behind an open delivery waits this long for it */
#define SQL_POOL_MAX 64
/* Runs released early (planner.release_lead) wait here until due: */
#define CLOCK_RESAMPLE_MS 10000 /* how often the database's clock is read again */
#define CLAIM_AHEAD_US 1000     /* claimed this close to due; warren.claim waits the rest */

enum slot_state {
    SLOT_FREE = 0,
    SLOT_RUNNING, /* handler running (exec child, C thread or sql thread) */
    SLOT_DONE,    /* handler finished: complete (or just ack), then free */
};

enum stop_reason { STOP_NONE = 0, STOP_LOST, STOP_TIMEOUT, STOP_SHUTDOWN };

enum kind { KIND_EXEC, KIND_SQL, KIND_C };

struct warren_handler_ctx {
    char *run_key, *job, *payload, *sql, *db_url;
    warren_us scheduled_at;
    int attempt;
    int64_t timeout_ms;
    warren_handler_fn fn;
    void *ud;
    struct hpool *hp;                /* sql: its connection pool lives with the threads */
    struct warren_handler_ctx *next; /* the handler pool's queue */
    int kind;                        /* KIND_C or KIND_SQL */
    atomic_int stop;
    atomic_int done;
    atomic_int lost;  /* sql: the lease was lost: no effect, no completion */
    char sql_tag[40]; /* sql: its session's application_name while it runs (set once) */
    /* results, written by the thread before done = 1 */
    warren_outcome outcome;
    char error[ERROR_MAX];
    int has_error;
    /* sql handler results */
    int sql_rc; /* 0, or a WARREN_E* code for the protocol/connection */
    int sql_recorded;
    char *sql_stmt_error;
};

typedef struct handler_reg {
    char *name;
    warren_handler_fn fn;
    void *ud;
} handler_reg;

typedef struct slot {
    int state;
    int kind;
    uint64_t tag;
    uint64_t gen; /* broker generation of the delivery */
    char run_key[WARREN_RUN_KEY_MAX];
    const warren_job *job;
    warren_claim claim;
    int64_t lease_ms, hb_every_ms, hb_margin_ms;
    int64_t started_mono, last_hb_ok, next_hb;
    int64_t received_mono; /* the delivery's arrival (for the report's "released") */
    warren_us msg_due_at;  /* due time this attempt was released for (message header) */
    int64_t timeout_at;
    int stop_reason;
    int64_t next_cancel; /* sql, lost: when to send the cancel (again) */
    int cancels_sent;
    int64_t kill_at; /* exec: SIGKILL after this; c: left behind after a timeout (0: not yet) */
    /* exec */
    pid_t pid;
    int out_fd;
    char tail[TAIL_MAX + 1];
    size_t tail_len;
    /* in-process handlers (c, sql): the context is with the handler pool */
    int has_thread;
    warren_handler_ctx *ctx;
    /* result */
    warren_outcome outcome;
    char *error;
    int complete_sql_retry; /* sql: relaunch after a connection failure */
    int64_t retry_at, sql_backoff;
} slot;

typedef struct pend {
    warren_delivery d;
    uint64_t gen;
    int64_t received_mono; /* when the delivery reached this worker */
    warren_run_msg msg;
    const warren_job *job;
    int answer_lost;          /* a claim of it failed, its fate unknown: it may be ours */
    int64_t answer_lost_mono; /* when that claim was sent */
    int picked;               /* in the claim batch being built */
} pend;

struct warren_worker {
    const warren_config *cfg;
    const warren_logger *lg;
    char *id;
    char *db_url, *amqp_url;
    char **queues;
    size_t nqueues;
    int concurrency;
    handler_reg *regs;
    size_t nregs;
    warren_run_report_fn report_fn;
    void *report_ud;

    warren_store *st;
    warren_broker *b;
    uint64_t gen;
    int64_t store_retry_at, store_backoff;
    int64_t broker_retry_at, broker_backoff;

    slot *slots;
    int *free_idx; /* stack of free slot indexes (O(1) to find a free slot) */
    int nfree;
    pend *pq; /* FIFO of deliveries waiting for a slot or for their due time */
    size_t pq_head, pq_len, pq_cap;
    size_t pq_held;      /* of those, not due at the last claim_pending */
    warren_us next_due;  /* the earliest due time of those (0: none) */
    int64_t clock_off;   /* the database's clock (us) minus the monotonic one */
    int64_t clock_at_ms; /* when clock_off was measured (monotonic; 0: never) */

    int wake[2];      /* handler threads write a byte when done (non-blocking) */
    struct hpool *hp; /* persistent handler threads (c and sql handlers) */

    warren_worker_stats stats;
};

static int64_t backoff_next(int64_t cur)
{
    if (cur < BACKOFF_MIN_MS)
        return BACKOFF_MIN_MS;
    return cur * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : cur * 2;
}

static char *xstrdup(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* ------------------------------------------------------------ handler context API */

const char *warren_handler_run_key(const warren_handler_ctx *ctx)
{
    return ctx->run_key;
}
const char *warren_handler_job(const warren_handler_ctx *ctx)
{
    return ctx->job;
}
warren_us warren_handler_scheduled_at(const warren_handler_ctx *ctx)
{
    return ctx->scheduled_at;
}
int warren_handler_attempt(const warren_handler_ctx *ctx)
{
    return ctx->attempt;
}
const char *warren_handler_payload(const warren_handler_ctx *ctx)
{
    return ctx->payload;
}
int warren_handler_should_stop(const warren_handler_ctx *ctx)
{
    return atomic_load_explicit(&((warren_handler_ctx *)ctx)->stop, memory_order_acquire) != 0;
}
void warren_handler_set_error(warren_handler_ctx *ctx, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->error, sizeof(ctx->error), fmt, ap);
    va_end(ap);
    ctx->has_error = 1;
}

static void ctx_free(warren_handler_ctx *c)
{
    if (c == NULL)
        return;
    free(c->run_key);
    free(c->job);
    free(c->payload);
    free(c->sql);
    free(c->db_url);
    free(c->sql_stmt_error);
    free(c);
}

/* ------------------------------------------------------------ lifecycle */

int warren_worker_new(const warren_config *cfg, const warren_logger *lg, warren_worker **out,
                      warren_error *err)
{
    warren_worker *w;
    char host[128] = "worker";
    char id[256];

    *out = NULL;
    if (cfg == NULL)
        return warren_error_set(err, WARREN_EINVAL, "warren_worker_new: no config");
    if ((w = calloc(1, sizeof(*w))) == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    w->cfg = cfg;
    w->lg = lg;
    w->concurrency = cfg->worker.concurrency > 0 ? cfg->worker.concurrency : 4;
    if (cfg->worker.id != NULL && cfg->worker.id[0] != '\0') {
        snprintf(id, sizeof(id), "%s", cfg->worker.id);
    } else {
        gethostname(host, sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0';
        snprintf(id, sizeof(id), "%s:%ld", host, (long)getpid());
    }
    w->id = strdup(id);
    w->db_url = xstrdup(cfg->database_url);
    w->amqp_url = xstrdup(cfg->amqp_url);
    w->wake[0] = w->wake[1] = -1;
    if (pipe(w->wake) != 0) {
        warren_worker_free(w);
        return warren_error_set(err, WARREN_ESYS, "pipe: %s", strerror(errno));
    }
    for (int i = 0; i < 2; i++) {
        fcntl(w->wake[i], F_SETFL, fcntl(w->wake[i], F_GETFL) | O_NONBLOCK);
        fcntl(w->wake[i], F_SETFD, FD_CLOEXEC);
    }
    if (w->id == NULL || (cfg->database_url && !w->db_url) || (cfg->amqp_url && !w->amqp_url)) {
        warren_worker_free(w);
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    *out = w;
    return 0;
}

static void free_queues(warren_worker *w)
{
    for (size_t i = 0; i < w->nqueues; i++)
        free(w->queues[i]);
    free(w->queues);
    w->queues = NULL;
    w->nqueues = 0;
}

void warren_worker_free(warren_worker *w)
{
    if (w == NULL)
        return;
    free(w->id);
    free(w->db_url);
    free(w->amqp_url);
    free_queues(w);
    for (size_t i = 0; i < w->nregs; i++)
        free(w->regs[i].name);
    free(w->regs);
    if (w->wake[0] >= 0)
        close(w->wake[0]);
    if (w->wake[1] >= 0)
        close(w->wake[1]);
    free(w);
}

int warren_worker_register(warren_worker *w, const char *name, warren_handler_fn fn, void *ud)
{
    handler_reg *nr;

    if (w == NULL || name == NULL || name[0] == '\0' || fn == NULL)
        return WARREN_EINVAL;
    for (size_t i = 0; i < w->nregs; i++)
        if (strcmp(w->regs[i].name, name) == 0)
            return WARREN_EINVAL;
    if ((nr = realloc(w->regs, (w->nregs + 1) * sizeof(*nr))) == NULL)
        return WARREN_ENOMEM;
    w->regs = nr;
    if ((nr[w->nregs].name = strdup(name)) == NULL)
        return WARREN_ENOMEM;
    nr[w->nregs].fn = fn;
    nr[w->nregs].ud = ud;
    w->nregs++;
    return 0;
}

static const handler_reg *find_reg(const warren_worker *w, const char *name)
{
    for (size_t i = 0; name != NULL && i < w->nregs; i++)
        if (strcmp(w->regs[i].name, name) == 0)
            return &w->regs[i];
    return NULL;
}

int warren_worker_set_queues(warren_worker *w, const char *const *queues, size_t n,
                             warren_error *err)
{
    free_queues(w);
    if (n == 0)
        return 0;
    if ((w->queues = calloc(n, sizeof(char *))) == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        if (!warren_name_valid(queues[i])) {
            free_queues(w);
            return warren_error_set(err, WARREN_EINVAL,
                                    "queue \"%s\" is not a valid queue name "
                                    "([A-Za-z0-9][A-Za-z0-9._-]{0,62})",
                                    queues[i]);
        }
        if ((w->queues[i] = strdup(queues[i])) == NULL) {
            free_queues(w);
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
        }
        w->nqueues++;
    }
    return 0;
}

int warren_worker_set_concurrency(warren_worker *w, int n, warren_error *err)
{
    if (n < 1 || n > MAX_CONCURRENCY)
        return warren_error_set(err, WARREN_EINVAL, "concurrency must be between 1 and %d, not %d",
                                MAX_CONCURRENCY, n);
    w->concurrency = n;
    return 0;
}

int warren_worker_set_id(warren_worker *w, const char *id, warren_error *err)
{
    char *c;
    if (id == NULL || id[0] == '\0' || strlen(id) > 200)
        return warren_error_set(err, WARREN_EINVAL, "worker id must be 1..200 bytes");
    if ((c = strdup(id)) == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    free(w->id);
    w->id = c;
    return 0;
}

const char *warren_worker_id(const warren_worker *w)
{
    return w->id;
}

int warren_worker_set_urls(warren_worker *w, const char *database_url, const char *amqp_url,
                           warren_error *err)
{
    if (database_url != NULL) {
        char *c = strdup(database_url);
        if (c == NULL)
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
        free(w->db_url);
        w->db_url = c;
    }
    if (amqp_url != NULL) {
        char *c = strdup(amqp_url);
        if (c == NULL)
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
        free(w->amqp_url);
        w->amqp_url = c;
    }
    return 0;
}

void warren_worker_on_finished(warren_worker *w, warren_run_report_fn fn, void *ud)
{
    w->report_fn = fn;
    w->report_ud = ud;
}

void warren_worker_stats_get(const warren_worker *w, warren_worker_stats *out)
{
    *out = w->stats;
}

/* The queues to consume: the configured ones, else every queue with a job
 * that has a handler this worker can run. */
static int default_queues(warren_worker *w, warren_error *err)
{
    const warren_config *cfg = w->cfg;
    if (w->nqueues > 0) {
        /* A named queue must have a job this worker can run: otherwise every
         * message on it would be dead-lettered as "no handler here". */
        for (size_t k = 0; k < w->nqueues; k++) {
            int ok = 0;
            for (size_t i = 0; i < cfg->njobs && !ok; i++)
                ok = strcmp(cfg->jobs[i].queue, w->queues[k]) == 0 &&
                     cfg->jobs[i].handler != WARREN_HANDLER_NONE;
            if (!ok)
                return warren_error_set(err, WARREN_EINVAL,
                                        "queue \"%s\": no job in %s has a handler on it (jobs "
                                        "without a handler are served by workers in other "
                                        "languages)",
                                        w->queues[k], cfg->path ? cfg->path : "the config");
        }
        return 0;
    }
    if ((w->queues = calloc(cfg->njobs + 1, sizeof(char *))) == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    for (size_t i = 0; i < cfg->njobs; i++) {
        const warren_job *j = &cfg->jobs[i];
        int seen = 0;
        if (j->handler == WARREN_HANDLER_NONE)
            continue;
        for (size_t k = 0; k < w->nqueues; k++)
            if (strcmp(w->queues[k], j->queue) == 0)
                seen = 1;
        if (!seen && (w->queues[w->nqueues++] = strdup(j->queue)) == NULL)
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    if (w->nqueues == 0)
        return warren_error_set(err, WARREN_EINVAL,
                                "no job in %s has a handler (exec, sql or c), so there is no queue "
                                "to consume; name queues with --queue",
                                cfg->path ? cfg->path : "the config");
    return 0;
}

/* ------------------------------------------------------------ connections */

static int broker_setup(warren_worker *w, warren_error *err)
{
    int rc;
    char name[128];
    warren_broker *b = NULL;

    if ((rc = warren_broker_open(w->amqp_url, w->lg, &b, err)) != 0)
        return rc;
    if ((rc = warren_broker_confirm_select(b, err)) != 0 ||
        (rc = warren_broker_qos(b, w->concurrency, err)) != 0)
        goto fail;
    for (size_t i = 0; i < w->nqueues; i++) {
        if ((rc = warren_broker_ready_queue_name(w->queues[i], name, sizeof(name), err)) != 0 ||
            (rc = warren_broker_consume(b, name, err)) != 0)
            goto fail;
    }
    w->b = b;
    w->gen++;
    return 0;
fail:
    warren_broker_free(b);
    return rc;
}

static void pq_clear(warren_worker *w);

static void broker_lost(warren_worker *w, const warren_error *e)
{
    warren_log(w->lg, WARREN_LOG_WARN,
               "worker %s: %s; unacknowledged messages return to their queues, reconnecting", w->id,
               e->message);
    warren_broker_free(w->b);
    w->b = NULL;
    pq_clear(w); /* their tags died with the connection; the broker redelivers them */
    w->broker_backoff = backoff_next(w->broker_backoff);
    w->broker_retry_at = warren__mono_ms() + w->broker_backoff;
}

static void broker_try_reconnect(warren_worker *w)
{
    warren_error e = {0};
    if (w->b != NULL || warren__mono_ms() < w->broker_retry_at)
        return;
    if (broker_setup(w, &e) != 0) {
        w->broker_backoff = backoff_next(w->broker_backoff);
        w->broker_retry_at = warren__mono_ms() + w->broker_backoff;
        warren_log(w->lg, WARREN_LOG_WARN, "worker %s: %s (retrying in %lld ms)", w->id, e.message,
                   (long long)w->broker_backoff);
        return;
    }
    w->broker_backoff = 0;
    w->stats.broker_reconnects++;
    warren_log(w->lg, WARREN_LOG_INFO, "worker %s: reconnected to RabbitMQ", w->id);
}

/* A PostgreSQL call failed. Connection errors start the reconnect backoff. */
static void store_failed(warren_worker *w, int rc, const warren_error *e, const char *what)
{
    w->stats.db_errors++;
    if (w->store_backoff == 0) {
        warren_log(w->lg, rc == WARREN_EDBCONN ? WARREN_LOG_WARN : WARREN_LOG_ERROR,
                   "worker %s: %s: %s; messages stay unacknowledged, retrying", w->id, what,
                   e->message);
        w->store_backoff = BACKOFF_MIN_MS;
    }
    /* Calls fail in bursts (every slot at once): the backoff grows only when
     * reconnecting fails (store_ready), not once per failed call. */
    w->store_retry_at = warren__mono_ms() + w->store_backoff;
}

/* 1 if the store may be used now (reconnecting when its backoff allows). */
static int store_ready(warren_worker *w)
{
    warren_error e = {0};
    int64_t now = warren__mono_ms();

    if (w->store_retry_at != 0 && now < w->store_retry_at)
        return 0;
    if (!warren_store_connected(w->st)) {
        if (warren_store_reconnect(w->st, &e) != 0) {
            w->store_backoff = backoff_next(w->store_backoff);
            w->store_retry_at = now + w->store_backoff;
            warren_log(w->lg, WARREN_LOG_DEBUG, "worker %s: %s", w->id, e.message);
            return 0;
        }
        warren_log(w->lg, WARREN_LOG_INFO, "worker %s: reconnected to PostgreSQL", w->id);
    }
    return 1;
}

static void store_ok(warren_worker *w)
{
    w->store_backoff = 0;
    w->store_retry_at = 0;
}

/* ------------------------------------------------------------ pending deliveries */

static void pend_clear(pend *p)
{
    warren_delivery_clear(&p->d);
    warren_run_msg_clear(&p->msg);
}

static void pq_clear(warren_worker *w)
{
    w->pq_held = 0;
    w->next_due = 0;
    while (w->pq_len > 0) {
        pend_clear(&w->pq[w->pq_head]);
        w->pq_head = (w->pq_head + 1) % w->pq_cap;
        w->pq_len--;
    }
}

static int pq_push(warren_worker *w, pend *p)
{
    if (w->pq_len == w->pq_cap) {
        size_t ncap = w->pq_cap ? w->pq_cap * 2 : 64;
        pend *nq = malloc(ncap * sizeof(*nq));
        if (nq == NULL)
            return WARREN_ENOMEM;
        for (size_t i = 0; i < w->pq_len; i++)
            nq[i] = w->pq[(w->pq_head + i) % w->pq_cap];
        free(w->pq);
        w->pq = nq;
        w->pq_cap = ncap;
        w->pq_head = 0;
    }
    w->pq[(w->pq_head + w->pq_len) % w->pq_cap] = *p;
    w->pq_len++;
    return 0;
}

static pend *pq_at(warren_worker *w, size_t i)
{
    return &w->pq[(w->pq_head + i) % w->pq_cap];
}

/* ------------------------------------------------------------ acks, dead letters */

static void ack(warren_worker *w, uint64_t tag, uint64_t gen, const char *key)
{
    warren_error e = {0};
    int rc;
    if (w->b == NULL || gen != w->gen)
        return; /* the connection it came on is gone: the broker redelivers, the claim dedupes */
    rc = warren_broker_ack_later(w->b, tag, &e); /* sent by ack_flush */
    if (rc == WARREN_EBROKERCONN)
        broker_lost(w, &e);
    else if (rc != 0)
        warren_log(w->lg, WARREN_LOG_WARN, "worker %s: ack of %s: %s", w->id, key ? key : "?",
                   e.message);
}

/* Sends the acknowledgements ack() collected (multiple-acks where the
 * settled deliveries are consecutive). Those behind a delivery still open
 * wait up to ACK_HOLD_MS for it unless all is set (the end of the run). */
static void ack_flush(warren_worker *w, int all)
{
    warren_error e = {0};
    if (w->b != NULL &&
        warren_broker_ack_flush_held(w->b, all ? 0 : ACK_HOLD_MS, &e) == WARREN_EBROKERCONN)
        broker_lost(w, &e);
}

typedef struct confirm_state {
    int status;
    int seen;
} confirm_state;

static void on_confirm(void *ud, uint64_t seq, warren_publish_status status)
{
    confirm_state *cs = ud;
    (void)seq;
    cs->status = (int)status;
    cs->seen = 1;
}

/* A message that is not a run this worker can handle: publish a copy with the
 * reason in x-warren-error to warren.dead (confirmed), then ack; if that
 * fails, reject without requeue (the ready queue dead-letters it there too). */
static void dead_letter(warren_worker *w, warren_delivery *d, const char *reason)
{
    warren_header hdrs[72];
    size_t nh = 0;
    warren_error e = {0};
    uint64_t seq = 0;
    confirm_state cs = {0, 0};
    int rc;

    w->stats.dead_lettered++;
    warren_log(w->lg, WARREN_LOG_WARN, "worker %s: dead-lettering message %s from %s: %s", w->id,
               d->message_id ? d->message_id : "(no id)", d->queue ? d->queue : "?", reason);
    for (size_t i = 0; i < d->nheaders && nh < 64; i++) {
        if (strcmp(d->headers[i].key, "x-warren-error") == 0 ||
            strncmp(d->headers[i].key, "x-death", 7) == 0 ||
            strncmp(d->headers[i].key, "x-first-death", 13) == 0 ||
            strncmp(d->headers[i].key, "x-last-death", 12) == 0 ||
            strcmp(d->headers[i].key, "x-delivery-count") == 0)
            continue;
        hdrs[nh++] = d->headers[i];
    }
    hdrs[nh++] = (warren_header){"x-warren-error", reason};
    hdrs[nh++] = (warren_header){"x-warren-dead-lettered-by", w->id};
    if (d->queue != NULL)
        hdrs[nh++] = (warren_header){"x-warren-source-queue", d->queue};
    warren_message m = {
        .exchange = WARREN_DEAD_EXCHANGE,
        .routing_key = d->routing_key ? d->routing_key : "",
        .message_id = d->message_id,
        .type = d->type,
        .timestamp = d->timestamp,
        .expiration_ms = -1,
        .headers = hdrs,
        .nheaders = nh,
        .body = d->body ? d->body : "",
        .body_len = d->body ? d->body_len : 0,
        .mandatory = 1,
    };
    rc = warren_broker_publish(w->b, &m, &seq, &e);
    if (rc == 0)
        rc = warren_broker_confirm_wait(w->b, seq, DEADLETTER_CONFIRM_MS, on_confirm, &cs, &e);
    if (rc == WARREN_EBROKERCONN) {
        broker_lost(w, &e);
        return; /* redelivered later, judged again */
    }
    if (rc == 0 && cs.seen && cs.status == WARREN_BROKER_ACKED) {
        ack(w, d->tag, w->gen, d->message_id);
        return;
    }
    warren_log(w->lg, WARREN_LOG_WARN,
               "worker %s: could not publish the dead letter (%s); rejecting the message so "
               "its queue dead-letters it",
               w->id, rc != 0 ? e.message : "not confirmed");
    memset(&e, 0, sizeof(e));
    rc = warren_broker_reject(w->b, d->tag, 0, &e);
    if (rc == WARREN_EBROKERCONN)
        broker_lost(w, &e);
}

/* A stopping worker gives a delivery it will not start back to its queue at
 * once (basic.reject with requeue), so another worker takes it now rather
 * than when this one's connection closes. */
static void give_back(warren_worker *w, pend *p)
{
    warren_error e = {0};
    int rc;
    if (w->b == NULL || p->gen != w->gen)
        return; /* that connection is gone: the broker has requeued it */
    rc = warren_broker_reject(w->b, p->d.tag, 1, &e);
    if (rc == WARREN_EBROKERCONN)
        broker_lost(w, &e);
    else if (rc == WARREN_ESTALE)
        return; /* its channel was reopened: the broker requeued it then */
    else if (rc != 0)
        warren_log(w->lg, WARREN_LOG_WARN, "worker %s: giving back %s: %s", w->id,
                   p->d.message_id ? p->d.message_id : "?", e.message);
    else
        w->stats.given_back++;
}

/* Stops consuming (a stopping worker): cancels the consumers, then gives
 * back what was received and not started. */
static void stop_consuming(warren_worker *w)
{
    warren_error e = {0};
    if (w->b != NULL && warren_broker_cancel_consumers(w->b, &e) != 0) {
        if (e.code == WARREN_EBROKERCONN || !warren_broker_connected(w->b))
            broker_lost(w, &e);
        else
            warren_log(w->lg, WARREN_LOG_WARN, "worker %s: %s", w->id, e.message);
    }
    /* give_back may lose the connection: broker_lost then empties the queue */
    for (size_t i = 0; i < w->pq_len; i++)
        give_back(w, pq_at(w, i));
    pq_clear(w);
}

/* Checks a delivery. Returns NULL if it is a run this worker can handle
 * (filling p), else the reason (written into why). */
static const char *judge(warren_worker *w, pend *p, char *why, size_t len)
{
    warren_error e = {0};
    const warren_job *j;

    if (warren_run_msg_decode(p->d.body ? p->d.body : "", p->d.body ? p->d.body_len : 0, &p->msg,
                              &e) != 0) {
        snprintf(why, len, "%s", e.message);
        return why;
    }
    if (p->d.message_id != NULL && strcmp(p->d.message_id, p->msg.run_key) != 0) {
        snprintf(why, len, "malformed run message: message_id \"%s\" differs from run_key \"%s\"",
                 p->d.message_id, p->msg.run_key);
        return why;
    }
    j = warren_config_job(w->cfg, p->msg.job);
    if (j == NULL) {
        snprintf(why, len, "unknown job \"%s\": not in this worker's config (%s)", p->msg.job,
                 w->cfg->path ? w->cfg->path : "config");
        return why;
    }
    switch (j->handler) {
    case WARREN_HANDLER_EXEC:
        if (j->exec_argv == NULL || j->exec_argv[0] == NULL) {
            snprintf(why, len, "job \"%s\" has an empty exec handler", j->name);
            return why;
        }
        break;
    case WARREN_HANDLER_SQL:
        if (j->sql == NULL || j->sql[0] == '\0') {
            snprintf(why, len, "job \"%s\" has an empty sql handler", j->name);
            return why;
        }
        break;
    case WARREN_HANDLER_C:
        if (find_reg(w, j->c_handler) == NULL) {
            snprintf(why, len,
                     "job \"%s\": in-process handler \"%s\" is not registered in this worker",
                     j->name, j->c_handler ? j->c_handler : "");
            return why;
        }
        break;
    default:
        snprintf(why, len, "job \"%s\" has no handler in this worker's config", j->name);
        return why;
    }
    p->job = j;
    return NULL;
}

/* ------------------------------------------------------------ handlers */

static char *fmt_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *fmt_error(const char *fmt, ...)
{
    char buf[ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    return strdup(buf);
}

/* Finds argv0 on PATH (in the parent: the child only calls async-signal-safe
 * functions, since other threads may hold locks). New string. */
static char *resolve_path(const char *argv0)
{
    const char *path = getenv("PATH");
    if (strchr(argv0, '/') != NULL || path == NULL)
        return strdup(argv0);
    while (*path) {
        const char *end = strchr(path, ':');
        size_t n = end ? (size_t)(end - path) : strlen(path);
        char *cand = malloc(n + strlen(argv0) + 3);
        if (cand == NULL)
            return NULL;
        if (n == 0)
            snprintf(cand, n + strlen(argv0) + 3, "./%s", argv0);
        else
            snprintf(cand, n + strlen(argv0) + 2, "%.*s/%s", (int)n, path, argv0);
        if (access(cand, X_OK) == 0)
            return cand;
        free(cand);
        if (end == NULL)
            break;
        path = end + 1;
    }
    return strdup(argv0);
}

static int env_skip(const char *e)
{
    static const char *const ours[] = {"WARREN_RUN_KEY=", "WARREN_JOB=", "WARREN_SCHEDULED_AT=",
                                       "WARREN_ATTEMPT=", "WARREN_DUE_AT="};
    for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
        if (strncmp(e, ours[i], strlen(ours[i])) == 0)
            return 1;
    return 0;
}

static int start_exec(warren_worker *w, slot *s, const warren_run_msg *msg, warren_error *err)
{
    const warren_job *j = s->job;
    char *argv_sh[4];
    char **argv = j->exec_argv;
    char *file = NULL;
    char **envp = NULL;
    size_t nenv = 0, k = 0;
    char sched[WARREN_TIME_BUF], due[WARREN_TIME_BUF];
    char *own[5] = {0};
    FILE *in = NULL;
    int outp[2] = {-1, -1};
    pid_t pid;
    int rc = 0;

    (void)w;
    if (j->exec_shell) {
        argv_sh[0] = "/bin/sh";
        argv_sh[1] = "-c";
        argv_sh[2] = j->exec_argv[0];
        argv_sh[3] = NULL;
        argv = argv_sh;
    }
    file = resolve_path(argv[0]);
    while (environ[nenv] != NULL)
        nenv++;
    envp = calloc(nenv + 6, sizeof(char *));
    warren_time_format(s->claim.scheduled_at, sched, sizeof(sched));
    warren_time_format_ms(msg->due_at, due, sizeof(due));
    own[0] = fmt_error("WARREN_RUN_KEY=%s", s->run_key);
    own[1] = fmt_error("WARREN_JOB=%s", j->name);
    own[2] = fmt_error("WARREN_SCHEDULED_AT=%s", sched);
    own[3] = fmt_error("WARREN_ATTEMPT=%d", s->claim.attempt);
    own[4] = fmt_error("WARREN_DUE_AT=%s", due);
    if (own[0] == NULL || own[1] == NULL || own[2] == NULL || own[3] == NULL || own[4] == NULL ||
        file == NULL || envp == NULL) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory starting a handler");
        goto done;
    }
    for (size_t i = 0; i < nenv; i++)
        if (!env_skip(environ[i]))
            envp[k++] = environ[i];
    for (int i = 0; i < 5; i++)
        envp[k++] = own[i];
    envp[k] = NULL;
    /* The payload goes through an unlinked temporary file: no pipe to feed. */
    if ((in = tmpfile()) == NULL ||
        fputs(s->claim.payload_json ? s->claim.payload_json : "{}", in) == EOF || fflush(in) != 0 ||
        fseek(in, 0, SEEK_SET) != 0) {
        rc = warren_error_set(err, WARREN_ESYS, "cannot write the payload file: %s",
                              strerror(errno));
        goto done;
    }
    if (pipe(outp) != 0) {
        rc = warren_error_set(err, WARREN_ESYS, "pipe: %s", strerror(errno));
        goto done;
    }
    pid = fork();
    if (pid < 0) {
        rc = warren_error_set(err, WARREN_ESYS, "fork: %s", strerror(errno));
        goto done;
    }
    if (pid == 0) {
        /* Child: async-signal-safe calls only. */
        sigset_t none;
        struct sigaction dfl;
        setpgid(0, 0);
        memset(&dfl, 0, sizeof(dfl));
        dfl.sa_handler = SIG_DFL;
        for (int sig = 1; sig < 32; sig++)
            if (sig != SIGKILL && sig != SIGSTOP)
                sigaction(sig, &dfl, NULL);
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        if (dup2(fileno(in), 0) < 0 || dup2(outp[1], 1) < 0 || dup2(outp[1], 2) < 0)
            _exit(126);
        closefrom(3);
        execve(file, argv, envp);
        _exit(127);
    }
    setpgid(pid, pid); /* also in the parent: no window where a kill misses the group */
    close(outp[1]);
    outp[1] = -1;
    fcntl(outp[0], F_SETFL, fcntl(outp[0], F_GETFL) | O_NONBLOCK);
    fcntl(outp[0], F_SETFD, FD_CLOEXEC);
    s->pid = pid;
    s->out_fd = outp[0];
    outp[0] = -1;
    s->tail_len = 0;
    s->tail[0] = '\0';
done:
    if (in != NULL)
        fclose(in);
    if (outp[0] >= 0)
        close(outp[0]);
    if (outp[1] >= 0)
        close(outp[1]);
    for (int i = 0; i < 5; i++)
        free(own[i]);
    free(envp);
    free(file);
    return rc;
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
    int nwaking;         /* signalled or started, not yet running: at most one */
    int wake_fd;         /* the loop's wake pipe (a duplicate of its write end) */
    int loop_waiting;    /* the loop sleeps in wait_wake: write to wake_fd */
    uint64_t ndone;      /* handlers finished */
    uint64_t ndone_seen; /* ... as of the loop's last wait_wake */
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

/* Waits up to ms for a handler thread to finish (no free slot: the broker
 * cannot send anything, so waiting on it would only add latency). */
static void wait_wake(warren_worker *w, int ms)
{
    char buf[256];
    struct pollfd p = {w->wake[0], POLLIN, 0};
    hpool *hp = w->hp;
    if (hp != NULL) {
        /* Handler threads write to the pipe only while loop_waiting is set;
         * what finished before that is seen through ndone. */
        pthread_mutex_lock(&hp->mu);
        if (hp->ndone != hp->ndone_seen) {
            hp->ndone_seen = hp->ndone;
            pthread_mutex_unlock(&hp->mu);
            return;
        }
        hp->loop_waiting = 1;
        pthread_mutex_unlock(&hp->mu);
    }
    if (poll(&p, 1, ms) > 0)
        while (read(w->wake[0], buf, sizeof(buf)) > 0)
            ;
    if (hp != NULL) {
        pthread_mutex_lock(&hp->mu);
        hp->loop_waiting = 0;
        hp->ndone_seen = hp->ndone;
        pthread_mutex_unlock(&hp->mu);
    }
}

static void c_run(warren_handler_ctx *c)
{
    c->outcome = c->fn(c, c->ud);
}

static void sql_run(warren_handler_ctx *c)
{
    warren_error e = {0};
    warren_store *st = pool_get(c->hp, c->db_url, &e);

    if (st == NULL) {
        c->sql_rc = e.code ? e.code : WARREN_EDBCONN;
        snprintf(c->error, sizeof(c->error), "%s", e.message);
    } else {
        c->sql_rc = warren_store_complete_sql(st, c->run_key, c->attempt, c->scheduled_at,
                                              c->payload, c->sql, c->timeout_ms, c->sql_tag,
                                              &c->lost, &c->sql_recorded, &c->sql_stmt_error, &e);
        if (c->sql_rc != 0)
            snprintf(c->error, sizeof(c->error), "%s", e.message);
        pool_put(c->hp, st);
    }
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
    if (hp->head == NULL || hp->nwaking > 0)
        return 0;
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
    int prc = pthread_create(&th, &at, hpool_main, hp);
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
        while (hp->head == NULL && !hp->quit) {
            hp->nidle++;
            pthread_cond_wait(&hp->cv, &hp->mu);
            hp->nidle--;
            if (hp->nwaking > 0)
                hp->nwaking--;
        }
        if (hp->head == NULL)
            break; /* quit */
        warren_handler_ctx *c = hp->head;
        hp->head = c->next;
        if (hp->head == NULL)
            hp->tail = NULL;
        hp->nqueued--;
        if (hp->quit && atomic_load_explicit(&c->done, memory_order_acquire) == 2) {
            /* left behind before it started: the worker is gone, do not run it */
            ctx_free(c);
            continue;
        }
        hp->nbusy++;
        hpool_wake_one(hp); /* more queued: the next thread (failure: a busy one takes it) */
        pthread_mutex_unlock(&hp->mu);
        if (c->kind == KIND_SQL)
            sql_run(c);
        else
            c_run(c);
        /* c belongs to the loop from here on, unless the loop abandoned it
         * (done = 2: it stopped waiting for this handler). */
        if (atomic_exchange_explicit(&c->done, 1, memory_order_acq_rel) == 2)
            ctx_free(c);
        pthread_mutex_lock(&hp->mu);
        hp->ndone++;
        if (hp->loop_waiting && hp->quit != 2) {
            /* Only when the loop sleeps in wait_wake (otherwise it polls the
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

static hpool *hpool_new(int wake_fd, int max, warren_error *err)
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
    return hp;
}

/* Queues c for a pool thread (hpool_wake_one). Fails only when there is no
 * thread at all and none can be started. */
static int hpool_submit(hpool *hp, warren_handler_ctx *c, warren_error *err)
{
    int rc = 0;
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
static int hpool_free(hpool *hp, int wait_ms)
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

static int start_thread(warren_worker *w, slot *s, warren_error *err)
{
    warren_handler_ctx *c = calloc(1, sizeof(*c));
    char key[WARREN_RUN_KEY_MAX];
    int prc;

    if (c == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    snprintf(key, sizeof(key), "%s", s->run_key);
    c->run_key = strdup(key);
    c->job = strdup(s->job->name);
    c->payload = strdup(s->claim.payload_json ? s->claim.payload_json : "{}");
    c->scheduled_at = s->claim.scheduled_at;
    c->attempt = s->claim.attempt;
    c->timeout_ms = s->job->timeout_ms;
    c->hp = w->hp;
    c->kind = s->kind;
    atomic_init(&c->stop, 0);
    atomic_init(&c->done, 0);
    atomic_init(&c->lost, 0);
    if (s->kind == KIND_SQL) {
        /* A name no other session has: the loop cancels the statement by it
         * (warren_store_cancel_tagged) if another worker takes the run. */
        uint64_t r = 0;
        if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
            r = (uint64_t)warren__mono_ms() * 0x9e3779b97f4a7c15ULL ^ (uint64_t)getpid() ^
                (uint64_t)(uintptr_t)c;
        snprintf(c->sql_tag, sizeof(c->sql_tag), "warren sql %016llx", (unsigned long long)r);
        c->sql = strdup(s->job->sql);
        c->db_url = strdup(w->db_url ? w->db_url : "");
    } else {
        const handler_reg *r = find_reg(w, s->job->c_handler);
        c->fn = r->fn;
        c->ud = r->ud;
    }
    if (c->run_key == NULL || c->job == NULL || c->payload == NULL ||
        (s->kind == KIND_SQL && (c->sql == NULL || c->db_url == NULL))) {
        ctx_free(c);
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    if ((prc = hpool_submit(w->hp, c, err)) != 0) {
        ctx_free(c);
        return prc;
    }
    s->has_thread = 1;
    s->ctx = c;
    return 0;
}

static void slot_reset(slot *s)
{
    warren_claim_clear(&s->claim);
    free(s->error);
    if (s->out_fd >= 0)
        close(s->out_fd);
    memset(s, 0, sizeof(*s));
    s->out_fd = -1;
    s->state = SLOT_FREE;
}

/* A used slot becomes free again. */
static void slot_release(warren_worker *w, slot *s)
{
    slot_reset(s);
    w->free_idx[w->nfree++] = (int)(s - w->slots);
}

static int64_t kill_grace(const warren_worker *w)
{
    int64_t g = w->cfg->worker.heartbeat_margin_ms / 2;
    if (g < 200)
        g = 200;
    return g > KILL_GRACE_MAX_MS ? KILL_GRACE_MAX_MS : g;
}

/* Starts a claimed run in slot s. On failure the run is completed as retry. */
static void slot_start(warren_worker *w, slot *s, pend *p, warren_claim *cl, int64_t claimed_mono)
{
    warren_error e = {0};
    int rc;

    s->state = SLOT_RUNNING;
    s->tag = p->d.tag;
    s->gen = p->gen;
    snprintf(s->run_key, sizeof(s->run_key), "%s", p->msg.run_key);
    s->job = p->job;
    s->claim = *cl;
    memset(cl, 0, sizeof(*cl));
    {
        /* Handlers get the payload compact, as in the message body. */
        char *compact = NULL;
        if (s->claim.payload_json != NULL &&
            warren_json_object_check(s->claim.payload_json, &compact, NULL) == 0) {
            free(s->claim.payload_json);
            s->claim.payload_json = compact;
        }
    }
    s->lease_ms = (int64_t)s->claim.lease_seconds * 1000;
    if (s->job->lease_ms > 0 && s->job->lease_ms < s->lease_ms)
        s->lease_ms = s->job->lease_ms;
    s->hb_every_ms = s->lease_ms / 3 > 0 ? s->lease_ms / 3 : 1;
    s->hb_margin_ms = w->cfg->worker.heartbeat_margin_ms;
    if (s->hb_margin_ms > s->lease_ms / 3)
        s->hb_margin_ms = s->lease_ms / 3; /* short leases: keep two heartbeats' worth of room */
    s->started_mono = claimed_mono;
    s->received_mono = p->received_mono;
    s->msg_due_at = p->msg.due_at;
    s->last_hb_ok = claimed_mono;
    s->next_hb = claimed_mono + s->hb_every_ms;
    s->timeout_at = claimed_mono + (s->job->timeout_ms > 0 ? s->job->timeout_ms : INT32_MAX);
    s->out_fd = -1;
    switch (s->job->handler) {
    case WARREN_HANDLER_EXEC:
        s->kind = KIND_EXEC;
        rc = start_exec(w, s, &p->msg, &e);
        break;
    case WARREN_HANDLER_SQL:
        s->kind = KIND_SQL;
        rc = start_thread(w, s, &e);
        break;
    default:
        s->kind = KIND_C;
        rc = start_thread(w, s, &e);
        break;
    }
    w->stats.started++;
    warren_log(w->lg, WARREN_LOG_DEBUG, "worker %s: started %s attempt %d", w->id, s->run_key,
               s->claim.attempt);
    if (rc != 0) {
        warren_log(w->lg, WARREN_LOG_ERROR, "worker %s: %s: %s", w->id, s->run_key, e.message);
        s->state = SLOT_DONE;
        s->outcome = WARREN_OUTCOME_RETRY;
        s->error = strdup(e.message);
    }
}

/* An sql handler whose lease was lost (a heartbeat refused, or none
 * succeeded for lease - margin): its transaction must not commit, and
 * cancel_lost_sql cancels its statement (the kill of the other kinds) as soon
 * as this worker's connection works. */
static void sql_lost(slot *s)
{
    if (s->kind != KIND_SQL || s->ctx == NULL)
        return;
    atomic_store(&s->ctx->lost, 1);
    s->next_cancel = 0; /* at once */
}

static void stop_slot(warren_worker *w, slot *s, int reason, int64_t now)
{
    if (s->stop_reason != STOP_NONE || s->state != SLOT_RUNNING)
        return;
    if (reason == STOP_LOST)
        sql_lost(s);
    s->stop_reason = reason;
    if (reason == STOP_LOST)
        w->stats.lease_lost++;
    else if (reason == STOP_TIMEOUT)
        w->stats.timeouts++;
    if (s->kind == KIND_EXEC && s->pid > 0) {
        kill(-s->pid, SIGTERM);
        s->kill_at = now + kill_grace(w);
    } else if (s->ctx != NULL) {
        atomic_store_explicit(&s->ctx->stop, 1, memory_order_release);
        if (reason == STOP_TIMEOUT && s->kind == KIND_C)
            s->kill_at = now + kill_grace(w); /* then it is left behind: poll_slot */
    }
}

static void read_output(warren_worker *w, slot *s)
{
    char buf[4096];
    ssize_t n;
    (void)w;
    if (s->out_fd < 0)
        return;
    while ((n = read(s->out_fd, buf, sizeof(buf))) > 0) {
        size_t m = (size_t)n;
        if (m >= TAIL_MAX) {
            memcpy(s->tail, buf + m - TAIL_MAX, TAIL_MAX);
            s->tail_len = TAIL_MAX;
        } else {
            if (s->tail_len + m > TAIL_MAX) {
                size_t drop = s->tail_len + m - TAIL_MAX;
                memmove(s->tail, s->tail + drop, s->tail_len - drop);
                s->tail_len -= drop;
            }
            memcpy(s->tail + s->tail_len, buf, m);
            s->tail_len += m;
        }
        s->tail[s->tail_len] = '\0';
    }
    if (n == 0) {
        close(s->out_fd);
        s->out_fd = -1;
    }
}

/* The last line(s) of the handler's output, trimmed, for error texts. */
static const char *tail_text(slot *s)
{
    char *t = s->tail;
    while (s->tail_len > 0 && (t[s->tail_len - 1] == '\n' || t[s->tail_len - 1] == ' '))
        t[--s->tail_len] = '\0';
    for (size_t i = 0; i < s->tail_len; i++)
        if (t[i] == '\0')
            t[i] = ' ';
    return t;
}

/* An sql handler's thread is done (committed or rolled back): no heartbeat,
 * its run is recorded or not already. */
static int sql_finished(const slot *s)
{
    return s->kind == KIND_SQL && s->ctx != NULL &&
           atomic_load_explicit(&s->ctx->done, memory_order_acquire) != 0;
}

/* Cancels the statement of an sql handler whose lease was lost, again every
 * heartbeat interval while it runs (a cancel that arrives between two
 * statements of the transaction is ignored by the server). */
static void cancel_lost_sql(warren_worker *w, slot *s, int64_t now)
{
    warren_error e = {0};
    int sent = 0, rc;
    if (s->kind != KIND_SQL || s->stop_reason != STOP_LOST || s->ctx == NULL || sql_finished(s) ||
        now < s->next_cancel || !store_ready(w))
        return;
    s->next_cancel = now + s->hb_every_ms;
    if ((rc = warren_store_cancel_tagged(w->st, s->ctx->sql_tag, &sent, &e)) != 0) {
        store_failed(w, rc, &e, "cancel an sql handler");
        return;
    }
    store_ok(w);
    if (sent && s->cancels_sent++ == 0)
        warren_log(w->lg, WARREN_LOG_WARN,
                   "worker %s: %s attempt %d: cancelled the sql handler's statement (the lease "
                   "was lost); it rolls back",
                   w->id, s->run_key, s->claim.attempt);
}

/* Polls one running slot: lease and timeout checks first (a handler whose
 * lease ran out while this process was stopped must not be completed, even
 * if it finished meanwhile), then whether it finished. */
static void poll_slot(warren_worker *w, slot *s, int64_t now)
{
    if (s->state != SLOT_RUNNING)
        return;
    /* Every kind, sql handlers too (their transaction is marked lost: it
     * rolls back and is not completed). The timeout of an sql handler is the
     * statement_timeout PostgreSQL enforces. */
    if (now >= s->last_hb_ok + s->lease_ms - s->hb_margin_ms && s->stop_reason != STOP_LOST) {
        if (s->stop_reason == STOP_NONE)
            warren_log(w->lg, WARREN_LOG_WARN,
                       "worker %s: %s attempt %d: no successful heartbeat for %lld ms (lease "
                       "%lld ms): stopping the handler, not completing",
                       w->id, s->run_key, s->claim.attempt, (long long)(now - s->last_hb_ok),
                       (long long)s->lease_ms);
        if (s->stop_reason != STOP_NONE) {
            s->stop_reason = STOP_LOST; /* already stopping: now it must not complete */
            sql_lost(s);
        } else {
            stop_slot(w, s, STOP_LOST, now);
        }
    } else if (s->kind != KIND_SQL && now >= s->timeout_at && s->stop_reason == STOP_NONE) {
        warren_log(w->lg, WARREN_LOG_WARN, "worker %s: %s attempt %d: timed out after %lld ms",
                   w->id, s->run_key, s->claim.attempt, (long long)s->job->timeout_ms);
        stop_slot(w, s, STOP_TIMEOUT, now);
    }
    cancel_lost_sql(w, s, now);
    if (s->kind == KIND_EXEC) {
        int status;
        pid_t r;
        read_output(w, s);
        if (s->kill_at != 0 && now >= s->kill_at) {
            kill(-s->pid, SIGKILL);
            s->kill_at = 0;
        }
        r = waitpid(s->pid, &status, WNOHANG);
        if (r < 0 && errno == ECHILD) {
            /* Reaped by someone else (SIGCHLD ignored by the embedding program):
             * the exit status is lost; count it as a retryable failure. */
            status = 255 << 8;
            r = s->pid;
        }
        if (r != s->pid)
            return;
        read_output(w, s);
        kill(-s->pid, SIGKILL); /* stragglers left in its process group */
        s->pid = 0;
        s->state = SLOT_DONE;
        if (s->stop_reason == STOP_TIMEOUT) {
            s->outcome = WARREN_OUTCOME_RETRY;
            s->error =
                fmt_error("timed out after %lld ms (process group killed)%s%s",
                          (long long)s->job->timeout_ms, s->tail_len ? ": " : "", tail_text(s));
        } else if (s->stop_reason == STOP_SHUTDOWN) {
            s->outcome = WARREN_OUTCOME_RETRY;
            s->error = fmt_error("stopped: worker %s shutting down", w->id);
        } else if (WIFEXITED(status)) {
            int code = WEXITSTATUS(status);
            s->outcome = code == 0                  ? WARREN_OUTCOME_SUCCEEDED
                         : code == 64 || code == 65 ? WARREN_OUTCOME_FAILED
                                                    : WARREN_OUTCOME_RETRY;
            if (code != 0)
                s->error = fmt_error("exit status %d%s%s%s", code,
                                     code == 127 ? " (command not found?)" : "",
                                     s->tail_len ? ": " : "", tail_text(s));
        } else {
            int sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
            s->outcome = WARREN_OUTCOME_RETRY;
            s->error = fmt_error("killed by signal %d (%s)%s%s", sig, strsignal(sig),
                                 s->tail_len ? ": " : "", tail_text(s));
        }
        return;
    }
    /* threads */
    if (s->kind == KIND_C && s->stop_reason == STOP_TIMEOUT && s->kill_at != 0 &&
        now >= s->kill_at && s->ctx != NULL &&
        atomic_exchange_explicit(&s->ctx->done, 2, memory_order_acq_rel) == 0) {
        /* Timed out and ignores should_stop: a thread cannot be killed, so
         * leave it (its pool thread frees the context if the handler ever
         * returns) and complete the run as a retry. Heartbeating it on would
         * hold the run forever. */
        s->ctx = NULL;
        s->kill_at = 0;
        s->has_thread = 0;
        s->state = SLOT_DONE;
        s->outcome = WARREN_OUTCOME_RETRY;
        s->error = fmt_error("timed out after %lld ms and did not stop within %lld ms; its thread "
                             "was left behind",
                             (long long)s->job->timeout_ms, (long long)kill_grace(w));
        warren_log(w->lg, WARREN_LOG_WARN,
                   "worker %s: %s attempt %d: handler ignores should_stop after its timeout; "
                   "left behind, completing as retry",
                   w->id, s->run_key, s->claim.attempt);
        return;
    }
    if (s->ctx == NULL || !atomic_load_explicit(&s->ctx->done, memory_order_acquire))
        return;
    s->has_thread = 0;
    s->state = SLOT_DONE;
    if (s->kind == KIND_C) {
        s->outcome = s->ctx->outcome;
        if (s->outcome != WARREN_OUTCOME_SUCCEEDED && s->outcome != WARREN_OUTCOME_RETRY &&
            s->outcome != WARREN_OUTCOME_FAILED)
            s->outcome = WARREN_OUTCOME_RETRY;
        if (s->stop_reason == STOP_TIMEOUT) {
            s->outcome = WARREN_OUTCOME_RETRY;
            s->error = fmt_error("timed out after %lld ms", (long long)s->job->timeout_ms);
        } else if (s->stop_reason == STOP_SHUTDOWN && s->outcome == WARREN_OUTCOME_RETRY) {
            /* a verdict the handler gave (succeeded, failed) stands */
            s->error = fmt_error("stopped: worker %s shutting down", w->id);
        } else if (s->outcome != WARREN_OUTCOME_SUCCEEDED) {
            s->error = strdup(s->ctx->has_error ? s->ctx->error : "handler reported failure");
        }
        ctx_free(s->ctx);
        s->ctx = NULL;
    }
    /* sql contexts are consumed by finish_sql */
}

/* ------------------------------------------------------------ completion */

static const char *outcome_name(warren_outcome o)
{
    return o == WARREN_OUTCOME_SUCCEEDED ? "succeeded"
           : o == WARREN_OUTCOME_FAILED  ? "failed"
                                         : "retry";
}

static void report(warren_worker *w, slot *s)
{
    warren_run_times t;
    warren_error e = {0};
    if (w->report_fn == NULL)
        return;
    if (warren_store_run_times(w->st, s->run_key, &t, &e) != 0)
        memset(&t, 0, sizeof(t));
    warren_run_report r = {
        .run_key = s->run_key,
        .job = s->job->name,
        .attempt = s->claim.attempt,
        .outcome = outcome_name(s->outcome),
        .state = t.state[0] ? t.state : "?",
        .error = s->error,
        .scheduled_at = s->claim.scheduled_at,
        /* The due time the message was released for: after a retry the
         * row already holds the next attempt's due time. */
        .due_at = s->msg_due_at != 0 ? s->msg_due_at : t.due_at,
        .published_at = t.published_at,
        /* Arrival on the database's clock: the claim's time minus the
         * monotonic time between receiving the delivery and sending the
         * claim (a run released early arrived before its due time). */
        .released_at = t.started_at != 0 && s->received_mono != 0
                           ? t.started_at - (s->started_mono - s->received_mono) * 1000
                           : 0,
        .started_at = t.started_at,
        .finished_at = t.finished_at,
    };
    w->report_fn(w->report_ud, &r);
}

static void count_outcome(warren_worker *w, warren_outcome o)
{
    if (o == WARREN_OUTCOME_SUCCEEDED)
        w->stats.succeeded++;
    else if (o == WARREN_OUTCOME_FAILED)
        w->stats.failed++;
    else
        w->stats.retried++;
}

/* After a completion committed (recorded or stale): ack and free the slot. */
static void slot_finish(warren_worker *w, slot *s, int recorded)
{
    if (recorded) {
        count_outcome(w, s->outcome);
        if (s->outcome == WARREN_OUTCOME_SUCCEEDED)
            warren_log(w->lg, WARREN_LOG_DEBUG, "worker %s: %s attempt %d succeeded", w->id,
                       s->run_key, s->claim.attempt);
        else
            warren_log(w->lg, WARREN_LOG_INFO, "worker %s: %s attempt %d: %s: %s", w->id,
                       s->run_key, s->claim.attempt, outcome_name(s->outcome),
                       s->error ? s->error : "");
    } else {
        w->stats.stale++;
        warren_log(w->lg, WARREN_LOG_WARN,
                   "worker %s: %s attempt %d: completion rejected (a newer attempt holds the "
                   "run); acknowledging",
                   w->id, s->run_key, s->claim.attempt);
    }
    ack(w, s->tag, s->gen, s->run_key);
    if (recorded)
        report(w, s);
    slot_release(w, s);
}

/* sql handler finished its transaction. */
static void finish_sql(warren_worker *w, slot *s, int64_t now)
{
    warren_handler_ctx *c = s->ctx;
    if (s->stop_reason == STOP_LOST && !c->sql_recorded) {
        /* rolled back (or never committed): complete_done acks it, no completion */
        ctx_free(c);
        s->ctx = NULL;
        return;
    }
    if (c->sql_rc != 0) {
        /* Connection trouble: nothing committed (or, if the commit's answer
         * was lost, the next try finds the run finished and is told stale). */
        warren_error e = {0};
        warren_error_set(&e, c->sql_rc, "%s", c->error);
        w->stats.db_errors++;
        warren_log(w->lg, WARREN_LOG_WARN, "worker %s: sql handler of %s: %s; retrying", w->id,
                   s->run_key, c->error);
        ctx_free(c);
        s->ctx = NULL;
        s->state = SLOT_RUNNING;
        s->complete_sql_retry = 1;
        s->sql_backoff = backoff_next(s->sql_backoff);
        s->retry_at = now + s->sql_backoff;
        return;
    }
    if (c->sql_stmt_error != NULL) {
        s->outcome = WARREN_OUTCOME_RETRY;
        s->error = c->sql_stmt_error;
        c->sql_stmt_error = NULL;
        ctx_free(c);
        s->ctx = NULL;
        return; /* stays SLOT_DONE: completed as retry through the batch path */
    }
    s->outcome = WARREN_OUTCOME_SUCCEEDED;
    int recorded = c->sql_recorded;
    ctx_free(c);
    s->ctx = NULL;
    slot_finish(w, s, recorded);
}

static int cmp_slot_key(const void *a, const void *b)
{
    const slot *const *x = a, *const *y = b;
    return strcmp((*x)->run_key, (*y)->run_key);
}

/* Completes every finished slot in one batch; lost-lease slots are only acked. */
static void complete_done(warren_worker *w, int64_t now)
{
    size_t n = 0;
    int cap = w->concurrency;
    warren_completion *c = NULL;
    int *rec = NULL;
    slot **which = NULL;
    warren_error e = {0};
    int rc;

    for (int i = 0; i < cap; i++) {
        slot *s = &w->slots[i];
        if (s->state == SLOT_DONE && s->kind == KIND_SQL && s->ctx != NULL)
            finish_sql(w, s, now);
        if (s->state == SLOT_DONE && s->stop_reason == STOP_LOST) {
            /* Not ours any more: no completion. The run is safe in the
             * database (the new holder or the reaper moves it on). */
            warren_log(w->lg, WARREN_LOG_WARN,
                       "worker %s: %s attempt %d: handler stopped after the lease was lost; not "
                       "completing",
                       w->id, s->run_key, s->claim.attempt);
            ack(w, s->tag, s->gen, s->run_key);
            slot_release(w, s);
        }
        if (s->state == SLOT_DONE)
            n++;
    }
    if (n == 0 || !store_ready(w))
        return;
    c = calloc(n, sizeof(*c));
    rec = calloc(n, sizeof(*rec));
    which = calloc(n, sizeof(*which));
    if (c == NULL || rec == NULL || which == NULL)
        goto out;
    n = 0;
    for (int i = 0; i < cap; i++)
        if (w->slots[i].state == SLOT_DONE)
            which[n++] = &w->slots[i];
    /* Key order, as claims: no deadlock with another batch over the same rows. */
    qsort(which, n, sizeof(*which), cmp_slot_key);
    for (size_t i = 0; i < n; i++) {
        slot *s = which[i];
        if (s->error != NULL)
            warren__utf8_clean(s->error); /* output cut anywhere, or not text at all */
        c[i].run_key = s->run_key;
        c[i].attempt = s->claim.attempt;
        c[i].outcome = outcome_name(s->outcome);
        c[i].error = s->error;
    }
    rc = warren_store_complete_batch(w->st, c, n, rec, &e);
    if (rc != 0 && rc != WARREN_EDBCONN) {
        /* One bad completion must not hold up the others: one by one. A
         * completion PostgreSQL refuses for its error text is recorded with
         * a note instead, or the slot would be retried forever. */
        for (size_t i = 0; i < n; i++) {
            warren_error e1 = {0};
            int r1 = warren_store_complete_batch(w->st, &c[i], 1, &rec[i], &e1);
            if (r1 != 0 && r1 != WARREN_EDBCONN && c[i].error != NULL) {
                char *note =
                    fmt_error("(the handler's error could not be recorded: %s)", e1.message);
                if (note != NULL) {
                    warren__utf8_clean(note);
                    free(which[i]->error);
                    which[i]->error = note;
                    c[i].error = note;
                    r1 = warren_store_complete_batch(w->st, &c[i], 1, &rec[i], &e1);
                }
            }
            if (r1 != 0) {
                store_failed(w, r1, &e1, "complete");
                if (r1 == WARREN_EDBCONN) {
                    /* not tried: nothing of these may be acknowledged */
                    for (size_t j = i; j < n; j++)
                        which[j] = NULL;
                    break;
                }
                which[i] = NULL;
            }
        }
        for (size_t i = 0; i < n; i++)
            if (which[i] != NULL && which[i]->state == SLOT_DONE)
                slot_finish(w, which[i], rec[i]);
        goto out;
    }
    if (rc != 0) {
        store_failed(w, rc, &e, "complete");
        goto out; /* nothing acked: retried with backoff */
    }
    store_ok(w);
    for (size_t i = 0; i < n; i++)
        slot_finish(w, which[i], rec[i]);
out:
    free(c);
    free(rec);
    free(which);
}

/* ------------------------------------------------------------ heartbeats */

static void heartbeat_due(warren_worker *w, int64_t now)
{
    size_t n = 0;
    const char **keys = NULL;
    int *att = NULL, *held = NULL;
    slot **which = NULL;
    warren_error e = {0};
    int rc;

    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        if (s->state == SLOT_RUNNING && s->stop_reason != STOP_LOST && now >= s->next_hb &&
            !sql_finished(s))
            n++;
    }
    if (n == 0 || !store_ready(w))
        return;
    keys = calloc(n, sizeof(*keys));
    att = calloc(n, sizeof(*att));
    held = calloc(n, sizeof(*held));
    which = calloc(n, sizeof(*which));
    if (keys == NULL || att == NULL || held == NULL || which == NULL)
        goto out;
    n = 0;
    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        if (s->state == SLOT_RUNNING && s->stop_reason != STOP_LOST && now >= s->next_hb &&
            !sql_finished(s))
            which[n++] = s;
    }
    qsort(which, n, sizeof(*which), cmp_slot_key); /* key order, as claims */
    for (size_t i = 0; i < n; i++) {
        keys[i] = which[i]->run_key;
        att[i] = which[i]->claim.attempt;
    }
    int64_t sent = warren__mono_ms();
    rc = warren_store_heartbeat_batch(w->st, keys, att, n, held, &e);
    if (rc != 0) {
        store_failed(w, rc, &e, "heartbeat");
        for (size_t i = 0; i < n; i++)
            which[i]->next_hb = now + BACKOFF_MIN_MS * 5; /* try again soon; the deadline rules */
        goto out;
    }
    store_ok(w);
    for (size_t i = 0; i < n; i++) {
        slot *s = which[i];
        if (held[i]) {
            s->last_hb_ok = sent;
            s->next_hb = sent + s->hb_every_ms;
        } else {
            warren_log(w->lg, WARREN_LOG_WARN,
                       "worker %s: %s attempt %d: heartbeat refused (the lease was lost): "
                       "stopping the handler, not completing",
                       w->id, s->run_key, s->claim.attempt);
            if (s->stop_reason != STOP_NONE) {
                s->stop_reason = STOP_LOST;
                sql_lost(s);
            } else {
                stop_slot(w, s, STOP_LOST, now);
            }
        }
    }
out:
    free(keys);
    free(att);
    free(held);
    free(which);
}

/* ------------------------------------------------------------ claims */

static int cmp_pend_key(const void *a, const void *b)
{
    const pend *const *x = a, *const *y = b;
    return strcmp((*x)->msg.run_key, (*y)->msg.run_key);
}

static int free_slots(const warren_worker *w)
{
    return w->nfree;
}

static slot *a_free_slot(warren_worker *w)
{
    return w->nfree > 0 ? &w->slots[w->free_idx[--w->nfree]] : NULL;
}

/* Claims keys[0..n) into cl (zeroed). Deliveries whose last claim's answer
 * was lost are first taken back if they run under this worker's lease (a new
 * attempt, warren.reclaim_many); the rest go through warren.claim_many. */
static int claim_batch(warren_worker *w, pend **batch, const char **keys, size_t n,
                       warren_claim *cl, warren_error *e)
{
    const char **rest = NULL;
    size_t *pos = NULL, m = 0;
    warren_claim *c2 = NULL;
    int rc;

    int64_t oldest = INT64_MAX, within_ms;
    for (size_t i = 0; i < n; i++) {
        /* a second delivery of a run a slot is running: it is not lost */
        for (int k = 0; batch[i]->answer_lost && k < w->concurrency; k++)
            if (w->slots[k].state != SLOT_FREE &&
                strcmp(w->slots[k].run_key, batch[i]->msg.run_key) == 0)
                batch[i]->answer_lost = 0;
        m += batch[i]->answer_lost != 0;
        if (batch[i]->answer_lost && batch[i]->answer_lost_mono < oldest)
            oldest = batch[i]->answer_lost_mono;
    }
    if (m == 0)
        return warren_store_claim_batch(w->st, keys, n, w->id, cl, e);
    /* Since the oldest of those claims was sent, and 2 s for the way there. */
    within_ms = warren__mono_ms() - oldest + 2000;
    rest = calloc(n, sizeof(*rest));
    pos = calloc(n, sizeof(*pos));
    c2 = calloc(n, sizeof(*c2));
    if (rest == NULL || pos == NULL || c2 == NULL) {
        rc = warren_error_set(e, WARREN_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        memset(&cl[i], 0, sizeof(cl[i]));
    for (size_t pass = 0; pass < 2; pass++) {
        m = 0;
        for (size_t i = 0; i < n; i++)
            if (pass == 1 ? !cl[i].claimed : batch[i]->answer_lost != 0) {
                rest[m] = keys[i];
                pos[m++] = i;
            }
        rc = pass == 0 ? warren_store_reclaim_batch(w->st, rest, m, w->id, within_ms, c2, e)
                       : warren_store_claim_batch(w->st, rest, m, w->id, c2, e);
        if (rc != 0)
            break;
        size_t got = 0;
        for (size_t j = 0; j < m; j++)
            if (c2[j].claimed) {
                cl[pos[j]] = c2[j]; /* takes payload_json */
                memset(&c2[j], 0, sizeof(c2[j]));
                got++;
            }
        if (pass == 0 && got > 0)
            warren_log(w->lg, WARREN_LOG_WARN,
                       "worker %s: took back %zu run%s whose claim answer was lost (new attempt, "
                       "the lost one does not count against the retry budget)",
                       w->id, got, got == 1 ? "" : "s");
    }
    if (rc != 0)
        for (size_t i = 0; i < n; i++)
            warren_claim_clear(&cl[i]);
    else
        for (size_t i = 0; i < n; i++)
            batch[i]->answer_lost = 0;
out:
    free(rest);
    free(pos);
    free(c2);
    return rc;
}

/* The database's now from the last reading of its clock (0: none yet). */
static warren_us db_now_cached(const warren_worker *w)
{
    return w->clock_at_ms != 0 ? warren__mono_us() + w->clock_off : 0;
}

/* The database's now estimated from the monotonic clock (read again every
 * CLOCK_RESAMPLE_MS, from the midpoint of a round trip). Only
 * for when to claim an early delivery: warren.claim itself waits on the
 * database's clock, so an estimate off by a little costs a short wait in the
 * claim, never an early start. -1 if the database cannot be read. */
static warren_us db_now_est(warren_worker *w)
{
    int64_t now = warren__mono_ms();
    if (w->clock_at_ms == 0 || now - w->clock_at_ms >= CLOCK_RESAMPLE_MS) {
        warren_error e = {0};
        warren_us db;
        int64_t m0 = warren__mono_us();
        int rc = warren_store_now(w->st, &db, &e);
        int64_t m1 = warren__mono_us();
        if (rc != 0) {
            store_failed(w, rc, &e, "read the database clock");
            return -1;
        }
        w->clock_off = db - (m0 + (m1 - m0) / 2);
        w->clock_at_ms = now;
    }
    return db_now_cached(w);
}

/* Marks up to n deliveries of the FIFO that are due (in arrival order) and
 * puts them into batch; notes how many are not due yet (pq_held) and when
 * the first of them falls due (next_due). Returns how many. */
static size_t pick_due(warren_worker *w, size_t n, pend **batch)
{
    warren_us now = db_now_est(w);
    size_t got = 0;

    if (now < 0)
        return 0; /* the claim would fail as well: later */
    w->pq_held = 0;
    w->next_due = 0;
    for (size_t i = 0; i < w->pq_len; i++) {
        pend *p = pq_at(w, i);
        if (p->msg.due_at > now + CLAIM_AHEAD_US) {
            if (w->next_due == 0 || p->msg.due_at < w->next_due)
                w->next_due = p->msg.due_at;
            w->pq_held++;
        } else if (got < n) {
            p->picked = 1;
            batch[got++] = p;
        }
    }
    return got;
}

/* Removes the picked deliveries from the FIFO, keeping the others' order. */
static void pq_drop_picked(warren_worker *w)
{
    size_t keep = 0;
    for (size_t i = 0; i < w->pq_len; i++) {
        pend *p = pq_at(w, i);
        if (p->picked) {
            pend_clear(p);
            continue;
        }
        if (keep != i)
            *pq_at(w, keep) = *p;
        keep++;
    }
    w->pq_len = keep;
}

/* Claims as many due deliveries as there are free slots, in one batch. */
static void claim_pending(warren_worker *w)
{
    size_t n = (size_t)free_slots(w);
    pend **batch = NULL;
    const char **keys = NULL;
    warren_claim *cl = NULL;
    struct {
        uint64_t tag, gen;
    } *dups = NULL;
    size_t ndups = 0;
    warren_error e = {0};
    int rc;

    if (n > w->pq_len)
        n = w->pq_len;
    if (n == 0 || !store_ready(w))
        return;
    /* every delivery is held and the first is not due yet: nothing to scan */
    if (w->pq_len == w->pq_held && w->next_due != 0 && w->clock_at_ms != 0 &&
        db_now_cached(w) < w->next_due - CLAIM_AHEAD_US)
        return;
    batch = calloc(n, sizeof(*batch));
    keys = calloc(n, sizeof(*keys));
    cl = calloc(n, sizeof(*cl));
    if (batch == NULL || keys == NULL || cl == NULL)
        goto out;
    if ((n = pick_due(w, n, batch)) == 0)
        goto out;
    /* One lock order for every batch: no deadlocks between workers. */
    qsort(batch, n, sizeof(*batch), cmp_pend_key);
    for (size_t i = 0; i < n; i++)
        keys[i] = batch[i]->msg.run_key;
    int64_t sent = warren__mono_ms();
    rc = claim_batch(w, batch, keys, n, cl, &e);
    if (rc != 0) {
        /* The commit's fate is unknown (a lost connection, or an answer
         * this side could not read): the runs may be running under this
         * worker's lease now. Their next claim takes them back first
         * (warren.reclaim_many; a claim that failed on the server finds
         * nothing to take back). */
        for (size_t i = 0; i < n; i++) {
            batch[i]->picked = 0;
            if (rc != WARREN_EINVAL && !batch[i]->answer_lost) {
                batch[i]->answer_lost = 1;
                batch[i]->answer_lost_mono = sent;
            }
        }
        store_failed(w, rc, &e, "claim");
        goto out; /* the deliveries stay unacknowledged and are claimed later */
    }
    store_ok(w);
    /* Duplicates are acked after the FIFO is updated: an ack that finds the
     * connection lost clears the FIFO (broker_lost), which must not happen
     * while batch still points into it. */
    dups = calloc(n, sizeof(*dups));
    for (size_t i = 0; i < n; i++) {
        pend *p = batch[i];
        if (cl[i].claimed) {
            slot_start(w, a_free_slot(w), p, &cl[i], sent);
            continue;
        }
        w->stats.duplicates++;
        warren_log(w->lg, WARREN_LOG_DEBUG,
                   "worker %s: %s not claimable (finished, leased elsewhere or held back); "
                   "dropped",
                   w->id, p->msg.run_key);
        if (dups != NULL) {
            dups[ndups].tag = p->d.tag;
            dups[ndups].gen = p->gen;
            ndups++;
        } else if (w->b != NULL) {
            ack(w, p->d.tag, p->gen, p->msg.run_key); /* out of memory: as before */
        }
    }
    pq_drop_picked(w);
    for (size_t i = 0; i < ndups; i++)
        ack(w, dups[i].tag, dups[i].gen, NULL);
out:
    free(dups);
    if (cl != NULL)
        for (size_t i = 0; i < n; i++)
            warren_claim_clear(&cl[i]);
    free(batch);
    free(keys);
    free(cl);
}

/* Reads what the broker has (waiting up to wait_ms for the first). */
static void receive(warren_worker *w, int wait_ms, int stopping)
{
    int max = w->concurrency * 2 + 16;
    for (int k = 0; k < max && w->b != NULL; k++) {
        pend p;
        int got = 0;
        warren_error e = {0};
        char why[WARREN_ERROR_MSG_MAX];
        int rc;

        memset(&p, 0, sizeof(p));
        rc = warren_broker_next(w->b, k == 0 ? wait_ms : 0, &p.d, &got, &e);
        if (rc != 0) {
            if (rc == WARREN_EBROKERCONN || !warren_broker_connected(w->b))
                broker_lost(w, &e);
            else
                warren_log(w->lg, WARREN_LOG_WARN, "worker %s: %s", w->id, e.message);
            return;
        }
        if (!got)
            return;
        w->stats.received++;
        p.gen = w->gen;
        p.received_mono = warren__mono_ms();
        if (stopping) {
            /* Sent before the cancel reached the broker: not ours to start
             * any more, so straight back to its queue. */
            give_back(w, &p);
            pend_clear(&p);
            continue;
        }
        if (judge(w, &p, why, sizeof(why)) != NULL) {
            dead_letter(w, &p.d, why);
            pend_clear(&p);
            continue;
        }
        if (pq_push(w, &p) != 0) {
            warren_log(w->lg, WARREN_LOG_ERROR, "worker %s: out of memory queueing a delivery",
                       w->id);
            pend_clear(&p);
        }
    }
}

/* ------------------------------------------------------------ the loop */

static int running_count(const warren_worker *w)
{
    return w->concurrency - w->nfree;
}

static void relaunch_sql(warren_worker *w, int64_t now)
{
    for (int i = 0; i < w->concurrency; i++) {
        slot *s = &w->slots[i];
        warren_error e = {0};
        if (s->state == SLOT_RUNNING && s->complete_sql_retry && s->stop_reason == STOP_LOST) {
            s->complete_sql_retry = 0; /* not ours any more: acked without completing */
            s->state = SLOT_DONE;
            continue;
        }
        if (s->state != SLOT_RUNNING || !s->complete_sql_retry || now < s->retry_at)
            continue;
        s->complete_sql_retry = 0;
        if (start_thread(w, s, &e) != 0) {
            s->complete_sql_retry = 1;
            s->retry_at = now + BACKOFF_MAX_MS;
            warren_log(w->lg, WARREN_LOG_ERROR, "worker %s: %s", w->id, e.message);
        }
    }
}

int warren_worker_run(warren_worker *w, volatile sig_atomic_t *stop, warren_error *err)
{
    int rc;
    int stopping = 0;
    int64_t stop_deadline = 0, hard_deadline = 0;

    if ((rc = default_queues(w, err)) != 0)
        return rc;
    if (w->db_url == NULL || w->amqp_url == NULL)
        return warren_error_set(err, WARREN_EINVAL, "worker: no database or broker URL");
    if ((w->slots = calloc((size_t)w->concurrency, sizeof(slot))) == NULL ||
        (w->free_idx = calloc((size_t)w->concurrency, sizeof(int))) == NULL) {
        free(w->slots);
        w->slots = NULL;
        return warren_error_set(err, WARREN_ENOMEM, "out of memory");
    }
    for (int i = 0; i < w->concurrency; i++) {
        slot_reset(&w->slots[i]);
        w->free_idx[i] = w->concurrency - 1 - i; /* slot 0 first */
    }
    w->nfree = w->concurrency;
    {
        warren_error e = {0};
        if ((w->hp = hpool_new(w->wake[1], w->concurrency, &e)) == NULL) {
            rc = warren_error_set(err, e.code, "%s", e.message);
            goto out;
        }
    }
    if ((rc = warren_store_open(w->db_url, w->lg, &w->st, err)) != 0)
        goto out;
    if ((rc = broker_setup(w, err)) != 0)
        goto out;
    {
        char list[512] = "";
        for (size_t i = 0; i < w->nqueues; i++)
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "",
                     w->queues[i]);
        warren_log(w->lg, WARREN_LOG_INFO, "worker %s: consuming %s with %d slots", w->id, list,
                   w->concurrency);
    }
    for (;;) {
        int64_t now = warren__mono_ms();
        if (!stopping && stop != NULL && *stop) {
            stopping = 1;
            stop_deadline = now + w->cfg->worker.shutdown_grace_ms;
            hard_deadline = stop_deadline + kill_grace(w) + 5000;
            stop_consuming(w);
            warren_log(w->lg, WARREN_LOG_INFO,
                       "worker %s: stopping: %d running handler(s) get %lld ms to finish", w->id,
                       running_count(w), (long long)w->cfg->worker.shutdown_grace_ms);
        }
        if (stopping) {
            if (running_count(w) == 0)
                break;
            if (now >= stop_deadline)
                for (int i = 0; i < w->concurrency; i++)
                    stop_slot(w, &w->slots[i], STOP_SHUTDOWN, now);
            if (now >= hard_deadline) {
                /* Handlers that ignore should_stop, or completions PostgreSQL
                 * cannot take: leave them. Their messages return to the queue
                 * when the connection closes and their runs come back when
                 * their leases expire (the reconciler). */
                warren_log(w->lg, WARREN_LOG_WARN,
                           "worker %s: %d run(s) still unfinished %lld ms after the stop; leaving "
                           "them to their leases",
                           w->id, running_count(w), (long long)(now - stop_deadline));
                break;
            }
        }
        /* Wait for the broker only when there is nothing else to do; with
         * every slot taken nothing can arrive, so wait for a handler instead. */
        int busy = 0, threads = 0;
        for (int i = 0; i < w->concurrency; i++) {
            if (w->slots[i].state == SLOT_DONE)
                busy = 1;
            if (w->slots[i].state == SLOT_RUNNING && w->slots[i].has_thread)
                threads = 1;
        }
        /* due deliveries (or new ones, not looked at yet) and a free slot */
        if (w->pq_len > w->pq_held && free_slots(w) > 0 && w->store_retry_at == 0)
            busy = 1;
        int wait = busy ? 0 : threads ? 1 : IDLE_WAIT_MS;
        if (w->next_due != 0 && wait > 0 && w->clock_at_ms != 0 && w->store_retry_at == 0 &&
            free_slots(w) > 0) {
            /* an early delivery falls due: wake up for it (not while the
             * database is backing off: nothing could be claimed) */
            int64_t until = (w->next_due - CLAIM_AHEAD_US - db_now_cached(w) + 999) / 1000;
            if (until < wait)
                wait = until < 0 ? 0 : (int)until;
        }
        if (w->b != NULL && free_slots(w) == 0 && !busy) {
            receive(w, 0, stopping); /* keep the connection serviced */
            wait_wake(w, IDLE_WAIT_MS);
        } else if (w->b != NULL) {
            receive(w, wait, stopping);
        } else if (stopping) {
            /* No reconnect: it would consume again, and acknowledgements
             * for deliveries of the lost connection cannot be sent anyway. */
            wait_wake(w, IDLE_WAIT_MS);
        } else {
            broker_try_reconnect(w);
            if (w->b == NULL)
                warren__sleep_ms(IDLE_WAIT_MS);
        }
        if (!stopping)
            claim_pending(w);
        now = warren__mono_ms();
        relaunch_sql(w, now);
        /* Heartbeat before the lease deadline check: after a pause (SIGSTOP,
         * a stall) the overdue heartbeat tells whether the run is still ours;
         * the deadline then stops what could not be confirmed. */
        heartbeat_due(w, now);
        now = warren__mono_ms();
        for (int i = 0; i < w->concurrency; i++)
            poll_slot(w, &w->slots[i], now);
        complete_done(w, now);
        ack_flush(w, 0);
    }
    ack_flush(w, 1);
    rc = 0;
out:
    if (w->slots != NULL) {
        for (int i = 0; i < w->concurrency; i++) {
            slot *s = &w->slots[i];
            /* done = 2 hands a still running handler's context to its pool
             * thread, which frees it when (if ever) the handler returns. */
            if (s->ctx != NULL &&
                atomic_exchange_explicit(&s->ctx->done, 2, memory_order_acq_rel) == 1)
                ctx_free(s->ctx);
            s->ctx = NULL;
            slot_reset(s);
        }
        free(w->slots);
        w->slots = NULL;
    }
    free(w->free_idx);
    w->free_idx = NULL;
    w->nfree = 0;
    if (hpool_free(w->hp, 1000) > 0)
        warren_log(w->lg, WARREN_LOG_WARN,
                   "worker %s: left handler thread(s) running that ignored should_stop", w->id);
    w->hp = NULL;
    pq_clear(w);
    free(w->pq);
    w->pq = NULL;
    w->pq_cap = 0;
    warren_broker_free(w->b);
    w->b = NULL;
    warren_store_free(w->st);
    w->st = NULL;
    warren_log(w->lg, WARREN_LOG_INFO,
               "worker %s: stopped (received %llu, started %llu, succeeded %llu, retried %llu, "
               "failed %llu, duplicates %llu, dead-lettered %llu, given back %llu)",
               w->id, (unsigned long long)w->stats.received, (unsigned long long)w->stats.started,
               (unsigned long long)w->stats.succeeded, (unsigned long long)w->stats.retried,
               (unsigned long long)w->stats.failed, (unsigned long long)w->stats.duplicates,
               (unsigned long long)w->stats.dead_lettered, (unsigned long long)w->stats.given_back);
    return rc;
}
