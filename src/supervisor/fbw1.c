/*
 * fbw1.c -- the watcher line protocol fbw1 (fbw1.h, docs/slurm.md): the
 * formatter the watcher writes with and the parser the supervisor reads
 * with.  Both take their bounds from the same constants, so what one writes
 * the other accepts.  The parser's input crosses nodes (srun's stdout): it
 * copies the line into a bounded buffer and never trusts a field.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "supervisor/fbw1.h"

#define END_CODE_MIN (-255)
#define END_CODE_MAX 255

int fb__fbw1_node_name_ok(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        if (!ok || n >= FB__FBW1_NODE_MAX - 1)
            return 0;
    }
    return n > 0;
}

int fb__fbw1_peers_split(const char *entry, char addr[][FB__FBW1_NODE_MAX])
{
    int n = 0;
    for (const char *p = entry;;) {
        const char *e = strchr(p, '+');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (n == FB__PEER_COPIES_MAX || len == 0 || len >= FB__FBW1_NODE_MAX)
            return -EINVAL;
        memcpy(addr[n], p, len);
        addr[n][len] = '\0';
        if (!fb__fbw1_node_name_ok(addr[n++]))
            return -EINVAL;
        if (!e)
            return n;
        p = e + 1;
    }
}

int fb__fbw1_peers_entry(const char *list, long long node_id, char *to, size_t size)
{
    if (size)
        to[0] = '\0';
    for (long long k = 0;; k++) {
        const char *c = strchr(list, ',');
        size_t len = c ? (size_t)(c - list) : strlen(list);
        char entry[FB__PEERS_ENTRY_MAX], addr[FB__PEER_COPIES_MAX][FB__FBW1_NODE_MAX];
        if (len == 0 || len >= sizeof entry || k > FB__FBW1_NODEID_MAX)
            return -EINVAL;
        memcpy(entry, list, len);
        entry[len] = '\0';
        if (strcmp(entry, "-")) {
            if (fb__fbw1_peers_split(entry, addr) < 0)
                return -EINVAL;
            if (k == node_id) {
                if (len >= size)
                    return -EINVAL;
                memcpy(to, entry, len + 1);
            }
        }
        if (!c)
            return 0;
        list = c + 1;
    }
}

const char *fb__fbw1_end_how_name(fb__fbw1_end_how how)
{
    switch (how) {
    case FB_FBW1_END_EXIT: return "exit";
    case FB_FBW1_END_SIGNAL: return "signal";
    case FB_FBW1_END_FINALIZED: return "finalized";
    case FB_FBW1_END_VANISHED: return "vanished";
    }
    return NULL;
}

const char *fb__fbw1_verdict_name(fb__fbw1_verdict v)
{
    switch (v) {
    case FB_FBW1_OK: return "ok";
    case FB_FBW1_WARN: return "warn";
    case FB_FBW1_FAIL: return "fail";
    case FB_FBW1_ERROR: return "error";
    }
    return NULL;
}

static int in(long long v, long long lo, long long hi)
{
    return v >= lo && v <= hi;
}

/* ---- parsing ---- */

/* Split `line` at every space into fields (empty ones included: two
 * spaces, or one at the end, make an empty field); with `rest`, the last
 * of `max` fields takes the rest of the line.  Returns the number of
 * fields, max + 1 when there are more than max. */
static int split(char *line, char **f, int max, int rest)
{
    int n = 0;
    char *p = line;
    for (;;) {
        if (n == max)
            return max + 1;
        f[n++] = p;
        if (rest && n == max)
            return n;
        char *sp = strchr(p, ' ');
        if (!sp)
            return n;
        *sp = '\0';
        p = sp + 1;
    }
}

/* A plain decimal number in [lo, hi]: an optional '-', then digits (no
 * '+', no blanks, no hex). */
static int num(const char *s, long long lo, long long hi, long long *out)
{
    const char *d = s[0] == '-' ? s + 1 : s;
    if (!*d || strspn(d, "0123456789") != strlen(d))
        return -EINVAL;
    return fb__parse_int(s, lo, hi, out);
}

static int parse_health(char *body, fb__fbw1_msg *m)
{
    char *f[4];
    int n = split(body, f, 4, 1);
    if (n < 3 || !fb__fbw1_node_name_ok(f[1]))
        return -EINVAL;
    for (fb__fbw1_verdict v = FB_FBW1_OK; v <= FB_FBW1_ERROR; v++) {
        if (!strcmp(f[2], fb__fbw1_verdict_name(v))) {
            m->kind = FB_FBW1_HEALTH;
            m->verdict = v;
            snprintf(m->node, sizeof m->node, "%s", f[1]);
            snprintf(m->reason, sizeof m->reason, "%s", n > 3 ? f[3] : "");
            return 0;
        }
    }
    return -EINVAL;
}

