/*
 * sup_shim_args.c -- libFuzzer target for the shim server program's
 * arguments (fb__shim_server_parse, src/supervisor/proc.c).  The
 * supervisor starts fb-shim-server itself, but anyone can run it: any
 * argv is refused or read within its bounds.  The input is argv, its
 * strings separated by NUL bytes (at most 8 of them).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/proc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size + 1); /* one NUL past the input ends the last string */
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = '\0';
    char *argv[9];
    int argc = 0;
    for (char *p = buf; argc < 8 && p <= buf + size; p += strlen(p) + 1)
        argv[argc++] = p;
    argv[argc] = NULL;
    fb__shim_server_argv a;
    if (fb__shim_server_parse(argc, argv, &a) == 0) {
        if (argc != 5 || a.sock < 3 || a.supervisor < 2 ||
            (a.set_nofile ? a.nofile < 0 : strcmp(argv[3], "-") != 0) ||
            (a.set_nice ? a.nice < -20 || a.nice > 19 : strcmp(argv[4], "-") != 0))
            __builtin_trap();
    }
    free(buf);
    return 0;
}
