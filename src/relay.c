/* relay.c: committed runs and outbox rows to RabbitMQ, in small batches with
 * pipelined publisher confirms; a run is marked published only after its ack.
 * See relay.h for the contract and docs/delivery.md for the reasoning. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <warren/codec.h>
#include <warren/duration.h>

#include "internal.h"
#include "relay.h"
#include "store_plan.h"

/* How long to wait for a batch's confirms before giving up on the connection. */
#define CONFIRM_TIMEOUT_MS 15000
/* A returned (unroutable) or nacked run is retried no sooner than this. */
#define UNROUTABLE_RETRY_MS 5000
#define NACK_RETRY_MS 1000
/* A missing ready queue is looked up again after this. */
#define READY_CHECK_MS 10000
#define MAX_READY_CACHE 256
/* This many events or more, met in one outbox pass or waiting: a burst of
 * completions; the young ones wait (planner.event_defer). Steady 200 runs/s
 * leaves about 200 per 1 s tick. */
#define EVENT_BACKLOG 1000

typedef struct ready_entry {
    char *queue;
    int exists;
    int64_t checked_ms; /* monotonic */
} ready_entry;

struct warren_relay {
    warren_store *st;
    warren_broker *b;
    warren_planner_config pc;
    const warren_logger *lg;
    int64_t stall_ms;
    ready_entry cache[MAX_READY_CACHE];
    size_t ncache;
    int holding;       /* events are being held back (planner.event_defer) */
    int64_t next_id;   /* outbox ids below this were published or are locked */
    int64_t rescan_ms; /* monotonic: while holding, look from id 0 again then */
};

int warren_relay_new(warren_store *st, warren_broker *b, const warren_planner_config *pc,
                     const warren_logger *lg, warren_relay **out, warren_error *err)
{
    warren_relay *r = calloc(1, sizeof(*r));
    *out = NULL;
    if (r == NULL)
        return warren_error_set(err, WARREN_ENOMEM, "out of memory creating the relay");
    r->st = st;
    r->b = b;
    r->pc = *pc;
    if (r->pc.publish_batch <= 0)
        r->pc.publish_batch = 200;
    if (r->pc.delay_queue_expires_ms <= 0)
        r->pc.delay_queue_expires_ms = 600000;
    r->lg = lg;
    *out = r;
    return 0;
}

static void cache_clear(warren_relay *r)
{
    for (size_t i = 0; i < r->ncache; i++)
        free(r->cache[i].queue);
    r->ncache = 0;
}

void warren_relay_free(warren_relay *r)
{
    if (r == NULL)
        return;
    cache_clear(r);
    free(r);
}

void warren_relay_set_broker(warren_relay *r, warren_broker *b)
{
    r->b = b;
    cache_clear(r); /* a new connection: look again */
}

void warren_relay_set_stall(warren_relay *r, int64_t ms)
{
    r->stall_ms = ms;
}

/* Not codec.c's warren_json_object_check: re-encoding through jansson
 * changes what PostgreSQL wrote (0.1 becomes 0.10000000000000001, 1.50 becomes
 * 1.5, an integer beyond int64 is refused, a body that is not an object is
 * refused), and outbox bodies must reach consumers as the worker protocol
 * wrote them. Removing whitespace outside strings changes no value. */
size_t warren_json_compact_inplace(char *json)
{
    size_t w = 0;
    int in_str = 0, esc = 0;

    for (size_t i = 0; json[i] != '\0'; i++) {
        char c = json[i];
        if (in_str) {
            if (esc)
                esc = 0;
            else if (c == '\\')
                esc = 1;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
            continue;
        }
        json[w++] = c;
    }
    json[w] = '\0';
    return w;
}

/* 1 if warren.ready.<queue> exists (cached per connection), 0 if it does not,
 * negative on a broker error. A run not yet due would otherwise sit in its
 * delay queue and be dropped at expiry by the dead-letter hop, silently. */
