/* check_cli.c: the operator commands of the `warren` program (src/cli_worker.c)
 * run as a user runs them, against a real PostgreSQL: `runs` with its filters
 * and its usage errors, `replay --job JOB --dead`, `show` of an unknown run,
 * `enqueue` (the SQL API's warren.enqueue) and its errors.
 * Dead runs are made through the SQL worker protocol (warren.claim, then
 * warren.complete with outcome 'failed'), as any worker would make them. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testenv.h"

/* ------------------------------------------------------------ harness */

typedef struct env {
    char *db, *dir, *cfg_path;
} env;

/* What one `warren` command did: exit status, standard output, standard error. */
typedef struct cli_result {
    int rc;
    char out[16384];
    char err[4096];
} cli_result;

/* A fresh migrated database and a config naming it with jobs alpha and beta,
 * synced by `warren sync`. Nothing runs the jobs: their runs are made by hand. */
static void env_setup(env *e)
{
    memset(e, 0, sizeof(*e));
    /* The config file names the database; nothing in the environment may
     * override it, and the default log level applies (stderr is compared). */
    unsetenv("WARREN_DATABASE_URL");
    unsetenv("WARREN_AMQP_URL");
    unsetenv("WARREN_CONFIG");
    unsetenv("WARREN_LOG");
    e->db = testenv_db_migrated();
    e->dir = testenv_tmpdir("warren-check-cli");
    e->cfg_path = testenv_fmt("%s/warren.cfg", e->dir);
    FILE *f = fopen(e->cfg_path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", e->cfg_path);
    fprintf(f,
            "database = { url = \"%s\"; };\n"
            "jobs = (\n"
            "  { name = \"alpha\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qa\";\n"
            "    handler = { exec = [\"/bin/true\"]; }; },\n"
            "  { name = \"beta\"; at = \"2099-01-01T00:00:00Z\"; queue = \"qa\";\n"
            "    handler = { exec = [\"/bin/true\"]; }; }\n"
            ");\n",
            e->db);
    fclose(f);
    char *cmd = testenv_fmt("%s sync -c %s >/dev/null", WARREN_BINARY, e->cfg_path);
    ck_assert_msg(system(cmd) == 0, "failed: %s", cmd);
    free(cmd);
}

static void env_teardown(env *e)
{
    free(e->db);
    free(e->dir);
    free(e->cfg_path);
}

/* Runs `warren ARGS -c CONFIG` (ARGS split by the shell; keep them plain). */
static void cli(const env *e, cli_result *r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void cli(const env *e, cli_result *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *args = testenv_vfmt(fmt, ap);
    va_end(ap);
    char *cmd = testenv_fmt("%s %s -c %s", WARREN_BINARY, args, e->cfg_path);
    r->rc = testenv_run_split(cmd, r->out, sizeof(r->out), r->err, sizeof(r->err));
    fprintf(stderr, "$ warren %s\n-> exit %d\n%s%s", args, r->rc, r->out, r->err);
    free(cmd);
    free(args);
}

/* A run of job at the RFC 3339 UTC instant `at` (its key JOB@AT), due now;
 * outcome NULL leaves it planned, else one attempt by worker w1 ends with it
 * ("failed": dead at once; "succeeded"), with the error "boom KEY". */
static void make_run(const env *e, const char *job, const char *at, const char *outcome)
{
    char *key = testenv_fmt("%s@%s", job, at);
    ck_assert_sqlf(e->db, key,
                   "INSERT INTO warren.runs (job, scheduled_at, due_at) VALUES ('%s', '%s', now()) "
                   "RETURNING run_key",
                   job, at);
    if (outcome != NULL) {
        ck_assert_sqlf(e->db, "1", "SELECT attempt FROM warren.claim('%s', 'w1')", key);
        ck_assert_sqlf(e->db, "t", "SELECT warren.complete('%s', 1, '%s', 'boom %s')", key, outcome,
                       key);
    }
    free(key);
}

/* The number of lines of s (each ends in '\n'). */
static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* The line `warren runs` prints for run key (from the database's row, in the
 * layout of src/cli_worker.c: times RFC 3339 UTC truncated to milliseconds). */
static char *runs_line(const env *e, const char *key)
{
    return testenv_sql1f(
        e->db,
        "SELECT format('%%-44s %%-10s %%7s %%-24s %%-24s %%s', run_key, state, attempt, "
        "to_char(date_trunc('milliseconds', due_at) AT TIME ZONE 'UTC', "
        "'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), "
        "coalesce(to_char(date_trunc('milliseconds', finished_at) AT TIME ZONE 'UTC', "
        "'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), '-'), "
        "coalesce(split_part(coalesce(last_error, note), E'\\n', 1), '')) || E'\\n' "
        "FROM warren.runs WHERE run_key = '%s'",
        key);
}

#define RUNS_HEADER                                                                                \
    "RUN KEY                                      STATE      ATTEMPT DUE                      "    \
    "FINISHED                 ERROR / NOTE\n"

/* ------------------------------------------------------------ runs */

START_TEST(test_runs_lists_only_the_newest_dead_run_of_the_job_with_limit_1)
{
    env e;
    env_setup(&e);
    /* alpha: dead at 00:00 and 00:01, succeeded at 00:02 (newest, not dead),
     * planned at 00:03; beta: dead at 00:04 (newest dead, other job). */
    make_run(&e, "alpha", "2026-01-01T00:00:00Z", "failed");
    make_run(&e, "alpha", "2026-01-01T00:01:00Z", "failed");
    make_run(&e, "alpha", "2026-01-01T00:02:00Z", "succeeded");
    make_run(&e, "alpha", "2026-01-01T00:03:00Z", NULL);
    make_run(&e, "beta", "2026-01-01T00:04:00Z", "failed");
    cli_result r;

    cli(&e, &r, "runs --job alpha --state dead --limit 1");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_str_eq(r.err, "");
    char *row = runs_line(&e, "alpha@2026-01-01T00:01:00Z");
    char *want = testenv_fmt("%s%s", RUNS_HEADER, row);
    ck_assert_str_eq(r.out, want); /* the header and exactly one data row */
    ck_assert_int_eq(count_lines(r.out), 2);
    ck_assert_ptr_nonnull(strstr(r.out, "\nalpha@2026-01-01T00:01:00Z "));
    ck_assert_ptr_nonnull(strstr(r.out, " dead       "));
    ck_assert_ptr_nonnull(strstr(r.out, " boom alpha@2026-01-01T00:01:00Z\n"));
    free(want);
    free(row);

    /* Without the limit both dead runs of alpha, newest scheduled first. */
    cli(&e, &r, "runs --job alpha --state dead");
    ck_assert_int_eq(r.rc, 0);
    char *row1 = runs_line(&e, "alpha@2026-01-01T00:01:00Z");
    char *row0 = runs_line(&e, "alpha@2026-01-01T00:00:00Z");
    want = testenv_fmt("%s%s%s", RUNS_HEADER, row1, row0);
    ck_assert_str_eq(r.out, want);
    free(want);
    free(row1);
    free(row0);
    env_teardown(&e);
}
END_TEST

START_TEST(test_runs_rejects_an_unknown_state_and_a_zero_limit_naming_the_flag)
{
    env e;
    env_setup(&e);
    make_run(&e, "alpha", "2026-01-01T00:00:00Z", "failed");
    cli_result r;

    cli(&e, &r, "runs --state bogus");
    ck_assert_int_eq(r.rc, 2);
    ck_assert_str_eq(r.out, "");
    ck_assert_str_eq(r.err, "warren runs: --state takes planned, published, running, retrying, "
                            "waiting, succeeded, dead, skipped or cancelled, not \"bogus\"\n");
    /* the state of a run held back by a cap (caps.sql) */
    cli(&e, &r, "runs --state waiting");
    ck_assert_msg(r.rc == 0, "runs --state waiting: %s", r.err);

    cli(&e, &r, "runs --limit 0");
    ck_assert_int_eq(r.rc, 2);
    ck_assert_str_eq(r.out, "");
    ck_assert_str_eq(r.err, "warren runs: --limit takes a positive number, not \"0\"\n");

    /* The same database and config list runs with valid flags. */
    cli(&e, &r, "runs --state dead --limit 5");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_int_eq(count_lines(r.out), 2);
    env_teardown(&e);
}
END_TEST

/* ------------------------------------------------------------ replay */

START_TEST(test_replay_job_dead_replans_every_dead_run_once_keeping_keys_and_history)
{
    env e;
    env_setup(&e);
    make_run(&e, "alpha", "2026-01-01T00:00:00Z", "failed");
    make_run(&e, "alpha", "2026-01-01T00:01:00Z", "failed");
    make_run(&e, "alpha", "2026-01-01T00:02:00Z", "succeeded");
    make_run(&e, "beta", "2026-01-01T00:03:00Z", "failed");
    cli_result r;

    cli(&e, &r, "replay --job alpha --dead");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_str_eq(r.out, "replayed 2 dead run(s) of alpha\n");
    ck_assert_str_eq(r.err, "");
    /* The same runs under the same keys, planned and due now; nothing added,
     * the succeeded run and the other job's dead run untouched. */
    ck_assert_sqlf(
        e.db,
        "alpha@2026-01-01T00:00:00Z|planned|t,alpha@2026-01-01T00:01:00Z|planned|t,"
        "alpha@2026-01-01T00:02:00Z|succeeded|f,beta@2026-01-01T00:03:00Z|dead|f",
        "SELECT string_agg(concat_ws('|', run_key, state, due_at <= now() AND finished_at IS "
        "NULL), ',' ORDER BY run_key) FROM warren.runs");
    /* History kept: the failed attempt with its error, the last error, the
     * dead note, and a note saying who replayed it; the fencing token stays. */
    ck_assert_sqlf(
        e.db, "2",
        "SELECT count(*) FROM warren.attempts WHERE run_key LIKE 'alpha@%%' AND attempt = 1 "
        "AND worker = 'w1' AND outcome = 'failed' AND error = 'boom ' || run_key");
    ck_assert_sqlf(
        e.db, "2",
        "SELECT count(*) FROM warren.runs WHERE job = 'alpha' AND state = 'planned' "
        "AND attempt = 1 AND last_error = 'boom ' || run_key "
        "AND note ~ '^dead: permanent failure\\nreplayed at \\S+ by warren replay \\(pid "
        "[0-9]+\\) after 1 attempts$'");
    /* Replayed runs are claimable again, with the next fencing token. */
    ck_assert_sqlf(e.db, "2",
                   "SELECT attempt FROM warren.claim('alpha@2026-01-01T00:00:00Z', 'w2')");

    cli(&e, &r, "replay --job alpha --dead");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_str_eq(r.out, "replayed 0 dead run(s) of alpha\n");
    ck_assert_str_eq(r.err, "");
    ck_assert_sqlf(e.db, "running,planned,succeeded,dead",
                   "SELECT string_agg(state, ',' ORDER BY run_key) FROM warren.runs");
    env_teardown(&e);
}
END_TEST

/* ------------------------------------------------------------ show */

START_TEST(test_show_of_an_unknown_run_key_fails_with_exit_1)
{
    env e;
    env_setup(&e);
    make_run(&e, "alpha", "2026-01-01T00:00:00Z", "failed");
    cli_result r;

    cli(&e, &r, "show alpha@2026-01-01T00:00:01Z");
    ck_assert_int_eq(r.rc, 1);
    ck_assert_str_eq(r.out, "");
    ck_assert_str_eq(r.err, "warren show: no run alpha@2026-01-01T00:00:01Z (run keys look like "
                            "JOB@2026-11-30T14:00:00Z)\n");

    /* The run that exists is shown, from the same config. */
    cli(&e, &r, "show alpha@2026-01-01T00:00:00Z");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_str_eq(r.err, "");
    ck_assert_ptr_nonnull(strstr(r.out, "run          alpha@2026-01-01T00:00:00Z\n"));
    ck_assert_ptr_nonnull(strstr(r.out, "state        dead\n"));
    env_teardown(&e);
}
END_TEST

/* ------------------------------------------------------------ enqueue */

START_TEST(test_enqueue_creates_once_and_says_which_run_holds_the_key)
{
    env e;
    env_setup(&e);
    cli_result r;

    cli(&e, &r,
        "enqueue alpha --key welcome:user-42 --at 2026-12-24T18:00:00.25+01:00 "
        "--payload '{\"user\":42}' --tenant acme");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_str_eq(r.out, "created run alpha@welcome:user-42 (due 2026-12-24T17:00:00.250Z)\n");
    ck_assert_str_eq(r.err, "");
    ck_assert_sqlf(
        e.db, "enqueue|planned|2026-12-24 17:00:00.25+00|{\"user\": 42}|acme",
        "SELECT origin || '|' || state || '|' || scheduled_at || '|' || payload || '|' || tenant "
        "FROM warren.runs WHERE run_key = 'alpha@welcome:user-42'");
    /* Again, with other options: nothing new, and the holder is named. */
    cli(&e, &r, "enqueue alpha --key welcome:user-42");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_str_eq(r.out, "run alpha@welcome:user-42 already holds key \"welcome:user-42\" "
                            "(state planned, due 2026-12-24T17:00:00.250Z): nothing created\n");
    ck_assert_sqlf(e.db, "1", "SELECT count(*) FROM warren.runs");
    /* The same key of another job is another run. */
    cli(&e, &r, "enqueue beta --key welcome:user-42");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "created run beta@welcome:user-42 (due "));
    ck_assert_sqlf(e.db, "2", "SELECT count(*) FROM warren.runs");
    /* An enqueued run's key is a run key for the other commands. */
    cli(&e, &r, "show alpha@welcome:user-42");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "run          alpha@welcome:user-42\n"));
    cli(&e, &r, "replay alpha@welcome:user-42");
    ck_assert_ptr_null(strstr(r.err, "is not a run key"));
    env_teardown(&e);
}
END_TEST