static int parse_report(char *body, int max_rank, fb__fbw1_msg *m)
{
    char *r[11];
    long long v[9];
    static const long long lo[9] = {0, 0, 0, INT32_MIN, 0, 0, 0, 0, 0};
    static const long long hi[9] = {0, INT64_MAX, FB__FBW1_REPORT_KIND_MAX, INT32_MAX,
                                    INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX};
    int k = split(body, r, 11, 1);
    if (k < 10)
        return -EINVAL;
    for (int i = 0; i < 9; i++) {
        long long h = i == 0 ? max_rank - 1 : hi[i];
        if (num(r[i + 1], lo[i], h, &v[i]))
            return -EINVAL;
    }
    m->kind = FB_FBW1_REPORT;
    m->rank = (int)v[0];
    m->rep_idx = v[1];
    m->rep_kind = (int)v[2];
    m->rep_code = (int)v[3];
    m->rep_step = v[4];
    m->rep_bytes = v[5];
    m->rep_v1 = v[6];
    m->rep_v2 = v[7];
    m->rep_wall_ns = v[8];
    snprintf(m->rep_text, sizeof m->rep_text, "%s", k > 10 ? r[10] : "");
    return 0;
}

int fb__fbw1_parse(const char *line, size_t len, int max_rank, fb__fbw1_msg *m)
{
    char buf[FB__FBW1_LINE_MAX + 1];
    char *f[6];
    long long a, b, c, d;
    memset(m, 0, sizeof *m);
    if (len == 0 || len > FB__FBW1_LINE_MAX)
        return -EINVAL;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)line[i];
        if (ch < 0x20 || ch == 0x7f)
            return -EINVAL; /* NUL, newline, escapes: never part of a line */
    }
    memcpy(buf, line, len);
    buf[len] = '\0';
    if (strncmp(buf, "fbw1 ", 5))
        return -EINVAL;
    char *body = buf + 5;
    if (!strncmp(body, "health ", 7))
        return parse_health(body, m);
    if (!strncmp(body, "report ", 7))
        return parse_report(body, max_rank, m);
    int n = split(body, f, 6, 0);
    if ((n == 4 || n == 5) && !strcmp(f[0], "hello") && fb__fbw1_node_name_ok(f[1]) &&
        !num(f[2], 0, FB__FBW1_NODEID_MAX, &a) && !num(f[3], 1, INT32_MAX, &b) &&
        (n == 4 || fb__fbw1_node_name_ok(f[4]))) {
        m->kind = FB_FBW1_HELLO;
        snprintf(m->node, sizeof m->node, "%s", f[1]);
        if (n == 5)
            snprintf(m->host, sizeof m->host, "%s", f[4]);
        m->nodeid = (int)a;
        m->pid = b;
        return 0;
    }
    if (n == 3 && !strcmp(f[0], "attach") && !num(f[1], 0, max_rank - 1, &a) &&
        !num(f[2], 1, INT32_MAX, &b)) {
        m->kind = FB_FBW1_ATTACH;
        m->rank = (int)a;
        m->pid = b;
        return 0;
    }
    if (n == 5 && !strcmp(f[0], "beat") && !num(f[1], 0, max_rank - 1, &a) &&
        !num(f[2], -1, INT64_MAX, &b) && !num(f[3], 0, FB__FBW1_PHASE_MAX, &c) &&
        !num(f[4], 0, INT64_MAX, &d)) {
        m->kind = FB_FBW1_BEAT;
        m->rank = (int)a;
        m->step = b;
        m->phase = (int)c;
        m->age_ms = d;
        return 0;
    }
    if (n == 4 && !strcmp(f[0], "end") && !num(f[1], 0, max_rank - 1, &a) &&
        !num(f[3], END_CODE_MIN, END_CODE_MAX, &c)) {
        for (fb__fbw1_end_how h = FB_FBW1_END_EXIT; h <= FB_FBW1_END_VANISHED; h++) {
            if (!strcmp(f[2], fb__fbw1_end_how_name(h))) {
                m->kind = FB_FBW1_END;
                m->rank = (int)a;
                m->how = h;
                m->code = (int)c;
                return 0;
            }
        }
        return -EINVAL;
    }
    if (n == 1 && !strcmp(f[0], "keep")) {
        m->kind = FB_FBW1_KEEP;
        return 0;
    }
    if (n >= 2 && n <= 2 + FB__FBW1_DROP_KEEP_MAX && !strcmp(f[0], "drop") &&
        !num(f[1], 0, FB__FBW1_STEP_MAX, &a)) {
        for (int i = 2; i < n; i++)
            if (num(f[i], 0, a - 1, &m->keep[i - 2]))
                return -EINVAL; /* a kept step is older than STEP */
        m->kind = FB_FBW1_DROP;
        m->step = a;
        m->nkeep = n - 2;
        return 0;
    }
    if (n == 2 && !strcmp(f[0], "send") && !num(f[1], 0, FB__FBW1_STEP_MAX, &a)) {
        m->kind = FB_FBW1_SEND;
        m->step = a;
        return 0;
    }
    if (n == 2 && !strcmp(f[0], "snap") && !num(f[1], 0, FB__FBW1_ATTEMPT_MAX, &a)) {
        m->kind = FB_FBW1_SNAP;
        m->attempt = (int)a;
        return 0;
    }
    if (n == 4 && !strcmp(f[0], "snapped") && fb__fbw1_node_name_ok(f[1]) &&
        !num(f[2], 0, FB__FBW1_ATTEMPT_MAX, &a) && !num(f[3], 0, FB__FBW1_COUNT_MAX, &b)) {
        m->kind = FB_FBW1_SNAPPED;
        snprintf(m->node, sizeof m->node, "%s", f[1]);
        m->attempt = (int)a;
        m->count = (int)b;
        return 0;
    }
    if (n == 5 && !strcmp(f[0], "peer") && fb__fbw1_node_name_ok(f[1]) &&
        !num(f[2], 0, FB__FBW1_STEP_MAX, &a) && !num(f[3], 0, max_rank - 1, &b) &&
        !num(f[4], 1, max_rank - b, &c)) {
        m->kind = FB_FBW1_PEER;
        snprintf(m->node, sizeof m->node, "%s", f[1]);
        m->step = a;
        m->rank = (int)b;
        m->count = (int)c;
        return 0;
    }
    if (n == 2 && (!strcmp(f[0], "bye") || !strcmp(f[0], "alive")) &&
        fb__fbw1_node_name_ok(f[1])) {
        m->kind = f[0][0] == 'b' ? FB_FBW1_BYE : FB_FBW1_ALIVE;
        snprintf(m->node, sizeof m->node, "%s", f[1]);
        return 0;
    }
    memset(m, 0, sizeof *m);
    return -EINVAL;
}