static int ready_exists(warren_relay *r, const char *queue, warren_error *err)
{
    int64_t now = warren__mono_ms();
    char name[160];
    uint32_t msgs = 0, consumers = 0;
    ready_entry *e = NULL;
    int rc;

    for (size_t i = 0; i < r->ncache; i++) {
        if (strcmp(r->cache[i].queue, queue) == 0) {
            e = &r->cache[i];
            break;
        }
    }
    if (e != NULL && (e->exists || now - e->checked_ms < READY_CHECK_MS))
        return e->exists;
    snprintf(name, sizeof(name), "%s%s", WARREN_READY_PREFIX, queue);
    {
        warren_error qerr = {0};
        rc = warren_broker_queue_count(r->b, name, &msgs, &consumers, &qerr);
        if (rc != 0 && rc != WARREN_ENOENT)
            return warren_error_set(err, rc, "%s", qerr.message);
    }
    if (e == NULL) {
        if (r->ncache == MAX_READY_CACHE)
            cache_clear(r);
        e = &r->cache[r->ncache];
        e->queue = strdup(queue);
        if (e->queue == NULL)
            return warren_error_set(err, WARREN_ENOMEM, "out of memory");
        r->ncache++;
    }
    e->exists = rc == 0;
    e->checked_ms = now;
    return e->exists;
}

/* Confirms of one batch, by delivery tag. */
typedef struct batch_state {
    const uint64_t *seqs;
    int *status; /* -1 unknown, else warren_publish_status */
    size_t n;
} batch_state;

static void on_confirm(void *ud, uint64_t seq, warren_publish_status status)
{
    batch_state *bs = ud;
    size_t lo = 0, hi = bs->n;

    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (bs->seqs[mid] < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < bs->n && bs->seqs[lo] == seq)
        bs->status[lo] = (int)status;
}

/* When a run goes to its ready queue: planner.release_lead before it is due
 * (the worker, and warren.claim on the database's clock, wait for the due
 * time; the broker's hop into the ready queue is done by then). */
static warren_us release_at(const warren_relay *r, warren_us due_at)
{
    return due_at - r->pc.release_lead_ms * 1000;
}

/* Builds and publishes one run. */
static int publish_run(warren_relay *r, const warren_relay_row *row, warren_us now_est,
                       uint64_t *seq, warren_error *err)
{
    char sched[WARREN_TIME_BUF], due[WARREN_TIME_BUF], attempt[16], qname[80];
    warren_run_msg m = {0};
    char *body = NULL;
    size_t body_len = 0;
    int rc;

    /* An enqueued run's instant may have milliseconds (the body says the same). */
    if (row->scheduled_at % WARREN_US_PER_S == 0)
        warren_time_format(row->scheduled_at, sched, sizeof(sched));
    else
        warren_time_format_ms(row->scheduled_at, sched, sizeof(sched));
    warren_time_format_ms(row->due_at, due, sizeof(due));
    snprintf(attempt, sizeof(attempt), "%d", row->attempt);
    m.run_key = row->run_key;
    m.job = row->job;
    m.scheduled_at = row->scheduled_at;
    m.due_at = row->due_at;
    m.attempt = row->attempt;
    m.payload_json = row->payload;
    m.template_name = row->template_name;
    m.tenant = row->tenant;
    if ((rc = warren_run_msg_encode(&m, &body, &body_len, err)) != 0)
        return rc;

    warren_header h[] = {{"x-warren-job", row->job},
                         {"x-warren-scheduled-at", sched},
                         {"x-warren-due-at", due},
                         {"x-warren-attempt", attempt},
                         {WARREN_QUEUE_HEADER, row->queue}};
    warren_message msg = {.exchange = WARREN_READY_EXCHANGE,
                          .routing_key = row->queue,
                          .message_id = row->run_key,
                          .type = row->job,
                          .timestamp = row->scheduled_at,
                          .expiration_ms = -1,
                          .headers = h,
                          .nheaders = sizeof(h) / sizeof(h[0]),
                          .body = body,
                          .body_len = body_len,
                          .mandatory = 1};

    warren_us rel = release_at(r, row->due_at);
    if (rel > now_est) {
        /* Not released yet: the delay queue of its release second. Round up
         * so the broker never releases it before rel. */
        int64_t ms = (rel - now_est + 999) / 1000;
        if (r->pc.delay_ring > 0)
            rc = warren_broker_delay_ring_queue_typed(r->b, warren_us_to_s(rel), r->pc.delay_ring,
                                                      r->pc.delay_ring_type, qname, sizeof(qname),
                                                      err);
        else
            rc = warren_broker_delay_queue(r->b, warren_us_to_s(rel), r->pc.delay_queue_expires_ms,
                                           qname, sizeof(qname), err);
        if (rc != 0) {
            free(body);
            /* A delay queue the settings cannot make is not this run's fault:
             * never WARREN_EINVAL, which would record the run dead. */
            return rc == WARREN_EINVAL ? WARREN_ECONFIG : rc;
        }
        msg.exchange = "";
        msg.routing_key = qname;
        msg.expiration_ms = ms < 1 ? 1 : ms;
    }
    rc = warren_broker_publish(r->b, &msg, seq, err);
    free(body);
    return rc;
}

