/* check_config.c: valid configs load with every field as written (or its
 * default); every invalid file in tests/data/config/invalid/ gives exactly the
 * errors its .expect file lists, with FILE:LINE; env overrides and @include. */
#include <check.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <warren/config.h>
#include <warren/duration.h>

#include "config_int.h"
#include "testenv.h"

/* libconfig 1.5 leaks its string buffer when a file ends inside an unclosed
 * string (a syntax error; the process reports it and moves on). That is not
 * ours to fix, so LeakSanitizer is told to ignore allocations made inside
 * libconfig; leaks in warren's own code are still reported. This is the
 * sanitizer's documented hook, read at startup in sanitizer builds only. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void)
{
    return "leak:libconfig.so\n";
}
const char *__lsan_default_options(void);
const char *__lsan_default_options(void)
{
    return "print_suppressions=0";
}

#define DATA WARREN_TEST_DATA "/config"
#define VALID DATA "/valid"
#define INVALID DATA "/invalid"

/* 2026-12-01T09:00:00Z */
#define AT_20261201 (INT64_C(1796115600) * WARREN_US_PER_S)

static warren_config *load_ok(const char *path)
{
    warren_config *cfg = NULL;
    warren_diags d = {0};
    warren_error err = {0};
    int rc = warren_config_load(path, &cfg, &d, &err);
    for (size_t i = 0; i < d.count; i++)
        fprintf(stderr, "  %s\n", d.items[i]);
    ck_assert_msg(rc == 0, "%s: %s", path, err.message);
    ck_assert_ptr_nonnull(cfg);
    ck_assert_uint_eq(d.count, 0);
    warren_diags_free(&d);
    return cfg;
}

/* ---- valid files ---------------------------------------------------------------------------- */

START_TEST(test_config_full_file_loads_every_field)
{
    unsetenv("WARREN_DATABASE_URL");
    unsetenv("WARREN_AMQP_URL");
    warren_config *cfg = load_ok(VALID "/full.cfg");
    ck_assert_str_eq(cfg->path, VALID "/full.cfg");
    ck_assert_str_eq(cfg->database_url, "postgresql://db.example/warren");
    ck_assert_str_eq(cfg->amqp_url, "amqps://u:p@mq.example:5671/prod");
    ck_assert_int_eq(cfg->delivery_limit, 7);
    ck_assert_int_eq(cfg->planner.horizon_ms, 5 * 60000);
    ck_assert_int_eq(cfg->planner.tick_ms, 500);
    ck_assert_int_eq(cfg->planner.misfire_threshold_ms, 90000);
    ck_assert_int_eq(cfg->planner.reconcile_grace_ms, 45000);
    ck_assert_int_eq(cfg->planner.partitions, 16);
    ck_assert_int_eq(cfg->planner.publish_batch, 500);
    ck_assert_int_eq(cfg->planner.delay_ring, 8);
    ck_assert_int_eq(cfg->planner.delay_queue_expires_ms, 3600000);
    ck_assert_int_eq(cfg->planner.event_defer_ms, 0);
    ck_assert_int_eq(cfg->planner.release_lead_ms, 750);
    ck_assert_int_eq(cfg->worker.concurrency, 16);
    ck_assert_int_eq(cfg->worker.shutdown_grace_ms, 60000);
    ck_assert_int_eq(cfg->worker.heartbeat_margin_ms, 2500);
    ck_assert_str_eq(cfg->worker.id, "worker-a");
    ck_assert_ptr_nonnull(cfg->worker.exec_env);
    ck_assert_str_eq(cfg->worker.exec_env[0], "AWS_PROFILE");
    ck_assert_str_eq(cfg->worker.exec_env[1], "PGSERVICE");
    ck_assert_str_eq(cfg->worker.exec_env[2], "APP_*");
    ck_assert_ptr_null(cfg->worker.exec_env[3]);
    ck_assert_int_eq(cfg->worker.sql_take, 0);
    ck_assert_uint_eq(cfg->njobs, 2);

    const warren_job *j = &cfg->jobs[0];
    ck_assert_str_eq(j->name, "usage-report");
    ck_assert_int_eq(j->kind, WARREN_SCHED_CRON);
    ck_assert_str_eq(j->schedule, "0 9 * * *");
    ck_assert_str_eq(j->timezone, "America/New_York");
    ck_assert_str_eq(j->queue, "reports");
    ck_assert_str_eq(j->payload_json, "{\"kind\":\"usage\",\"depth\":2}");
    ck_assert_int_eq(j->handler, WARREN_HANDLER_EXEC);
    ck_assert_str_eq(j->exec_argv[0], "/usr/local/bin/report");
    ck_assert_str_eq(j->exec_argv[1], "--daily");
    ck_assert_str_eq(j->exec_argv[2], "");
    ck_assert_ptr_null(j->exec_argv[3]);
    ck_assert_int_eq(j->exec_shell, 0);
    ck_assert_int_eq(j->misfire, WARREN_MISFIRE_CATCH_UP);
    ck_assert_int_eq(j->max_catch_up, 3);
    ck_assert_int_eq(j->overlap, WARREN_OVERLAP_CANCEL_PREVIOUS);
    ck_assert_int_eq(j->jitter_ms, 30000);
    ck_assert_int_eq(j->retry_max_attempts, 8);
    ck_assert_int_eq(j->retry_base_ms, 250);
    ck_assert_int_eq(j->retry_cap_ms, 5400000);
    ck_assert_int_eq(j->lease_ms, 60000);
    ck_assert_int_eq(j->timeout_ms, 2 * 86400000);
    ck_assert_int_eq(j->paused, 1);
    ck_assert_str_eq(j->file, VALID "/full.cfg");
    ck_assert_int_eq(j->line, 26);

    j = &cfg->jobs[1];
    ck_assert_str_eq(j->name, "A.b_c-9");
    ck_assert_int_eq(j->kind, WARREN_SCHED_AT);
    ck_assert_str_eq(j->schedule, "2026-12-01T10:00:00+01:00");
    ck_assert_int_eq(j->at, AT_20261201);
    ck_assert_int_eq(j->handler, WARREN_HANDLER_SQL);
    ck_assert_str_eq(j->sql, "INSERT INTO t VALUES ($1, $2, $3)");
    ck_assert_int_eq(j->misfire, WARREN_MISFIRE_SKIP);
    ck_assert_int_eq(j->overlap, WARREN_OVERLAP_QUEUE);
    ck_assert_int_eq(j->paused, 0);
    ck_assert_ptr_eq(warren_config_job(cfg, "A.b_c-9"), j);
    ck_assert_ptr_null(warren_config_job(cfg, "a.b_c-9"));
    warren_config_free(cfg);
}
END_TEST

