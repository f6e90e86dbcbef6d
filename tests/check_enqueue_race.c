/* check_enqueue_race.c: warren.enqueue and warren.enqueue_many under
 * concurrency (issue 33 items 7, 8, 10; sql/functions/enqueue.sql,
 * "Locks", "Runs are inserted in one canonical order", "Isolation"), against
 * the real PostgreSQL, by SQL alone (no planner or worker: what is checked
 * is what the calls answer and the rows they leave):
 *  - overlapping arrays in opposite orders from several connections at once,
 *    with single enqueues of the same keys beside them, many rounds: no
 *    error (no deadlock), exactly one run per key, each key created by
 *    exactly one caller (the others answer created = false);
 *  - enqueue (and enqueue_many) racing delete_job, many rounds: a call that
 *    meets the delete in progress waits for it and is refused; no run of the
 *    job appears after its delete;
 *  - REPEATABLE READ and SERIALIZABLE: a concurrent enqueue of the same key
 *    committed after the caller's snapshot raises 40001 naming the key and
 *    the retry; the retried transaction answers created = false. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <libpq-fe.h>

#include "testenv.h"

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* A database with job "mail" (a config job, far-future one-shot). */
static char *db_with_mail(void)
{
    char *db = testenv_db_migrated();
    testenv_exec(db,
                 "INSERT INTO warren.jobs (name, schedule_kind, expression, queue) VALUES ('mail', "
                 "'at', '2099-01-01T00:00:00Z', 'q')");
    return db;
}

/* ------------------------------------------------------------ item 7 */

#define NCALLERS 4

typedef struct caller {
    const char *db;
    pthread_barrier_t *go;
    char *sql;         /* one enqueue_many call, or NULL: single enqueues */
    int lo, hi, round; /* single enqueues: keys lo..hi, descending */
    long created;
    char error[512];
} caller;

static void *call_thread(void *arg)
{
    caller *k = arg;
    PGconn *c = PQconnectdb(k->db);
    k->created = 0;
    k->error[0] = '\0';
    if (PQstatus(c) != CONNECTION_OK) {
        snprintf(k->error, sizeof(k->error), "connect: %s", PQerrorMessage(c));
        pthread_barrier_wait(k->go);
        PQfinish(c);
        return NULL;
    }
    pthread_barrier_wait(k->go);
    if (k->sql != NULL) {
        PGresult *r = PQexec(c, k->sql);
        if (PQresultStatus(r) != PGRES_TUPLES_OK)
            snprintf(k->error, sizeof(k->error), "%s: %s", PQresultErrorField(r, PG_DIAG_SQLSTATE),
                     PQerrorMessage(c));
        else
            k->created = atol(PQgetvalue(r, 0, 0));
        PQclear(r);
    } else {
        for (int i = k->hi; i >= k->lo && k->error[0] == '\0'; i -= 7) {
            char sql[160];
            snprintf(sql, sizeof(sql), "SELECT created FROM warren.enqueue('mail', 'r%d:%06d')",
                     k->round, i);
            PGresult *r = PQexec(c, sql);
            if (PQresultStatus(r) != PGRES_TUPLES_OK)
                snprintf(k->error, sizeof(k->error), "%s: %s",
                         PQresultErrorField(r, PG_DIAG_SQLSTATE), PQerrorMessage(c));
            else if (strcmp(PQgetvalue(r, 0, 0), "t") == 0)
                k->created++;
            PQclear(r);
        }
    }
    PQfinish(c);
    return NULL;
}

/* The JSON array of keys r<round>:<lo..hi> (ascending or descending), as an
 * enqueue_many call counting what it created. */
static char *many_sql(int round, int lo, int hi, int descending)
{
    size_t cap = (size_t)(hi - lo + 1) * 48 + 128, len = 0;
    char *s = malloc(cap);
    ck_assert_ptr_nonnull(s);
    len += (size_t)snprintf(s, cap,
                            "SELECT count(*) FILTER (WHERE created) FROM "
                            "warren.enqueue_many('[");
    for (int j = 0; j <= hi - lo; j++) {
        int i = descending ? hi - j : lo + j;
        len += (size_t)snprintf(s + len, cap - len, "%s{\"job\":\"mail\",\"key\":\"r%d:%06d\"}",
                                j ? "," : "", round, i);
    }
    snprintf(s + len, cap - len, "]')");
    return s;
}

