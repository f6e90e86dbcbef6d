/* check_testenv.c: testenv gives each test its own database and vhost on the
 * real servers of tests/servers.sh, and fails (never skips) without them. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <amqp.h>
#include <amqp_tcp_socket.h>

#include "testenv.h"

/* Declares a classic queue `queue` on the vhost of amqp_url and publishes n
 * messages to it; the channel close waits until the broker processed them. */
static void publish_n(const char *amqp_url, const char *queue, int n)
{
    char *buf = strdup(amqp_url);
    struct amqp_connection_info ci;
    amqp_default_connection_info(&ci);
    ck_assert_int_eq(amqp_parse_url(buf, &ci), AMQP_STATUS_OK);
    amqp_connection_state_t conn = amqp_new_connection();
    amqp_socket_t *sock = amqp_tcp_socket_new(conn);
    struct timeval tv = {10, 0};
    ck_assert_int_eq(amqp_socket_open_noblock(sock, ci.host, ci.port, &tv), AMQP_STATUS_OK);
    amqp_rpc_reply_t r =
        amqp_login(conn, ci.vhost, 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, ci.user, ci.password);
    ck_assert_int_eq(r.reply_type, AMQP_RESPONSE_NORMAL);
    amqp_channel_open(conn, 1);
    ck_assert_int_eq(amqp_get_rpc_reply(conn).reply_type, AMQP_RESPONSE_NORMAL);
    amqp_queue_declare(conn, 1, amqp_cstring_bytes(queue), 0, 0, 0, 0, amqp_empty_table);
    ck_assert_int_eq(amqp_get_rpc_reply(conn).reply_type, AMQP_RESPONSE_NORMAL);
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(amqp_basic_publish(conn, 1, amqp_empty_bytes, amqp_cstring_bytes(queue), 0,
                                            0, NULL, amqp_cstring_bytes("hello")),
                         AMQP_STATUS_OK);
    ck_assert_int_eq(amqp_channel_close(conn, 1, AMQP_REPLY_SUCCESS).reply_type,
                     AMQP_RESPONSE_NORMAL);
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
    free(buf);
}

START_TEST(test_testenv_db_is_fresh_and_writable)
{
    char *a = testenv_db();
    char *b = testenv_db();
    ck_assert_str_ne(a, b);
    ck_assert_int_eq(testenv_psql(a, "CREATE TABLE t (x int); INSERT INTO t VALUES (1), (2)", NULL),
                     2);
    char *n = testenv_sql1(a, "SELECT count(*) FROM t");
    ck_assert_str_eq(n, "2");
    free(n);
    /* The other database does not see it. */
    ck_assert_int_eq(testenv_psql(b, "SELECT count(*) FROM t", NULL), -1);
    char *db = testenv_sql1(a, "SELECT current_database()");
    ck_assert_ptr_nonnull(strstr(a, db));
    ck_assert_int_eq(strncmp(db, "warren_t_", 9), 0);
    free(db);
    free(a);
    free(b);
}
END_TEST

START_TEST(test_testenv_db_migrated_has_the_schema)
{
    char *url = testenv_db_migrated();
    char *n = testenv_sql1(url, "SELECT count(*) FROM pg_tables WHERE schemaname = 'warren' "
                                "AND tablename IN ('jobs', 'runs')");
    ck_assert_str_eq(n, "2");
    free(n);
    free(url);
}
END_TEST

START_TEST(test_testenv_psql_reports_errors_and_values)
{
    char *url = testenv_db();
    char *v = (char *)"untouched";
    ck_assert_int_eq(testenv_psql(url, "SELECT * FROM no_such_table", &v), -1);
    ck_assert_ptr_null(v);
    ck_assert_int_eq(testenv_psql(url, "SELECT NULL::text", &v), 1);
    ck_assert_ptr_null(v);
    ck_assert_int_eq(testenv_psql(url, "SELECT 'a' UNION ALL SELECT 'b'", &v), 2);
    ck_assert_str_eq(v, "a");
    free(v);
    free(url);
}
END_TEST