START_TEST(test_config_delay_ring_type_classic_is_parsed)
{
    warren_config *cfg = load_ok(VALID "/delay_ring_classic.cfg");
    ck_assert_int_eq(cfg->planner.delay_ring, 160);
    ck_assert_int_eq(cfg->planner.delay_ring_type, WARREN_DELAY_RING_CLASSIC);
    ck_assert_int_ne(WARREN_DELAY_RING_CLASSIC, WARREN_DELAY_RING_QUORUM);
    warren_config_free(cfg);
}
END_TEST

START_TEST(test_config_minimal_file_gets_documented_defaults)
{
    unsetenv("WARREN_DATABASE_URL");
    unsetenv("WARREN_AMQP_URL");
    warren_config *cfg = load_ok(VALID "/minimal.cfg");
    ck_assert_str_eq(cfg->database_url, "postgresql://localhost/warren");
    ck_assert_str_eq(cfg->amqp_url, "amqp://guest:guest@localhost:5672/%2f");
    ck_assert_int_eq(cfg->delivery_limit, 5);
    ck_assert_int_eq(cfg->planner.horizon_ms, 150000);
    ck_assert_int_eq(cfg->planner.tick_ms, 1000);
    ck_assert_int_eq(cfg->planner.misfire_threshold_ms, 60000);
    ck_assert_int_eq(cfg->planner.reconcile_grace_ms, 30000);
    ck_assert_int_eq(cfg->planner.partitions, 64);
    ck_assert_int_eq(cfg->planner.publish_batch, 200);
    ck_assert_int_eq(cfg->planner.delay_ring, 0);
    ck_assert_int_eq(cfg->planner.delay_ring_type, WARREN_DELAY_RING_QUORUM);
    ck_assert_int_eq(cfg->planner.delay_queue_expires_ms, 600000);
    ck_assert_int_eq(cfg->planner.event_defer_ms, 10000);
    ck_assert_int_eq(cfg->planner.release_lead_ms, 3000);
    ck_assert_int_eq(cfg->worker.concurrency, 4);
    ck_assert_int_eq(cfg->worker.shutdown_grace_ms, 30000);
    ck_assert_int_eq(cfg->worker.heartbeat_margin_ms, 5000);
    ck_assert_ptr_null(cfg->worker.exec_env); /* handlers get only the allow-list */
    ck_assert_int_eq(cfg->worker.sql_take, 1);
    ck_assert_ptr_null(cfg->worker.id);
    ck_assert_uint_eq(cfg->njobs, 1);
    const warren_job *j = &cfg->jobs[0];
    ck_assert_str_eq(j->name, "tick");
    ck_assert_int_eq(j->kind, WARREN_SCHED_EVERY);
    ck_assert_str_eq(j->schedule, "90s");
    ck_assert_int_eq(j->every_ms, 90000);
    ck_assert_str_eq(j->timezone, "UTC");
    ck_assert_str_eq(j->queue, "default");
    ck_assert_str_eq(j->payload_json, "{}");
    ck_assert_int_eq(j->handler, WARREN_HANDLER_NONE);
    ck_assert_ptr_null(j->exec_argv);
    ck_assert_int_eq(j->misfire, WARREN_MISFIRE_RUN_ONCE);
    ck_assert_int_eq(j->max_catch_up, 0);
    ck_assert_int_eq(j->overlap, WARREN_OVERLAP_SKIP);
    ck_assert_int_eq(j->jitter_ms, 0);
    ck_assert_int_eq(j->retry_max_attempts, 5);
    ck_assert_int_eq(j->retry_base_ms, 10000);
    ck_assert_int_eq(j->retry_cap_ms, 600000);
    ck_assert_int_eq(j->lease_ms, 30000);
    ck_assert_int_eq(j->timeout_ms, 1800000);
    ck_assert_int_eq(j->paused, 0);
    ck_assert_int_eq(j->line, 2);
    warren_config_free(cfg);
}
END_TEST

START_TEST(test_config_empty_file_has_no_jobs)
{
    warren_config *cfg = load_ok(VALID "/empty.cfg");
    ck_assert_uint_eq(cfg->njobs, 0);
    size_t n = 99;
    const char **qs = warren_config_queues(cfg, &n);
    ck_assert_uint_eq(n, 0);
    free(qs);
    warren_config_free(cfg);
}
END_TEST