/* Callers 0-3: [0, 3n/4) ascending, [n/4, n) descending, [0, n) descending,
 * [n/8, 7n/8) ascending; and a fifth connection enqueuing every 7th key one
 * by one, descending. Every key is in at least two arrays. */
static void race_round(const char *db, int round, int n)
{
    pthread_barrier_t go;
    caller k[NCALLERS + 1];
    pthread_t th[NCALLERS + 1];
    const int lo[NCALLERS] = {0, n / 4, 0, n / 8},
              hi[NCALLERS] = {3 * n / 4 - 1, n - 1, n - 1, 7 * n / 8 - 1};
    const int desc[NCALLERS] = {0, 1, 1, 0};

    pthread_barrier_init(&go, NULL, NCALLERS + 1);
    for (int t = 0; t <= NCALLERS; t++) {
        memset(&k[t], 0, sizeof(k[t]));
        k[t].db = db;
        k[t].go = &go;
        k[t].round = round;
        if (t < NCALLERS)
            k[t].sql = many_sql(round, lo[t], hi[t], desc[t]);
        else
            k[t].lo = 0, k[t].hi = n - 1;
        ck_assert_int_eq(pthread_create(&th[t], NULL, call_thread, &k[t]), 0);
    }
    long created = 0;
    for (int t = 0; t <= NCALLERS; t++) {
        pthread_join(th[t], NULL);
        ck_assert_msg(k[t].error[0] == '\0', "round %d caller %d: %s", round, t, k[t].error);
        created += k[t].created;
        free(k[t].sql);
    }
    pthread_barrier_destroy(&go);
    ck_assert_msg(created == n, "round %d: %ld keys created in all, want %d (one each)", round,
                  created, n);
    char *want = testenv_fmt("%d|%d", n, n);
    ck_assert_sqlf(db, want,
                   "SELECT count(*) || '|' || count(DISTINCT run_key) FROM warren.runs "
                   "WHERE run_key LIKE 'mail@r%d:%%'",
                   round);
    free(want);
}

START_TEST(test_enqueue_many_opposite_orders_from_several_connections_never_deadlock)
{
    char *db = db_with_mail();
    /* many small rounds (collisions at every key), then the size */
    for (int round = 1; round <= 12; round++)
        race_round(db, round, 3000);
    race_round(db, 100, 30000);
    free(db);
}
END_TEST

/* ------------------------------------------------------------ item 8 */

/* The async call's result: "created" / "refused: MESSAGE" / other errors. */
static char *async_outcome(PGconn *c)
{
    PGresult *r, *last = NULL;
    while ((r = PQgetResult(c)) != NULL) {
        PQclear(last);
        last = r;
    }
    ck_assert_ptr_nonnull(last);
    char *out;
    if (PQresultStatus(last) == PGRES_TUPLES_OK)
        out = testenv_fmt("created=%s", PQgetvalue(last, 0, 0));
    else
        out = testenv_fmt("%s %s", PQresultErrorField(last, PG_DIAG_SQLSTATE),
                          PQresultErrorField(last, PG_DIAG_MESSAGE_PRIMARY));
    PQclear(last);
    return out;
}

/* Each round a new API job; the delete's transaction is open (it holds the
 * job's row) when the enqueue is sent, and commits 0-4 ms later: the
 * enqueue either got to the row before the commit (it waits, then sees the
 * removal) or after it; either way it is refused and no run appears. The
 * old code read `removed` without a lock, before the commit, and its INSERT
 * (the foreign key's lock) waited for the delete and then wrote the run.
 * Odd rounds use enqueue_many. Then the other order: the enqueue's
 * transaction holds the row first and the delete waits for its commit. */
