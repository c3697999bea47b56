/*
 * cmd_ckpt.c -- `firebreak ckpt` (not built yet: placeholder that says so).
 */
#include <stdio.h>

#include "cli/cli.h"

int fb__cmd_ckpt(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "firebreak ckpt: not available in this build yet\n");
    return 2;
}
