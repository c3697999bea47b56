/*
 * cmd_sim.c -- `firebreak sim` (not built yet: placeholder that says so).
 */
#include <stdio.h>

#include "cli/cli.h"

int fb__cmd_sim(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "firebreak sim: not available in this build yet\n");
    return 2;
}
