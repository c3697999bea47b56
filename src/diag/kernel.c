/*
 * kernel.c -- the kernel log as evidence: which lines matter for a root
 * cause (NVIDIA XIDs, machine checks, EDAC uncorrectable errors, the OOM
 * killer, NVMe and InfiniBand device errors), and a bounded scan of
 * /dev/kmsg or a file of its records for those lines around an incident.
 *
 * The records are read with the health checks' reader (health/parse.h);
 * every line is untrusted: it is looked at within its length only, and
 * what is kept is cut and cleaned of control bytes.
 */
#include "diag/diag.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "firebreak/firebreak.h"
#include "health/parse.h"

#define LINE_KEEP 240 /* bytes of a kept line's text */

const char *fb__diag_kline_name(fb__kline_kind k)
{
    switch (k) {
    case FB__KLINE_XID: return "xid";
    case FB__KLINE_MCE: return "machine_check";
    case FB__KLINE_EDAC_UE: return "edac_ue";
    case FB__KLINE_OOM_KILL: return "oom_kill";
    case FB__KLINE_NVME: return "storage_error";
    case FB__KLINE_NIC: return "nic_error";
    default: return "none";
    }
}

/* Digits at p (at most 9) as an int; -1 when there are none. */
static int take_int(const char *p, const char *end)
{
    int v = 0, n = 0;
    while (p < end && n < 9 && isdigit((unsigned char)*p)) {
        v = v * 10 + (*p++ - '0');
        n++;
    }
    return n ? v : -1;
}

/* "Killed process 123 (name)" / "Kill process 123 (name)" /
 * "oom-kill:...,task=name,pid=123". */
static void oom_victim(const char *t, fb__kline *out)
{
    const char *end = t + strlen(t);
    const char *p = strstr(t, "process ");
    if (p) {
        p += 8;
        out->pid = take_int(p, end);
        const char *o = strchr(p, '(');
        const char *c = o ? strchr(o, ')') : NULL;
        if (o && c && c - o - 1 < (long)sizeof out->name)
            snprintf(out->name, sizeof out->name, "%.*s", (int)(c - o - 1), o + 1);
    } else if ((p = strstr(t, ",pid=")) != NULL) {
        out->pid = take_int(p + 5, end);
        const char *task = strstr(t, "task=");
        if (task) {
            task += 5;
            size_t n = strcspn(task, ",");
            snprintf(out->name, sizeof out->name, "%.*s",
                     (int)(n < sizeof out->name ? n : sizeof out->name - 1), task);
        }
    }
    if (out->pid < 0)
        out->pid = 0;
}

/* Length of a "[SECONDS.MICROS] " prefix (as the scan writes), or 0. */
static size_t stamp_len(const char *text, size_t len)
{
    size_t i = 1;
    if (len < 4 || text[0] != '[')
        return 0;
    while (i < len && i < 32 && (isdigit((unsigned char)text[i]) || text[i] == '.'))
        i++;
    return i + 1 < len && text[i] == ']' && text[i + 1] == ' ' ? i + 2 : 0;
}

fb__kline_kind fb__diag_kernel_line(const char *text, size_t len, fb__kline *out)
{
    char t[FB__KMSG_TEXT_MAX];
    const char *nul = memchr(text, '\0', len);
    if (nul)
        len = (size_t)(nul - text);
    size_t skip = stamp_len(text, len);
    text += skip;
    len -= skip;
    if (len >= sizeof t)
        len = sizeof t - 1;
    memcpy(t, text, len);
    t[len] = '\0';
    memset(out, 0, sizeof *out);
    out->xid = -1;
    fb__xid_event xe;
    if (fb__xid_parse(t, len, &xe) == 1) {
        out->xid = xe.xid;
        return out->kind = FB__KLINE_XID;
    }
    if (strstr(t, "[Hardware Error]") || strstr(t, "Machine check") ||
        strstr(t, "Machine Check") || !strncmp(t, "mce: ", 5))
        return out->kind = FB__KLINE_MCE;
    if (!strncmp(t, "EDAC ", 5) && (strstr(t, " UE ") || strstr(t, "Uncorrected") ||
                                    strstr(t, "uncorrectable")))
        return out->kind = FB__KLINE_EDAC_UE;
    if (strstr(t, "Out of memory: Kill") || strstr(t, "out of memory: Kill") ||
        !strncmp(t, "oom-kill:", 9)) {
        oom_victim(t, out);
        return out->kind = FB__KLINE_OOM_KILL;
    }
    if ((strstr(t, "nvme") && (strstr(t, "timeout") || strstr(t, "I/O error") ||
                               strstr(t, "controller is down"))) ||
        strstr(t, "Buffer I/O error") || strstr(t, "EXT4-fs error") ||
        (strstr(t, "XFS (") && strstr(t, "I/O error")))
        return out->kind = FB__KLINE_NVME;
    if ((strstr(t, "mlx5_core") || strstr(t, "infiniband") || strstr(t, "ib_core")) &&
        (strstr(t, "error") || strstr(t, "fatal") || strstr(t, "down")))
        return out->kind = FB__KLINE_NIC;
    return out->kind = FB__KLINE_NONE;
}