START_TEST(test_enqueue_rejects_bad_input_with_exit_2_and_writes_nothing)
{
    static const struct {
        const char *args, *err;
    } cases[] = {
        {"enqueue alpha", "missing --key KEY"},
        {"enqueue --key k", "missing JOB"},
        {"enqueue alpha --key 'bad key'", "key \"bad key\" has a character outside"},
        {"enqueue alpha --key 2026-01-01T00:00:00Z",
         "begins with a time of the form YYYY-MM-DDTHH:MM:SS"},
        {"enqueue nope --key k", "job \"nope\" does not exist"},
        {"enqueue alpha --key k --at tomorrow", "--at: \"tomorrow\" is not an RFC 3339 time"},
        {"enqueue alpha --key k --payload '[1]'", "--payload: the payload must be a JSON object"},
        {"enqueue alpha --key k --tenant 'a b'", "tenant \"a b\" is not a tenant name"},
        {"enqueue alpha --key k --bogus 1", "unknown option \"--bogus\""},
    };
    env e;
    env_setup(&e);
    cli_result r;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cli(&e, &r, "%s", cases[i].args);
        ck_assert_int_eq(r.rc, 2);
        ck_assert_str_eq(r.out, "");
        ck_assert_msg(strstr(r.err, cases[i].err) != NULL, "%s: stderr lacks \"%s\"", cases[i].args,
                      cases[i].err);
    }
    ck_assert_sqlf(e.db, "0", "SELECT count(*) FROM warren.runs");
    env_teardown(&e);
}
END_TEST

