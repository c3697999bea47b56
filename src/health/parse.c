/*
 * parse.c -- bounded parsers for kernel-log records, XID lines and sysfs
 * values (see parse.h).  Nothing here allocates; every loop is bounded by
 * the caller's length.
 */
#include "health/parse.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"
#include "firebreak/firebreak.h"
#include "health/health.h"

/* Parse an unsigned decimal at *p (< end); advances *p.  0 or -1. */
static int take_u64(const char **p, const char *end, uint64_t *out)
{
    const char *s = *p;
    uint64_t v = 0;
    if (s >= end || !isdigit((unsigned char)*s))
        return -1;
    while (s < end && isdigit((unsigned char)*s)) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
        s++;
    }
    *p = s;
    *out = v;
    return 0;
}

int fb__kmsg_parse(const char *line, size_t len, fb__kmsg_record *rec)
{
    const char *nl = memchr(line, '\n', len);
    const char *end = nl ? nl : line + len;
    const char *p = line;
    uint64_t prio, seq, usec;
    memset(rec, 0, sizeof *rec);
    if (take_u64(&p, end, &prio) || prio > 1023 || p >= end || *p++ != ',')
        return FB_EFORMAT;
    if (take_u64(&p, end, &seq) || p >= end || *p++ != ',')
        return FB_EFORMAT;
    if (take_u64(&p, end, &usec))
        return FB_EFORMAT;
    /* flags and any fields a newer kernel appends, up to ';' */
    const char *semi = memchr(p, ';', (size_t)(end - p));
    if (!semi || (p < semi && *p != ','))
        return FB_EFORMAT;
    rec->prio = (int)prio;
    rec->seq = seq;
    rec->usec = usec;
    size_t n = (size_t)(end - (semi + 1));
    if (n >= sizeof rec->text)
        n = sizeof rec->text - 1;
    memcpy(rec->text, semi + 1, n);
    rec->text[n] = '\0';
    /* a NUL inside the text ends it: the rest was not text anyway */
    return 0;
}

static const char *find_str(const char *s, size_t len, const char *needle)
{
    size_t nl = strlen(needle);
    for (size_t i = 0; i + nl <= len; i++)
        if (s[i] == needle[0] && !memcmp(s + i, needle, nl))
            return s + i;
    return NULL;
}

static void copy_clean(char *dst, size_t size, const char *src, size_t n)
{
    if (n >= size)
        n = size - 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];
        dst[i] = (c < 0x20 || c == 0x7f) ? ' ' : (char)c;
    }
    dst[n] = '\0';
}

int fb__xid_parse(const char *text, size_t len, fb__xid_event *ev)
{
    const char *end = text + len;
    const char *nul = memchr(text, '\0', len);
    if (nul)
        end = nul;
    /* The driver's line begins with it: anywhere else it is someone
     * else's text (a process may name itself "NVRM: Xid (0)79" and crash,
     * and the kernel's segfault line quotes the name). */
    const char *p = text;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    static const char mark[] = "NVRM: Xid (";
    if ((size_t)(end - p) < sizeof mark - 1 || memcmp(p, mark, sizeof mark - 1))
        return 0;
    memset(ev, 0, sizeof *ev);
    ev->action = -1;
    p += sizeof mark - 1;
    if ((size_t)(end - p) >= 4 && !memcmp(p, "PCI:", 4))
        p += 4;
    /* A bus address ("0000:2b:00"), then "): N" and a comma or the end:
     * the driver's shape, which a 15-byte process name at the start of
     * the kernel's segfault line ("NVRM: Xid (0)79[pid]: segfault")
     * cannot take. */
    const char *close = memchr(p, ')', (size_t)(end - p));
    if (!close || close == p || (size_t)(close - p) >= sizeof ev->pci ||
        !memchr(p, ':', (size_t)(close - p)))
        return FB_EFORMAT;
    for (const char *q = p; q < close; q++)
        if (!isxdigit((unsigned char)*q) && *q != ':' && *q != '.')
            return FB_EFORMAT;
    memcpy(ev->pci, p, (size_t)(close - p));
    ev->pci[close - p] = '\0';
    p = close + 1;
    if (p == end || *p != ':')
        return FB_EFORMAT;
    p++;
    while (p < end && *p == ' ')
        p++;
    uint64_t xid;
    if (take_u64(&p, end, &xid) || xid > 100000 || (p < end && *p != ',' && *p != ' '))
        return FB_EFORMAT;
    ev->xid = (int)xid;
    while (p < end && (*p == ',' || *p == ' '))
        p++;
    copy_clean(ev->msg, sizeof ev->msg, p, (size_t)(end - p));
    if (ev->xid == 154) {
        /* "... recovery action changed from 0x0 (None) to 0x1 (GPU Reset
         * Required)" */
        const char *to = find_str(p, (size_t)(end - p), " to 0x");
        if (to) {
            const char *q = to + 6;
            long long v = 0;
            int digits = 0;
            while (q < end && isxdigit((unsigned char)*q) && digits < 8) {
                int c = tolower((unsigned char)*q);
                v = v * 16 + (isdigit(c) ? c - '0' : c - 'a' + 10);
                q++;
                digits++;
            }
            if (digits)
                ev->action = v;
            if (q < end && *q == ' ' && q + 1 < end && q[1] == '(') {
                const char *s = q + 2;
                const char *c = memchr(s, ')', (size_t)(end - s));
                if (c)
                    copy_clean(ev->action_name, sizeof ev->action_name, s,
                               (size_t)(c - s));
            }
        }
    }
    return 1;
}