START_TEST(test_enqueue_racing_delete_job_makes_no_run_of_a_deleted_job)
{
    char *db = db_with_mail();
    PGconn *d = testenv_connect(db), *e = testenv_connect(db);
    unsigned seed = (unsigned)time(NULL);
    fprintf(stderr, "check_enqueue_race: delete race seed %u\n", seed);
    srand(seed);
    for (int round = 0; round < 40; round++) {
        char *sql = testenv_fmt(
            "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, origin, template) "
            "VALUES ('api-%d', 'at', '2099-01-01T00:00:00Z', 'q', 'api', 'mail')",
            round);
        testenv_exec(db, sql);
        free(sql);
        testenv_exec_on(d, "BEGIN");
        sql = testenv_fmt("SELECT warren.delete_job('api-%d')", round);
        testenv_exec_on(d, sql);
        free(sql);
        sql = round % 2 ? testenv_fmt("SELECT created FROM warren.enqueue_many('[{\"job\": "
                                      "\"api-%d\", \"key\": \"k\"}]')",
                                      round)
                        : testenv_fmt("SELECT created FROM warren.enqueue('api-%d', 'k')", round);
        ck_assert_int_eq(PQsendQuery(e, sql), 1);
        free(sql);
        sleep_us((long)(rand() % 4000));
        testenv_exec_on(d, "COMMIT");
        char *got = async_outcome(e);
        ck_assert_msg(strncmp(got, "22023 ", 6) == 0 && strstr(got, "was removed") != NULL,
                      "round %d: the enqueue after a delete answered %s", round, got);
        free(got);
        ck_assert_sqlf(db, "0", "SELECT count(*) FROM warren.runs WHERE job = 'api-%d'", round);
    }
    /* The other order: the enqueue's transaction first; the delete waits for
     * it and then finds the run made before it (kept, as enqueued runs are). */
    for (int round = 100; round < 110; round++) {
        char *sql = testenv_fmt(
            "INSERT INTO warren.jobs (name, schedule_kind, expression, queue, origin, template) "
            "VALUES ('api-%d', 'at', '2099-01-01T00:00:00Z', 'q', 'api', 'mail')",
            round);
        testenv_exec(db, sql);
        free(sql);
        testenv_exec_on(e, "BEGIN");
        sql = testenv_fmt("SELECT warren.enqueue('api-%d', 'k')", round);
        testenv_exec_on(e, sql);
        free(sql);
        sql = testenv_fmt("SELECT warren.delete_job('api-%d'); SELECT count(*) FROM warren.runs "
                          "WHERE job = 'api-%d'",
                          round, round);
        ck_assert_int_eq(PQsendQuery(d, sql), 1);
        free(sql);
        sleep_us((long)(rand() % 4000));
        testenv_exec_on(e, "COMMIT");
        PGresult *r, *last = NULL;
        while ((r = PQgetResult(d)) != NULL) {
            ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "delete: %s", PQerrorMessage(d));
            PQclear(last);
            last = r;
        }
        /* the delete's own next statement saw the run: it came before */
        ck_assert_str_eq(PQgetvalue(last, 0, 0), "1");
        PQclear(last);
    }
    PQfinish(d);
    PQfinish(e);
    free(db);
}
END_TEST

/* ------------------------------------------------------------ item 10 */

/* Two connections at level: a's snapshot is taken, b enqueues key k and
 * commits, then a enqueues k (after b's commit: no wait), and c enqueues
 * key w while b2 holds it uncommitted (c waits, then b2 commits). Both a
 * and c raise 40001 naming the key and the retry; the retries answer
 * created = false. */
