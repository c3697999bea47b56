/*
 * sim_rates.c -- the parser of `firebreak sim --rates FILE`.
 *
 * The file is outside input: every line is checked and any problem is
 * reported as "line N: what" (the fuzz target fuzz/sim_rates.c runs this
 * parser on arbitrary bytes).  Format, one statement a line, '#' starts a
 * comment:
 *
 *   failure NAME RATE [crash|hang] [node|job]
 *   planned RATE
 *
 * RATE is a number, optionally divided by more numbers, then a unit:
 * "148/54/16384/gpu-day" (148 failures in 54 days on 16,384 GPUs),
 * "6.5/1000/node-day", "0.87/job-day".  Units: gpu-, node- and job- with
 * -second, -hour or -day.  Job rates do not scale with --gpus.
 */
#include "sim/sim.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LINE 1024
#define MAX_TOKENS 8

static int is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\v' ||
           ch == '\f';
}

/* A finite, non-negative decimal number and nothing else. */
static int parse_number(const char *s, double *out)
{
    if (!*s)
        return -EINVAL;
    for (const char *q = s; *q; q++)
        if (!((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' ||
              *q == 'E' || *q == '+' || *q == '-'))
            return -EINVAL; /* no hex, inf or nan through strtod */
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(v))
        return -EINVAL;
    *out = v;
    return 0;
}

int fb__sim_parse_rate(const char *s, int gpus_per_node, double *per_gpu_s,
                       double *per_job_s)
{
    static const struct {
        const char *name;
        int scope; /* 0 gpu, 1 node, 2 job */
        double seconds;
    } units[] = {
        {"gpu-second", 0, 1}, {"gpu-hour", 0, 3600}, {"gpu-day", 0, 86400},
        {"node-second", 1, 1}, {"node-hour", 1, 3600},
        {"node-day", 1, 86400}, {"job-second", 2, 1}, {"job-hour", 2, 3600},
        {"job-day", 2, 86400},
    };
    char buf[128];
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof buf || gpus_per_node < 1)
        return -EINVAL;
    memcpy(buf, s, n + 1);
    char *unit = strrchr(buf, '/');
    if (!unit)
        return -EINVAL;
    *unit++ = '\0';
    int u = -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (strcmp(unit, units[i].name) == 0)
            u = (int)i;
    if (u < 0)
        return -EINVAL;
    /* buf is now "NUM[/NUM...]". */
    double value = 0;
    char *save = buf;
    for (int first = 1;; first = 0) {
        char *slash = strchr(save, '/');
        if (slash)
            *slash = '\0';
        double v;
        if (parse_number(save, &v))
            return -EINVAL;
        if (v < 0)
            return -ERANGE;
        if (first) {
            value = v;
        } else {
            if (v <= 0)
                return -EINVAL;
            value /= v;
        }
        if (!slash)
            break;
        save = slash + 1;
    }
    value /= units[u].seconds;
    if (!isfinite(value) || value > 1)
        return -EDOM; /* 1/1e-300/1e-300/gpu-day: inf, unnamed later */
    *per_gpu_s = 0;
    *per_job_s = 0;
    if (units[u].scope == 0)
        *per_gpu_s = value;
    else if (units[u].scope == 1)
        *per_gpu_s = value / gpus_per_node;
    else
        *per_job_s = value;
    return 0;
}

static int line_error(char *err, size_t size, long line, const char *fmt,
                      ...) __attribute__((format(printf, 4, 5)));
static int line_error(char *err, size_t size, long line, const char *fmt,
                      ...)
{
    if (err && size) {
        int n = snprintf(err, size, "line %ld: ", line);
        if (n >= 0 && (size_t)n < size) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + n, size - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -EINVAL;
}

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= FB_SIM_NAME_MAX)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
              (*s >= '0' && *s <= '9') || *s == '_' || *s == '-' ||
              *s == '.'))
            return 0;
    return 1;
}

static int rate_error(char *err, size_t size, long line, const char *tok,
                      int rc)
{
    if (rc == -ERANGE)
        return line_error(err, size, line, "negative rate '%s'", tok);
    if (rc == -EDOM)
        return line_error(err, size, line, "rate '%s' is more than one a "
                          "second", tok);
    return line_error(err, size, line,
                      "bad rate '%s' (want e.g. 148/54/16384/gpu-day, "
                      "6.5/1000/node-day, 0.87/job-day)", tok);
}