/* ------------------------------------------------------------ --help */

/* Runs `warren ARGS` in an empty directory with no config and an unreachable
 * database in the environment: a command that needs either fails, so help
 * that reaches for them shows. */
static void cli_bare(cli_result *r, const char *args)
{
    char tmpl[] = "/tmp/warren-check-cli-help-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(tmpl));
    char *cmd = testenv_fmt("cd %s && WARREN_CONFIG=%s/none.cfg "
                            "WARREN_DATABASE_URL=postgresql://nobody@127.0.0.1:1/nowhere "
                            "WARREN_AMQP_URL=amqp://nobody:x@127.0.0.1:1/%%2f %s %s",
                            tmpl, tmpl, WARREN_BINARY, args);
    r->rc = testenv_run_split(cmd, r->out, sizeof(r->out), r->err, sizeof(r->err));
    rmdir(tmpl);
    free(cmd);
}

/* Every command `warren help` lists (main.c's dispatch table, so a new
 * command is covered without touching this test) prints its usage to
 * standard output and exits 0 for --help and -h, writes nothing to standard
 * error and needs no config, database or broker. */
START_TEST(test_every_command_prints_its_usage_for_help_and_exits_0)
{
    cli_result top, r;
    char names[64][32];
    int n = 0;

    cli_bare(&top, "help");
    ck_assert_int_eq(top.rc, 0);
    const char *p = strstr(top.out, "\ncommands:\n");
    ck_assert_ptr_nonnull(p);
    p += strlen("\ncommands:\n");
    while (p[0] == ' ' && p[1] == ' ' && p[2] != ' ' && n < 64) {
        size_t len = strcspn(p + 2, " \n");
        ck_assert_uint_lt(len, sizeof(names[0]));
        memcpy(names[n], p + 2, len);
        names[n++][len] = '\0';
        p = strchr(p, '\n');
        ck_assert_ptr_nonnull(p);
        p++;
    }
    ck_assert_msg(n >= 15, "only %d commands parsed from `warren help`:\n%s", n, top.out);
    int failures = 0;
    for (int i = 0; i < n; i++) {
        static const char *const flags[] = {"--help", "-h"};
        for (int f = 0; f < 2; f++) {
            char *args = testenv_fmt("%s %s", names[i], flags[f]);
            char *want = testenv_fmt("usage: warren %s", names[i]);
            cli_bare(&r, args);
            int ok = r.rc == 0 && strncmp(r.out, want, strlen(want)) == 0 &&
                     (r.out[strlen(want)] == ' ' || r.out[strlen(want)] == '\n') &&
                     r.err[0] == '\0';
            if (!ok) {
                fprintf(stderr, "FAIL `warren %s`: exit %d\nstdout: %.200s\nstderr: %.300s\n", args,
                        r.rc, r.out, r.err);
                failures++;
            }
            free(args);
            free(want);
        }
    }
    ck_assert_msg(failures == 0, "%d of %d help calls failed (see above)", failures, 2 * n);
}
END_TEST