size_t fb__fbw1_lines(char *buf, size_t len, int *dropping,
                      void (*on_line)(void *ctx, const char *line, size_t n), void *ctx)
{
    char *start = buf, *nl;
    while ((nl = memchr(start, '\n', len - (size_t)(start - buf)))) {
        if (!*dropping)
            on_line(ctx, start, (size_t)(nl - start));
        *dropping = 0;
        start = nl + 1;
    }
    size_t rest = len - (size_t)(start - buf);
    if (rest >= FB__FBW1_LINE_MAX) {
        *dropping = 1; /* an over-long line: skip to its end */
        rest = 0;
    }
    memmove(buf, start, rest);
    return rest;
}

/* ---- formatting ---- */

/* The fields before the free text; 0 or -EINVAL. */
static int head(const fb__fbw1_msg *m, char *buf, size_t size, int *len)
{
    int w = -1;
    switch (m->kind) {
    case FB_FBW1_HELLO:
        if (!fb__fbw1_node_name_ok(m->node) || !in(m->nodeid, 0, FB__FBW1_NODEID_MAX) ||
            !in(m->pid, 1, INT32_MAX))
            return -EINVAL;
        if (m->host[0] && !fb__fbw1_node_name_ok(m->host))
            return -EINVAL;
        w = snprintf(buf, size, "fbw1 hello %s %d %lld%s%s", m->node, m->nodeid, m->pid,
                     m->host[0] ? " " : "", m->host);
        break;
    case FB_FBW1_ATTACH:
        if (m->rank < 0 || !in(m->pid, 1, INT32_MAX))
            return -EINVAL;
        w = snprintf(buf, size, "fbw1 attach %d %lld", m->rank, m->pid);
        break;
    case FB_FBW1_BEAT:
        if (m->rank < 0 || m->step < -1 || !in(m->phase, 0, FB__FBW1_PHASE_MAX) ||
            m->age_ms < 0)
            return -EINVAL;
        w = snprintf(buf, size, "fbw1 beat %d %lld %d %lld", m->rank, m->step, m->phase,
                     m->age_ms);
        break;
    case FB_FBW1_END:
        if (m->rank < 0 || !fb__fbw1_end_how_name(m->how) ||
            !in(m->code, END_CODE_MIN, END_CODE_MAX))
            return -EINVAL;
        w = snprintf(buf, size, "fbw1 end %d %s %d", m->rank, fb__fbw1_end_how_name(m->how),
                     m->code);
        break;
    case FB_FBW1_HEALTH:
        if (!fb__fbw1_node_name_ok(m->node) || !fb__fbw1_verdict_name(m->verdict))
            return -EINVAL;
        w = snprintf(buf, size, "fbw1 health %s %s ", m->node,
                     fb__fbw1_verdict_name(m->verdict));
        break;
    case FB_FBW1_BYE:
    case FB_FBW1_ALIVE:
        if (!fb__fbw1_node_name_ok(m->node))
            return -EINVAL;
        w = snprintf(buf, size, "fbw1 %s %s", m->kind == FB_FBW1_BYE ? "bye" : "alive",
                     m->node);
        break;
    case FB_FBW1_SNAP:
        if (!in(m->attempt, 0, FB__FBW1_ATTEMPT_MAX))
            return -EINVAL;
        w = snprintf(buf, size, "fbw1 snap %d", m->attempt);
        break;
    case FB_FBW1_SNAPPED:
        if (!fb__fbw1_node_name_ok(m->node) || !in(m->attempt, 0, FB__FBW1_ATTEMPT_MAX) ||
            !in(m->count, 0, FB__FBW1_COUNT_MAX))
            return -EINVAL;
        w = snprintf(buf, size, "fbw1 snapped %s %d %d", m->node, m->attempt, m->count);
        break;
    case FB_FBW1_PEER:
        if (!fb__fbw1_node_name_ok(m->node) || !in(m->step, 0, FB__FBW1_STEP_MAX) ||
            m->rank < 0 || m->count < 1 || m->count > INT32_MAX - m->rank)
            return -EINVAL;
        w = snprintf(buf, size, "fbw1 peer %s %lld %d %d", m->node, m->step, m->rank,
                     m->count);
        break;
    case FB_FBW1_DROP:
        if (!in(m->step, 0, FB__FBW1_STEP_MAX) || m->nkeep < 0 ||
            m->nkeep > FB__FBW1_DROP_KEEP_MAX)
            return -EINVAL;
        for (int i = 0; i < m->nkeep; i++)
            if (m->keep[i] < 0 || m->keep[i] >= m->step)
                return -EINVAL;
        w = snprintf(buf, size, "fbw1 drop %lld", m->step);
        for (int i = 0; i < m->nkeep && w >= 0 && (size_t)w < size; i++) {
            int k = snprintf(buf + w, size - (size_t)w, " %lld", m->keep[i]);
            w = k < 0 ? k : w + k;
        }
        break;
    case FB_FBW1_SEND:
        if (!in(m->step, 0, FB__FBW1_STEP_MAX))
            return -EINVAL;
        w = snprintf(buf, size, "fbw1 send %lld", m->step);
        break;
    case FB_FBW1_KEEP:
        w = snprintf(buf, size, "fbw1 keep");
        break;
    case FB_FBW1_REPORT:
        if (m->rank < 0 || m->rep_idx < 0 ||
            !in(m->rep_kind, 0, FB__FBW1_REPORT_KIND_MAX) || m->rep_step < 0 ||
            m->rep_bytes < 0 || m->rep_v1 < 0 || m->rep_v2 < 0 || m->rep_wall_ns < 0)
            return -EINVAL;
        w = snprintf(buf, size, "fbw1 report %d %lld %d %d %lld %lld %lld %lld %lld ",
                     m->rank, m->rep_idx, m->rep_kind, m->rep_code, m->rep_step,
                     m->rep_bytes, m->rep_v1, m->rep_v2, m->rep_wall_ns);
        break;
    default:
        return -EINVAL;
    }
    if (w < 0 || (size_t)w >= size)
        return -EMSGSIZE;
    *len = w;
    return 0;
}

int fb__fbw1_format(const fb__fbw1_msg *m, char *line, size_t size)
{
    int len;
    int rc = head(m, line, size, &len);
    if (rc)
        return rc;
    const char *text = m->kind == FB_FBW1_HEALTH ? m->reason
                     : m->kind == FB_FBW1_REPORT ? m->rep_text : "";
    size_t tmax = m->kind == FB_FBW1_HEALTH ? sizeof m->reason
                : m->kind == FB_FBW1_REPORT ? sizeof m->rep_text : 1;
    size_t n = strnlen(text, tmax - 1), at = (size_t)len;
    if (at + n > FB__FBW1_LINE_MAX || at + n + 2 > size)
        return -EMSGSIZE;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        line[at++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    line[at++] = '\n';
    line[at] = '\0';
    return (int)at;
}
