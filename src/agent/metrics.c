/*
 * metrics.c -- writing the Prometheus text exposition format (0.0.4):
 * "# HELP", "# TYPE" once per family, then its samples, label values
 * escaped.  Non-finite values are written as NaN / +Inf / -Inf.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "common/util.h"

static void put(fb__prom *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void put(fb__prom *p, const char *fmt, ...)
{
    if (p->oom)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = p->cap - p->len;
        int n = vsnprintf(p->buf ? p->buf + p->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            p->oom = 1;
            return;
        }
        if ((size_t)n < room) {
            p->len += (size_t)n;
            return;
        }
        size_t cap = p->cap ? p->cap * 2 : 16384;
        while (cap - p->len <= (size_t)n)
            cap *= 2;
        char *b = realloc(p->buf, cap);
        if (!b) {
            p->oom = 1;
            return;
        }
        p->buf = b;
        p->cap = cap;
    }
}

void fb__prom_family(fb__prom *p, const char *name, const char *type,
                     const char *help)
{
    put(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

const char *fb__prom_number(char *buf, size_t size, double v)
{
    /* The shortest of 15 or 17 digits that reads back as v: 9 (as before)
     * made a Unix time of 1765155000.5 "1.765155e+09", ten seconds a step,
     * and a joules counter past 1e9 move in steps rate() misreads. */
    snprintf(buf, size, "%.15g", v);
    if (strtod(buf, NULL) != v)
        snprintf(buf, size, "%.17g", v);
    return buf;
}

void fb__prom_sample(fb__prom *p, const char *name, const char *labels,
                     double value)
{
    char num[32];
    const char *open = labels && *labels ? "{" : "";
    const char *close = labels && *labels ? "}" : "";
    if (isnan(value))
        put(p, "%s%s%s%s NaN\n", name, open, labels ? labels : "", close);
    else if (isinf(value))
        put(p, "%s%s%s%s %sInf\n", name, open, labels ? labels : "", close,
            value > 0 ? "+" : "-");
    else if (value == floor(value) && fabs(value) < 1e15)
        put(p, "%s%s%s%s %.0f\n", name, open, labels ? labels : "", close,
            value);
    else
        put(p, "%s%s%s%s %s\n", name, open, labels ? labels : "", close,
            fb__prom_number(num, sizeof num, value));
}

void fb__prom_escape(char *out, size_t size, const char *in)
{
    size_t o = 0, left = strlen(in);
    while (left && o + 3 < size) {
        const unsigned char *c = (const unsigned char *)in;
        size_t n = fb__utf8_len(c, left);
        if (n > 1) { /* a whole character, or none of it */
            if (o + n + 1 > size)
                break;
            memcpy(out + o, in, n);
            o += n;
        } else if (*in == '\\' || *in == '"') {
            out[o++] = '\\';
            out[o++] = *in;
        } else if (*in == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            /* not UTF-8, or a control byte: Prometheus refuses the whole
             * scrape for one label that is not valid UTF-8 */
            out[o++] = n == 0 || *c < 0x20 || *c == 0x7f ? '?' : *in;
            n = 1;
        }
        in += n ? n : 1;
        left -= n ? n : 1;
    }
    out[o] = '\0';
}

void fb__prom_free(fb__prom *p)
{
    free(p->buf);
    memset(p, 0, sizeof *p);
}