/* One batch: select, publish, confirm, mark, commit. *got = rows selected;
 * *unpublishable counts the runs recorded dead because they cannot be
 * published at all. */
static int relay_batch(warren_relay *r, int64_t lead_ms, size_t *got, int *published,
                       int *unroutable, int *unpublishable, warren_error *err)
{
    warren_relay_row *rows = NULL;
    size_t n = 0, npub = 0, nacked = 0;
    uint64_t *seqs = NULL;
    int *status = NULL;
    size_t *idx = NULL;
    const char **keys = NULL;
    warren_us db_now = 0;
    int64_t t_sel;
    size_t nfailed = 0;
    char first_error[400] = "";
    int rc;

    *got = 0;
    if ((rc = warren_plan_begin(r->st, err)) != 0)
        return rc;
    rc = warren_plan_relay_select(r->st, lead_ms, r->pc.publish_batch, &rows, &n, &db_now, err);
    t_sel = warren__mono_us();
    if (rc != 0 || n == 0)
        goto done;
    *got = n;
    seqs = calloc(n, sizeof(*seqs));
    status = calloc(n, sizeof(*status));
    idx = calloc(n, sizeof(*idx));
    keys = calloc(n, sizeof(*keys));
    if (!seqs || !status || !idx || !keys) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory relaying runs");
        goto done;
    }
    /* Ready queues first: a passive declare of a missing queue closes the
     * channel, which must not happen while this batch's confirms are pending. */
    for (size_t i = 0; i < n; i++) {
        int ok = 1;
        if (rows[i].invalid) {
            const char *e = "its scheduled_at or due_at is not a finite instant";
            warren_log(r->lg, WARREN_LOG_ERROR,
                       "run %s cannot be published: %s; recorded dead with a dead letter",
                       rows[i].run_key, e);
            (*unpublishable)++;
            status[i] = 1;
            if ((rc = warren_plan_mark_unpublishable(r->st, rows[i].run_key, e, err)) != 0)
                goto done;
            continue;
        }
        /* a delay queue's dead letters would go nowhere: checked first */
        if (release_at(r, rows[i].due_at) > db_now + (warren__mono_us() - t_sel)) {
            ok = ready_exists(r, rows[i].queue, err);
            if (ok < 0) {
                rc = ok;
                goto done;
            }
        }
        status[i] = ok ? 0 : 1; /* 1: skip */
        if (!ok) {
            char e[200];
            snprintf(e, sizeof(e),
                     "ready queue %s%s does not exist: not published (declare it with `warren "
                     "topology`)",
                     WARREN_READY_PREFIX, rows[i].queue);
            warren_log(r->lg, WARREN_LOG_DEBUG, "run %s: %s", rows[i].run_key, e);
            if (nfailed++ == 0)
                snprintf(first_error, sizeof(first_error), "run %s: %s", rows[i].run_key, e);
            (*unroutable)++;
            if ((rc = warren_plan_mark_publish_error(r->st, rows[i].run_key, e, UNROUTABLE_RETRY_MS,
                                                     err)) != 0)
                goto done;
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (status[i] == 1)
            continue;
        /* The database's now at the select plus the (monotonic) time since. */
        warren_us now_est = db_now + (warren__mono_us() - t_sel);
        warren_error perr = {0};
        rc = publish_run(r, &rows[i], now_est, &seqs[npub], &perr);
        if (rc == WARREN_EINVAL) {
            /* This run's message cannot be built or sent at all (its payload
             * is not a JSON object, its body is too large): publishing it
             * again cannot help, and failing the batch would put it first
             * again next time, ahead of every other run. It is dead, with
             * the reason and a dead letter; the batch goes on. */
            warren_log(r->lg, WARREN_LOG_ERROR,
                       "run %s cannot be published: %s; recorded dead with a dead letter "
                       "(`warren show %s`; fix it, then `warren replay`)",
                       rows[i].run_key, perr.message, rows[i].run_key);
            (*unpublishable)++;
            if ((rc = warren_plan_mark_unpublishable(r->st, rows[i].run_key, perr.message, err)) !=
                0)
                goto done;
            continue;
        }
        if (rc != 0) {
            warren_error_set(err, rc, "%s", perr.message);
            goto done;
        }
        idx[npub] = i;
        npub++;
    }
    for (size_t k = 0; k < npub; k++)
        status[k] = -1;
    if (npub > 0) {
        batch_state bs = {seqs, status, npub};
        if (r->stall_ms > 0)
            warren__sleep_ms(r->stall_ms);
        rc = warren_broker_confirm_wait(r->b, seqs[npub - 1], CONFIRM_TIMEOUT_MS, on_confirm, &bs,
                                        err);
        if (rc != 0)
            goto done;
    }
    for (size_t k = 0; k < npub; k++) {
        const warren_relay_row *row = &rows[idx[k]];
        if (status[k] == WARREN_BROKER_ACKED) {
            keys[nacked++] = row->run_key;
        } else if (status[k] == WARREN_BROKER_RETURNED) {
            char e[200];
            snprintf(e, sizeof(e),
                     "unroutable: %s has no queue bound for %s=%s (returned by RabbitMQ; declare "
                     "it with `warren topology`)",
                     WARREN_READY_EXCHANGE, WARREN_QUEUE_HEADER, row->queue);
            warren_log(r->lg, WARREN_LOG_DEBUG, "run %s: %s", row->run_key, e);
            if (nfailed++ == 0)
                snprintf(first_error, sizeof(first_error), "run %s: %s", row->run_key, e);
            (*unroutable)++;
            if ((rc = warren_plan_mark_publish_error(r->st, row->run_key, e, UNROUTABLE_RETRY_MS,
                                                     err)) != 0)
                goto done;
        } else {
            const char *e = status[k] == WARREN_BROKER_NACKED
                                ? "publish nacked by RabbitMQ (will retry)"
                                : "publish not confirmed by RabbitMQ (will retry)";
            warren_log(r->lg, WARREN_LOG_DEBUG, "run %s: %s", row->run_key, e);
            if (nfailed++ == 0)
                snprintf(first_error, sizeof(first_error), "run %s: %s", row->run_key, e);
            if ((rc = warren_plan_mark_publish_error(r->st, row->run_key, e, NACK_RETRY_MS, err)) !=
                0)
                goto done;
        }
    }
    {
        int marked = 0;
        if ((rc = warren_plan_mark_published(r->st, keys, nacked, &marked, err)) != 0)
            goto done;
    }
    if ((rc = warren_plan_commit(r->st, err)) != 0)
        goto done;
    *published += (int)nacked;
    warren_log(r->lg, WARREN_LOG_DEBUG, "relay: published %zu of %zu runs", nacked, n);
    if (nfailed > 0)
        warren_log(r->lg, WARREN_LOG_WARN,
                   "relay: %zu run(s) not published (recorded on the runs as last_error, retried "
                   "later), e.g. %s",
                   nfailed, first_error);
done:
    if (rc != 0 || n == 0)
        warren_plan_rollback(r->st);
    warren_plan_relay_rows_free(rows, n);
    free(seqs);
    free(status);
    free(idx);
    free(keys);
    return rc;
}

