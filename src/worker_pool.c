/* worker_pool.c: the C worker's thread pool (docs/design.md §6.2): persistent
 * threads that run queued handler contexts, one batch per thread at a time,
 * and the wake pipe through which a finished batch wakes the worker's loop.
 * Generic: what a batch is and how it runs are the caller's (hpool_ops,
 * given by worker_handler.c); the pool sees a context's queue link and its
 * done flag only, never a handler kind, a slot or the worker. */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "worker_int.h"

#define BATCH_MAX 64 /* at most this many contexts run as one batch */

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
    int held;             /* warren__hpool_hold: queued runs wait */
    int nwaking;          /* signalled or started, not yet running: at most one */
    int wake_fd;          /* the loop's wake pipe (a duplicate of its write end) */
    int loop_waiting;     /* the loop sleeps (warren__hpool_arm): write to wake_fd */
    uint64_t ndone;       /* handlers finished */
    uint64_t ndone_seen;  /* ... as of the loop's last warren__hpool_arm */
    const hpool_ops *ops; /* the caller's: forms and runs batches */
    void *ud;
} hpool;

/* Frees a pool no thread uses any more. */
static void hpool_destroy(hpool *hp)
{
    if (hp->ops->destroy != NULL)
        hp->ops->destroy(hp->ud);
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
        /* One batch: the contexts queued first that the caller's form()
         * puts together (sql runs sharing a transaction), at least one. */
        warren_handler_ctx *batch[BATCH_MAX];
        size_t nf = hp->ops->form(hp->ud, hp->head, batch, BATCH_MAX), nb = 0;
        assert(nf >= 1 && nf <= BATCH_MAX && batch[0] == hp->head);
        for (size_t i = 0; i < nf; i++) {
            warren_handler_ctx *c = hp->head;
            assert(c == batch[i]);
            hp->head = c->next;
            if (hp->head == NULL)
                hp->tail = NULL;
            hp->nqueued--;
            if (hp->quit && atomic_load_explicit(&c->done, memory_order_acquire) == 2) {
                /* left behind before it started: the worker is gone, do not run it */
                hp->ops->dropped(hp->ud, c);
                continue;
            }
            batch[nb++] = c;
        }
        if (nb == 0)
            continue;
        hp->nbusy++;
        hpool_wake_one(hp); /* more queued: the next thread (failure: a busy one takes it) */
        pthread_mutex_unlock(&hp->mu);
        hp->ops->run(hp->ud, batch, nb);
        /* each belongs to the loop from here on, unless the loop abandoned it
         * (done = 2: it stopped waiting for this handler). */
        for (size_t i = 0; i < nb; i++)
            if (atomic_exchange_explicit(&batch[i]->done, 1, memory_order_acq_rel) == 2)
                hp->ops->dropped(hp->ud, batch[i]);
        pthread_mutex_lock(&hp->mu);
        hp->ndone += nb;
        if (hp->loop_waiting && hp->quit != 2) {
            /* Only when the loop sleeps (warren__hpool_arm) (otherwise it polls the
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

hpool *warren__hpool_new(int wake_fd, int max, const hpool_ops *ops, void *ud, warren_error *err)
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
    hp->ops = ops;
    hp->ud = ud;
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
