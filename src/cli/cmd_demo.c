/*
 * cmd_demo.c -- `firebreak demo` (not built yet: placeholder that says so).
 */
#include <stdio.h>

#include "cli/cli.h"

int fb__cmd_demo(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "firebreak demo: not available in this build yet\n");
    return 2;
}