int warren_relay_runs(warren_relay *r, int64_t lead_ms, int64_t budget_ms, int *published,
                      int *unroutable, warren_error *err)
{
    int64_t start = warren__mono_ms();
    int pub = 0, unr = 0, bad = 0, rc = 0;
    size_t got;

    do {
        rc = relay_batch(r, lead_ms, &got, &pub, &unr, &bad, err);
    } while (rc == 0 && got == (size_t)r->pc.publish_batch &&
             warren__mono_ms() - start < budget_ms);
    if (published)
        *published = pub;
    if (unroutable)
        *unroutable = unr;
    return rc;
}

/* Largest original body an outbox row's stand-in dead letter carries. */
#define STAND_IN_BODY_MAX (1024 * 1024)

/* An outbox row RabbitMQ cannot take as written (more headers than a message
 * may carry, a body over the broker module's cap, a message_id or key over
 * 255 bytes) goes to warren.dead in a form that can be sent: the reason in
 * x-warren-error, where it was going in x-warren-original-exchange and
 * x-warren-original-routing-key, its message_id and type if they fit, and
 * its body when it is at most 1 MiB (else a note of its size). The row is
 * deleted after this copy's confirm, like any other. */
static int publish_unpublishable(warren_relay *r, const warren_outbox_row *o, size_t body_len,
                                 const char *why, uint64_t *seq, warren_error *err)
{
    char error[600], small[96], rk[256];
    warren_header h[3];
    const char *body = o->body;
    size_t len = body_len;

    snprintf(error, sizeof(error), "outbox row %lld not published as written: %.500s",
             (long long)o->id, why); /* the reason cut to fit the header */
    snprintf(rk, sizeof(rk), "%s", o->routing_key);
    h[0] = (warren_header){"x-warren-error", error};
    h[1] = (warren_header){"x-warren-original-exchange", o->exchange};
    h[2] = (warren_header){"x-warren-original-routing-key", o->routing_key};
    if (len > STAND_IN_BODY_MAX) {
        len = (size_t)snprintf(small, sizeof(small), "{\"body_omitted_bytes\":%zu}", body_len);
        body = small;
    }
    warren_message msg = {.exchange = WARREN_DEAD_EXCHANGE,
                          .routing_key = rk,
                          .message_id =
                              o->message_id && strlen(o->message_id) < 256 ? o->message_id : NULL,
                          .type = o->type && strlen(o->type) < 256 ? o->type : NULL,
                          .timestamp = 0,
                          .expiration_ms = -1,
                          .headers = h,
                          .nheaders = 3,
                          .body = body,
                          .body_len = len,
                          .mandatory = 0};
    warren_log(r->lg, WARREN_LOG_ERROR, "%s; sent to %s instead", error, WARREN_DEAD_EXCHANGE);
    return warren_broker_publish(r->b, &msg, seq, err);
}

