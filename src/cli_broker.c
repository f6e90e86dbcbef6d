/* cli_broker.c: `warren topology`: declare on RabbitMQ what the config's job
 * queues need (DESIGN §4) and print what was declared. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <warren/broker.h>

#include "cli.h"

static void topology_usage(FILE *f)
{
    fprintf(f,
            "usage: warren topology [-c FILE]\n\n"
            "Declares, idempotently, the RabbitMQ exchanges and queues the configuration needs:\n"
            "exchanges warren.ready (headers), warren.dead (fanout), warren.events (topic);\n"
            "the quorum queue warren.dead; and per job queue Q the quorum queue warren.ready.Q\n"
            "(x-delivery-limit = broker.delivery_limit, dead-lettering to warren.dead).\n"
            "Delay queues are declared by the planner on demand. See broker/README.md.\n\n"
            "  -c, --config FILE  the configuration (default: $WARREN_CONFIG, else warren.cfg)\n\n"
            "exit codes: 0 declared, 1 the broker refused (e.g. a queue exists with other\n"
            "arguments), 2 usage or config error, 69 RabbitMQ unreachable\n");
}

/* The conventions of cli.h, kept local until src/cli_common.c lands (the
 * lead parked it); they match cli_config_path / cli_load_config /
 * cli_exit_code / cli_logger exactly. */
static const char *config_path(const char *given)
{
    const char *env = getenv("WARREN_CONFIG");
    if (given != NULL && given[0] != '\0')
        return given;
    if (env != NULL && env[0] != '\0')
        return env;
    return "warren.cfg";
}

static warren_config *load_config(const char *path)
{
    warren_config *cfg = NULL;
    warren_diags diags = {0};
    warren_error err = {0};

    if (warren_config_load(path, &cfg, &diags, &err) != 0) {
        if (diags.count == 0)
            fprintf(stderr, "warren: %s\n", err.message);
        for (size_t i = 0; i < diags.count; i++)
            fprintf(stderr, "%s\n", diags.items[i]);
        warren_diags_free(&diags);
        return NULL;
    }
    warren_diags_free(&diags);
    return cfg;
}

static int exit_code(int rc)
{
    switch (rc) {
    case WARREN_OK:
        return WARREN_EXIT_OK;
    case WARREN_EBROKERCONN:
    case WARREN_EDBCONN:
        return WARREN_EXIT_UNAVAILABLE;
    case WARREN_EINVAL:
    case WARREN_ECONFIG:
        return WARREN_EXIT_USAGE;
    default:
        return WARREN_EXIT_FAIL;
    }
}

static warren_logger stderr_logger(void)
{
    warren_logger lg = {warren_log_stderr, stderr, WARREN_LOG_INFO};
    const char *lvl = getenv("WARREN_LOG");
    if (lvl != NULL && strcmp(lvl, "debug") == 0)
        lg.min_level = WARREN_LOG_DEBUG;
    else if (lvl != NULL && strcmp(lvl, "warn") == 0)
        lg.min_level = WARREN_LOG_WARN;
    return lg;
}

int cli_topology(int argc, char **argv)
{
    const char *given = NULL;
    warren_config *cfg = NULL;
    warren_broker *b = NULL;
    warren_error err = {0};
    warren_logger lg = stderr_logger();
    const char **queues = NULL;
    size_t nqueues = 0;
    int rc;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            topology_usage(stdout);
            return WARREN_EXIT_OK;
        } else if ((strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--config") == 0) &&
                   i + 1 < argc) {
            given = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            given = argv[i] + 9;
        } else {
            fprintf(stderr, "warren topology: unexpected argument \"%s\"\n", argv[i]);
            topology_usage(stderr);
            return WARREN_EXIT_USAGE;
        }
    }
    cfg = load_config(config_path(given));
    if (cfg == NULL)
        return WARREN_EXIT_USAGE;
    queues = warren_config_queues(cfg, &nqueues);
    if (queues == NULL && nqueues > 0) {
        fprintf(stderr, "warren topology: out of memory\n");
        warren_config_free(cfg);
        return WARREN_EXIT_FAIL;
    }
    rc = warren_broker_open(cfg->amqp_url, &lg, &b, &err);
    if (rc == 0)
        rc = warren_broker_topology(b, queues, nqueues, cfg->delivery_limit, &err);
    if (rc != 0) {
        fprintf(stderr, "warren topology: %s\n", err.message);
        goto out;
    }
    printf("declared on RabbitMQ at %s:\n", warren_broker_where(b));
    printf("  exchange %-24s headers, durable\n", WARREN_READY_EXCHANGE);
    printf("  exchange %-24s fanout, durable\n", WARREN_DEAD_EXCHANGE);
    printf("  exchange %-24s topic, durable (run.<outcome>.<job>)\n", WARREN_EVENTS_EXCHANGE);
    printf("  queue    %-24s quorum, bound to exchange %s\n", WARREN_DEAD_QUEUE,
           WARREN_DEAD_EXCHANGE);
    for (size_t i = 0; i < nqueues; i++) {
        char name[128];
        warren_broker_ready_queue_name(queues[i], name, sizeof(name), NULL);
        printf("  queue    %-24s quorum, x-delivery-limit %d, dead letters to %s "
               "(at-least-once); bound to %s where %s = %s\n",
               name, cfg->delivery_limit, WARREN_DEAD_EXCHANGE, WARREN_READY_EXCHANGE,
               WARREN_QUEUE_HEADER, queues[i]);
    }
    if (nqueues == 0)
        printf("  (the configuration names no job queues)\n");
out:
    warren_broker_free(b);
    free(queues);
    warren_config_free(cfg);
    return exit_code(rc);
}