START_TEST(test_config_payload_types_become_json)
{
    warren_config *cfg = load_ok(VALID "/payload.cfg");
    ck_assert_str_eq(cfg->jobs[0].payload_json,
                     "{\"s\":\"text \\\"quoted\\\" \xc3\xa9\",\"i\":-42,\"big\":9007199254740993,"
                     "\"f\":1.5,\"t\":true,\"no\":false,\"arr\":[1,2,3],"
                     "\"list\":[\"a\",1,{\"deep\":{\"x\":[]}},[true]],\"empty\":{}}");
    warren_config_free(cfg);
}
END_TEST

START_TEST(test_config_handler_forms)
{
    warren_config *cfg = load_ok(VALID "/handlers.cfg");
    const warren_job *j;
    char want[4096];

    j = warren_config_job(cfg, "exec-relative");
    /* a relative path with a '/' is taken relative to the config file's directory */
    ck_assert_int_eq(j->handler, WARREN_HANDLER_EXEC);
    ck_assert_ptr_nonnull(strstr(j->exec_argv[0], "/tests/data/config/valid/handlers/run.sh"));
    ck_assert_int_eq(j->exec_argv[0][0], '/');
    ck_assert_ptr_null(j->exec_argv[1]);

    j = warren_config_job(cfg, "exec-path-lookup");
    ck_assert_str_eq(j->exec_argv[0], "python3");
    ck_assert_str_eq(j->exec_argv[1], "job.py");
    ck_assert_str_eq(j->exec_argv[2], "--flag");
    ck_assert_ptr_null(j->exec_argv[3]);

    j = warren_config_job(cfg, "exec-shell");
    ck_assert_int_eq(j->exec_shell, 1);
    ck_assert_str_eq(j->exec_argv[0], "./run.sh | tee -a log/out.txt");
    ck_assert_ptr_null(j->exec_argv[1]);

    j = warren_config_job(cfg, "sql");
    ck_assert_int_eq(j->handler, WARREN_HANDLER_SQL);
    ck_assert_str_eq(j->sql, "SELECT 1");

    j = warren_config_job(cfg, "c");
    ck_assert_int_eq(j->handler, WARREN_HANDLER_C);
    ck_assert_str_eq(j->c_handler, "noop");

    j = warren_config_job(cfg, "none");
    ck_assert_int_eq(j->handler, WARREN_HANDLER_NONE);

    snprintf(want, sizeof(want), "%s", "sql");
    ck_assert_str_eq(warren_handler_kind_name(WARREN_HANDLER_SQL), want);
    warren_config_free(cfg);
}
END_TEST

START_TEST(test_config_schedule_forms)
{
    warren_config *cfg = load_ok(VALID "/schedules.cfg");
    const warren_job *j = warren_config_job(cfg, "six-fields");
    ck_assert_int_eq(j->kind, WARREN_SCHED_CRON);
    ck_assert_str_eq(j->schedule, "*/15 * * * * *");
    j = warren_config_job(cfg, "macro");
    ck_assert_str_eq(j->schedule, "@daily");
    j = warren_config_job(cfg, "hashed");
    ck_assert_str_eq(j->schedule, "H H(0-5) * * *");
    j = warren_config_job(cfg, "every-day");
    ck_assert_int_eq(j->kind, WARREN_SCHED_EVERY);
    ck_assert_int_eq(j->every_ms, 86400000 + 1000);
    j = warren_config_job(cfg, "at-utc");
    ck_assert_int_eq(j->kind, WARREN_SCHED_AT);
    ck_assert_int_eq(j->at, AT_20261201);
    size_t n = 0;
    const char **qs = warren_config_queues(cfg, &n);
    ck_assert_uint_eq(n, 2);
    ck_assert_str_eq(qs[0], "q1");
    ck_assert_str_eq(qs[1], "q2");
    free(qs);
    warren_config_free(cfg);
}
END_TEST

START_TEST(test_config_include_is_relative_to_the_file)
{
    warren_config *cfg = load_ok(VALID "/include.cfg");
    ck_assert_uint_eq(cfg->njobs, 3);
    ck_assert_str_eq(cfg->jobs[0].name, "main-job");
    ck_assert_str_eq(cfg->jobs[1].name, "included-1");
    ck_assert_str_eq(cfg->jobs[2].name, "included-2");
    ck_assert_str_eq(cfg->jobs[1].file, VALID "/include/jobs.inc");
    ck_assert_int_eq(cfg->jobs[1].line, 3);
    ck_assert_int_eq(cfg->planner.partitions, 8); /* from include/planner.inc */
    warren_config_free(cfg);
}
END_TEST

START_TEST(test_config_every_valid_file_loads)
{
    DIR *d = opendir(VALID);
    struct dirent *e;
    int n = 0;
    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        char path[4096];
        if (len < 5 || strcmp(e->d_name + len - 4, ".cfg") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", VALID, e->d_name);
        warren_config *cfg = load_ok(path);
        for (size_t i = 0; i < cfg->njobs; i++)
            ck_assert_ptr_eq(warren_config_job(cfg, cfg->jobs[i].name), &cfg->jobs[i]);
        ck_assert_ptr_null(warren_config_job(cfg, "no-such-job"));
        warren_config_free(cfg);
        n++;
    }
    closedir(d);
    ck_assert_int_ge(n, 8);
}
END_TEST

