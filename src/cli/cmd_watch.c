/*
 * cmd_watch.c -- `firebreak watch` (not built yet: placeholder that says so).
 */
#include <stdio.h>

#include "cli/cli.h"

int fb__cmd_watch(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "firebreak watch: not available in this build yet\n");
    return 2;
}
