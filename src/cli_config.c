/* cli_config.c: placeholder until its owner lands the real commands. */
#include <stdio.h>

#include "cli.h"

int cli_check(int argc, char **argv)
{
    (void)argc;
    fprintf(stderr, "warren %s: not built yet\n", argv[0]);
    return WARREN_EXIT_FAIL;
}
