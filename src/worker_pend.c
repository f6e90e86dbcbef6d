/* worker_pend.c: the C worker's pending deliveries (docs/design.md §6.2), the
 * bottom of its layers (see worker.c): the FIFO of deliveries waiting for a
 * slot or for their due time, the table of runs this worker gave back
 * (refusals), and the estimate of the database's clock. Plain data: it calls
 * no other worker file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/broker.h>
#include <warren/codec.h>

#include "internal.h"
#include "worker_int.h"

void warren__pend_clear(pend *p)
{
    warren_delivery_clear(&p->d);
    warren_run_msg_clear(&p->msg);
    free(p->foreign);
    p->foreign = NULL;
}

/* Moves *p out of the FIFO into *to (the FIFO's entry is left empty and
 * picked, for warren__pq_drop_picked). */
void warren__pend_take(pend *p, pend *to)
{
    *to = *p;
    memset(p, 0, sizeof(*p));
    p->picked = 1;
}

void warren__pend_free(pend *p)
{
    if (p == NULL)
        return;
    warren__pend_clear(p);
    free(p);
}

void warren__pq_clear(pendq *q)
{
    q->held = 0;
    q->next_due = 0;
    while (q->len > 0) {
        warren__pend_clear(&q->items[q->head]);
        q->head = (q->head + 1) % q->cap;
        q->len--;
    }
}

int warren__pq_push(pendq *q, const pend *p)
{
    if (q->len == q->cap) {
        size_t ncap = q->cap ? q->cap * 2 : 64;
        pend *nq = malloc(ncap * sizeof(*nq));
        if (nq == NULL)
            return WARREN_ENOMEM;
        for (size_t i = 0; i < q->len; i++)
            nq[i] = q->items[(q->head + i) % q->cap];
        free(q->items);
        q->items = nq;
        q->cap = ncap;
        q->head = 0;
    }
    q->items[(q->head + q->len) % q->cap] = *p;
    q->len++;
    return 0;
}

int warren__pq_put_back(pendq *q, pend *p)
{
    if (warren__pq_push(q, p) != 0) {
        warren__pend_clear(p);
        return WARREN_ENOMEM;
    }
    return 0;
}

pend *warren__pq_at(pendq *q, size_t i)
{
    return &q->items[(q->head + i) % q->cap];
}

/* Removes the picked deliveries from the FIFO, keeping the others' order. */
void warren__pq_drop_picked(pendq *q)
{
    size_t keep = 0;
    for (size_t i = 0; i < q->len; i++) {
        pend *p = warren__pq_at(q, i);
        if (p->picked) {
            warren__pend_clear(p);
            continue;
        }
        if (keep != i)
            *warren__pq_at(q, keep) = *p;
        keep++;
    }
    q->len = keep;
}

refusal *warren__refusal_of(pendq *q, const char *key, int add)
{
    for (size_t i = 0; i < REFUSALS; i++)
        if (q->refused[i].key[0] != '\0' && strcmp(q->refused[i].key, key) == 0)
            return &q->refused[i];
    if (!add)
        return NULL;
    for (size_t i = 0; i < REFUSALS; i++)
        if (q->refused[i].key[0] == '\0') {
            snprintf(q->refused[i].key, sizeof(q->refused[i].key), "%s", key);
            return &q->refused[i];
        }
    refusal *r = &q->refused[q->refused_next];
    q->refused_next = (q->refused_next + 1) % REFUSALS;
    memset(r, 0, sizeof(*r));
    snprintf(r->key, sizeof(r->key), "%s", key);
    return r;
}

/* The database's now from the last reading of its clock (0: none yet). */
warren_us warren__db_now_cached(const dbclock *c)
{
    return c->at_ms != 0 ? warren__mono_us() + c->off : 0;
}

/* A reading db of the database's clock between monotonic m0 and m1 (us).
 * Within WARREN__CLOCK_RTT_MAX_US: *off = db - the midpoint, returns 1. Slower: too
 * slow to trust the midpoint (it could be off by half the round trip), so the
 * last estimate is kept (have), or for the first one *off is the offset's
 * low end (the clock was read before m1), which is never ahead; returns 0. */
int warren__clock_reading(int64_t m0, int64_t m1, warren_us db, int have, int64_t *off)
{
    if (m1 - m0 <= WARREN__CLOCK_RTT_MAX_US) {
        *off = db - (m0 + (m1 - m0) / 2);
        return 1;
    }
    if (!have)
        *off = db - m1;
    return 0;
}