START_TEST(test_config_example_file_is_valid)
{
    warren_config *cfg = load_ok(WARREN_SOURCE_DIR "/examples/warren.cfg");
    ck_assert_uint_ge(cfg->njobs, 4);
    int kinds[3] = {0, 0, 0}, handlers[4] = {0, 0, 0, 0};
    for (size_t i = 0; i < cfg->njobs; i++) {
        kinds[cfg->jobs[i].kind]++;
        handlers[cfg->jobs[i].handler]++;
    }
    ck_assert_int_ge(kinds[WARREN_SCHED_CRON], 1);
    ck_assert_int_ge(kinds[WARREN_SCHED_EVERY], 1);
    ck_assert_int_ge(kinds[WARREN_SCHED_AT], 1);
    ck_assert_int_ge(handlers[WARREN_HANDLER_EXEC], 1);
    ck_assert_int_ge(handlers[WARREN_HANDLER_SQL], 1);
    warren_config_free(cfg);
}
END_TEST

/* ---- the settings tables ------------------------------------------------------------------- */

/* Where docs/config.md documents each section: the heading that opens its
 * part (NULL: the top level, whose settings are headings themselves) and the
 * prefix its rows give the settings' names. */
static const struct {
    const char *section, *heading, *row_prefix;
} doc_places[] = {
    {"", NULL, ""},
    {"database", "\n## `database`\n", ""},
    {"broker", "\n## `broker`\n", ""},
    {"planner", "\n## `planner`\n", ""},
    {"worker", "\n## `worker`\n", ""},
    {"jobs", "\n## `jobs`\n", ""},
    {"jobs.retry", "\n## `jobs`\n", "retry."},
    {"jobs.handler", "\n### `handler`\n", ""},
};

/* The first `code` span of a table cell (between from and the cell's end), or "". */
static void first_code(const char *from, const char *end, char *out, size_t len)
{
    const char *a = memchr(from, '`', (size_t)(end - from)), *b;
    out[0] = '\0';
    if (a == NULL || (b = memchr(a + 1, '`', (size_t)(end - a - 1))) == NULL)
        return;
    snprintf(out, len, "%.*s", (int)(b - a - 1), a + 1);
}

/* The next cell border at or after p ("\\|" inside a cell is a literal bar). */
static const char *next_bar(const char *p)
{
    for (; *p != '\0' && *p != '\n'; p++)
        if (*p == '|' && p[-1] != '\\')
            return p;
    return NULL;
}

/* Checks the default column of a documented row against the table's default. */
static void check_doc_default(const warren__setting *st, const char *path, const char *row,
                              const char *table_head)
{
    char cell[256], want[256];
    const char *c = row, *end;
    /* columns: | setting | type | default | meaning | (the handler table has no default) */
    if (strstr(table_head, "| default |") == NULL || strchr(table_head, '\n') == NULL ||
        strstr(table_head, "| default |") > strchr(table_head, '\n'))
        return;
    for (int i = 0; i < 2; i++) { /* to the '|' before the default */
        c = next_bar(c + 1);
        ck_assert_ptr_nonnull(c);
    }
    end = next_bar(c + 1);
    ck_assert_ptr_nonnull(end);
    first_code(c + 1, end, cell, sizeof(cell));
    switch (st->type) {
    case WARREN__SET_STRING:
        if (st->def_str == NULL)
            return;
        snprintf(want, sizeof(want), "\"%s\"", st->def_str);
        ck_assert_msg(strcmp(cell, want) == 0, "docs/config.md: %s's default is `%s`, not %s", path,
                      cell, want);
        return;
    case WARREN__SET_INT: {
        char *e;
        long long v = strtoll(cell, &e, 10);
        ck_assert_msg(cell[0] != '\0' && *e == '\0' && v == st->def,
                      "docs/config.md: %s's default is `%s`, not %lld", path, cell,
                      (long long)st->def);
        return;
    }
    case WARREN__SET_BOOL:
        ck_assert_msg(strcmp(cell, st->def ? "true" : "false") == 0,
                      "docs/config.md: %s's default is `%s`", path, cell);
        return;
    case WARREN__SET_ENUM: {
        const char *name = st->names[st->def];
        snprintf(want, sizeof(want), "\"%s\"", name);
        ck_assert_msg(strcmp(cell, name) == 0 || strcmp(cell, want) == 0,
                      "docs/config.md: %s's default is `%s`, not %s", path, cell, name);
        return;
    }
    case WARREN__SET_DURATION: {
        int64_t ms = -1;
        size_t n = strlen(cell);
        ck_assert_msg(n >= 2 && cell[0] == '"' && cell[n - 1] == '"',
                      "docs/config.md: %s's default `%s` is not a quoted duration", path, cell);
        cell[n - 1] = '\0';
        ck_assert_msg(warren_duration_parse(cell + 1, &ms, NULL) == 0 && ms == st->def,
                      "docs/config.md: %s's default is %s\", not %lld ms", path, cell,
                      (long long)st->def);
        return;
    }
    case WARREN__SET_GROUP:
    case WARREN__SET_CUSTOM:
        return;
    }
}

/* 1 if text has `name =` as a setting (also commented out: "# name = ..."). */
static int example_has(const char *text, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = strstr(text, name); p != NULL; p = strstr(p + 1, name)) {
        char before = p == text ? '\n' : p[-1];
        const char *after = p + n;
        if (!(before == '\n' || before == ' ' || before == '{' || before == '#' || before == ';'))
            continue;
        while (*after == ' ')
            after++;
        if (*after == '=')
            return 1;
    }
    return 0;
}