/* One tokenized line into *c (categories appended). */
static int parse_statement(fb__sim_config *c, char **tok, int ntok, long line,
                           int *planned_seen, char *err, size_t size)
{
    double per_gpu, per_job;
    int rc;
    if (strcmp(tok[0], "planned") == 0) {
        if (ntok != 2)
            return line_error(err, size, line, "want 'planned RATE'");
        if (*planned_seen)
            return line_error(err, size, line, "second 'planned' line");
        rc = fb__sim_parse_rate(tok[1], c->gpus_per_node, &per_gpu,
                                &per_job);
        if (rc)
            return rate_error(err, size, line, tok[1], rc);
        if (per_gpu > 0)
            return line_error(err, size, line,
                              "planned maintenance is per job: use a "
                              "job-day, job-hour or job-second rate");
        c->planned_per_job_s = per_job;
        *planned_seen = 1;
        return 0;
    }
    if (strcmp(tok[0], "failure") != 0)
        return line_error(err, size, line,
                          "unknown statement '%.40s' (want 'failure' or "
                          "'planned')", tok[0]);
    if (ntok < 3 || ntok > 5)
        return line_error(err, size, line,
                          "want 'failure NAME RATE [crash|hang] [node|job]'");
    if (!valid_name(tok[1]))
        return line_error(err, size, line,
                          "bad category name '%.40s' (letters, digits, "
                          "'_', '-', '.', at most %d)", tok[1],
                          FB_SIM_NAME_MAX - 1);
    for (int i = 0; i < c->ncat; i++)
        if (strcmp(c->cat[i].name, tok[1]) == 0)
            return line_error(err, size, line, "category '%s' given twice",
                              tok[1]);
    if (c->ncat >= FB_SIM_MAX_CATEGORIES)
        return line_error(err, size, line, "more than %d categories",
                          FB_SIM_MAX_CATEGORIES);
    rc = fb__sim_parse_rate(tok[2], c->gpus_per_node, &per_gpu, &per_job);
    if (rc)
        return rate_error(err, size, line, tok[2], rc);
    fb__sim_category k;
    memset(&k, 0, sizeof k);
    snprintf(k.name, sizeof k.name, "%s", tok[1]);
    k.rate_per_gpu_s = per_gpu;
    k.rate_per_job_s = per_job;
    k.kind = FB_SIM_CRASH;
    k.scope = FB_SIM_SCOPE_JOB;
    int seen_kind = 0, seen_scope = 0;
    for (int i = 3; i < ntok; i++) {
        if (!seen_kind && (strcmp(tok[i], "crash") == 0 ||
                           strcmp(tok[i], "hang") == 0)) {
            k.kind = tok[i][0] == 'h' ? FB_SIM_HANG : FB_SIM_CRASH;
            seen_kind = 1;
        } else if (!seen_scope && (strcmp(tok[i], "node") == 0 ||
                                   strcmp(tok[i], "job") == 0)) {
            k.scope = tok[i][0] == 'n' ? FB_SIM_SCOPE_NODE
                                       : FB_SIM_SCOPE_JOB;
            seen_scope = 1;
        } else {
            return line_error(err, size, line,
                              "unexpected '%.40s' (want crash|hang, "
                              "node|job, each at most once)", tok[i]);
        }
    }
    c->cat[c->ncat++] = k;
    return 0;
}

int fb__sim_parse_rates(fb__sim_config *c, const char *text, size_t len,
                        char *err, size_t size)
{
    fb__sim_config next = *c;
    next.ncat = 0;
    next.planned_per_job_s = 0;
    int planned_seen = 0;
    long line = 0;
    size_t pos = 0;
    while (pos < len) {
        line++;
        size_t start = pos;
        while (pos < len && text[pos] != '\n')
            pos++;
        size_t n = pos - start;
        if (pos < len)
            pos++; /* the newline */
        if (n >= MAX_LINE)
            return line_error(err, size, line, "longer than %d bytes",
                              MAX_LINE - 1);
        char buf[MAX_LINE];
        memcpy(buf, text + start, n);
        buf[n] = '\0';
        if (memchr(buf, '\0', n))
            return line_error(err, size, line, "contains a NUL byte");
        char *hash = strchr(buf, '#');
        if (hash)
            *hash = '\0';
        char *tok[MAX_TOKENS];
        int ntok = 0;
        char *q = buf;
        for (;;) {
            while (is_space(*q))
                q++;
            if (!*q)
                break;
            if (ntok == MAX_TOKENS)
                return line_error(err, size, line, "too many fields");
            tok[ntok++] = q;
            while (*q && !is_space(*q))
                q++;
            if (*q)
                *q++ = '\0';
        }
        if (ntok == 0)
            continue;
        int rc = parse_statement(&next, tok, ntok, line, &planned_seen, err,
                                 size);
        if (rc)
            return rc;
    }
    if (next.ncat == 0) {
        if (err && size)
            snprintf(err, size, "no 'failure' line in the rates file");
        return -EINVAL;
    }
    c->ncat = next.ncat;
    memcpy(c->cat, next.cat, sizeof next.cat);
    c->planned_per_job_s = next.planned_per_job_s;
    return 0;
}
