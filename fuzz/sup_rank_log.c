/*
 * sup_rank_log.c -- libFuzzer target for the choice of a rank's last log
 * lines (fb__rank_log_tail_text, src/supervisor/ranklog.c): the log is the
 * rank's output, any bytes.  Byte 0 bit 0 says whether the text was cut
 * from a longer file; the rest is the text.  What is kept is a suffix of
 * the input (NULs read as '?'), NUL-terminated with no NUL inside, that
 * starts a line, drops a cut fragment, holds at most FB__RANK_LOG_LINES
 * lines and no attempt marker but at its start, and is cut short only by
 * the line cap or a marker.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/ranklog.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MARK FB__RANK_LOG_MARK

static int is_mark_at(const char *s, size_t len, size_t i)
{
    size_t ml = strlen(MARK);
    return len - i >= ml && memcmp(s + i, MARK, ml) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    int cut = data[0] & 1;
    size_t n = size - 1;
    char *in = malloc(n + 1), *buf = malloc(n + 1);
    if (!in || !buf)
        __builtin_trap();
    memcpy(buf, data + 1, n);
    for (size_t i = 0; i < n; i++)
        in[i] = data[1 + i] ? (char)data[1 + i] : '?';
    size_t len = fb__rank_log_tail_text(buf, n, cut);
    if (len > n || buf[len] != '\0' || memchr(buf, '\0', len))
        __builtin_trap();
    size_t start = n - len;
    if (memcmp(buf, in + start, len))
        __builtin_trap(); /* a suffix of the input */
    if (start > 0 && in[start - 1] != '\n')
        __builtin_trap(); /* starts a line */
    const char *first_nl = memchr(in, '\n', n);
    size_t from = cut && first_nl ? (size_t)(first_nl - in) + 1 : 0;
    if (start < from && !(start == 0 && is_mark_at(in, n, 0)))
        __builtin_trap(); /* a cut fragment is dropped (unless it reads as a marker) */
    size_t inner = 0; /* newlines but a final one */
    for (size_t i = 0; i + 1 < len; i++)
        if (buf[i] == '\n')
            inner++;
    if (inner >= FB__RANK_LOG_LINES)
        __builtin_trap();
    for (size_t i = 1; i < len; i++)
        if (buf[i - 1] == '\n' && is_mark_at(buf, len, i))
            __builtin_trap(); /* an earlier attempt's lines */
    /* Nothing more was dropped than the cut, the cap or a marker asked. */
    if (start > from && inner + 1 < FB__RANK_LOG_LINES && !is_mark_at(buf, len, 0))
        __builtin_trap();
    free(in);
    free(buf);
    return 0;
}
