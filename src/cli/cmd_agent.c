/*
 * cmd_agent.c -- `firebreak agent` (not built yet: placeholder that says so).
 */
#include <stdio.h>

#include "cli/cli.h"

int fb__cmd_agent(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "firebreak agent: not available in this build yet\n");
    return 2;
}
