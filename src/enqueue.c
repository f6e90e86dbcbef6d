/* enqueue.c: warren_enqueue (include/warren/enqueue.h), a call of the SQL
 * function warren.enqueue (sql/functions/enqueue.sql), which checks the input
 * and decides everything; this file only carries values in and out. */
#include <stdio.h>
#include <string.h>

#include <warren/enqueue.h>

#include "store_int.h"

static const char SQL_ENQUEUE[] =
    "SELECT run_key, created, state, (extract(epoch FROM scheduled_at) * 1000000)::bigint "
    "FROM warren.enqueue($1, $2, $3::timestamptz, $4::jsonb, $5)";

int warren_enqueue(warren_store *st, const char *job, const char *key, const warren_us *at,
                   const char *payload, const char *tenant, warren_enqueue_result *out,
                   warren_error *err)
{
    char tb[WARREN_TIME_BUF];
    const char *p[5] = {job, key, at ? warren__store_us_param(*at, tb, sizeof(tb)) : NULL, payload,
                        tenant};
    PGresult *res = NULL;
    warren_error e = {0};
    int rc;

    memset(out, 0, sizeof(*out));
    rc =
        warren__store_exec_prepared(st, "enqueue", SQL_ENQUEUE, 5, p, &res, "enqueueing a run", &e);
    if (rc != 0) {
        /* Bad input: warren.enqueue's own message says what and how to fix it. */
        if (rc == WARREN_EDB && strcmp(warren__store_sqlstate(st), "22023") == 0)
            rc = WARREN_EINVAL;
        return warren_error_set(err, rc, "%s", e.message);
    }
    if (PQntuples(res) != 1) {
        int n = PQntuples(res);
        PQclear(res);
        return warren_error_set(err, WARREN_EDB, "warren.enqueue returned %d rows, expected 1", n);
    }
    snprintf(out->run_key, sizeof(out->run_key), "%s", warren__store_get_text(res, 0, 0));
    if (warren__store_get_bool(res, 0, 1, &out->created) != 0)
        out->created = 0;
    {
        const char *s = warren__store_get_text(res, 0, 2);
        snprintf(out->state, sizeof(out->state), "%s", s ? s : "");
    }
    if (warren__store_get_us(res, 0, 3, &out->scheduled_at) != 0)
        out->scheduled_at = 0;
    PQclear(res);
    return 0;
}
