/* main.c: the warren program: finds the subcommand and hands over. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"check", cli_check, "validate a config file and summarise its jobs"},
    {"cron", cli_cron, "cron next: print the next fire instants of an expression"},
    {"migrate", cli_migrate, "apply the SQL migrations in sql/ to the database"},
    {"topology", cli_topology, "declare the RabbitMQ queues and exchanges the config needs"},
    {"sync", cli_sync, "upsert the config's jobs into the database"},
    {"planner", cli_planner, "run a planner: materialise, publish, reconcile"},
    {"worker", cli_worker, "run a worker: consume ready queues, claim, run, complete"},
    {"run", cli_run, "planner and workers in one process (small installs, the demo)"},
    {"trigger", cli_trigger, "create a one-shot run of a job now or at a time"},
    {"enqueue", cli_enqueue, "enqueue a one-shot run with your idempotency key (SQL API)"},
    {"pause", cli_pause, "pause a job"},
    {"resume", cli_resume, "resume a job (applies its misfire policy)"},
    {"backfill", cli_backfill, "materialise every fire time in a range"},
    {"replay", cli_replay, "send dead runs back to planned under the same run key"},
    {"runs", cli_runs, "list runs"},
    {"show", cli_show, "show one run with its history"},
    {"grant", cli_grant, "let a worker login work on queues (or list grants)"},
    {"revoke", cli_revoke, "take queues away from a worker login"},
    {"grant-producer", cli_grant_producer,
     "let a producer login use templates and jobs of the Job API (or list grants)"},
    {"revoke-producer", cli_revoke_producer, "take templates and jobs away from a producer login"},
    {"tenant-cap", cli_tenant_cap, "cap the runs of one tenant running at once (or list caps)"},
    {"jobs", cli_jobs, "list jobs: schedule, next fire time, paused, broken"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: warren [--version] [--help] COMMAND [ARGS]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-16s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\n'warren COMMAND --help' describes one command.\n"
               "exit codes: 0 ok, 1 runtime failure, 2 usage or config error, "
               "69 a server unreachable\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return WARREN_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return WARREN_EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("warren %s\n", WARREN_VERSION);
        return WARREN_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "warren: unknown command \"%s\" (see 'warren --help')\n", argv[1]);
    return WARREN_EXIT_USAGE;
}