/* ------------------------------------------------------- producer grants */

/* grant-producer grants templates, config jobs and a tenant prefix and lists
 * them; revoke-producer takes some, then everything. */
START_TEST(test_grant_producer_grants_lists_and_revoke_producer_takes_away)
{
    env e;
    env_setup(&e);
    cli_result r;
    char *login = testenv_unique_name("warren_p1");
    char *sql = testenv_fmt("CREATE ROLE %s LOGIN IN ROLE warren_producer", login);
    ck_assert_int_eq(testenv_psql(e.db, sql, NULL), 0);
    free(sql);

    /* alpha is a config job: granted with --job; as a template it is refused */
    cli(&e, &r, "grant-producer %s --template alpha", login);
    ck_assert_int_eq(r.rc, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "\"alpha\" is not a template"));
    ck_assert_sqlf(e.db, "0", "SELECT count(*) FROM warren.producer_logins");

    cli(&e, &r, "grant-producer %s --job alpha --job beta --tenant-prefix acme-", login);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "2 grants added (2 given)"));
    ck_assert_sqlf(
        e.db, "job alpha acme-,job beta acme-",
        "SELECT string_agg(g.kind || ' ' || g.name || ' ' || l.tenant_prefix, ',' ORDER BY g.name)"
        " FROM warren.producer_grants g JOIN warren.producer_logins l USING (login)"
        " WHERE login = '%s'",
        login);

    /* listing: with the login alone, and with nothing */
    cli(&e, &r, "grant-producer %s", login);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "LOGIN "));
    ck_assert_int_eq(count_lines(r.out), 3);
    ck_assert_ptr_nonnull(strstr(r.out, " job       alpha "));
    cli(&e, &r, "grant-producer");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_ptr_nonnull(strstr(r.out, " job       beta "));

    cli(&e, &r, "revoke-producer %s --job alpha", login);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "1 grant removed (1 given)"));
    ck_assert_sqlf(e.db, "beta", "SELECT string_agg(name, ',') FROM warren.producer_grants");

    cli(&e, &r, "revoke-producer %s", login);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "every grant revoked"));
    ck_assert_sqlf(e.db, "0", "SELECT count(*) FROM warren.producer_logins");
    cli(&e, &r, "grant-producer %s", login);
    ck_assert_int_eq(r.rc, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "no producer grants for "));

    sql = testenv_fmt("DROP ROLE %s", login);
    ck_assert_int_eq(testenv_psql(e.db, sql, NULL), 0);
    free(sql);
    free(login);
    env_teardown(&e);
}
END_TEST

