/* planner_fixture.h: what the planner and relay tests share: a fresh migrated
 * database and a vhost with ready queue "q", and small planner helpers.
 * Header-only (static inline) because tests/CMakeLists.txt links each runner
 * with testenv.c alone. */
#ifndef WARREN_PLANNER_FIXTURE_H
#define WARREN_PLANNER_FIXTURE_H

#include <check.h>
#include <stdlib.h>

#include <warren/broker.h>
#include <warren/planner.h>

#include "testenv.h"

typedef struct env {
    char *db;
    char *amqp;
} env;

static inline env fixture_env_new(void)
{
    static const char *const queues[] = {"q"};
    env e = {testenv_db_migrated(), testenv_vhost()};
    testenv_topology(e.amqp, queues, 1, 5);
    return e;
}

static inline void env_free(env *e)
{
    free(e->db);
    free(e->amqp);
}

static inline warren_planner *planner_new(const env *e, const warren_config *c)
{
    warren_planner *p = NULL;
    warren_error err = {0};
    ck_assert_msg(warren_planner_new(c, e->db, e->amqp, NULL, &p, &err) == 0, "planner: %s",
                  err.message);
    return p;
}

static inline void tick(warren_planner *p)
{
    warren_error err = {0};
    ck_assert_msg(warren_planner_tick(p, &err) == 0, "tick: %s", err.message);
}

#endif
