/* cli_enqueue.c: `warren enqueue JOB --key K [--at TIME] [--payload JSON]
 * [--tenant T]`: parse, call warren_enqueue (the SQL API), print. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/codec.h>
#include <warren/enqueue.h>
#include <warren/store.h>

#include "cli.h"

static const char usage[] = "JOB --key KEY [--at TIME] [--payload JSON] [--tenant T] [-c FILE]";

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "warren enqueue: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: warren enqueue %s\n", usage);
    return WARREN_EXIT_USAGE;
}

int cli_enqueue(int argc, char **argv)
{
    const char *config = NULL, *job = NULL, *key = NULL, *at_s = NULL, *payload_s = NULL,
               *tenant = NULL;
    warren_config *cfg = NULL;
    warren_store *st = NULL;
    warren_error err = {0};
    warren_enqueue_result r;
    char when[WARREN_TIME_BUF];
    char *payload = NULL;
    warren_us at = 0;
    int rc;

    if (cli_wants_help(argc, argv)) {
        printf("usage: warren enqueue %s\n\n"
               "Enqueues a one-shot run of a job (a config job, an API job or a template)\n"
               "through the SQL API (warren.enqueue), keyed JOB@KEY with your idempotency\n"
               "key: 1-200 of [A-Za-z0-9._:/=+@-], first a letter or digit, not beginning\n"
               "with a time YYYY-MM-DDTHH:MM:SS. Enqueueing the same key again creates\n"
               "nothing and says which run holds it. TIME: RFC 3339 with a UTC offset,\n"
               "milliseconds allowed (rounded up to the millisecond); default now, by the\n"
               "database's clock. The payload (a JSON object) overrides the job's; the\n"
               "tenant (default: the job's) is the run's for per-tenant caps.\n",
               usage);
        return WARREN_EXIT_OK;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = NULL;
        if (strcmp(a, "-c") == 0 || strcmp(a, "--config") == 0)
            slot = &config;
        else if (strcmp(a, "--key") == 0 || strcmp(a, "-k") == 0)
            slot = &key;
        else if (strcmp(a, "--at") == 0)
            slot = &at_s;
        else if (strcmp(a, "--payload") == 0)
            slot = &payload_s;
        else if (strcmp(a, "--tenant") == 0)
            slot = &tenant;
        else if (a[0] == '-' && a[1] != '\0')
            return usage_error("unknown option \"%s\"", a);
        else if (job == NULL) {
            job = a;
            continue;
        } else {
            return usage_error("unexpected argument \"%s\"", a);
        }
        if (i + 1 >= argc)
            return usage_error("option %s needs a value", a);
        *slot = argv[++i];
    }
    if (job == NULL)
        return usage_error("%s", "missing JOB");
    if (!warren_job_name_valid(job))
        return usage_error("\"%s\" is not a job name", job);
    if (key == NULL)
        return usage_error(
            "%s", "missing --key KEY: an idempotency key you choose (e.g. welcome:user-42)");
    /* The key, payload and tenant are checked by warren.enqueue itself (one
     * set of rules); the time is parsed here, where its text is. */
    if (at_s != NULL && warren_time_parse(at_s, &at, &err) != 0)
        return usage_error("--at: %s", err.message);
    if (payload_s != NULL && warren_json_object_check(payload_s, &payload, &err) != 0)
        return usage_error("--payload: %s", err.message);
    if ((cfg = cli_load_config(cli_config_path(config))) == NULL) {
        free(payload);
        return WARREN_EXIT_USAGE;
    }
    if ((rc = warren_store_open(cfg->database_url, NULL, &st, &err)) == 0)
        rc = warren_enqueue(st, job, key, at_s ? &at : NULL, payload, tenant, &r, &err);
    if (rc == 0) {
        /* cppcheck-suppress uninitStructMember ; rc 0 comes from warren_enqueue, which fills r */
        warren_time_format_ms(r.scheduled_at, when, sizeof(when));
        if (r.created)
            printf("created run %s (due %s)\n", r.run_key, when);
        else
            printf("run %s already holds key \"%s\" (state %s, due %s): nothing created\n",
                   r.run_key, key, r.state[0] ? r.state : "unknown", when);
    } else {
        fprintf(stderr, "warren enqueue: %s\n", err.message);
    }
    free(payload);
    warren_store_free(st);
    warren_config_free(cfg);
    if (rc == WARREN_EINVAL)
        return WARREN_EXIT_USAGE;
    return rc == 0 ? WARREN_EXIT_OK : cli_exit_code(rc);
}