/* `warren tenant-cap`: sets, changes, lists and removes the operator's cap
 * on one tenant (warren.tenant_caps), saying what it was. */
START_TEST(test_tenant_cap_sets_lists_and_removes_a_tenants_cap)
{
    env e;
    env_setup(&e);
    cli_result r;
    cli(&e, &r, "tenant-cap");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "no tenant caps"));
    cli(&e, &r, "tenant-cap billing:acme 3");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "tenant-cap billing:acme: 3 runs at once"));
    cli(&e, &r, "tenant-cap billing:acme 5");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "5 runs at once (it was 3)"));
    ck_assert_sqlf(e.db, "billing:acme=5",
                   "SELECT string_agg(tenant || '=' || max_running, ',') FROM warren.tenant_caps");
    cli(&e, &r, "tenant-cap billing:acme");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_int_eq(count_lines(r.out), 2);
    ck_assert_ptr_nonnull(strstr(r.out, "billing:acme"));
    cli(&e, &r, "tenant-cap billing:acme off");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "removed (it was 5)"));
    cli(&e, &r, "tenant-cap billing:acme --remove");
    ck_assert_int_eq(r.rc, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "had no cap"));
    ck_assert_sqlf(e.db, "0", "SELECT count(*) FROM warren.tenant_caps");
    env_teardown(&e);
}
END_TEST