START_TEST(test_config_every_setting_is_documented_with_its_default)
{
    char *doc = testenv_read_file(WARREN_SOURCE_DIR "/docs/config.md", NULL);
    char *example = testenv_read_file(WARREN_SOURCE_DIR "/examples/warren.cfg", NULL);
    size_t n = 0, total = 0;
    const warren__section *const *secs = warren__config_sections(&n);

    ck_assert_uint_ge(n, 8);
    for (size_t i = 0; i < n; i++) {
        const warren__section *sec = secs[i];
        size_t k;
        ck_assert_uint_le(sec->count, WARREN__SECTION_MAX);
        for (k = 0; k < sizeof(doc_places) / sizeof(doc_places[0]); k++)
            if (strcmp(doc_places[k].section, sec->name) == 0)
                break;
        ck_assert_msg(k < sizeof(doc_places) / sizeof(doc_places[0]),
                      "section \"%s\" has no place in docs/config.md (add it to doc_places)",
                      sec->name);
        const char *part = doc, *part_end = doc + strlen(doc);
        if (doc_places[k].heading != NULL) {
            part = strstr(doc, doc_places[k].heading);
            ck_assert_msg(part != NULL, "docs/config.md has no heading %s", doc_places[k].heading);
            const char *next = strstr(part + strlen(doc_places[k].heading), "\n## ");
            if (next != NULL)
                part_end = next;
        }
        for (size_t j = 0; j < sec->count; j++) {
            const warren__setting *st = &sec->settings[j];
            char want[256], path[256];
            snprintf(path, sizeof(path), "%s%s%s", sec->name, sec->name[0] ? "." : "", st->name);
            for (size_t m = 0; m < j; m++)
                ck_assert_msg(strcmp(sec->settings[m].name, st->name) != 0, "%s is listed twice",
                              path);
            if (doc_places[k].heading == NULL)
                snprintf(want, sizeof(want), "\n## `%s`\n", st->name);
            else
                snprintf(want, sizeof(want), "\n| `%s%s` |", doc_places[k].row_prefix, st->name);
            const char *row = strstr(part, want);
            ck_assert_msg(row != NULL && row < part_end, "%s is not documented in docs/config.md",
                          path);
            if (doc_places[k].heading != NULL) {
                /* the header row of the table the row is in */
                const char *head = row, *h;
                for (h = part; (h = strstr(h, "\n| setting |")) != NULL && h < row; h++)
                    head = h;
                ck_assert_ptr_ne(head, row);
                check_doc_default(st, path, row + 1, head + 1);
            }
            ck_assert_msg(example_has(example, st->name),
                          "%s is not in examples/warren.cfg (a commented-out line with its "
                          "default will do)",
                          path);
            total++;
        }
    }
    ck_assert_uint_ge(total, 40);
    free(doc);
    free(example);
}
END_TEST

START_TEST(test_config_table_defaults_are_the_loaded_defaults)
{
    /* Every table default reaches the loaded struct (spot checks of each type). */
    unsetenv("WARREN_DATABASE_URL");
    unsetenv("WARREN_AMQP_URL");
    warren_config *cfg = load_ok(VALID "/minimal.cfg");
    size_t n = 0;
    const warren__section *const *secs = warren__config_sections(&n);
    const warren__section *planner = NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(secs[i]->name, "planner") == 0)
            planner = secs[i];
    ck_assert_ptr_nonnull(planner);
    for (size_t j = 0; j < planner->count; j++) {
        const warren__setting *st = &planner->settings[j];
        const char *f = (const char *)&cfg->planner + st->offset;
        if (st->type == WARREN__SET_DURATION)
            ck_assert_int_eq(*(const int64_t *)f, st->def);
        else if (st->type == WARREN__SET_INT || st->type == WARREN__SET_ENUM)
            ck_assert_int_eq(*(const int *)f, st->def);
    }
    warren_config_free(cfg);
}
END_TEST

/* ---- environment ---------------------------------------------------------------------------- */

START_TEST(test_config_env_overrides_urls)
{
    setenv("WARREN_DATABASE_URL", "postgresql://env-host/envdb", 1);
    setenv("WARREN_AMQP_URL", "amqp://env:env@env-host:5672/%2f", 1);
    warren_config *cfg = load_ok(VALID "/full.cfg");
    ck_assert_str_eq(cfg->database_url, "postgresql://env-host/envdb");
    ck_assert_str_eq(cfg->amqp_url, "amqp://env:env@env-host:5672/%2f");
    warren_config_free(cfg);

    /* empty variables do not override */
    setenv("WARREN_DATABASE_URL", "", 1);
    setenv("WARREN_AMQP_URL", "", 1);
    cfg = load_ok(VALID "/full.cfg");
    ck_assert_str_eq(cfg->database_url, "postgresql://db.example/warren");
    ck_assert_str_eq(cfg->amqp_url, "amqps://u:p@mq.example:5671/prod");
    warren_config_free(cfg);

    /* and they also fill in what the file leaves out */
    setenv("WARREN_DATABASE_URL", "postgresql://only-env/db", 1);
    cfg = load_ok(VALID "/minimal.cfg");
    ck_assert_str_eq(cfg->database_url, "postgresql://only-env/db");
    warren_config_free(cfg);
    unsetenv("WARREN_DATABASE_URL");
    unsetenv("WARREN_AMQP_URL");
}
END_TEST

