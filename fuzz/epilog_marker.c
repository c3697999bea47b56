/*
 * epilog_marker.c -- libFuzzer target for the reader of the marker that
 * names a node-memory directory's Slurm job (src/supervisor/epilog.c):
 * the marker lies in /dev/shm, which any local user can write, and Slurm's
 * Epilog reads it as root.  Any bytes are refused or read within bounds;
 * what is accepted is one job id in one spelling: formatting it again
 * gives the input back (with its newline).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "supervisor/watcher.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint32_t job = 0;
    if (fb__epilog_marker_parse((const char *)data, size, &job))
        return 0;
    if (job == 0 || size > FB__EPILOG_MARKER_MAX)
        __builtin_trap();
    char again[FB__EPILOG_MARKER_MAX];
    int n = fb__epilog_marker_format(again, sizeof again, job);
    size_t want = size && data[size - 1] == '\n' ? size : size + 1;
    if (n < 0 || (size_t)n != want || memcmp(again, data, size))
        __builtin_trap();
    return 0;
}
