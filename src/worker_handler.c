/* worker_handler.c: the handler kinds (docs/design.md §6.3) as the handler
 * pool runs them: an in-process C function, the start of an exec process
 * (so the loop never waits for a spawn; worker_exec.c runs it), and sql
 * statements in batches (worker_sql.c). It gives the generic pool
 * (worker_pool.c) its batch forming and its run function, and frees the
 * handler contexts. */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "worker_int.h"

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

static size_t form(void *ud, warren_handler_ctx *head, warren_handler_ctx **batch, size_t max)
{
    if (head->kind == KIND_SQL)
        return warren__sql_form(ud, head, batch, max);
    batch[0] = head;
    return 1;
}

static void run_batch(void *ud, warren_handler_ctx **batch, size_t n)
{
    if (batch[0]->kind == KIND_SQL)
        warren__sql_run(ud, batch, n);
    else if (batch[0]->kind == KIND_EXEC)
        exec_spawn_run(batch[0]);
    else
        c_run(batch[0]);
}

static void dropped(void *ud, warren_handler_ctx *c)
{
    (void)ud;
    warren__exec_abandoned(c);
    warren__ctx_free(c);
}

static void destroy(void *ud)
{
    warren__sql_free(ud);
}

static const hpool_ops handler_ops = {form, run_batch, dropped, destroy};

struct hpool *warren__handlers_new(int wake_fd, int max, int sql_batch, sqlengine **se,
                                   warren_error *err)
{
    struct hpool *hp;
    if ((*se = warren__sql_new(sql_batch)) == NULL) {
        warren_error_set(err, WARREN_ENOMEM, "out of memory");
        return NULL;
    }
    if ((hp = warren__hpool_new(wake_fd, max, &handler_ops, *se, err)) == NULL) {
        warren__sql_free(*se);
        *se = NULL;
    }
    return hp;
}