START_TEST(test_config_env_amqp_url_is_validated)
{
    warren_config *cfg = NULL;
    warren_diags d = {0};
    warren_error err = {0};
    setenv("WARREN_AMQP_URL", "http://wrong", 1);
    ck_assert_int_eq(warren_config_load(VALID "/minimal.cfg", &cfg, &d, &err), WARREN_ECONFIG);
    unsetenv("WARREN_AMQP_URL");
    ck_assert_ptr_null(cfg);
    ck_assert_uint_eq(d.count, 1);
    ck_assert_ptr_nonnull(
        strstr(d.items[0], "WARREN_AMQP_URL: \"http://wrong\" is not an AMQP URL"));
    warren_diags_free(&d);
    /* The password of a wrong URL is not repeated in the message. */
    setenv("WARREN_AMQP_URL", "rabbitmq://guest:s3cret@mq.example:5672/%2f", 1);
    ck_assert_int_eq(warren_config_load(VALID "/minimal.cfg", &cfg, &d, &err), WARREN_ECONFIG);
    unsetenv("WARREN_AMQP_URL");
    ck_assert_uint_eq(d.count, 1);
    ck_assert_msg(strstr(d.items[0], "s3cret") == NULL, "%s", d.items[0]);
    ck_assert_msg(strstr(d.items[0], "\"rabbitmq://guest:***@mq.example:5672/%2f\" is not an AMQP "
                                     "URL") != NULL,
                  "%s", d.items[0]);
    warren_diags_free(&d);
}
END_TEST

/* ---- failures that are not about a setting -------------------------------------------------- */

START_TEST(test_config_missing_file_names_it)
{
    warren_config *cfg = NULL;
    warren_diags d = {0};
    warren_error err = {0};
    ck_assert_int_eq(warren_config_load("/nonexistent/warren.cfg", &cfg, &d, &err), WARREN_ECONFIG);
    ck_assert_ptr_null(cfg);
    ck_assert_uint_eq(d.count, 1);
    ck_assert_str_eq(d.items[0],
                     "/nonexistent/warren.cfg: cannot read the configuration: No such file or "
                     "directory");
    ck_assert_str_eq(err.message, d.items[0]);
    warren_diags_free(&d);
    ck_assert_int_eq(warren_config_load(NULL, &cfg, NULL, NULL), WARREN_EINVAL);
    ck_assert_int_eq(warren_config_load(VALID, &cfg, &d, NULL), WARREN_ECONFIG);
    ck_assert_uint_eq(d.count, 1);
    ck_assert_str_eq(d.items[0], VALID ": cannot read the configuration: it is a directory");
    warren_diags_free(&d);
}
END_TEST

START_TEST(test_config_error_summary_counts_the_rest)
{
    warren_config *cfg = NULL;
    warren_error err = {0};
    /* diags may be NULL; err still gets the first error and the count */
    ck_assert_int_eq(warren_config_load(INVALID "/many_errors.cfg", &cfg, NULL, &err),
                     WARREN_ECONFIG);
    ck_assert_int_eq(err.code, WARREN_ECONFIG);
    ck_assert_ptr_nonnull(strstr(err.message, INVALID "/many_errors.cfg:"));
    ck_assert_ptr_nonnull(strstr(err.message, "more errors)"));
}
END_TEST

START_TEST(test_config_policy_names_round_trip)
{
    warren_misfire m;
    warren_overlap o;
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(warren_misfire_from_name(warren_misfire_name((warren_misfire)i), &m), 0);
        ck_assert_int_eq(m, i);
    }
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(warren_overlap_from_name(warren_overlap_name((warren_overlap)i), &o), 0);
        ck_assert_int_eq(o, i);
    }
    ck_assert_int_eq(warren_misfire_from_name("RUN_ONCE", &m), WARREN_EINVAL);
    ck_assert_int_eq(warren_overlap_from_name(NULL, &o), WARREN_EINVAL);
    ck_assert_str_eq(warren_sched_kind_name(WARREN_SCHED_EVERY), "every");
    ck_assert_str_eq(warren_overlap_name(WARREN_OVERLAP_CANCEL_PREVIOUS), "cancel_previous");
    ck_assert_str_eq(warren_handler_kind_name(WARREN_HANDLER_NONE), "none");
    warren_sched_kind k;
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(
            warren_sched_kind_from_name(warren_sched_kind_name((warren_sched_kind)i), &k), 0);
        ck_assert_int_eq(k, i);
    }
    ck_assert_int_eq(warren_sched_kind_from_name("hourly", &k), WARREN_EINVAL);
    ck_assert_str_eq(warren_misfire_name((warren_misfire)3), "unknown");
}
END_TEST

/* Random edits of valid files: loading either succeeds or reports errors
 * with FILE:LINE; it never crashes or leaks (run under ASan). */
START_TEST(test_config_survives_mutated_files)
{
    static const char *const sources[] = {VALID "/full.cfg", VALID "/payload.cfg",
                                          VALID "/handlers.cfg", VALID "/schedules.cfg"};
    static const char alphabet[] = "{}()[];=,\"#@*-0123456789LxsmhdHW/ \n\\";
    char tmpl[] = "/tmp/warren-mutant-XXXXXX";
    uint64_t x = 0x2545F4914F6CDD1DULL;
    char src[8192], buf[8192];
    int ok = 0, bad = 0;

    for (int i = 0; i < 1200; i++) {
        FILE *f = fopen(sources[i % 4], "r");
        ck_assert_ptr_nonnull(f);
        size_t n = fread(src, 1, sizeof(src) - 1, f);
        fclose(f);
        memcpy(buf, src, n);
        for (int k = 0; k < 1 + (int)(x % 4); k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[(x >> 8) % n] = alphabet[(x >> 32) % (sizeof(alphabet) - 1)];
        }
        char path[sizeof(tmpl)];
        memcpy(path, tmpl, sizeof(tmpl));
        int fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, buf, n), (ssize_t)n);
        close(fd);
        warren_config *cfg = NULL;
        warren_diags d = {0};
        int rc = warren_config_load(path, &cfg, &d, NULL);
        if (rc == 0) {
            ck_assert_ptr_nonnull(cfg);
            ok++;
        } else {
            ck_assert_int_eq(rc, WARREN_ECONFIG);
            ck_assert_uint_gt(d.count, 0);
            for (size_t e = 0; e < d.count; e++)
                ck_assert_msg(strncmp(d.items[e], path, strlen(path)) == 0, "%s", d.items[e]);
            bad++;
        }
        warren_config_free(cfg);
        warren_diags_free(&d);
        unlink(path);
    }
    ck_assert_int_gt(bad, 100);
    (void)ok;
}
END_TEST

