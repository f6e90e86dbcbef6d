/* worker_claim.c: the C worker's claims (DESIGN §6): deliveries wait in a
 * FIFO of pending runs, those released early (planner.release_lead) are held
 * there until due on an estimate of the database's clock, and the due ones
 * are claimed in batches (warren.claim_many, or warren.reclaim_many for those
 * whose last claim's answer was lost) and started in free slots. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/broker.h>
#include <warren/codec.h>
#include <warren/store.h>

#include "store_work.h"
#include "internal.h"
#include "worker_int.h"

#define CLOCK_RESAMPLE_MS 10000 /* how often the database's clock is read again */

/* ------------------------------------------------------------ pending deliveries */

static void pend_clear(pend *p)
{
    warren_delivery_clear(&p->d);
    warren_run_msg_clear(&p->msg);
}

void warren__pq_clear(warren_worker *w)
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

pend *warren__pq_at(warren_worker *w, size_t i)
{
    return &w->pq[(w->pq_head + i) % w->pq_cap];
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
        if (warren__worker_find_reg(w, j->c_handler) == NULL) {
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

/* ------------------------------------------------------------ claims */

static int cmp_pend_key(const void *a, const void *b)
{
    const pend *const *x = a, *const *y = b;
    return strcmp((*x)->msg.run_key, (*y)->msg.run_key);
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
warren_us warren__db_now_cached(const warren_worker *w)
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
            warren__worker_store_failed(w, rc, &e, "read the database clock");
            return -1;
        }
        w->clock_off = db - (m0 + (m1 - m0) / 2);
        w->clock_at_ms = now;
    }
    return warren__db_now_cached(w);
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
        pend *p = warren__pq_at(w, i);
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
        pend *p = warren__pq_at(w, i);
        if (p->picked) {
            pend_clear(p);
            continue;
        }
        if (keep != i)
            *warren__pq_at(w, keep) = *p;
        keep++;
    }
    w->pq_len = keep;
}

/* Claims as many due deliveries as there are free slots, in one batch. */
void warren__claim_pending(warren_worker *w)
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
    if (n == 0 || !warren__worker_store_ready(w))
        return;
    /* every delivery is held and the first is not due yet: nothing to scan */
    if (w->pq_len == w->pq_held && w->next_due != 0 && w->clock_at_ms != 0 &&
        warren__db_now_cached(w) < w->next_due - CLAIM_AHEAD_US)
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
        warren__worker_store_failed(w, rc, &e, "claim");
        goto out; /* the deliveries stay unacknowledged and are claimed later */
    }
    warren__worker_store_ok(w);
    /* Duplicates are acked after the FIFO is updated: an ack that finds the
     * connection lost clears the FIFO (warren__worker_broker_lost), which must not happen
     * while batch still points into it. */
    dups = calloc(n, sizeof(*dups));
    for (size_t i = 0; i < n; i++) {
        pend *p = batch[i];
        if (cl[i].claimed) {
            warren__slot_start(w, a_free_slot(w), p, &cl[i], sent);
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
            warren__ack(w, p->d.tag, p->gen, p->msg.run_key); /* out of memory: as before */
        }
    }
    pq_drop_picked(w);
    for (size_t i = 0; i < ndups; i++)
        warren__ack(w, dups[i].tag, dups[i].gen, NULL);
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
void warren__receive(warren_worker *w, int wait_ms, int stopping)
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
                warren__worker_broker_lost(w, &e);
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
            warren__give_back(w, &p);
            pend_clear(&p);
            continue;
        }
        if (judge(w, &p, why, sizeof(why)) != NULL) {
            warren__dead_letter(w, &p.d, why);
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
