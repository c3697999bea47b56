/*
 * cmd_fr.c -- `firebreak fr` (not built yet: placeholder that says so).
 */
#include <stdio.h>

#include "cli/cli.h"

int fb__cmd_fr(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "firebreak fr: not available in this build yet\n");
    return 2;
}