int fb__diag_dmesg_parse(const char *line, size_t len, fb__kmsg_record *rec)
{
    const char *nl = memchr(line, '\n', len);
    const char *p = line, *end = nl ? nl : line + len;
    memset(rec, 0, sizeof *rec);
    if (p >= end || *p++ != '[')
        return FB_EFORMAT;
    while (p < end && *p == ' ')
        p++;
    uint64_t sec = 0, usec = 0;
    int nd = 0, nf = 0;
    while (p < end && isdigit((unsigned char)*p) && nd < 12) {
        sec = sec * 10 + (uint64_t)(*p++ - '0');
        nd++;
    }
    if (!nd || p >= end || *p++ != '.')
        return FB_EFORMAT;
    while (p < end && isdigit((unsigned char)*p) && nf < 6) {
        usec = usec * 10 + (uint64_t)(*p++ - '0');
        nf++;
    }
    if (nf != 6 || p >= end || *p++ != ']')
        return FB_EFORMAT;
    if (p < end && *p == ' ')
        p++;
    rec->usec = sec * 1000000ull + usec;
    rec->prio = 6;
    size_t n = (size_t)(end - p);
    if (n >= sizeof rec->text)
        n = sizeof rec->text - 1;
    memcpy(rec->text, p, n);
    rec->text[n] = '\0';
    return 0;
}

/* The kept lines: a ring of the newest. */
typedef struct kept {
    char line[FB__DIAG_KLINES_MAX][LINE_KEEP + 24];
    int n, next;
} kept;

static void keep(kept *k, const fb__kmsg_record *rec)
{
    char *l = k->line[k->next];
    int w = snprintf(l, sizeof k->line[0], "[%llu.%06llu] ",
                     (unsigned long long)(rec->usec / 1000000),
                     (unsigned long long)(rec->usec % 1000000));
    size_t i = 0;
    for (; rec->text[i] && i < LINE_KEEP && (size_t)w + i + 1 < sizeof k->line[0]; i++) {
        unsigned char ch = (unsigned char)rec->text[i];
        l[w + i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
    }
    l[w + i] = '\0';
    k->next = (k->next + 1) % FB__DIAG_KLINES_MAX;
    if (k->n < FB__DIAG_KLINES_MAX)
        k->n++;
}

/* One line of a plain file: a /dev/kmsg record or a dmesg line. */
static void take_line(const char *line, size_t len, uint64_t from_us,
                      uint64_t to_us, kept *k)
{
    fb__kmsg_record rec;
    fb__kline kl;
    if (len == 0 || line[0] == ' ')
        return; /* empty, or a record's " KEY=value" continuation */
    if (fb__kmsg_parse(line, len, &rec) && fb__diag_dmesg_parse(line, len, &rec))
        return; /* neither form: not evidence */
    if (rec.usec >= from_us && rec.usec <= to_us && fb__kmsg_is_kernel(&rec) &&
        fb__diag_kernel_line(rec.text, strlen(rec.text), &kl) != FB__KLINE_NONE)
        keep(k, &rec);
}

/* A plain file, line by line: at most FB__DIAG_KMSG_FILE_MAX bytes; a
 * line longer than the buffer is passed over whole. */
static int scan_file(int fd, uint64_t from_us, uint64_t to_us, kept *k,
                     char *buf, size_t cap)
{
    size_t len = 0;
    uint64_t total = 0;
    int skipping = 0;
    for (;;) {
        ssize_t n = 0;
        if (total < FB__DIAG_KMSG_FILE_MAX) {
            size_t want = cap - len;
            if (want > FB__DIAG_KMSG_FILE_MAX - total)
                want = (size_t)(FB__DIAG_KMSG_FILE_MAX - total);
            n = read(fd, buf + len, want);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                return -errno;
        }
        total += (uint64_t)n;
        len += (size_t)n;
        size_t pos = 0;
        char *nl;
        while ((nl = memchr(buf + pos, '\n', len - pos)) != NULL) {
            size_t l = (size_t)(nl - (buf + pos));
            if (!skipping)
                take_line(buf + pos, l, from_us, to_us, k);
            skipping = 0;
            pos += l + 1;
        }
        memmove(buf, buf + pos, len - pos);
        len -= pos;
        if (n == 0) { /* the end (or the bound): a last line without '\n' */
            if (len && !skipping)
                take_line(buf, len, from_us, to_us, k);
            return 0;
        }
        if (len == cap) { /* a line longer than the buffer */
            skipping = 1;
            len = 0;
        }
    }
}

int fb__diag_kmsg_scan(const char *path, uint64_t from_us, uint64_t to_us,
                       char *buf, size_t size)
{
    if (size)
        buf[0] = '\0';
    fb__kmsg_reader *r = malloc(sizeof *r);
    kept *k = calloc(1, sizeof *k);
    int rc = r && k ? fb__kmsg_open(r, path) : -ENOMEM;
    if (rc) {
        free(r);
        free(k);
        return rc;
    }
    int got = 0;
    if (r->is_dev) {
        fb__kmsg_record rec;
        while ((got = fb__kmsg_next(r, &rec, 1)) == 1) {
            fb__kline kl;
            if (rec.usec >= from_us && rec.usec <= to_us && fb__kmsg_is_kernel(&rec) &&
                fb__diag_kernel_line(rec.text, strlen(rec.text), &kl) != FB__KLINE_NONE)
                keep(k, &rec);
        }
    } else {
        got = scan_file(r->fd, from_us, to_us, k, r->buf, sizeof r->buf);
    }
    fb__kmsg_close(r);
    rc = got < 0 ? got : k->n;
    size_t used = 0;
    for (int i = 0; got >= 0 && i < k->n && size; i++) {
        const char *l = k->line[(k->next - k->n + i + FB__DIAG_KLINES_MAX) %
                                FB__DIAG_KLINES_MAX];
        int w = snprintf(buf + used, size - used, "%s\n", l);
        if (w < 0 || (size_t)w >= size - used) {
            buf[used] = '\0'; /* a line that does not fit is left out whole */
            break;
        }
        used += (size_t)w;
    }
    free(r);
    free(k);
    return rc;
}