/* Usage errors exit 2 without touching the database; an unknown role exits 1. */
START_TEST(test_producer_and_tenant_cap_commands_refuse_bad_input)
{
    static const struct {
        const char *args, *err;
        int rc;
    } cases[] = {
        {"grant-producer a b --template t", "give one LOGIN", 2},
        {"grant-producer --template t", "give the LOGIN to grant to", 2},
        {"grant-producer '' --template t", "a login name has 1 to 63 characters", 2},
        {"grant-producer x --template=", "template \"\" is not a valid job name", 2},
        {"grant-producer x --template 'a b'", "template \"a b\" is not a valid job name", 2},
        {"grant-producer x --bogus", "unknown argument \"--bogus\"", 2},
        {"grant-producer x --tenant-prefix 'a b'", "tenant prefix \"a b\" can never start", 2},
        {"grant-producer warren_no_such_login_zz --template t",
         "no role \"warren_no_such_login_zz\"", 1},
        {"revoke-producer", "give the LOGIN", 2},
        {"revoke-producer x --tenant-prefix p", "unknown argument \"--tenant-prefix\"", 2},
        {"tenant-cap 'a b' 3", "\"a b\" is not a tenant name", 2},
        {"tenant-cap acme 0", "N \"0\" is not a cap", 2},
        {"tenant-cap acme -1", "unknown argument \"-1\"", 2},
        {"tenant-cap acme many", "N \"many\" is not a cap", 2},
        {"tenant-cap acme 3 4", "too many arguments", 2},
        {"tenant-cap --remove", "--remove needs the TENANT", 2},
        {"tenant-cap acme 3 --remove", "--remove takes the TENANT alone", 2},
    };
    env e;
    env_setup(&e);
    cli_result r;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cli(&e, &r, "%s", cases[i].args);
        ck_assert_int_eq(r.rc, cases[i].rc);
        ck_assert_msg(strstr(r.err, cases[i].err) != NULL, "%s: stderr lacks \"%s\"", cases[i].args,
                      cases[i].err);
    }
    ck_assert_sqlf(e.db, "0", "SELECT count(*) FROM warren.producer_logins");
    env_teardown(&e);
}
END_TEST

static Suite *cli_suite(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("runs");
    tcase_add_test(tc, test_runs_lists_only_the_newest_dead_run_of_the_job_with_limit_1);
    tcase_add_test(tc, test_runs_rejects_an_unknown_state_and_a_zero_limit_naming_the_flag);
    suite_add_tcase(s, tc);

    tc = tcase_create("replay");
    tcase_add_test(tc, test_replay_job_dead_replans_every_dead_run_once_keeping_keys_and_history);
    suite_add_tcase(s, tc);

    tc = tcase_create("show");
    tcase_add_test(tc, test_show_of_an_unknown_run_key_fails_with_exit_1);
    suite_add_tcase(s, tc);

    tc = tcase_create("enqueue");
    tcase_add_test(tc, test_enqueue_creates_once_and_says_which_run_holds_the_key);
    tcase_add_test(tc, test_enqueue_rejects_bad_input_with_exit_2_and_writes_nothing);
    suite_add_tcase(s, tc);

    tc = tcase_create("help");
    tcase_add_test(tc, test_every_command_prints_its_usage_for_help_and_exits_0);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);

    tc = tcase_create("producer_grants");
    tcase_add_test(tc, test_grant_producer_grants_lists_and_revoke_producer_takes_away);
    tcase_add_test(tc, test_tenant_cap_sets_lists_and_removes_a_tenants_cap);
    tcase_add_test(tc, test_producer_and_tenant_cap_commands_refuse_bad_input);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    testenv_pg_admin_url();
    SRunner *sr = srunner_create(cli_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
