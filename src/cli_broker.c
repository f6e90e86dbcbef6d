/* cli_broker.c: `warren topology`: declare on RabbitMQ what the config's job
 * queues need (docs/design.md §4.1) and print what was declared. */
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
            "With planner.delay_ring = N it also declares the N delay queues\n"
            "warren.delay.ring.0..N-1 (quorum, or classic with planner.delay_ring_type =\n"
            "\"classic\"); per-second delay queues are declared by the planner on demand.\n"
            "See broker/README.md.\n\n"
            "  -c, --config FILE  the configuration (default: $WARREN_CONFIG, else warren.cfg)\n\n"
            "exit codes: 0 declared, 1 the broker refused (e.g. a queue exists with other\n"
            "arguments), 2 usage or config error, 69 RabbitMQ unreachable\n");
}

int cli_topology(int argc, char **argv)
{
    const char *given = NULL;
    warren_config *cfg = NULL;
    warren_broker *b = NULL;
    warren_error err = {0};
    warren_logger lg = cli_logger();
    const char **queues = NULL;
    size_t nqueues = 0;
    int rc;

    if (cli_wants_help(argc, argv)) {
        topology_usage(stdout);
        return WARREN_EXIT_OK;
    }
    for (int i = 1; i < argc; i++) {
        if ((strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--config") == 0) && i + 1 < argc) {
            given = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            given = argv[i] + 9;
        } else if (strcmp(argv[i], "-c") == 0 || strcmp(argv[i], "--config") == 0) {
            fprintf(stderr, "warren topology: %s needs a value: %s FILE\n", argv[i], argv[i]);
            return WARREN_EXIT_USAGE;
        } else {
            fprintf(stderr, "warren topology: unexpected argument \"%s\"\n", argv[i]);
            topology_usage(stderr);
            return WARREN_EXIT_USAGE;
        }
    }
    cfg = cli_load_config(cli_config_path(given));
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
    /* the optional delay ring: created up front so operators see it (and so
     * the planner never creates a queue while runs are being released) */
    if (rc == 0 && cfg->planner.delay_ring > 0)
        rc = warren_broker_delay_ring_check(cfg->planner.delay_ring, cfg->planner.horizon_ms, &err);
    for (int s = 0; rc == 0 && s < cfg->planner.delay_ring; s++) {
        char name[64];
        rc = warren_broker_delay_ring_queue_typed(
            b, s, cfg->planner.delay_ring, cfg->planner.delay_ring_type, name, sizeof(name), &err);
    }
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
    if (cfg->planner.delay_ring > 0)
        printf("  queues   %s0 .. %s%d: %s delay ring (planner.delay_ring = %d), dead "
               "letters to %s\n",
               WARREN_DELAY_RING_PREFIX, WARREN_DELAY_RING_PREFIX, cfg->planner.delay_ring - 1,
               cfg->planner.delay_ring_type == WARREN_DELAY_RING_CLASSIC ? "classic" : "quorum",
               cfg->planner.delay_ring, WARREN_READY_EXCHANGE);
    else
        printf("  (delay queues %s<second> are declared by the planner on demand)\n",
               WARREN_DELAY_PREFIX);
out:
    warren_broker_free(b);
    free(queues);
    warren_config_free(cfg);
    return cli_exit_code(rc);
}
