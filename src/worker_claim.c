/* worker_claim.c: the C worker's claim phase (docs/design.md §6.2): the
 * pending deliveries that are due (those released early, planner.release_lead,
 * are held until due on the estimate of the database's clock) are claimed in
 * batches (warren.claim_many, or warren.reclaim_many for those whose last
 * claim's answer was lost) and started in free slots, or handed to the
 * handler pool to be taken in their effect's transaction (warren.take_many).
 * Deliveries the claim gives no row for, and runs this worker cannot handle,
 * are settled by the database's word. Queue -> claim -> slot: it meets the
 * intake and settle phases only in the FIFO and the slot table. */
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
/* A reading of the database's clock from a slower round trip is not trusted
 * (the midpoint could be off by up to half of it): the last estimate is kept
 * and the clock read again after CLOCK_RETRY_MS. */
#define CLOCK_RTT_MAX_US WARREN__CLOCK_RTT_MAX_US
#define CLOCK_RETRY_MS 1000
/* An early delivery is held at most planner.release_lead + this ahead of its
 * due time; one due later is not held: the database decides (see
 * settle_unclaimed). */
#define HOLD_MARGIN_US 5000000
/* Take only when at least this many are due together (warren__claim_pending). */
#define TAKE_MIN 2

/* What becomes of a delivery taken out of the FIFO. */
enum { FATE_ACK = 0, FATE_DEAD_LETTER, FATE_GIVE_BACK };

typedef struct fate {
    int what;
    pend p;    /* taken out of the FIFO (warren__pend_take) */
    char *why; /* FATE_DEAD_LETTER: new */
} fate;

