/*
 * cmd_report.c -- `firebreak report` (not built yet: placeholder that says so).
 */
#include <stdio.h>

#include "cli/cli.h"

int fb__cmd_report(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "firebreak report: not available in this build yet\n");
    return 2;
}
