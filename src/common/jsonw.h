/*
 * jsonw.h -- a small streaming JSON writer into a growable buffer.
 *
 * Used for every --json output (one object on one line, the last line of
 * stdout) and for metadata we write.  Commas are inserted automatically;
 * strings are escaped (control characters, quotes, backslash; non-UTF-8
 * bytes are replaced with U+FFFD).  Doubles that are not finite become
 * null.  Nesting is bounded (FB__JSONW_MAX_DEPTH).
 */
#ifndef FB_COMMON_JSONW_H
#define FB_COMMON_JSONW_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FB__JSONW_MAX_DEPTH 32

typedef struct fb__jsonw {
    char *buf;
    size_t len, cap;
    int depth;
    unsigned char need_comma[FB__JSONW_MAX_DEPTH];
    int oom; /* set when an allocation failed; output is then unusable */
} fb__jsonw;

void fb__jsonw_init(fb__jsonw *w);
void fb__jsonw_free(fb__jsonw *w);

void fb__jsonw_obj_begin(fb__jsonw *w);
void fb__jsonw_obj_end(fb__jsonw *w);
void fb__jsonw_arr_begin(fb__jsonw *w);
void fb__jsonw_arr_end(fb__jsonw *w);
/* Object key; the next value call supplies its value. */
void fb__jsonw_key(fb__jsonw *w, const char *key);

void fb__jsonw_str(fb__jsonw *w, const char *s);      /* NULL -> null */
void fb__jsonw_strn(fb__jsonw *w, const char *s, size_t n);
void fb__jsonw_int(fb__jsonw *w, long long v);
void fb__jsonw_uint(fb__jsonw *w, unsigned long long v);
void fb__jsonw_double(fb__jsonw *w, double v);        /* %.17g-ish, short */
void fb__jsonw_bool(fb__jsonw *w, int v);
void fb__jsonw_null(fb__jsonw *w);
/* Insert already-valid JSON text as a value. */
void fb__jsonw_raw(fb__jsonw *w, const char *json);

/* Key + value shorthands. */
void fb__jsonw_kstr(fb__jsonw *w, const char *k, const char *v);
void fb__jsonw_kint(fb__jsonw *w, const char *k, long long v);
void fb__jsonw_kuint(fb__jsonw *w, const char *k, unsigned long long v);
void fb__jsonw_kdouble(fb__jsonw *w, const char *k, double v);
void fb__jsonw_kbool(fb__jsonw *w, const char *k, int v);

/* The text so far (NUL-terminated; "" when empty or after OOM). */
const char *fb__jsonw_text(const fb__jsonw *w);

/* Print the text and a newline to f; returns 0 or -EIO / -ENOMEM. */
int fb__jsonw_print(const fb__jsonw *w, FILE *f);

#endif