START_TEST(test_testenv_vhosts_are_isolated)
{
    char *a = testenv_vhost();
    char *b = testenv_vhost();
    ck_assert_str_ne(a, b);
    publish_n(a, "q", 3);
    ck_assert_int_eq(testenv_queue_depth(a, "q"), 3);
    ck_assert_int_eq(testenv_queue_depth(b, "q"), -1);
    free(a);
    free(b);
}
END_TEST

START_TEST(test_testenv_http_reads_the_management_api)
{
    char *url = testenv_vhost();
    publish_n(url, "q", 1);
    char *vh = testenv_vhost_path(url);
    size_t plen = strlen(vh) + 64;
    char *path = malloc(plen);
    snprintf(path, plen, "/api/queues/%s/q", vh);
    char *body = NULL;
    ck_assert_int_eq(testenv_http("GET", path, NULL, &body), 200);
    ck_assert_ptr_nonnull(strstr(body, "\"name\":\"q\""));
    free(body);
    snprintf(path, plen, "/api/queues/%s/nope", vh);
    ck_assert_int_eq(testenv_http("GET", path, NULL, &body), 404);
    free(body);
    free(path);
    free(vh);
    free(url);
}
END_TEST

START_TEST(test_testenv_vhost_name_decodes_default_vhost)
{
    char *n = testenv_vhost_name("amqp://guest:guest@127.0.0.1:55672/%2f");
    ck_assert_str_eq(n, "/");
    free(n);
    n = testenv_vhost_path("amqp://guest:guest@127.0.0.1:55672/%2f");
    ck_assert_str_eq(n, "%2F");
    free(n);
}
END_TEST

START_TEST(test_testenv_unique_names_differ)
{
    char *a = testenv_unique_name("Warren-T");
    char *b = testenv_unique_name("Warren-T");
    ck_assert_str_ne(a, b);
    ck_assert_int_eq(strncmp(a, "warren_t_", 9), 0);
    free(a);
    free(b);
    char long_prefix[100];
    memset(long_prefix, 'x', sizeof long_prefix - 1);
    long_prefix[99] = '\0';
    a = testenv_unique_name(long_prefix);
    ck_assert_uint_le(strlen(a), 63);
    free(a);
}
END_TEST

/* The execution-log check fails when it should: a run executed twice, a run
 * never executed, an execution of a run nobody expected; and passes once the
 * duplicate is explained. */
START_TEST(test_testenv_executions_mismatch_names_duplicates_missing_and_unexpected)
{
    char *url = testenv_db();
    char path[] = "/tmp/warren-check-testenv-execlog-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs("a@1 1 first\nb@1 1\nb@1 2 again\nz@9 1\n\n", f);
    fclose(f);
    testenv_execlog_create(url);
    ck_assert_int_eq(testenv_execlog_load(url, path), 4);
    ck_assert_int_eq(testenv_execlog_load(url, "/nonexistent/execlog"), 0);
    unlink(path);
    char *v = testenv_sql1(
        url, "SELECT string_agg(run_key || ':' || coalesce(attempt::text, "
             "'-') || ':' || who, ',' ORDER BY run_key, attempt) FROM " TESTENV_EXECLOG);
    ck_assert_str_eq(v, "a@1:1:a@1 1 first,b@1:1:b@1 1,b@1:2:b@1 2 again,z@9:1:z@9 1");
    free(v);
    const char *runs = "SELECT unnest(ARRAY['a@1', 'b@1', 'c@1'])";
    char *why = testenv_executions_mismatch(url, runs, NULL, NULL);
    ck_assert_ptr_nonnull(why);
    ck_assert_msg(strstr(why, "1 expected run(s) never executed: c@1") != NULL, "%s", why);
    ck_assert_msg(strstr(why, "1 run(s) executed more than once, not caused by the test: b@1 x2") !=
                      NULL,
                  "%s", why);
    ck_assert_msg(strstr(why, "1 execution(s) of unexpected runs: z@9 x1") != NULL, "%s", why);
    free(why);
    /* b's second execution explained, c not expected, z's not counted */
    why = testenv_executions_mismatch(
        url, "SELECT unnest(ARRAY['a@1', 'b@1'])",
        "SELECT run_key FROM " TESTENV_EXECLOG " WHERE run_key <> 'z@9'", "SELECT 'b@1'");
    ck_assert_msg(why == NULL, "%s", why);
    /* exactly once means exactly once */
    why = testenv_executions_mismatch(
        url, "SELECT unnest(ARRAY['a@1', 'b@1'])",
        "SELECT run_key FROM " TESTENV_EXECLOG " WHERE run_key <> 'z@9'", NULL);
    ck_assert_ptr_nonnull(why);
    free(why);
    free(url);
}
END_TEST