/* ---- warren check ---------------------------------------------------------------------------- */

/* Runs `warren check ARGS`, returns its exit status; out/errout get stdout/stderr. */
static int run_check(const char *args, char *out, size_t outlen, char *errout, size_t errlen)
{
    char *cmd = testenv_fmt("env -u WARREN_DATABASE_URL -u WARREN_AMQP_URL %s check %s",
                            WARREN_BINARY, args);
    int rc = testenv_run_split(cmd, out, outlen, errout, errlen);
    free(cmd);
    return rc;
}

START_TEST(test_check_prints_one_line_per_job_and_exits_0)
{
    static char out[65536], err[65536];
    int rc = run_check("-c " WARREN_SOURCE_DIR "/tests/data/config/valid/schedules.cfg", out,
                       sizeof(out), err, sizeof(err));
    ck_assert_msg(rc == 0, "rc %d, stderr: %s", rc, err);
    ck_assert_str_eq(err, "");
    int lines = 0;
    for (char *c = out; *c; c++)
        lines += *c == '\n';
    ck_assert_int_eq(lines, 7 + 1); /* 7 jobs and the summary */
    ck_assert_ptr_nonnull(strstr(out, "six-fields "));
    ck_assert_ptr_nonnull(strstr(out, "cron \"*/15 * * * * *\""));
    ck_assert_ptr_nonnull(strstr(out, "every 1d1s"));
    ck_assert_ptr_nonnull(strstr(out, "tz=Asia/Kathmandu queue=q2"));
    ck_assert_ptr_nonnull(strstr(out, "valid, 7 jobs, 2 queues"));
}
END_TEST

START_TEST(test_check_prints_every_error_and_exits_2)
{
    static char out[65536], err[65536];
    int rc = run_check("-c " INVALID "/many_errors.cfg", out, sizeof(out), err, sizeof(err));
    ck_assert_int_eq(rc, 2);
    ck_assert_str_eq(out, "");
    ck_assert_ptr_nonnull(strstr(err, INVALID "/many_errors.cfg:1: setting \"database.url\""));
    ck_assert_ptr_nonnull(
        strstr(err, INVALID "/many_errors.cfg:9: job \"c\": setting \"timeout\""));
    ck_assert_ptr_nonnull(strstr(err, "is invalid: 16 errors"));
}
END_TEST

START_TEST(test_check_warns_about_missing_handler_programs)
{
    static char out[65536], err[65536];
    int rc = run_check("-q -c " VALID "/full.cfg", out, sizeof(out), err, sizeof(err));
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(out, "");
    ck_assert_ptr_nonnull(strstr(err, VALID "/full.cfg:26: warning: job \"usage-report\": handler "
                                            "program /usr/local/bin/report is not executable"));
}
END_TEST

START_TEST(test_check_usage_errors_exit_2)
{
    static char out[4096], err[4096];
    ck_assert_int_eq(run_check("--bogus", out, sizeof(out), err, sizeof(err)), 2);
    ck_assert_ptr_nonnull(strstr(err, "usage: warren check"));
    /* A trailing -c is missing its value, not an unknown argument. */
    ck_assert_int_eq(run_check("-c", out, sizeof(out), err, sizeof(err)), 2);
    ck_assert_msg(strstr(err, "-c needs a value: -c FILE") != NULL, "%s", err);
    ck_assert_int_eq(run_check("--help", out, sizeof(out), err, sizeof(err)), 0);
    ck_assert_ptr_nonnull(strstr(out, "usage: warren check"));
    ck_assert_int_eq(run_check("-c /nonexistent.cfg", out, sizeof(out), err, sizeof(err)), 2);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent.cfg: cannot read the configuration"));
}
END_TEST

START_TEST(test_check_reads_warren_config_env)
{
    static char out[65536], err[65536];
    setenv("WARREN_CONFIG", VALID "/minimal.cfg", 1);
    int rc = run_check("", out, sizeof(out), err, sizeof(err));
    unsetenv("WARREN_CONFIG");
    ck_assert_int_eq(rc, 0);
    ck_assert_ptr_nonnull(strstr(out, "tick "));
    ck_assert_ptr_nonnull(strstr(out, "valid, 1 job, 1 queue"));
}
END_TEST

/* ---- data-driven invalid files -------------------------------------------------------------- */

#define MAX_CASES 256
static char *cases[MAX_CASES];
static int ncases;

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void scan_invalid(void)
{
    DIR *d = opendir(INVALID);
    struct dirent *e;
    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL && ncases < MAX_CASES) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".cfg") == 0)
            cases[ncases++] = strndup(e->d_name, len - 4);
    }
    closedir(d);
    qsort(cases, (size_t)ncases, sizeof(cases[0]), name_cmp);
}