/* Publishes one batch of outbox rows of kind and deletes what RabbitMQ
 * confirmed. Events (kind WARREN_OUTBOX_EVENTS, from r->next_id on) go out
 * only up to the first that is not ripe (written less than ripe_ms ago),
 * which sets *held: the rest of the batch waits, in id order. *nevents gets
 * the events published. */
static int outbox_batch(warren_relay *r, warren_outbox_kind kind, int64_t ripe_ms, size_t *got,
                        int *held, int *nevents, int *published, warren_error *err)
{
    warren_outbox_row *rows = NULL;
    size_t n = 0, npub = 0, nack = 0, nsent = 0, *sent = NULL;
    uint64_t *seqs = NULL;
    int *status = NULL;
    int64_t *ids = NULL, next;
    int rc;

    *got = 0;
    *held = 0;
    *nevents = 0;
    if ((rc = warren_plan_begin(r->st, err)) != 0)
        return rc;
    rc = warren_plan_outbox_select(r->st, r->pc.publish_batch, kind, r->next_id, ripe_ms, &rows, &n,
                                   err);
    if (rc != 0 || n == 0)
        goto done;
    *got = n;
    while (npub < n && rows[npub].ripe)
        npub++;
    *held = npub < n;
    /* next_id moves on only when the batch is settled (a failed batch is
     * taken again); rows RabbitMQ nacked stay in the outbox for the next pass
     * from the start, once the backlog is gone. */
    next = npub < n ? rows[npub].id : rows[n - 1].id + 1;
    if (npub == 0) {
        if (kind != WARREN_OUTBOX_URGENT)
            r->next_id = next;
        goto done; /* rolled back: nothing taken */
    }
    seqs = calloc(npub, sizeof(*seqs));
    status = calloc(npub, sizeof(*status));
    ids = calloc(npub, sizeof(*ids));
    sent = calloc(npub, sizeof(*sent));
    if (!seqs || !status || !ids || !sent) {
        rc = warren_error_set(err, WARREN_ENOMEM, "out of memory relaying the outbox");
        goto done;
    }
    for (size_t i = 0; i < npub; i++) {
        warren_outbox_row *o = &rows[i];
        warren_header *h = NULL;
        warren_error perr = {0};
        if (o->nheaders > 0 && (h = calloc(o->nheaders, sizeof(*h))) == NULL) {
            rc = warren_error_set(err, WARREN_ENOMEM, "out of memory relaying the outbox");
            goto done;
        }
        for (size_t k = 0; k < o->nheaders; k++) {
            h[k].key = o->headers[k].key;
            h[k].value = o->headers[k].value;
        }
        size_t len = warren_json_compact_inplace(o->body);
        warren_message msg = {.exchange = o->exchange,
                              .routing_key = o->routing_key,
                              .message_id = o->message_id,
                              .type = o->type,
                              .timestamp = 0,
                              .expiration_ms = -1,
                              .headers = h,
                              .nheaders = o->nheaders,
                              .body = o->body,
                              .body_len = len,
                              .mandatory = 0};
        rc = warren_broker_publish(r->b, &msg, &seqs[nsent], &perr);
        free(h);
        if (rc == WARREN_EINVAL)
            rc = publish_unpublishable(r, o, len, perr.message, &seqs[nsent], err);
        else if (rc != 0)
            warren_error_set(err, rc, "%s", perr.message);
        if (rc == WARREN_EINVAL) {
            /* not even the stand-in could be sent: the row stays (and is
             * logged every pass), the rest of the batch goes on */
            warren_log(r->lg, WARREN_LOG_ERROR, "outbox row %lld cannot be published: %s",
                       (long long)o->id, err->message);
            warren_error_clear(err);
            rc = 0;
            continue;
        }
        if (rc != 0)
            goto done;
        status[nsent] = -1;
        sent[nsent++] = i;
    }
    if (nsent > 0) {
        batch_state bs = {seqs, status, nsent};
        rc = warren_broker_confirm_wait(r->b, seqs[nsent - 1], CONFIRM_TIMEOUT_MS, on_confirm, &bs,
                                        err);
        if (rc != 0)
            goto done;
    }
    for (size_t k = 0; k < nsent; k++) {
        size_t i = sent[k];
        if (status[k] == WARREN_BROKER_ACKED || status[k] == WARREN_BROKER_RETURNED) {
            ids[nack++] = rows[i].id;
            *nevents += strcmp(rows[i].exchange, WARREN_EVENTS_EXCHANGE) == 0;
        } else {
            warren_log(r->lg, WARREN_LOG_WARN, "outbox row %lld: publish nacked; will retry",
                       (long long)rows[i].id);
        }
    }
    if ((rc = warren_plan_outbox_delete(r->st, ids, nack, err)) != 0)
        goto done;
    if ((rc = warren_plan_commit(r->st, err)) != 0)
        goto done;
    *published += (int)nack;
    if (kind != WARREN_OUTBOX_URGENT)
        r->next_id = next;
done:
    if (rc != 0 || npub == 0)
        warren_plan_rollback(r->st);
    warren_plan_outbox_rows_free(rows, n);
    free(seqs);
    free(status);
    free(ids);
    free(sent);
    return rc;
}

