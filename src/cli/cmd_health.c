/*
 * cmd_health.c -- `firebreak health` (not built yet: placeholder that says so).
 */
#include <stdio.h>

#include "cli/cli.h"

int fb__cmd_health(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "firebreak health: not available in this build yet\n");
    return 2;
}