int fb__sysfs_parse_i64(const char *buf, size_t len, int64_t *out)
{
    const char *p = buf, *end = buf + len;
    while (p < end && isspace((unsigned char)*p))
        p++;
    int neg = 0;
    if (p < end && (*p == '-' || *p == '+'))
        neg = *p++ == '-';
    uint64_t v;
    if (take_u64(&p, end, &v) || v > (uint64_t)INT64_MAX)
        return FB_EFORMAT;
    while (p < end && isspace((unsigned char)*p))
        p++;
    if (p != end)
        return FB_EFORMAT;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

int fb__sysfs_read_i64(const char *path, int64_t *out)
{
    char *buf;
    size_t len;
    int rc = fb__read_file(path, 4096, &buf, &len);
    if (rc)
        return rc;
    rc = fb__sysfs_parse_i64(buf, len, out);
    free(buf);
    return rc;
}

int fb__aer_parse(const char *buf, size_t len, uint64_t *total)
{
    const char *p = buf, *end = buf + len;
    uint64_t sum = 0, tot = 0;
    int have_total = 0, lines = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *sp = memchr(p, ' ', (size_t)(le - p));
        if (le > p) {
            if (!sp || sp == p)
                return FB_EFORMAT;
            const char *q = sp;
            while (q < le && *q == ' ')
                q++;
            uint64_t v;
            if (take_u64(&q, le, &v) || q != le)
                return FB_EFORMAT;
            if ((size_t)(sp - p) > 10 && !memcmp(p, "TOTAL_ERR_", 10)) {
                have_total = 1;
                tot = v;
            } else {
                sum = sum + v < sum ? UINT64_MAX : sum + v;
            }
            lines++;
        }
        p = nl ? nl + 1 : end;
    }
    if (!lines)
        return FB_EFORMAT;
    *total = have_total ? tot : sum;
    return 0;
}

int fb__ib_state_parse(const char *buf, size_t len, int *state)
{
    const char *p = buf, *end = buf + len;
    uint64_t v;
    if (take_u64(&p, end, &v) || v > 5)
        return FB_EFORMAT;
    *state = (int)v;
    return 0;
}

void fb__xid_lookup(const fb__xid_event *ev, fb__xid_info *in)
{
    static const char *drain = "drain the node and reboot it";
    static const char *reset = "reset the GPU (drain the node until then)";
    in->status = FB_HEALTH_OK;
    in->category = NULL;
    in->component = NULL;
    in->action = NULL;
    switch (ev->xid) {
    case 13: in->meaning = "graphics engine exception (application error, noted)";
        in->action = "restart the application"; break;
    case 31: in->meaning = "GPU memory page fault (application error, noted)";
        in->action = "restart the application"; break;
    case 43: in->meaning = "channel reset, GPU healthy"; break;
    case 45: in->meaning = "preemptive cleanup after another error"; break;
    case 48: in->meaning = "double-bit ECC error (HBM)";
        in->status = FB_HEALTH_FAIL; in->category = "GPU";
        in->component = "GPU HBM3 memory"; in->action = reset; break;
    case 63: in->meaning = "row remap / page retirement event";
        in->status = FB_HEALTH_WARN; in->category = "GPU";
        in->component = "GPU HBM3 memory"; in->action = "watch the remap counters"; break;
    case 64: in->meaning = "row remap / retirement failure (HBM)";
        in->status = FB_HEALTH_FAIL; in->category = "GPU";
        in->component = "GPU HBM3 memory";
        in->action = "reset the GPU; replace it if this repeats"; break;
    case 74: in->meaning = "NVLink error";
        in->status = FB_HEALTH_FAIL; in->category = "GPU";
        in->component = "Faulty GPU"; in->action = "drain the node, check the NVLink peer"; break;
    case 79: in->meaning = "GPU fell off the bus";
        in->status = FB_HEALTH_FAIL; in->category = "GPU";
        in->component = "Faulty GPU"; in->action = drain; break;
    case 92: in->meaning = "high single-bit ECC error rate";
        in->status = FB_HEALTH_WARN; in->category = "GPU";
        in->component = "GPU HBM3 memory"; in->action = "watch the ECC counters"; break;
    case 94: in->meaning = "contained ECC error";
        in->status = FB_HEALTH_WARN; in->category = "GPU";
        in->component = "GPU HBM3 memory";
        in->action = "restart the application; reset the GPU when convenient"; break;
    case 95: in->meaning = "uncontained ECC error";
        in->status = FB_HEALTH_FAIL; in->category = "GPU";
        in->component = "GPU HBM3 memory"; in->action = reset; break;
    case 109: in->meaning = "context-switch timeout";
        in->status = FB_HEALTH_FAIL; in->category = "GPU";
        in->component = "Faulty GPU"; in->action = reset; break;
    case 119: case 120: in->meaning = "GPU system processor (GSP) timeout or error";
        in->status = FB_HEALTH_FAIL; in->category = "GPU";
        in->component = "GPU system processor"; in->action = reset; break;
    case 140: in->meaning = "unrecovered ECC error";
        in->status = FB_HEALTH_FAIL; in->category = "GPU";
        in->component = "GPU HBM3 memory"; in->action = reset; break;
    case 154: in->meaning = "GPU recovery action changed";
        if (ev->action > 0) {
            in->status = FB_HEALTH_FAIL; in->category = "GPU";
            in->component = "Faulty GPU";
            in->action = "follow the recovery action (reset, reboot or drain)";
        }
        break;
    default: in->meaning = "XID not in firebreak's table (noted)"; break;
    }
}