/* Replaces {FILE} with the case's path and {DIR} with its directory. */
static void expand(const char *in, const char *file, char *out, size_t len)
{
    size_t o = 0;
    while (*in != '\0' && o + 1 < len) {
        const char *rep = NULL;
        size_t skip = 0;
        if (strncmp(in, "{FILE}", 6) == 0) {
            rep = file;
            skip = 6;
        } else if (strncmp(in, "{DIR}", 5) == 0) {
            rep = INVALID;
            skip = 5;
        }
        if (rep != NULL) {
            size_t n = strlen(rep);
            if (o + n >= len)
                break;
            memcpy(out + o, rep, n);
            o += n;
            in += skip;
        } else {
            out[o++] = *in++;
        }
    }
    out[o] = '\0';
}

/* Each non-comment line of NAME.expect must be a substring of the error at
 * the same position, and there must be exactly as many errors as lines; a
 * line starting with "+ " is one more substring of the previous error. */
START_TEST(test_config_invalid_file_gives_expected_errors)
{
    char path[4096], expect_path[4096], line[2048], want[4096];
    warren_config *cfg = NULL;
    warren_diags d = {0};
    warren_error err = {0};
    size_t k = 0;

    snprintf(path, sizeof(path), "%s/%s.cfg", INVALID, cases[_i]);
    snprintf(expect_path, sizeof(expect_path), "%s/%s.expect", INVALID, cases[_i]);
    unsetenv("WARREN_DATABASE_URL");
    unsetenv("WARREN_AMQP_URL");
    FILE *f = fopen(expect_path, "r");
    ck_assert_msg(f != NULL, "%s has no .expect file", path);

    int rc = warren_config_load(path, &cfg, &d, &err);
    ck_assert_msg(rc == WARREN_ECONFIG, "%s: loaded (rc %d), expected errors", cases[_i], rc);
    ck_assert_ptr_null(cfg);
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        if (line[0] == '#' || line[0] == '\0')
            continue;
        expand(line[0] == '+' && line[1] == ' ' ? line + 2 : line, path, want, sizeof(want));
        if (line[0] == '+' && line[1] == ' ') { /* one more substring of the previous error */
            ck_assert_msg(k > 0, "%s: '+ ' line before any error line", cases[_i]);
            ck_assert_msg(strstr(d.items[k - 1], want) != NULL,
                          "%s: error %zu\n  is   \"%s\"\n  lacks \"%s\"", cases[_i], k,
                          d.items[k - 1], want);
            continue;
        }
        ck_assert_msg(k < d.count, "%s: expected error %zu \"%s\", got only %zu errors", cases[_i],
                      k + 1, want, d.count);
        ck_assert_msg(strstr(d.items[k], want) != NULL,
                      "%s: error %zu\n  is   \"%s\"\n  want \"%s\"", cases[_i], k + 1, d.items[k],
                      want);
        k++;
    }
    fclose(f);
    ck_assert_msg(k > 0, "%s.expect lists no errors", cases[_i]);
    ck_assert_msg(k == d.count, "%s: %zu errors, expected %zu; extra: \"%s\"", cases[_i], d.count,
                  k, d.items[k < d.count ? k : 0]);
    /* err carries the first error too */
    ck_assert_int_eq(
        strncmp(err.message, d.items[0], strlen(d.items[0]) < 200 ? strlen(d.items[0]) : 200), 0);
    warren_diags_free(&d);
}
END_TEST

START_TEST(test_config_has_enough_invalid_cases)
{
    ck_assert_int_ge(ncases, 40);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("valid");
    tcase_add_test(tc, test_config_full_file_loads_every_field);
    tcase_add_test(tc, test_config_minimal_file_gets_documented_defaults);
    tcase_add_test(tc, test_config_delay_ring_type_classic_is_parsed);
    tcase_add_test(tc, test_config_empty_file_has_no_jobs);
    tcase_add_test(tc, test_config_payload_types_become_json);
    tcase_add_test(tc, test_config_handler_forms);
    tcase_add_test(tc, test_config_schedule_forms);
    tcase_add_test(tc, test_config_include_is_relative_to_the_file);
    tcase_add_test(tc, test_config_every_valid_file_loads);
    tcase_add_test(tc, test_config_example_file_is_valid);
    tcase_add_test(tc, test_config_policy_names_round_trip);
    suite_add_tcase(s, tc);

    tc = tcase_create("tables");
    tcase_add_test(tc, test_config_every_setting_is_documented_with_its_default);
    tcase_add_test(tc, test_config_table_defaults_are_the_loaded_defaults);
    suite_add_tcase(s, tc);

    tc = tcase_create("environment");
    tcase_add_test(tc, test_config_env_overrides_urls);
    tcase_add_test(tc, test_config_env_amqp_url_is_validated);
    suite_add_tcase(s, tc);

    tc = tcase_create("check_command");
    tcase_add_test(tc, test_check_prints_one_line_per_job_and_exits_0);
    tcase_add_test(tc, test_check_prints_every_error_and_exits_2);
    tcase_add_test(tc, test_check_warns_about_missing_handler_programs);
    tcase_add_test(tc, test_check_usage_errors_exit_2);
    tcase_add_test(tc, test_check_reads_warren_config_env);
    suite_add_tcase(s, tc);

    tc = tcase_create("invalid");
    tcase_add_test(tc, test_config_missing_file_names_it);
    tcase_add_test(tc, test_config_survives_mutated_files);
    tcase_add_test(tc, test_config_error_summary_counts_the_rest);
    tcase_add_test(tc, test_config_has_enough_invalid_cases);
    tcase_add_loop_test(tc, test_config_invalid_file_gives_expected_errors, 0, ncases);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    scan_invalid();
    SRunner *sr = srunner_create(config_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    for (int i = 0; i < ncases; i++)
        free(cases[i]);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
