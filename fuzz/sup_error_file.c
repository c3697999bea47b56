/*
 * sup_error_file.c -- libFuzzer target for the reader of PyTorch's
 * TORCHELASTIC_ERROR_FILE (src/supervisor/errorfile.c): the file is the
 * rank's, so any bytes must be rejected or read within bounds, and what is
 * taken from it is one NUL-terminated line with no control bytes.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "supervisor/errorfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const char *s, size_t cap)
{
    const char *end = memchr(s, '\0', cap);
    if (!end)
        __builtin_trap();
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p < 0x20 && *p != '\t') || *p == 0x7f)
            __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char msg[256], where[256];
    int rc = fb__sup_error_file_parse((const char *)data, size, msg, sizeof msg, where,
                                      sizeof where);
    check(msg, sizeof msg);
    check(where, sizeof where);
    if (rc != 0 && (msg[0] || where[0]))
        __builtin_trap(); /* nothing is taken from a file that is refused */
    return 0;
}
