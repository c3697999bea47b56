/*
 * error.c -- fb_strerror(), fb_version(), the dtype table, and the
 * library's messages to its user (fb__say, lib.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "firebreak/firebreak.h"
#include "lib/lib.h"

/* Where this thread keeps its messages (fb__say_keep), or NULL. */
static __thread fb__say_buf *kept;

static void say(int keeper_only, const char *fmt, va_list ap)
{
    char line[1024];
    int n = vsnprintf(line, sizeof line, fmt, ap);
    if (n < 0)
        return;
    size_t len = strlen(line);
    if (len && line[len - 1] == '\n')
        line[--len] = '\0';
    fb__say_buf *b = kept;
    if (!b) {
        if (!keeper_only)
            fprintf(stderr, "firebreak: %s\n", line);
        return;
    }
    if (b->cut)
        return;
    size_t sep = b->len ? 1 : 0;
    if (b->len + sep + len + 5 > sizeof b->text) { /* room kept for "\n...\0" */
        memcpy(b->text + b->len, sep ? "\n..." : "...", sep + 4);
        b->len += sep + 3;
        b->cut = 1;
        return;
    }
    if (sep)
        b->text[b->len++] = '\n';
    memcpy(b->text + b->len, line, len + 1);
    b->len += len;
}

void fb__say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(0, fmt, ap);
    va_end(ap);
}

void fb__say_to_keeper(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(1, fmt, ap);
    va_end(ap);
}

void fb__say_keep(fb__say_buf *b)
{
    if (b) {
        b->text[0] = '\0';
        b->len = 0;
        b->cut = 0;
    }
    kept = b;
}

const char *fb_strerror(int rc)
{
    switch (rc) {
    case 0:
        return "success";
#define FB__ERRSTR(name, code, msg) case code: return msg;
        FB_ERRNO_MAP(FB__ERRSTR)
#undef FB__ERRSTR
    default:
        break;
    }
    if (rc < 0 && rc > -4000)
        return strerror(-rc);
    return "unknown error";
}

/* The table is dense: each code is the base minus its position, so
 * FB_ELAST_ (computed from the count) is one past the last. */
#define FB__ERRCHECK(name, code, msg)                                         \
    _Static_assert(code == FB__ERRNO_BASE - FB__ERRPOS_##name,                \
                   "FB_" #name ": codes are appended one below the last");
FB_ERRNO_MAP(FB__ERRCHECK)
#undef FB__ERRCHECK

const char *fb_version(void)
{
    return FB_VERSION_STRING;
}

static const struct {
    const char *name;
    size_t size;
} dtypes[FB_DTYPE_COUNT_] = {
    [FB_DTYPE_BOOL] = {"BOOL", 1},   [FB_DTYPE_U8] = {"U8", 1},
    [FB_DTYPE_I8] = {"I8", 1},       [FB_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
    [FB_DTYPE_F8_E4M3] = {"F8_E4M3", 1}, [FB_DTYPE_I16] = {"I16", 2},
    [FB_DTYPE_U16] = {"U16", 2},     [FB_DTYPE_F16] = {"F16", 2},
    [FB_DTYPE_BF16] = {"BF16", 2},   [FB_DTYPE_I32] = {"I32", 4},
    [FB_DTYPE_U32] = {"U32", 4},     [FB_DTYPE_F32] = {"F32", 4},
    [FB_DTYPE_C64] = {"C64", 8},     [FB_DTYPE_F64] = {"F64", 8},
    [FB_DTYPE_I64] = {"I64", 8},     [FB_DTYPE_U64] = {"U64", 8},
};

const char *fb_dtype_name(fb_dtype dtype)
{
    return (unsigned)dtype < FB_DTYPE_COUNT_ ? dtypes[dtype].name : NULL;
}

size_t fb_dtype_size(fb_dtype dtype)
{
    return (unsigned)dtype < FB_DTYPE_COUNT_ ? dtypes[dtype].size : 0;
}