static void set_holding(warren_relay *r, int on)
{
    char d[32];
    if (on == r->holding)
        return;
    r->holding = on;
    r->rescan_ms = warren__mono_ms() + r->pc.event_defer_ms;
    if (on)
        warren_log(r->lg, WARREN_LOG_INFO,
                   "relay: %d or more events waiting: events younger than %s wait "
                   "(planner.event_defer) so that they do not slow down runs",
                   EVENT_BACKLOG, warren_duration_format(r->pc.event_defer_ms, d, sizeof(d)));
    else
        warren_log(r->lg, WARREN_LOG_INFO, "relay: event backlog gone; events go out at once");
}

/* Publishes the outbox in id order, within budget_ms. When a pass meets
 * EVENT_BACKLOG events or more (a burst of completions) and
 * planner.event_defer > 0, the relay holds back events younger than
 * event_defer: publishing them would compete with the burst's own runs for
 * RabbitMQ and for this process. While holding, the other rows (dead
 * letters) go out first and never wait, events go out once they are that old
 * (the ripe prefix, in id order), and holding ends when fewer than
 * EVENT_BACKLOG events wait. Event selects start at next_id, past the rows
 * just published (their dead index entries make a scan from the start
 * expensive); every event_defer the relay looks from id 0 again, for rows a
 * transaction committed after higher ids went out, a nack, or another
 * planner's relay left behind. */
