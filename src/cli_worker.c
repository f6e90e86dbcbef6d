/* cli_worker.c: placeholder until its owner lands the real commands. */
#include <stdio.h>

#include "cli.h"

int cli_worker(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "warren %s: not built yet\n", argv[0]);
    return WARREN_EXIT_FAIL;
}

int cli_run(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "warren %s: not built yet\n", argv[0]);
    return WARREN_EXIT_FAIL;
}

int cli_replay(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "warren %s: not built yet\n", argv[0]);
    return WARREN_EXIT_FAIL;
}

int cli_runs(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "warren %s: not built yet\n", argv[0]);
    return WARREN_EXIT_FAIL;
}

int cli_show(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "warren %s: not built yet\n", argv[0]);
    return WARREN_EXIT_FAIL;
}