static void isolation_case(const char *db, const char *level)
{
    PGconn *a = testenv_connect(db), *b = testenv_connect(db);
    char *begin = testenv_fmt("BEGIN ISOLATION LEVEL %s", level);
    testenv_exec_on(a, begin);
    testenv_exec_on(a, "SELECT count(*) FROM warren.runs"); /* the snapshot */
    testenv_exec_on(b, "SELECT warren.enqueue('mail', 'k')");
    PGresult *r = PQexec(a, "SELECT created FROM warren.enqueue('mail', 'k')");
    const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const char *msg = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    ck_assert_msg(st != NULL && strcmp(st, "40001") == 0, "%s, committed before: %s %s", level,
                  st ? st : "no error", msg ? msg : "");
    ck_assert_msg(strstr(msg, "run key \"mail@k\" was enqueued by a transaction that committed") !=
                          NULL &&
                      strstr(msg, "retry the whole transaction") != NULL,
                  "%s: %s", level, msg);
    PQclear(r);
    testenv_exec_on(a, "ROLLBACK");
    testenv_exec_on(a, begin);
    r = PQexec(a, "SELECT created FROM warren.enqueue('mail', 'k')");
    ck_assert_int_eq(PQresultStatus(r), PGRES_TUPLES_OK);
    ck_assert_str_eq(PQgetvalue(r, 0, 0), "f");
    PQclear(r);
    testenv_exec_on(a, "COMMIT");

    /* the same through a wait, and enqueue_many */
    testenv_exec_on(a, begin);
    testenv_exec_on(a, "SELECT count(*) FROM warren.runs");
    testenv_exec_on(b, "BEGIN");
    testenv_exec_on(b, "SELECT warren.enqueue('mail', 'w')");
    ck_assert_int_eq(
        PQsendQuery(a, "SELECT created FROM warren.enqueue_many('[{\"job\": \"mail\", \"key\": "
                       "\"w\"}, {\"job\": \"mail\", \"key\": \"w2\"}]')"),
        1);
    sleep_us(200000);
    testenv_exec_on(b, "COMMIT");
    char *got = async_outcome(a);
    ck_assert_msg(strncmp(got, "40001 ", 6) == 0 && strstr(got, "retry the whole transaction"),
                  "%s, waited: %s", level, got);
    free(got);
    testenv_exec_on(a, "ROLLBACK");
    testenv_exec_on(a, begin);
    testenv_exec_on(a, "CREATE TEMP TABLE IF NOT EXISTS got (v text); TRUNCATE got");
    testenv_exec_on(
        a, "INSERT INTO got SELECT string_agg(created::text, ',' ORDER BY idx) FROM "
           "warren.enqueue_many('[{\"job\": \"mail\", \"key\": \"w\"}, {\"job\": \"mail\", "
           "\"key\": \"w2\"}]')");
    r = PQexec(a, "SELECT v FROM got");
    ck_assert_str_eq(PQgetvalue(r, 0, 0), "false,true");
    PQclear(r);
    testenv_exec_on(a, "COMMIT");
    free(begin);
    PQfinish(a);
    PQfinish(b);
}

START_TEST(test_enqueue_repeatable_read_and_serializable_raise_40001_and_a_retry_answers_false)
{
    char *db = db_with_mail();
    isolation_case(db, "REPEATABLE READ");
    testenv_exec(db, "DELETE FROM warren.runs");
    isolation_case(db, "SERIALIZABLE");
    /* READ COMMITTED: the same wait answers created = false */
    testenv_exec(db, "DELETE FROM warren.runs");
    PGconn *a = testenv_connect(db), *b = testenv_connect(db);
    testenv_exec_on(b, "BEGIN");
    testenv_exec_on(b, "SELECT warren.enqueue('mail', 'rc')");
    ck_assert_int_eq(PQsendQuery(a, "SELECT created FROM warren.enqueue('mail', 'rc')"), 1);
    sleep_us(200000);
    testenv_exec_on(b, "COMMIT");
    char *got = async_outcome(a);
    ck_assert_str_eq(got, "created=f");
    free(got);
    PQfinish(a);
    PQfinish(b);
    free(db);
}
END_TEST

static Suite *race_suite(void)
{
    Suite *s = suite_create("enqueue_race");
    TCase *tc = tcase_create("race");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_enqueue_many_opposite_orders_from_several_connections_never_deadlock);
    tcase_add_test(tc, test_enqueue_racing_delete_job_makes_no_run_of_a_deleted_job);
    tcase_add_test(
        tc, test_enqueue_repeatable_read_and_serializable_raise_40001_and_a_retry_answers_false);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    testenv_pg_admin_url();
    SRunner *sr = srunner_create(race_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
