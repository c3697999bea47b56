/*
 * jsonw.c -- streaming JSON writer (see jsonw.h).
 */
#include "common/jsonw.h"
#include "common/util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"

void fb__jsonw_init(fb__jsonw *w)
{
    memset(w, 0, sizeof *w);
}

void fb__jsonw_free(fb__jsonw *w)
{
    free(w->buf);
    memset(w, 0, sizeof *w);
}

static void put(fb__jsonw *w, const char *s, size_t n)
{
    if (w->oom)
        return;
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (w->len + n + 1 > cap)
            cap *= 2;
        char *nb = fb__realloc(w->buf, cap);
        if (!nb) {
            w->oom = 1;
            return;
        }
        w->buf = nb;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    w->buf[w->len] = '\0';
}

static void puts_(fb__jsonw *w, const char *s)
{
    put(w, s, strlen(s));
}

/* Before a value: a comma when this is not the first element, unless a key
 * was just written (then the key handled the comma). */
static void before_value(fb__jsonw *w)
{
    if (w->depth > 0 && w->depth <= FB__JSONW_MAX_DEPTH) {
        unsigned char *nc = &w->need_comma[w->depth - 1];
        if (*nc == 1)
            put(w, ",", 1);
        *nc = 1;
    }
}

static void open_(fb__jsonw *w, char c)
{
    before_value(w);
    put(w, &c, 1);
    if (w->depth < FB__JSONW_MAX_DEPTH)
        w->need_comma[w->depth] = 0;
    else
        w->oom = 1;
    w->depth++;
}

static void close_(fb__jsonw *w, char c)
{
    if (w->depth > 0)
        w->depth--;
    put(w, &c, 1);
}

void fb__jsonw_obj_begin(fb__jsonw *w) { open_(w, '{'); }
void fb__jsonw_obj_end(fb__jsonw *w) { close_(w, '}'); }
void fb__jsonw_arr_begin(fb__jsonw *w) { open_(w, '['); }
void fb__jsonw_arr_end(fb__jsonw *w) { close_(w, ']'); }

static void put_escaped(fb__jsonw *w, const char *s, size_t n)
{
    put(w, "\"", 1);
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\'; esc[1] = (char)c;
            put(w, esc, 2);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            const char *named = c == '\n' ? "\\n" : c == '\t' ? "\\t"
                              : c == '\r' ? "\\r" : NULL;
            if (named) {
                puts_(w, named);
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                puts_(w, esc);
            }
            i++;
        } else if (c < 0x80) {
            put(w, (const char *)p + i, 1);
            i++;
        } else {
            size_t l = fb__utf8_len(p + i, n - i);
            if (l == 0) {
                puts_(w, "\xef\xbf\xbd");
                i++;
            } else if (l == 2 && c == 0xc2 && p[i + 1] < 0xa0) {
                /* a C1 control (CSI among them): escaped, so that output
                 * on a terminal cannot drive it */
                snprintf(esc, sizeof esc, "\\u%04x", p[i + 1]);
                puts_(w, esc);
                i += 2;
            } else {
                put(w, (const char *)p + i, l);
                i += l;
            }
        }
    }
    put(w, "\"", 1);
}

void fb__jsonw_key(fb__jsonw *w, const char *key)
{
    before_value(w);
    put_escaped(w, key, strlen(key));
    put(w, ":", 1);
    /* The value that follows must not add a comma. */
    if (w->depth > 0 && w->depth <= FB__JSONW_MAX_DEPTH)
        w->need_comma[w->depth - 1] = 2;
}

/* A value after a key: need_comma is 2; reset to 1 without a comma. */
static void value_prefix(fb__jsonw *w)
{
    if (w->depth > 0 && w->depth <= FB__JSONW_MAX_DEPTH &&
        w->need_comma[w->depth - 1] == 2) {
        w->need_comma[w->depth - 1] = 1;
        return;
    }
    before_value(w);
}

void fb__jsonw_strn(fb__jsonw *w, const char *s, size_t n)
{
    value_prefix(w);
    put_escaped(w, s, n);
}

void fb__jsonw_str(fb__jsonw *w, const char *s)
{
    if (!s) {
        fb__jsonw_null(w);
        return;
    }
    fb__jsonw_strn(w, s, strlen(s));
}

void fb__jsonw_int(fb__jsonw *w, long long v)
{
    char b[32];
    value_prefix(w);
    snprintf(b, sizeof b, "%lld", v);
    puts_(w, b);
}

void fb__jsonw_uint(fb__jsonw *w, unsigned long long v)
{
    char b[32];
    value_prefix(w);
    snprintf(b, sizeof b, "%llu", v);
    puts_(w, b);
}

void fb__jsonw_double(fb__jsonw *w, double v)
{
    char b[40];
    value_prefix(w);
    if (!isfinite(v)) {
        puts_(w, "null");
        return;
    }
    /* Shortest of %.15g / %.17g that round-trips. */
    snprintf(b, sizeof b, "%.15g", v);
    if (strtod(b, NULL) != v)
        snprintf(b, sizeof b, "%.17g", v);
    puts_(w, b);
}

void fb__jsonw_bool(fb__jsonw *w, int v)
{
    value_prefix(w);
    puts_(w, v ? "true" : "false");
}

void fb__jsonw_null(fb__jsonw *w)
{
    value_prefix(w);
    puts_(w, "null");
}

void fb__jsonw_raw(fb__jsonw *w, const char *json)
{
    value_prefix(w);
    puts_(w, json);
}

/* open_ is used for nested containers after a key too. */
void fb__jsonw_kstr(fb__jsonw *w, const char *k, const char *v)
{
    fb__jsonw_key(w, k);
    fb__jsonw_str(w, v);
}

void fb__jsonw_kint(fb__jsonw *w, const char *k, long long v)
{
    fb__jsonw_key(w, k);
    fb__jsonw_int(w, v);
}

void fb__jsonw_kuint(fb__jsonw *w, const char *k, unsigned long long v)
{
    fb__jsonw_key(w, k);
    fb__jsonw_uint(w, v);
}

void fb__jsonw_kdouble(fb__jsonw *w, const char *k, double v)
{
    fb__jsonw_key(w, k);
    fb__jsonw_double(w, v);
}

void fb__jsonw_kbool(fb__jsonw *w, const char *k, int v)
{
    fb__jsonw_key(w, k);
    fb__jsonw_bool(w, v);
}

const char *fb__jsonw_text(const fb__jsonw *w)
{
    return (w->buf && !w->oom) ? w->buf : "";
}

int fb__jsonw_print(const fb__jsonw *w, FILE *f)
{
    if (w->oom)
        return -ENOMEM;
    if (fprintf(f, "%s\n", fb__jsonw_text(w)) < 0 || fflush(f))
        return -EIO;
    return 0;
}
