/*
 * sup_tee.c -- libFuzzer target for a console rank's output on its way to
 * the terminal (--console-ranks, src/supervisor/tee.c): the bytes are the
 * rank's, any bytes.  Byte 0 picks the rank and how the output is split
 * into reads; the rest is the output, fed read by read to the splitter,
 * then its end.  Every input line comes out once, in order (its first
 * FB__SUP_TEE_LINE bytes, cut when longer), and its console line is one
 * line within FB__SUP_TEE_OUT: "[rank<R>]: ", text that cannot drive a
 * terminal (no control byte but tab, no C1 control, valid UTF-8) with one
 * character for each of the line's (a NUL does not end it), the cut
 * marker exactly when cut, one newline; printable ASCII passes unchanged.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "supervisor/sup.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MARK " [firebreak: line cut; the log has it whole]"

typedef struct {
    const uint8_t *in;
    size_t n, pos; /* the reference: where the next input line starts */
    int rank;
} ref;

/* Length of a valid UTF-8 character at s (n bytes left): 1..4, 0 if none
 * (overlong, surrogate, past U+10FFFF, cut). */
static size_t utf8_char(const unsigned char *s, size_t n)
{
    unsigned c = s[0], need, min;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        need = 1, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        need = 2, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        need = 3, min = 0x10000;
    else
        return 0;
    if (n < need + 1)
        return 0;
    unsigned cp = c & (0x3f >> need);
    for (unsigned i = 1; i <= need; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return need + 1;
}

static void check_console(const char *line, size_t len, int cut, int rank, const char *out,
                          size_t used)
{
    char head[32];
    int hl = snprintf(head, sizeof head, "[rank%d]: ", rank);
    size_t ml = cut ? strlen(MARK) : 0;
    if (used == 0 || used >= FB__SUP_TEE_OUT || strlen(out) != used || out[used - 1] != '\n' ||
        strncmp(out, head, (size_t)hl) || used < (size_t)hl + ml + 1 ||
        (cut && memcmp(out + used - 1 - ml, MARK, ml)))
        __builtin_trap();
    const unsigned char *t = (const unsigned char *)out + hl;
    size_t tl = used - 1 - ml - (size_t)hl, chars = 0, units = 0;
    for (size_t i = 0; i < tl; chars++) {
        size_t k = utf8_char(t + i, tl - i);
        if (k == 0 || (t[i] < 0x20 && t[i] != '\t') || t[i] == 0x7f ||
            (k == 2 && t[i] == 0xc2 && t[i + 1] < 0xa0))
            __builtin_trap();
        i += k;
    }
    /* A line's text is never lost: one character out for each one in (a
     * valid UTF-8 character, or a byte that is not part of one). */
    for (size_t i = 0; i < len; units++) {
        size_t k = utf8_char((const unsigned char *)line + i, len - i);
        i += k ? k : 1;
    }
    if (chars != units)
        __builtin_trap();
    int plain = 1;
    for (size_t i = 0; i < len && plain; i++)
        plain = (line[i] >= 0x20 && line[i] < 0x7f) || line[i] == '\t';
    if (plain && (tl != len || memcmp(t, line, len)))
        __builtin_trap();
}

static void on_line(void *ctx, const char *line, size_t len, int cut)
{
    ref *r = ctx;
    /* The next input line, from the reference's own split. */
    if (r->pos >= r->n)
        __builtin_trap(); /* a line that is not in the input */
    const uint8_t *nl = memchr(r->in + r->pos, '\n', r->n - r->pos);
    size_t whole = nl ? (size_t)(nl - (r->in + r->pos)) : r->n - r->pos;
    size_t want = whole > FB__SUP_TEE_LINE ? FB__SUP_TEE_LINE : whole;
    if (len != want || cut != (whole > FB__SUP_TEE_LINE) || memcmp(line, r->in + r->pos, len))
        __builtin_trap();
    r->pos += whole + (nl != NULL);
    char out[FB__SUP_TEE_OUT];
    size_t used = fb__sup_tee_format(out, sizeof out, "", r->rank, line, len, cut);
    check_console(line, len, cut, r->rank, out, used);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    ref r = {data + 1, size - 1, 0, (data[0] & 0x80) ? 1000000 : data[0] & 7};
    fb__sup_tee *t = calloc(1, sizeof *t);
    if (!t)
        __builtin_trap();
    size_t chunk = 1 + (size_t)(data[0] & 0x7f) * 37;
    for (size_t off = 0; off < r.n; off += chunk)
        fb__sup_tee_split(t, (const char *)r.in + off, r.n - off < chunk ? r.n - off : chunk,
                          on_line, &r);
    fb__sup_tee_end(t, on_line, &r);
    if (r.pos != r.n)
        __builtin_trap(); /* every line came out */
    free(t);
    return 0;
}
