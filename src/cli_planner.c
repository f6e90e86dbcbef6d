/* cli_planner.c: placeholder until its owner lands the real commands. */
#include <stdio.h>

#include "cli.h"

int cli_planner(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "warren %s: not built yet\n", argv[0]);
    return WARREN_EXIT_FAIL;
}

int cli_trigger(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "warren %s: not built yet\n", argv[0]);
    return WARREN_EXIT_FAIL;
}

int cli_pause(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "warren %s: not built yet\n", argv[0]);
    return WARREN_EXIT_FAIL;
}

int cli_resume(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "warren %s: not built yet\n", argv[0]);
    return WARREN_EXIT_FAIL;
}

int cli_backfill(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "warren %s: not built yet\n", argv[0]);
    return WARREN_EXIT_FAIL;
}
