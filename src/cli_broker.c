/* cli_broker.c: placeholder until its owner lands the real commands. */
#include <stdio.h>

#include "cli.h"

int cli_topology(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "warren %s: not built yet\n", argv[0]);
    return WARREN_EXIT_FAIL;
}