static int cmp_pend_key(const void *a, const void *b)
{
    const pend *const *x = a, *const *y = b;
    return strcmp((*x)->msg.run_key, (*y)->msg.run_key);
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
            if (w->slots[k].state != SLOT_FREE && !w->slots[k].take && /* a take holds no claim */
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

/* The database's now estimated from the monotonic clock (read again every
 * CLOCK_RESAMPLE_MS, from the midpoint of a round trip). Only
 * for when to claim an early delivery: warren.claim itself waits on the
 * database's clock, so an estimate off by a little costs a short wait in the
 * claim, never an early start. -1 if the database cannot be read. */
static warren_us db_now_est(warren_worker *w)
{
    int64_t now = warren__mono_ms();
    if (w->clock.at_ms == 0 || now - w->clock.at_ms >= CLOCK_RESAMPLE_MS) {
        warren_error e = {0};
        warren_us db;
        int64_t m0 = warren__mono_us();
        int rc = warren_store_now(w->st, &db, &e);
        int64_t m1 = warren__mono_us();
        if (rc != 0) {
            warren__worker_store_failed(w, rc, &e, "read the database clock");
            return -1;
        }
        if (warren__clock_reading(m0, m1, db, w->clock.at_ms != 0, &w->clock.off)) {
            w->clock.at_ms = now;
        } else {
            w->clock.at_ms = now - CLOCK_RESAMPLE_MS + CLOCK_RETRY_MS; /* read again soon */
            if (w->clock.at_ms <= 0)
                w->clock.at_ms = 1;
            warren_log(w->lg, WARREN_LOG_DEBUG,
                       "worker %s: database clock read in %lld us (over %d): not used", w->id,
                       (long long)(m1 - m0), CLOCK_RTT_MAX_US);
        }
    }
    return warren__db_now_cached(&w->clock);
}

/* How far ahead of its due time a delivery is held at most. */
static int64_t hold_max_us(const warren_worker *w)
{
    return w->cfg->planner.release_lead_ms * 1000 + HOLD_MARGIN_US;
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
    w->q.held = 0;
    w->q.next_due = 0;
    /* A delivery whose batch timed out on the server (a row lock held by an
     * operator's transaction, say) goes on its own, one per turn, and one
     * whose own claim timed out waits CLAIM_ALONE_RETRY_MS: the others'
     * batches never contain it, so they are not held up by its row. */
    int64_t mono = warren__mono_ms();
    for (size_t i = 0; i < w->q.len && n > 0; i++) {
        pend *p = warren__pq_at(&w->q, i);
        if (p->foreign == NULL && p->claim_alone && mono >= p->claim_retry_mono &&
            (p->msg.due_at <= now + CLAIM_AHEAD_US || p->msg.due_at > now + hold_max_us(w))) {
            p->picked = 1;
            batch[0] = p;
            return 1;
        }
    }
    for (size_t i = 0; i < w->q.len; i++) {
        pend *p = warren__pq_at(&w->q, i);
        if (p->foreign != NULL) {
            w->q.held++; /* settle_foreign's */
            continue;
        }
        if (p->claim_alone) {
            w->q.held++; /* claimed on its own, above, once its retry time comes */
            continue;
        }
        /* Due further ahead than any early release: its body is wrong (or a
         * clock is); picked now, so that the database decides. */
        if (p->msg.due_at > now + hold_max_us(w) && !p->picked) {
            if (got < n) {
                p->picked = 1;
                batch[got++] = p;
            }
            continue;
        }
        if (p->msg.due_at > now + CLAIM_AHEAD_US) {
            if (w->q.next_due == 0 || p->msg.due_at < w->q.next_due)
                w->q.next_due = p->msg.due_at;
            w->q.held++;
        } else if (got < n) {
            p->picked = 1;
            batch[got++] = p;
        }
    }
    return got;
}

/* Settles fates[0..n) (after the FIFO was updated: an ack or dead letter that
 * finds the connection lost empties the FIFO) and frees them. */
static void settle_fates(warren_worker *w, fate *f, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (f[i].what == FATE_DEAD_LETTER && w->b != NULL && f[i].p.gen == w->gen)
            warren__dead_letter(w, &f[i].p.d, f[i].why ? f[i].why : "not a run");
        else if (f[i].what == FATE_GIVE_BACK)
            warren__give_back(w, &f[i].p);
        else if (f[i].what == FATE_ACK)
            warren__ack(w, f[i].p.d.tag, f[i].p.gen, NULL);
        free(f[i].why);
        warren__pend_clear(&f[i].p);
    }
}

/* Runs this worker cannot handle (judge: JUDGED_FOREIGN). A run that does not
 * exist is dead-lettered at once, a stale copy (the run is not published)
 * acknowledged; a published run is given back to its queue, so that a
 * worker that knows its job takes it, FOREIGN_GIVE_BACKS times, each time
 * held a little longer first (a run that comes straight back to this worker
 * does not spin); then warren.refuse makes it dead with the reason, and its
 * delivery is acknowledged: the run stops coming back (the reconciler
 * republishes published runs only). */
static void settle_foreign(warren_worker *w)
{
    int64_t now = warren__mono_ms();
    fate *f = NULL;
    size_t nf = 0, nforeign = 0;

    for (size_t i = 0; i < w->q.len; i++)
        nforeign += warren__pq_at(&w->q, i)->foreign != NULL;
    if (nforeign == 0 || !warren__worker_store_ready(w))
        return;
    if ((f = calloc(nforeign, sizeof(*f))) == NULL)
        return;
    for (size_t i = 0; i < w->q.len; i++) {
        pend *p = warren__pq_at(&w->q, i);
        warren_error e = {0};
        const char *key = p->msg.run_key;
        if (p->foreign == NULL || p->picked || now < p->hold_until)
            continue;
        refusal *r = warren__refusal_of(&w->q, key, 1);
        if (r->count > 0 && now - r->at_ms > FOREIGN_FORGET_MS)
            r->count = 0; /* an old story (replayed since?): start again */
        if (r->count < FOREIGN_GIVE_BACKS) {
            if (r->count == 0) {
                /* First sight: is it a run at all? */
                warren_run_state rs;
                int rc = warren_store_run_states(w->st, &key, 1, &rs, NULL, &e);
                if (rc == WARREN_EDBCONN) {
                    warren__worker_store_failed(w, rc, &e, "read a run's state");
                    break;
                }
                if (rc != 0) {
                    /* Refused for this run alone (a revoked queue, a database
                     * without this version's functions): it must not stop the
                     * loop's other calls. Given back, as if it were published. */
                    warren_log(w->lg, WARREN_LOG_WARN,
                               "worker %s: reading the state of %s failed (%s): giving it back",
                               w->id, key, e.message);
                    rs.found = 1;
                    snprintf(rs.state, sizeof(rs.state), "published");
                }
                if (!rs.found || strcmp(rs.state, "published") != 0) {
                    f[nf].what = rs.found ? FATE_ACK : FATE_DEAD_LETTER;
                    f[nf].why = rs.found ? NULL : strdup(p->foreign);
                    if (rs.found)
                        w->stats.duplicates++;
                    memset(r, 0, sizeof(*r));
                    warren__pend_take(p, &f[nf++].p);
                    continue;
                }
            }
            r->count++;
            r->at_ms = now;
            warren_log(w->lg, WARREN_LOG_WARN,
                       "worker %s: giving %s back to its queue (%d of %d): %s", w->id, key,
                       r->count, FOREIGN_GIVE_BACKS, p->foreign);
            f[nf].what = FATE_GIVE_BACK;
            warren__pend_take(p, &f[nf++].p);
            continue;
        }
        char state[16];
        char *why = warren__fmt_error("%s; no worker of its queue took it after %d give-backs",
                                      p->foreign, FOREIGN_GIVE_BACKS);
        int rc = warren_store_refuse(w->st, key, w->id, why ? why : p->foreign, state,
                                     sizeof(state), &e);
        if (rc == WARREN_EDBCONN) {
            free(why);
            warren__worker_store_failed(w, rc, &e, "refuse a run");
            break;
        }
        if (rc != 0) {
            /* Refused for this run alone (e.g. its queue was revoked from this
             * login): given back and tried again after the next give-back's
             * hold, without stopping the loop's other calls. */
            warren_log(w->lg, WARREN_LOG_WARN, "worker %s: refusing %s failed (%s): giving it back",
                       w->id, key, e.message);
            free(why);
            r->at_ms = now;
            f[nf].what = FATE_GIVE_BACK;
            warren__pend_take(p, &f[nf++].p);
            continue;
        }
        warren_log(w->lg, WARREN_LOG_WARN, "worker %s: %s: %s (run %s)", w->id, key,
                   why ? why : p->foreign,
                   state[0] == '\0'             ? "does not exist"
                   : strcmp(state, "dead") == 0 ? "now dead"
                                                : state);
        memset(r, 0, sizeof(*r));
        if (state[0] == '\0') {
            f[nf].what = FATE_DEAD_LETTER; /* not a run: its only trace is the dead letter */
            f[nf].why = why;
        } else {
            f[nf].what = FATE_ACK; /* dead (its dead letter is in the outbox), or stale */
            free(why);
        }
        warren__pend_take(p, &f[nf++].p);
    }
    if (nf > 0)
        warren__pq_drop_picked(&w->q);
    settle_fates(w, f, nf);
    free(f);
}

/* Deliveries claim_many gave no row for (un[0..n)): the database decides. A
 * published run that is not due yet on the database's clock is held until
 * its due time there (the estimate, or the message's due_at, was early); a
 * run that does not exist is dead-lettered (a forged or corrupted message);
 * everything else (finished, leased elsewhere, held back by its overlap
 * policy, a stale copy of a retry or a run due beyond any early release) is
 * acknowledged as a duplicate. Those to settle go into f (nf). Returns 0, or
 * the store's error (then the deliveries stay in the FIFO, unpicked). */
static int settle_unclaimed(warren_worker *w, pend **un, size_t n, fate *f, size_t *nf)
{
    const char **keys = calloc(n, sizeof(*keys));
    warren_run_state *rs = calloc(n, sizeof(*rs));
    warren_error e = {0};
    warren_us db_now = 0;
    int rc;

    if (keys == NULL || rs == NULL) {
        free(keys);
        free(rs);
        return WARREN_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        keys[i] = un[i]->msg.run_key;
    rc = warren_store_run_states(w->st, keys, n, rs, &db_now, &e);
    if (rc == WARREN_EDBCONN) {
        for (size_t i = 0; i < n; i++)
            un[i]->picked = 0;
        warren__worker_store_failed(w, rc, &e, "read run states");
        goto out;
    }
    if (rc != 0) {
        /* Not a lost connection but a refusal that would come back every
         * time (a timeout on a locked row, a database without this version's
         * functions): the claim gave no row, so they are acknowledged as
         * duplicates, as before warren.run_states (the reconciler republishes
         * a published run that is lost that way), rather than holding up
         * every other call of the loop. */
        warren_log(w->lg, WARREN_LOG_WARN,
                   "worker %s: reading the state of %zu unclaimed run%s failed (%s): dropped as "
                   "duplicates",
                   w->id, n, n == 1 ? "" : "s", e.message);
        for (size_t i = 0; i < n; i++) {
            w->stats.duplicates++;
            f[*nf].what = FATE_ACK;
            warren__pend_take(un[i], &f[(*nf)++].p);
        }
        rc = 0;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        pend *p = un[i];
        if (rs[i].found && strcmp(rs[i].state, "published") == 0 && rs[i].due_at > db_now &&
            rs[i].due_at <= db_now + hold_max_us(w)) {
            warren_log(w->lg, WARREN_LOG_DEBUG,
                       "worker %s: %s is due in %lld ms on the database's clock: held", w->id,
                       p->msg.run_key, (long long)((rs[i].due_at - db_now) / 1000));
            p->msg.due_at = rs[i].due_at; /* the database's word, not the body's */
            p->picked = 0;
            w->clock.at_ms = 1; /* the estimate was early: read the clock again */
            continue;
        }
        if (!rs[i].found) {
            f[*nf].what = FATE_DEAD_LETTER;
            f[*nf].why = warren__fmt_error("no run %s in the database that worker %s may see: "
                                           "a forged or corrupted message, a deleted run, or a "
                                           "run of a queue this worker's login is not granted "
                                           "(`warren grant LOGIN QUEUE`)",
                                           p->msg.run_key, w->id);
        } else {
            w->stats.duplicates++;
            warren_log(w->lg, WARREN_LOG_DEBUG,
                       "worker %s: %s not claimable (%s: finished, leased elsewhere, held back or "
                       "a stale copy); dropped",
                       w->id, p->msg.run_key, rs[i].state);
            f[*nf].what = FATE_ACK;
        }
        warren__pend_take(p, &f[(*nf)++].p);
    }
out:
    free(keys);
    free(rs);
    return rc;
}

/* An sql run its pool thread may take in its effect's transaction
 * (warren.take_many) instead of this loop claiming it: a job that needs no
 * committed claim (overlap allow or skip, no cap, as far as this worker's
 * config says: take_many has the database's word, and takes a skip job's run
 * only under the job's overlap lock, with none of its runs running) and a
 * statement measured (in this process) at most one batch's budget: a slow
 * one, or one not measured yet, is claimed, and so seen running and
 * heartbeated, with its row not locked, while it runs. Not after a take
 * gave it back or a claim of it went wrong. */
static int take_ok(warren_worker *w, const pend *p)
{
    const warren_job *j = p->job;
    if (!w->cfg->worker.sql_take || j == NULL || j->handler != WARREN_HANDLER_SQL ||
        j->sql == NULL ||
        (j->overlap != WARREN_OVERLAP_ALLOW && j->overlap != WARREN_OVERLAP_SKIP) ||
        j->max_running > 0 || j->max_running_per_tenant > 0 || p->no_take || p->answer_lost ||
        p->claim_alone)
        return 0;
    int64_t cost = warren__sql_cost_of(w->se, j->sql);
    return cost >= 0 && cost <= WARREN_SQL_BATCH_BUDGET_US;
}

/* Claims as many due deliveries as there are free slots, in one batch. */
void warren__claim_pending(warren_worker *w)
{
    size_t n, nt = 0;
    pend **batch = NULL, **un = NULL, **tk = NULL;
    const char **keys = NULL;
    warren_claim *cl = NULL;
    fate *f = NULL;
    size_t nf = 0, nun = 0;
    warren_error e = {0};
    int rc;

    settle_foreign(w);
    n = (size_t)free_slots(w);
    if (n > w->q.len)
        n = w->q.len;
    if (n == 0 || !warren__worker_store_ready(w))
        return;
    /* every delivery is held and the first is not due yet: nothing to scan */
    if (w->q.len == w->q.held && w->q.next_due != 0 && w->clock.at_ms != 0 &&
        warren__db_now_cached(&w->clock) < w->q.next_due - CLAIM_AHEAD_US)
        return;
    batch = calloc(n, sizeof(*batch));
    keys = calloc(n, sizeof(*keys));
    cl = calloc(n, sizeof(*cl));
    un = calloc(n, sizeof(*un));
    f = calloc(n, sizeof(*f));
    tk = calloc(n, sizeof(*tk));
    if (batch == NULL || keys == NULL || cl == NULL || un == NULL || f == NULL || tk == NULL)
        goto out;
    if ((n = pick_due(w, n, batch)) == 0)
        goto out;
    /* The sql runs a pool thread takes in their effect's transaction leave
     * the claim batch (tk); the rest are claimed here. Not a lone one: it
     * saves a commit, but its claim then waits for a handler thread to wake
     * up (200 runs/s spread over the second, 6 interleaved pairs: start p99
     * 9-19 ms taken, 6-13 ms claimed); when several are due at once the
     * commits saved are what counts (docs/benchmarks.md). */
    {
        size_t nc = 0;
        for (size_t i = 0; i < n; i++)
            if (take_ok(w, batch[i]))
                tk[nt++] = batch[i];
            else
                batch[nc++] = batch[i];
        if (nt < TAKE_MIN) {
            for (size_t i = 0; i < nt; i++)
                batch[nc++] = tk[i];
            nt = 0;
        }
        n = nc;
    }
    /* One lock order for every batch: no deadlocks between workers. */
    qsort(batch, n, sizeof(*batch), cmp_pend_key);
    for (size_t i = 0; i < n; i++)
        keys[i] = batch[i]->msg.run_key;
    int64_t sent = warren__mono_ms();
    rc = n > 0 ? claim_batch(w, batch, keys, n, cl, &e) : 0;
    if (rc != 0)
        for (size_t i = 0; i < nt; i++)
            tk[i]->picked = 0; /* taken next time */
    if (rc != 0 && warren_store_timed_out(w->st)) {
        /* statement_timeout or lock_timeout: the server refused the batch
         * whole, so nothing was claimed. Its deliveries go on their own from
         * now on (pick_due); one that timed out alone waits a little. */
        for (size_t i = 0; i < n; i++) {
            batch[i]->picked = 0;
            if (n == 1 && batch[i]->claim_alone)
                batch[i]->claim_retry_mono = warren__mono_ms() + CLAIM_ALONE_RETRY_MS;
            batch[i]->claim_alone = 1;
        }
        warren__worker_store_failed(w, rc, &e, "claim");
        goto out;
    }
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
    if (n > 0)
        warren__worker_store_ok(w);
    /* the whole claim batch is queued before a pool thread takes any of it:
     * its sql runs then share transactions (worker.sql_batch) */
    warren__hpool_hold(w->hp, 1);
    for (size_t i = 0; i < nt; i++)
        if (warren__slot_take(w, warren__slot_alloc(w), tk[i], sent) != 0) {
            tk[i]->picked = 0; /* claimed next time (the slot was released) */
            tk[i]->no_take = 1;
        }
    for (size_t i = 0; i < n; i++) {
        if (cl[i].claimed)
            warren__slot_start(w, warren__slot_alloc(w), batch[i], &cl[i], sent);
        else
            un[nun++] = batch[i];
    }
    warren__hpool_hold(w->hp, 0);
    /* Never acknowledged as a duplicate on the strength of an estimate: ask. */
    if (nun > 0)
        settle_unclaimed(w, un, nun, f, &nf);
    warren__pq_drop_picked(&w->q);
    settle_fates(w, f, nf);
out:
    if (cl != NULL)
        for (size_t i = 0; i < n; i++)
            warren_claim_clear(&cl[i]);
    free(batch);
    free(keys);
    free(cl);
    free(un);
    free(f);
    free(tk);
}

int64_t warren__claim_deadline(warren_worker *w)
{
    int64_t d = INT64_MAX, now = warren__mono_ms();
    int room = free_slots(w) > 0;
    if (room && w->q.next_due != 0 && w->clock.at_ms != 0) {
        /* an early delivery falls due (on the estimate of the database's clock) */
        int64_t until =
            (w->q.next_due - CLAIM_AHEAD_US - warren__db_now_cached(&w->clock) + 999) / 1000;
        d = now + (until > 0 ? until : 0);
    }
    for (size_t i = 0; i < w->q.len; i++) {
        const pend *p = warren__pq_at(&w->q, i);
        if (p->foreign != NULL && !p->picked && p->hold_until < d)
            d = p->hold_until; /* settle_foreign gives it back, or refuses it */
        else if (room && p->claim_alone && p->claim_retry_mono < d)
            d = p->claim_retry_mono;
    }
    return d;
}
