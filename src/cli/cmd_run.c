/*
 * cmd_run.c -- `firebreak run` (not built yet: placeholder that says so).
 */
#include <stdio.h>

#include "cli/cli.h"

int fb__cmd_run(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "firebreak run: not available in this build yet\n");
    return 2;
}
