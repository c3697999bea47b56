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

#include "check_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char msg[256], where[256];
    int rc = fb__sup_error_file_parse((const char *)data, size, msg, sizeof msg, where,
                                      sizeof where);
    fuzz_check_text(msg, sizeof msg);
    fuzz_check_text(where, sizeof where);
    if (rc != 0 && (msg[0] || where[0]))
        __builtin_trap(); /* nothing is taken from a file that is refused */
    return 0;
}
