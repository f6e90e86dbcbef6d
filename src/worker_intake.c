/* worker_intake.c: the C worker's intake (docs/design.md §6.2): reads what
 * the broker delivers, judges each delivery (a run message of a job this
 * worker can run, malformed, or foreign) and queues it in the pending FIFO;
 * dead-letters what is not a run and gives back what arrives while stopping.
 * Meets the claim and settle phases only in the FIFO. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/broker.h>
#include <warren/codec.h>

#include "internal.h"
#include "worker_int.h"

/* Checks a delivery. Returns JUDGED_OK if it is a run this worker can handle
 * (filling p); JUDGED_BAD for what is not a run of this queue (dead-lettered
 * at once); JUDGED_FOREIGN for a run this worker cannot handle but another
 * worker might (a job or in-process handler not in this worker's config: a
 * rolling deploy), which is given back (settle_foreign). The reason goes into
 * why. */
static int judge(warren_worker *w, pend *p, char *why, size_t len)
{
    int rc;
    warren_error e = {0};
    const warren_job *j;
    const char *q = p->d.queue;

    if (p->d.body_dropped > 0) {
        snprintf(why, len,
                 "malformed run message: body of %llu bytes exceeds the %d-byte limit (not kept)",
                 (unsigned long long)p->d.body_dropped, WARREN_MSG_MAX_BODY);
        return JUDGED_BAD;
    }
    if (warren_run_msg_decode(p->d.body ? p->d.body : "", p->d.body ? p->d.body_len : 0, &p->msg,
                              &e) != 0) {
        snprintf(why, len, "%s", e.message);
        return JUDGED_BAD;
    }
    if (p->d.message_id != NULL && strcmp(p->d.message_id, p->msg.run_key) != 0) {
        snprintf(why, len, "malformed run message: message_id \"%s\" differs from run_key \"%s\"",
                 p->d.message_id, p->msg.run_key);
        return JUDGED_BAD;
    }
    /* Only a first look: the handler that runs is the one the claim's
     * answer names (warren__claimed_job), never the message's. */
    j = warren_config_job(w->cfg, p->msg.template_name ? p->msg.template_name : p->msg.job);
    if (j == NULL) {
        snprintf(why, len, "unknown job \"%s\": not in this worker's config (%s)", p->msg.job,
                 w->cfg->path ? w->cfg->path : "config");
        return JUDGED_FOREIGN;
    }
    if ((rc = warren__job_usable(w, j, q, why, len)) != JUDGED_OK)
        return rc;
    p->job = j;
    return JUDGED_OK;
}

/* Reads what the broker has (waiting up to wait_ms for the first). */
void warren__receive(warren_worker *w, int wait_ms, int stopping)
{
    int max = w->prefetch * 2 + 16;
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
            warren__pend_clear(&p);
            continue;
        }
        int verdict = judge(w, &p, why, sizeof(why));
        if (verdict == JUDGED_BAD) {
            warren__dead_letter(w, &p.d, why);
            warren__pend_clear(&p);
            continue;
        }
        if (verdict == JUDGED_FOREIGN) {
            /* settle_foreign decides; one that came back is held first */
            refusal *r = warren__refusal_of(&w->q, p.msg.run_key, 0);
            int64_t times = r != NULL ? r->count : 0;
            /* A redelivery whose story the table lost (more foreign runs in
             * flight than REFUSALS) is still held once: it must not spin. */
            if (times == 0 && p.d.redelivered)
                times = 1;
            p.hold_until = p.received_mono + times * FOREIGN_HOLD_MS;
            if ((p.foreign = strdup(why)) == NULL) {
                warren__dead_letter(w, &p.d, why);
                warren__pend_clear(&p);
                continue;
            }
        }
        if (warren__pq_push(&w->q, &p) != 0) {
            warren_log(w->lg, WARREN_LOG_ERROR, "worker %s: out of memory queueing a delivery",
                       w->id);
            warren__pend_clear(&p);
        }
    }
}