/* The identity a restart proof compares: present for both servers, stable
 * while they run. */
START_TEST(test_testenv_server_identity_is_stable_without_a_restart)
{
    const char *which[] = {"pg", "rabbit"};
    for (int i = 0; i < 2; i++) {
        char *a = testenv_server_identity(which[i]);
        char *b = testenv_server_identity(which[i]);
        ck_assert_msg(a != NULL, "no identity for %s", which[i]);
        ck_assert_ptr_nonnull(b);
        ck_assert_str_eq(a, b);
        ck_assert_ptr_nonnull(strstr(a, i == 0 ? "postmaster started " : " os pid "));
        free(a);
        free(b);
    }
}
END_TEST

/* The shared helpers: the first value or "SQLSTATE: message", the URL as
 * another login, a number (none fails the test), waiting for a value. */
START_TEST(test_testenv_sql_helpers_give_values_errors_and_wait)
{
    char *url = testenv_db();
    char *v = testenv_try_sql(url, "SELECT 'a' UNION ALL SELECT 'b'");
    ck_assert_str_eq(v, "a");
    free(v);
    v = testenv_try_sql(url, "SELECT NULL::text");
    ck_assert_str_eq(v, "");
    free(v);
    v = testenv_try_sql(url, "SELECT * FROM no_such_table");
    ck_assert_str_eq(v, "42P01: relation \"no_such_table\" does not exist");
    free(v);
    ck_assert_sql_eq(url, "SELECT 6 * 7", "42");
    ck_assert_sql_prefix(url, "SELECT 1/0", "22012: ");
    ck_assert_sqlf(url, "<null>", "SELECT NULL::int + %d", 1);
    ck_assert_int_eq(testenv_sql_long(url, "SELECT 6 * 7"), 42);
    testenv_exec(url, "CREATE TABLE t (x int)");
    ck_assert_int_eq(testenv_wait_for(url, "0", 0, "SELECT count(*) FROM t"), 1);
    ck_assert_int_eq(testenv_wait_forf(url, "1", 300, "SELECT count(*) FROM %s", "t"), 0);
    /* a server that is not there is "not yet", not an error */
    ck_assert_int_eq(testenv_wait_for("postgresql://nobody@127.0.0.1:1/none", "1", 0, "SELECT 1"),
                     0);
    char *as = testenv_url_as("postgresql://postgres@127.0.0.1:55432/db?x=1", "app");
    ck_assert_str_eq(as, "postgresql://app@127.0.0.1:55432/db?x=1");
    free(as);
    free(url);
}
END_TEST

/* A value that is not there fails the test (exit 1). */
START_TEST(test_testenv_sql_long_fails_on_null)
{
    char *url = testenv_db();
    testenv_sql_long(url, "SELECT NULL::int");
}
END_TEST

/* An error in the statement fails the wait at once (exit 1). */
START_TEST(test_testenv_wait_for_fails_on_an_sql_error)
{
    char *url = testenv_db();
    testenv_wait_for(url, "1", 60000, "SELECT * FROM no_such_table");
}
END_TEST

/* Files: written with a mode, read whole (or "" when missing, or into a
 * buffer), waited for. */