int warren_relay_outbox(warren_relay *r, int64_t budget_ms, int *published, warren_error *err)
{
    int64_t start = warren__mono_ms();
    int pub = 0, rc = 0, held = 0, nev = 0, events = 0, waiting = 0, ripe = 0;
    size_t got;
    const size_t batch = (size_t)r->pc.publish_batch;

    if (r->pc.event_defer_ms <= 0)
        set_holding(r, 0);
    if (r->holding) {
        if (start >= r->rescan_ms) {
            r->next_id = 0;
            r->rescan_ms = start + r->pc.event_defer_ms;
        }
        rc = warren_plan_outbox_events_waiting(r->st, r->next_id, EVENT_BACKLOG,
                                               r->pc.event_defer_ms, &waiting, &ripe, err);
        if (rc == 0 && waiting < EVENT_BACKLOG)
            set_holding(r, 0);
    }
    if (rc == 0 && !r->holding) {
        r->next_id = 0; /* a whole pass from the start */
        do {
            rc = outbox_batch(r, WARREN_OUTBOX_ALL, 0, &got, &held, &nev, &pub, err);
            events += nev;
            if (rc == 0 && got == batch && r->pc.event_defer_ms > 0 && events >= EVENT_BACKLOG)
                set_holding(r, 1);
        } while (rc == 0 && !r->holding && got == batch && warren__mono_ms() - start < budget_ms);
        ripe = 0; /* what is left of this pass is young */
    }
    if (rc == 0 && r->holding) {
        do {
            rc = outbox_batch(r, WARREN_OUTBOX_URGENT, 0, &got, &held, &nev, &pub, err);
        } while (rc == 0 && got == batch && warren__mono_ms() - start < budget_ms);
        /* No event select while the oldest is young: it would lock a batch of
         * rows for nothing on every tick of the burst. */
        while (rc == 0 && ripe && warren__mono_ms() - start < budget_ms) {
            rc = outbox_batch(r, WARREN_OUTBOX_EVENTS, r->pc.event_defer_ms, &got, &held, &nev,
                              &pub, err);
            if (got < batch || held)
                break;
        }
    }
    if (published)
        *published = pub;
    return rc;
}