START_TEST(test_testenv_files)
{
    char *dir = testenv_tmpdir("warren-check-testenv");
    char *path = testenv_fmt("%s/f", dir);
    struct stat st;
    size_t len = 0;
    char buf[4];
    char *t = testenv_read_file_or_empty(path);
    ck_assert_str_eq(t, "");
    free(t);
    ck_assert_int_eq(testenv_file_wait(path, "x", 100), 0);
    testenv_write_bytes(path, "a\0bx", 4, 0600);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    t = testenv_read_file(path, &len);
    ck_assert_uint_eq(len, 4);
    ck_assert_int_eq(memcmp(t, "a\0bx", 5), 0);
    free(t);
    ck_assert_int_eq(testenv_file_wait(path, "bx", 0), 0); /* after a NUL: not text */
    testenv_write_file(path, "hello\n", 0755);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0755);
    testenv_read_into(path, buf, sizeof(buf));
    ck_assert_str_eq(buf, "hel");
    ck_assert_int_eq(testenv_file_wait(path, "llo", 0), 1);
    unlink(path);
    rmdir(dir);
    free(path);
    free(dir);
}
END_TEST

START_TEST(test_testenv_time_helpers)
{
    uint64_t s = 1, a = testenv_xorshift(&s), b = testenv_xorshift(&s);
    ck_assert(a != 0 && b != 0 && a != b && s == b);
    ck_assert_int_eq(testenv_at("1970-01-01T00:00:01.5Z"), 1500000);
    int64_t t0 = testenv_mono_ms();
    testenv_sleep_ms(20);
    ck_assert_int_ge(testenv_mono_ms() - t0, 20);
    ck_assert_int_gt(testenv_wall_ms(), 1700000000000LL);
    ck_assert_int_ge(testenv_wall_us() / 1000, testenv_wall_ms() - 1000);
}
END_TEST

/* Without the variable the test must fail (exit 1), not pass or skip. */
START_TEST(test_testenv_fails_without_pg_url)
{
    unsetenv("WARREN_TEST_PG_URL");
    free(testenv_db());
}
END_TEST

START_TEST(test_testenv_fails_without_amqp_url)
{
    unsetenv("WARREN_TEST_AMQP_URL");
    free(testenv_vhost());
}
END_TEST

static Suite *testenv_suite(void)
{
    Suite *s = suite_create("testenv");
    TCase *pg = tcase_create("postgresql");
    tcase_add_test(pg, test_testenv_db_is_fresh_and_writable);
    tcase_add_test(pg, test_testenv_db_migrated_has_the_schema);
    tcase_add_test(pg, test_testenv_psql_reports_errors_and_values);
    tcase_add_test(pg, test_testenv_executions_mismatch_names_duplicates_missing_and_unexpected);
    tcase_add_test(pg, test_testenv_sql_helpers_give_values_errors_and_wait);
    tcase_add_exit_test(pg, test_testenv_sql_long_fails_on_null, 1);
    tcase_add_exit_test(pg, test_testenv_wait_for_fails_on_an_sql_error, 1);
    suite_add_tcase(s, pg);
    TCase *mq = tcase_create("rabbitmq");
    tcase_add_test(mq, test_testenv_vhosts_are_isolated);
    tcase_add_test(mq, test_testenv_http_reads_the_management_api);
    tcase_add_test(mq, test_testenv_vhost_name_decodes_default_vhost);
    tcase_add_test(mq, test_testenv_server_identity_is_stable_without_a_restart);
    suite_add_tcase(s, mq);
    TCase *names = tcase_create("names");
    tcase_add_test(names, test_testenv_unique_names_differ);
    tcase_add_test(names, test_testenv_files);
    tcase_add_test(names, test_testenv_time_helpers);
    suite_add_tcase(s, names);
    TCase *missing = tcase_create("missing_servers");
    tcase_add_exit_test(missing, test_testenv_fails_without_pg_url, 1);
    tcase_add_exit_test(missing, test_testenv_fails_without_amqp_url, 1);
    suite_add_tcase(s, missing);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(testenv_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
