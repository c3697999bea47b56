/*
 * classify.c -- root cause of an incident, in Llama 3's categories
 * (REFERENCE.md section 1, Table 5; docs/report.md "Root cause").
 *
 * The evidence is weighed in a fixed order and the first rule that
 * applies decides; `decided_by` names it and `evidence` is the chain: the
 * deciding sentence, then "also: ..." for other evidence that was seen.
 *
 *   1. a classification already recorded (kept as is)
 *   2. kind `interrupted`: a planned stop, not a failure
 *   3. the injected fault that fired: the category of the real fault it
 *      imitates, marked injected
 *   4. hardware in the kernel log around the incident (XIDs but the
 *      application's own, machine checks, EDAC, NVMe, NIC errors)
 *   5. a failing check of the health verdict taken after the incident
 *   5b. kind `sdc` (a replica's hash off the majority): silent data
 *      corruption
 *   6. an NVIDIA XID in the detail or the last lines; an application
 *      XID (13, 31, 43, 45) in the kernel log
 *   7. the kernel's OOM killer killed the rank (or a process, the rank
 *      being SIGKILLed)
 *   8. the failing rank's last lines: ECC, out of memory, disk full,
 *      NCCL / gloo network errors, watchdog timeouts, CUDA errors, a
 *      Python traceback's exception, a Python syntax error, a Python
 *      program file that does not exist
 *   9. a failed save's code (-28: disk full, -5: I/O error)
 *  10. the fatal signal or exit code of a crash (not of a hang: there the
 *      signal is the supervisor's own kill)
 *  11. the kind alone (launch failure, segment faults)
 *  12. the flight-recorder verdict (a collective mismatch is a software
 *      bug; a culprit rank with nothing else is a watchdog timeout)
 *  13. a hang after fb_finalize (phase done): a software bug in the
 *      program's teardown; another hang with nothing else: watchdog
 *      timeout; else Unknown.
 *
 * "Unknown" is an honest answer; a guess is not.  The JSON inputs (health
 * and flight-recorder verdicts) come from other programs: they are parsed
 * with explicit bounds and any malformed part is simply not evidence.
 */
#include "diag/diag.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/json.h"

#define SCAN_MAX (64u << 10)

typedef struct cause {
    const char *component, *category;
} cause;

static const cause C_GPU = {"Faulty GPU", "GPU"};
static const cause C_HBM = {"GPU HBM3 memory", "GPU"};
static const cause C_SRAM = {"GPU SRAM memory", "GPU"};
static const cause C_GSP = {"GPU system processor", "GPU"};
static const cause C_SDC = {"Silent data corruption", "GPU"};
static const cause C_THERMAL = {"GPU thermal interface + sensor", "GPU"};
static const cause C_SWBUG = {"Software bug", "Dependency"};
static const cause C_DEP = {"Dependency", "Dependency"};
static const cause C_NET = {"Network switch/cable", "Network"};
static const cause C_MAINT = {"Host maintenance", "Unplanned maintenance"};
static const cause C_NIC = {"NIC", "Host"};
static const cause C_SSD = {"SSD", "Host"};
static const cause C_PSU = {"Power supply", "Host"};
static const cause C_CHASSIS = {"Server chassis", "Host"};
static const cause C_IOB = {"IO expansion board", "Host"};
static const cause C_CPU = {"CPU", "Host"};
static const cause C_SYSMEM = {"System memory", "Host"};
static const cause C_WATCHDOG = {"Collective watchdog timeout", "Unknown"};
static const cause C_UNKNOWN = {"Unknown", "Unknown"};
static const cause C_PLANNED = {"Planned stop", "Planned"};
/* Not rows of Table 5: the job's own resources ran out.  Llama 3 files
 * what is neither hardware nor the job's code under Dependency. */
static const cause C_OOM_HOST = {"Host out of memory", "Dependency"};
static const cause C_OOM_GPU = {"GPU out of memory", "Dependency"};
static const cause C_DISK_FULL = {"Storage full", "Dependency"};

static void set(fb__diag_class *out, cause c, fb__diag_rule by, const char *fmt,
                ...) __attribute__((format(printf, 4, 5)));
static void set(fb__diag_class *out, cause c, fb__diag_rule by, const char *fmt,
                ...)
{
    out->component = c.component;
    out->category = c.category;
    out->rule = by;
    out->decided_by = fb__diag_rule_name(by);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->evidence, sizeof out->evidence, fmt, ap);
    va_end(ap);
}

static void append(fb__diag_class *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void append(fb__diag_class *out, const char *fmt, ...)
{
    size_t n = strlen(out->evidence);
    if (n + 1 >= sizeof out->evidence)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->evidence + n, sizeof out->evidence - n, fmt, ap);
    va_end(ap);
}

/* The cause whose Llama 3 component is `name` (health checks name it,
 * docs/health.md), or NULL. */
static const cause *cause_named(const char *name)
{
    static const cause *const all[] = {&C_GPU, &C_HBM, &C_SRAM, &C_GSP, &C_SDC,
        &C_THERMAL, &C_SWBUG, &C_DEP, &C_NET, &C_MAINT, &C_NIC, &C_SSD, &C_PSU,
        &C_CHASSIS, &C_IOB, &C_CPU, &C_SYSMEM};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (!strcasecmp(name, all[i]->component))
            return all[i];
    return NULL;
}

/* Case-insensitive whole-word search (a "word" may contain spaces) within
 * the first SCAN_MAX bytes of text. */
static int has_word(const char *text, const char *word)
{
    if (!text)
        return 0;
    size_t wl = strlen(word), n = strnlen(text, SCAN_MAX);
    for (size_t i = 0; i + wl <= n; i++) {
        if (strncasecmp(text + i, word, wl))
            continue;
        int before = i == 0 || !isalnum((unsigned char)text[i - 1]);
        int after = i + wl == n || !isalnum((unsigned char)text[i + wl]);
        if (before && after)
            return 1;
    }
    return 0;
}

/* Hardware words in a health check's category, name and detail, most
 * specific word first.  Returns 1 and the cause when one matches. */
static int hw_cause(const char *a, const char *b, const char *d, cause *c)
{
    static const struct {
        const char *word;
        const cause *c;
    } words[] = {
        {"hbm", &C_HBM}, {"hbm3", &C_HBM}, {"ecc", &C_HBM},
        {"row remap", &C_HBM}, {"row remapping", &C_HBM}, {"remapped rows", &C_HBM},
        {"dbe", &C_HBM}, {"sram", &C_SRAM}, {"gsp", &C_GSP},
        {"system processor", &C_GSP}, {"sdc", &C_SDC},
        {"silent data corruption", &C_SDC}, {"thermal", &C_THERMAL},
        {"temperature", &C_THERMAL}, {"nvlink", &C_GPU}, {"xid", &C_GPU},
        {"gpu", &C_GPU}, {"nic", &C_NIC}, {"infiniband", &C_NIC}, {"ib", &C_NIC},
        {"rdma", &C_NIC}, {"hca", &C_NIC}, {"switch", &C_NET}, {"cable", &C_NET},
        {"link down", &C_NET}, {"network", &C_NET}, {"ssd", &C_SSD},
        {"nvme", &C_SSD}, {"disk", &C_SSD}, {"storage", &C_SSD},
        {"filesystem", &C_SSD}, {"psu", &C_PSU}, {"power supply", &C_PSU},
        {"chassis", &C_CHASSIS}, {"fan", &C_CHASSIS}, {"pcie", &C_IOB},
        {"io board", &C_IOB}, {"cpu", &C_CPU}, {"memory", &C_SYSMEM},
        {"dimm", &C_SYSMEM}, {"dram", &C_SYSMEM}, {"mce", &C_SYSMEM},
        {"driver", &C_DEP}, {"dependency", &C_DEP}, {"library", &C_DEP},
    };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (has_word(a, words[i].word) || has_word(b, words[i].word) ||
            has_word(d, words[i].word)) {
            *c = *words[i].c;
            return 1;
        }
    return 0;
}

int fb__diag_find_xid(const char *text)
{
    if (!text)
        return -1;
    size_t n = strnlen(text, SCAN_MAX);
    for (size_t i = 0; i + 3 <= n; i++) {
        if (strncasecmp(text + i, "xid", 3))
            continue;
        size_t j = i + 3;
        if (j < n && text[j] == ' ')
            j++;
        if (j < n && text[j] == '(') { /* "Xid (PCI:0000:3b:00): 79" */
            while (j < n && text[j] != ')' && j - i < 64)
                j++;
            if (j >= n || text[j] != ')')
                continue;
            j++;
        }
        while (j < n && (text[j] == ':' || text[j] == ' ' || text[j] == '='))
            j++;
        int v = 0, digits = 0;
        while (j < n && isdigit((unsigned char)text[j]) && digits < 6) {
            v = v * 10 + (text[j] - '0');
            j++;
            digits++;
        }
        if (digits > 0 && digits < 6)
            return v;
    }
    return -1;
}


/* NVIDIA's XID catalogue (REFERENCE.md section 5), the rows that matter
 * for root cause.  *app: raised by the application's own kernels. */
static cause xid_cause(int xid, const char **why, int *app)
{
    *app = 0;
    switch (xid) {
    case 48: case 63: case 64: case 92: case 94: case 95: case 140:
        *why = "GPU memory ECC / row remapping";
        return C_HBM;
    case 119: case 120:
        *why = "GPU system processor (GSP) error";
        return C_GSP;
    case 13: case 31: case 43: case 45:
        *why = "usually raised by the application's own kernels";
        *app = 1;
        return C_SWBUG;
    case 74:
        *why = "NVLink error";
        return C_GPU;
    case 79:
        *why = "GPU has fallen off the bus";
        return C_GPU;
    default:
        *why = "GPU error";
        return C_GPU;
    }
}

static fb__json_doc *parse_json(const char *text)
{
    if (!text || !*text)
        return NULL;
    fb__json_limits lim = {.max_input = 1u << 20, .max_depth = 16,
                           .max_nodes = 100000};
    fb__json_doc *doc = NULL;
    if (fb__json_parse(text, strlen(text), &lim, &doc, NULL, 0))
        return NULL;
    return doc;
}

static int from_health(const char *health, fb__diag_class *out, int commit)
{
    fb__json_doc *doc = parse_json(health);
    if (!doc)
        return 0;
    const fb__json *root = fb__json_root(doc);
    const fb__json *checks = fb__json_get(root, "checks");
    int found = 0;
    for (const fb__json *c = checks && checks->type == FB_JSON_ARRAY
                                 ? checks->child : NULL;
         c && !found; c = c->next) {
        const char *st = fb__json_as_str(fb__json_get(c, "status"));
        if (!st || !(has_word(st, "fail") || has_word(st, "error") ||
                     has_word(st, "critical")))
            continue;
        const char *name = fb__json_as_str(fb__json_get(c, "name"));
        const char *cat = fb__json_as_str(fb__json_get(c, "category"));
        const char *detail = fb__json_as_str(fb__json_get(c, "detail"));
        const cause *named =
            cause_named(fb__json_as_str(fb__json_get(c, "component")));
        cause k;
        const char *why = "";
        int xid = fb__diag_find_xid(detail), app;
        if (named)
            k = *named;
        else if (xid >= 0)
            k = xid_cause(xid, &why, &app);
        else if (!hw_cause(name, cat, detail, &k))
            continue; /* a failing check that names no component */
        found = 1;
        if (commit)
            set(out, k, xid >= 0 && !named ? FB__DIAG_BY_XID : FB__DIAG_BY_HEALTH,
                "health check '%s'%s%s%s failed%s%.200s%s%s", name ? name : "?",
                cat ? " (" : "", cat ? cat : "", cat ? ")" : "",
                detail && *detail ? ": " : "", detail ? detail : "",
                *why ? "; " : "", why);
        else
            append(out, "; also: health check '%s' failed (%s)",
                   name ? name : "?", k.component);
    }
    /* A verdict with no failing check that names a component is evidence
     * too: the node looked healthy (or could not say) right after. */
    const char *verdict = fb__json_as_str(fb__json_get(root, "verdict"));
    if (!found && !commit && verdict)
        append(out, "; also: the node's health check after it: %.16s", verdict);
    fb__json_free(doc);
    return found;
}

static void rank_list(const fb__json *arr, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const fb__json *r = arr && arr->type == FB_JSON_ARRAY ? arr->child : NULL;
         r && used + 24 < size; r = r->next) {
        int64_t v;
        if (fb__json_as_i64(r, &v) == 0)
            used += (size_t)snprintf(buf + used, size - used, "%s%lld",
                                     used ? "," : "", (long long)v);
    }
}
static int from_fr(const char *fr, fb__diag_class *out)
{
    fb__json_doc *doc = parse_json(fr);
    if (!doc)
        return 0;
    const fb__json *root = fb__json_root(doc);
    const char *verdict = fb__json_as_str(fb__json_get(root, "verdict"));
    const char *summary = fb__json_as_str(fb__json_get(root, "summary"));
    const fb__json *findings = fb__json_get(root, "findings");
    const fb__json *f = findings && findings->type == FB_JSON_ARRAY
                            ? findings->child : NULL;
    const char *kind = fb__json_as_str(fb__json_get(f, "kind"));
    char ranks[96];
    rank_list(fb__json_get(root, "culprits"), ranks, sizeof ranks);
    if (!ranks[0])
        rank_list(fb__json_get(f, "ranks"), ranks, sizeof ranks);
    int mismatch = verdict ? !strcmp(verdict, "mismatch")
                           : kind && strstr(kind, "mismatch") &&
                                 !strstr(kind, "state");
    int decided = mismatch || (verdict ? !strcmp(verdict, "hang") ||
                                             !strcmp(verdict, "slow")
                                       : f != NULL);
    if (decided) {
        char what[256];
        if (summary && *summary) {
            snprintf(what, sizeof what, "%.250s", summary);
        } else {
            const char *group = fb__json_as_str(fb__json_get(f, "group"));
            const char *detail = fb__json_as_str(fb__json_get(f, "detail"));
            int64_t seq = -1;
            fb__json_as_i64(fb__json_get(f, "seq"), &seq);
            snprintf(what, sizeof what, "%.40s in group %.40s at seq %lld: %.150s",
                     kind ? kind : "finding", group ? group : "?",
                     (long long)seq, detail ? detail : "");
        }
        set(out, mismatch ? C_SWBUG : C_WATCHDOG, FB__DIAG_BY_FLIGHT_RECORDER,
            "flight recorder: %s: %s; culprit rank(s) [%s]%s",
            verdict ? verdict : "finding", what, ranks,
            mismatch ? " (ranks disagree on the collective: a program bug)"
                     : " (no hardware evidence)");
    }
    fb__json_free(doc);
    return decided;
}

/* ---- the kernel log ---------------------------------------------------- */

/* The strongest evidence line of the kernel log, by rank: hardware first,
 * then the OOM killer, then application XIDs.  Lines are "[s.us] text". */
typedef struct kfind {
    fb__kline kl;
    char line[256];
} kfind;

static int kline_rank(const fb__kline *k)
{
    const char *why;
    int app = 0;
    switch (k->kind) {
    case FB__KLINE_XID:
        xid_cause(k->xid, &why, &app);
        return app ? 1 : 6;
    case FB__KLINE_MCE: case FB__KLINE_EDAC_UE: return 5;
    case FB__KLINE_NVME: return 4;
    case FB__KLINE_NIC: return 3;
    case FB__KLINE_OOM_KILL: return 2;
    default: return 0;
    }
}

/* The best line of kind-rank >= 1 into *best (the first of the highest
 * rank; an OOM kill of `pid` before another's).  Returns its rank, 0. */
static int kernel_best(const char *log, int pid, kfind *best)
{
    int best_rank = 0;
    if (!log)
        return 0;
    size_t n = strnlen(log, SCAN_MAX);
    const char *p = log, *end = log + n;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        fb__kline k;
        fb__diag_kernel_line(p, len, &k);
        int r = kline_rank(&k);
        int better = r > best_rank ||
                     (r == best_rank && r == 2 && pid > 0 && k.pid == pid &&
                      best->kl.pid != pid);
        if (r && better) {
            best_rank = r;
            best->kl = k;
            snprintf(best->line, sizeof best->line, "%.*s",
                     (int)(len < 200 ? len : 200), p);
        }
        p += len + (nl != NULL);
    }
    return best_rank;
}

static cause kernel_cause(const kfind *f, const char **why)
{
    int app;
    switch (f->kl.kind) {
    case FB__KLINE_XID:
        return xid_cause(f->kl.xid, why, &app);
    case FB__KLINE_MCE:
        *why = "a machine check";
        return has_word(f->line, "memory") || has_word(f->line, "DIMM") ||
               has_word(f->line, "DRAM") ? C_SYSMEM : C_CPU;
    case FB__KLINE_EDAC_UE:
        *why = "an uncorrectable host memory error";
        return C_SYSMEM;
    case FB__KLINE_NVME:
        *why = "a storage device I/O error";
        return C_SSD;
    case FB__KLINE_NIC:
        *why = "a NIC / InfiniBand device error";
        return C_NIC;
    case FB__KLINE_OOM_KILL:
        *why = "the kernel's OOM killer: host memory ran out";
        return C_OOM_HOST;
    default:
        *why = "";
        return C_UNKNOWN;
    }
}

/* ---- the rank's own words ---------------------------------------------- */

/* Case-sensitive search within the first SCAN_MAX bytes. */
static const char *find(const char *text, const char *word)
{
    if (!text)
        return NULL;
    size_t n = strnlen(text, SCAN_MAX), wl = strlen(word);
    for (size_t i = 0; i + wl <= n; i++)
        if (text[i] == word[0] && !memcmp(text + i, word, wl))
            return text + i;
    return NULL;
}

/* The log rules, most specific first (docs/report.md, rule 8).  A line a
 * rank prints when another rank died (a peer closing the connection) is
 * listed as what it is: weak evidence of the network. */
static const struct log_rule {
    const char *word;
    const cause *c;
    const char *why;
} log_rules[] = {
    {"uncorrectable ECC error", &C_HBM, "GPU memory ECC error"},
    {"ECC error", &C_HBM, "GPU memory ECC error"},
    {"CUDA out of memory", &C_OOM_GPU, "GPU memory ran out (the program asked for more than the GPU has)"},
    {"OutOfMemoryError", &C_OOM_GPU, "GPU memory ran out (the program asked for more than the GPU has)"},
    {"CUDA error: out of memory", &C_OOM_GPU, "GPU memory ran out"},
    {"No space left on device", &C_DISK_FULL, "the file system is full"},
    {"[Errno 28]", &C_DISK_FULL, "the file system is full"},
    {"Disk quota exceeded", &C_DISK_FULL, "the disk quota is exhausted"},
    {"Watchdog caught collective operation timeout", &C_WATCHDOG,
     "collective watchdog timeout"},
    {"NET/IB", &C_NET, "NCCL's InfiniBand transport failed (switch, cable or NIC; or a peer died first)"},
    {"ibv_", &C_NET, "an InfiniBand verbs call failed (switch, cable or NIC; or a peer died first)"},
    {"remote process exited or there was a network error", &C_NET,
     "NCCL lost a peer: a network error, or the peer died first"},
    {"NCCL error", &C_NET, "a NCCL error between ranks (the network, or a peer that died first)"},
    {"ncclSystemError", &C_NET, "a NCCL system error between ranks (the network, or a peer that died first)"},
    {"ncclRemoteError", &C_NET, "a NCCL remote error (the network, or a peer that died first)"},
    {"Connection reset by peer", &C_NET,
     "a peer's connection was reset: a network error, or the peer died first"},
    {"Connection closed by peer", &C_NET,
     "gloo lost a peer: a network error, or the peer died first"},
    {"GPU is lost", &C_GPU, "the GPU is lost"},
    {"CUDA-capable device(s) is/are busy or unavailable", &C_GPU, "the GPU is unavailable"},
    {"illegal memory access", &C_SWBUG, "an illegal memory access (a kernel's bug)"},
    {"device-side assert", &C_SWBUG, "a device-side assert (the program's check failed)"},
    {"Segmentation fault", &C_SWBUG, "a segmentation fault"},
    {"CUDA error", &C_SWBUG, "a CUDA error with no hardware evidence"},
};

/* The last line from `from` on (within SCAN_MAX) that `match` takes,
 * quoted into buf (200 bytes at most, control bytes as '?'); 0 if none. */
static int last_line(const char *from, int (*match)(const char *line, size_t len),
                     char *buf, size_t size)
{
    if (!from)
        return 0;
    const char *p = from, *end = from + strnlen(from, SCAN_MAX), *best = NULL;
    size_t best_len = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        if (match(p, len)) {
            best = p;
            best_len = len;
        }
        p += len + (nl != NULL);
    }
    if (!best)
        return 0;
    snprintf(buf, size, "%.*s", (int)(best_len < 200 ? best_len : 200), best);
    for (char *q = buf; *q; q++)
        if ((unsigned char)*q < 0x20)
            *q = '?';
    return 1;
}

/* "RuntimeError: ...": an identifier starting upper case, then a colon. */
static int exception_line(const char *p, size_t len)
{
    size_t i = 0;
    while (i < len && (isalnum((unsigned char)p[i]) || p[i] == '_' || p[i] == '.'))
        i++;
    return i > 0 && i < len && p[i] == ':' && isupper((unsigned char)p[0]);
}

/* What Python says of a program it cannot compile. */
static int compile_error_line(const char *p, size_t len)
{
    static const char *const kinds[] = {"SyntaxError: ", "IndentationError: ",
                                        "TabError: "};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        size_t kl = strlen(kinds[k]);
        if (len >= kl && !memcmp(p, kinds[k], kl))
            return 1;
    }
    return 0;
}

/* The exception a Python traceback ends with: the last exception line
 * after "Traceback (most recent call last):", into buf. */
static int traceback_exception(const char *text, char *buf, size_t size)
{
    return last_line(find(text, "Traceback (most recent call last):"), exception_line,
                     buf, size);
}

/* An error Python reports before running anything, without a traceback:
 * the last "SyntaxError: ", "IndentationError: " or "TabError: " line
 * after a `  File "...", line N` one, into buf. */
static int compile_error(const char *text, char *buf, size_t size)
{
    return last_line(find(text, "  File \""), compile_error_line, buf, size);
}

/* A quoted excerpt of the line holding `at` within text. */
static void line_of(const char *text, const char *at, char *buf, size_t size)
{
    const char *s = at;
    while (s > text && s[-1] != '\n' && at - s < 120)
        s--;
    size_t len = strcspn(s, "\n");
    snprintf(buf, size, "%.*s", (int)(len < 160 ? len : 160), s);
    for (char *q = buf; *q; q++)
        if ((unsigned char)*q < 0x20)
            *q = '?';
}

static int from_log(const char *text, const char *where, fb__diag_class *out)
{
    char quote[200];
    for (size_t i = 0; i < sizeof log_rules / sizeof log_rules[0]; i++) {
        const char *at = log_rules[i].c == &C_HBM
                             ? (has_word(text, log_rules[i].word) ? find(text, "ECC") : NULL)
                             : find(text, log_rules[i].word);
        if (!at)
            continue;
        line_of(text, at, quote, sizeof quote);
        set(out, *log_rules[i].c, FB__DIAG_BY_LOG, "%s in the %s: '%s'", log_rules[i].why,
            where, quote);
        return 1;
    }
    if (traceback_exception(text, quote, sizeof quote)) {
        set(out, C_SWBUG, FB__DIAG_BY_LOG, "a Python exception ended the program (the %s "
            "hold its traceback): '%s'; no hardware evidence", where, quote);
        return 1;
    }
    if (compile_error(text, quote, sizeof quote)) {
        set(out, C_SWBUG, FB__DIAG_BY_LOG, "Python could not compile the program, so "
            "it never ran (the %s): '%s'; no hardware evidence", where, quote);
        return 1;
    }
    const char *at = find(text, "can't open file '");
    if (at && find(at, "[Errno 2]")) {
        line_of(text, at, quote, sizeof quote);
        set(out, C_SWBUG, FB__DIAG_BY_LOG, "the program's file does not exist, so it "
            "never ran (the %s): '%s'; no hardware evidence", where, quote);
        return 1;
    }
    return 0;
}

/* ---- signals and injected faults --------------------------------------- */

static const char *sig_name(int sig)
{
    switch (sig) {
    case 1: return "SIGHUP";
    case 2: return "SIGINT";
    case 4: return "SIGILL";
    case 6: return "SIGABRT";
    case 7: return "SIGBUS";
    case 8: return "SIGFPE";
    case 9: return "SIGKILL";
    case 11: return "SIGSEGV";
    case 15: return "SIGTERM";
    default: return "signal";
    }
}

static int self_signal(int sig)
{
    return sig == 4 || sig == 6 || sig == 7 || sig == 8 || sig == 11;
}

static void from_signal(int sig, const char *how, fb__diag_class *out)
{
    if (self_signal(sig))
        set(out, C_SWBUG, FB__DIAG_BY_SIGNAL, "%s %s (%d): the program faulted or "
            "aborted itself; no hardware evidence", how, sig_name(sig), sig);
    else
        set(out, C_UNKNOWN, FB__DIAG_BY_SIGNAL, "%s %s (%d) sent from outside the process "
            "by an unknown sender; no other evidence", how, sig_name(sig), sig);
}

/* An injected fault is filed under the real fault it imitates, marked
 * injected: a SIGKILL from outside is a stop by an unknown sender (not
 * host maintenance: nobody maintained anything). */
static const struct {
    const char *kind;
    const cause *c;
    const char *as;
} imitates[] = {
    {"kill", &C_UNKNOWN, "SIGKILL from outside the process, as from an unknown sender"},
    {"segv", &C_SWBUG, "the program crashed itself with SIGSEGV, as a software bug does"},
    {"exit", &C_SWBUG, "the program exited with an error code, as a software bug does"},
    {"hang", &C_WATCHDOG, "a rank stopped making progress, as before a collective "
                          "watchdog timeout"},
    {"corrupt", &C_SSD, "a checkpoint shard corrupted on storage"},
    {"flip", &C_SDC, "one bit flipped in a replicated tensor, as silent data "
                     "corruption does"},
};

static void from_injected(const char *inj, fb__diag_class *out)
{
    size_t n = strcspn(inj, ":");
    set(out, C_UNKNOWN, FB__DIAG_BY_INJECTED, "injected fault '%.200s' (it imitates no "
        "Table 5 cause)", inj);
    for (size_t i = 0; i < sizeof imitates / sizeof imitates[0]; i++)
        if (n == strlen(imitates[i].kind) && !strncmp(inj, imitates[i].kind, n))
            set(out, *imitates[i].c, FB__DIAG_BY_INJECTED, "injected fault '%.200s': %s",
                inj, imitates[i].as);
    out->injected = 1;
}

/* ---- the rules --------------------------------------------------------- */

static int crashed_kind(const char *kind)
{
    return !strcmp(kind, "crash") || !strcmp(kind, "error_exit") ||
           !strcmp(kind, "launch_failure") || !strcmp(kind, "node_failure");
}

static void keep_recorded(const fb__diag_evidence *ev, fb__diag_class *out)
{
    out->category = ev->category;
    out->component = ev->component && *ev->component ? ev->component : ev->category;
    out->rule = fb__diag_stored_rule(ev->evidence);
    out->decided_by = fb__diag_rule_name(out->rule);
    out->injected = out->rule == FB__DIAG_BY_INJECTED;
    const char *e = ev->evidence && *ev->evidence ? ev->evidence
                                                  : "recorded by the supervisor";
    /* "[by RULE] " of a rule we know is ours, not part of the chain */
    if (out->rule != FB__DIAG_BY_SUPERVISOR || !strncmp(e, "[by supervisor]", 15)) {
        e += 5 + strlen(out->decided_by);
        if (*e == ' ')
            e++;
    }
    snprintf(out->evidence, sizeof out->evidence, "%s", e);
}

/* Rules 4 to 15 for an incident that was not injected.  kbest: the
 * kernel log's best line, krank its rank (0: none). */
static void decide(const fb__diag_evidence *ev, const char *kind, int krank,
                   const kfind *kbest, fb__diag_class *out)
{
    int crashed = crashed_kind(kind);
    const char *why = "";
    int xid, app;
    if (krank >= 3) {
        cause c = kernel_cause(kbest, &why);
        set(out, c, FB__DIAG_BY_KERNEL_LOG, "%s in the kernel log around the incident: '%s'",
            why, kbest->line);
    } else if (from_health(ev->health, out, 1)) {
        /* decided */
    } else if (!strcmp(kind, "sdc")) {
        /* After the kernel log and the health verdict: an XID or a failed
         * check says which part of the machine corrupted the data. */
        set(out, C_SDC, FB__DIAG_BY_KIND, "a replica's hash disagreed with the "
            "majority's (silent data corruption): %.200s", ev->detail ? ev->detail : "");
    } else if ((xid = fb__diag_find_xid(ev->detail)) >= 0 ||
               (xid = fb__diag_find_xid(ev->last_lines)) >= 0) {
        set(out, xid_cause(xid, &why, &app), FB__DIAG_BY_XID, "NVIDIA XID %d in the %s: %s",
            xid, fb__diag_find_xid(ev->detail) >= 0 ? "detail" : "last lines", why);
    } else if (krank == 1) {
        set(out, kernel_cause(kbest, &why), FB__DIAG_BY_KERNEL_LOG, "NVIDIA XID %d in the "
            "kernel log (%s): '%s'", kbest->kl.xid, why, kbest->line);
    } else if (krank == 2 && (crashed || ev->signal == 9) &&
               (ev->pid <= 0 || kbest->kl.pid <= 0 || kbest->kl.pid == ev->pid)) {
        set(out, C_OOM_HOST, FB__DIAG_BY_KERNEL_LOG, "the kernel's OOM killer killed %s "
            "(pid %d, %s): host memory ran out: '%s'",
            ev->pid > 0 && kbest->kl.pid == ev->pid ? "the rank" : "a process",
            kbest->kl.pid, kbest->kl.name[0] ? kbest->kl.name : "?", kbest->line);
    } else if (from_log(ev->last_lines, "last lines", out) ||
               from_log(ev->detail, "detail", out)) {
        /* decided */
    } else if (ev->ckpt_code == -28 || ev->ckpt_code == -122) {
        set(out, C_DISK_FULL, FB__DIAG_BY_STORAGE, "the checkpoint could not be written: "
            "code %d (%s)", ev->ckpt_code, ev->ckpt_code == -28
            ? "no space left on device" : "disk quota exceeded");
    } else if (ev->ckpt_code == -5) {
        set(out, C_SSD, FB__DIAG_BY_STORAGE, "the checkpoint could not be written: "
            "code -5 (I/O error on the storage device)");
    } else if (crashed && ev->signal > 0) {
        from_signal(ev->signal, "killed by", out);
    } else if (crashed && ev->has_exit_code && ev->exit_code > 128 &&
               ev->exit_code < 160) {
        from_signal(ev->exit_code - 128, "exit code reports", out);
    } else if (!strcmp(kind, "launch_failure")) {
        set(out, C_DEP, FB__DIAG_BY_KIND, "the job could not be launched: %.200s",
            ev->detail ? ev->detail : "");
    } else if (!strcmp(kind, "segment_corrupt")) {
        set(out, C_SWBUG, FB__DIAG_BY_KIND, "the rank wrote over its own firebreak "
            "segment (a wild write in the program): %.200s",
            ev->detail ? ev->detail : "");
    } else if (!strcmp(kind, "segment_not_ours")) {
        set(out, C_UNKNOWN, FB__DIAG_BY_KIND, "another local user's file held the "
            "rank's segment name, so the rank could not record: %.200s",
            ev->detail ? ev->detail : "");
    } else if (crashed && ev->has_exit_code && ev->exit_code != 0) {
        set(out, C_SWBUG, FB__DIAG_BY_EXIT_CODE, "exit code %d: the program stopped "
            "itself with an error; no hardware evidence", ev->exit_code);
    } else if (from_fr(ev->fr_verdict, out)) {
        /* decided */
    } else if (!strcmp(kind, "restore_fallback") && ev->detail &&
               strstr(ev->detail, "incomplete")) {
        set(out, C_UNKNOWN, FB__DIAG_BY_KIND, "the checkpoint was incomplete: a rank "
            "stopped before its shard committed, a consequence of the "
            "interruption before it, not a fault of its own");
    } else if (!strcmp(kind, "restore_fallback") && ev->detail &&
               (strstr(ev->detail, "corrupt") || strstr(ev->detail, "hash"))) {
        set(out, C_UNKNOWN, FB__DIAG_BY_KIND, "a checkpoint shard failed its hash check "
            "(corrupted on storage or before it was written); what corrupted "
            "it is not recorded");
    } else if (!strcmp(kind, "hang") && ev->phase && !strcmp(ev->phase, "done")) {
        set(out, C_SWBUG, FB__DIAG_BY_KIND, "a hang after fb_finalize, in the "
            "program's teardown (exit handlers, a library's shutdown); no "
            "flight-recorder culprit and no hardware evidence");
    } else if (!strcmp(kind, "hang")) {
        set(out, C_WATCHDOG, FB__DIAG_BY_KIND, "no progress until the hang timeout; no "
            "flight-recorder culprit and no hardware evidence");
    } else {
        set(out, C_UNKNOWN, FB__DIAG_BY_NONE, "no evidence for this %s",
            *kind ? kind : "incident");
    }
}

/* The rest of the chain: evidence seen that did not decide. */
static void also(const fb__diag_evidence *ev, int krank, const kfind *kbest,
                 fb__diag_class *out)
{
    fb__diag_rule by = out->rule;
    if (krank && by != FB__DIAG_BY_KERNEL_LOG)
        append(out, "; also: kernel log: '%s'", kbest->line);
    if (by != FB__DIAG_BY_HEALTH)
        from_health(ev->health, out, 0);
    if (ev->signal > 0 && by != FB__DIAG_BY_SIGNAL)
        append(out, "; also: ended by %s (%d)", sig_name(ev->signal), ev->signal);
    else if (ev->has_exit_code && ev->exit_code && by != FB__DIAG_BY_SIGNAL &&
             by != FB__DIAG_BY_EXIT_CODE)
        append(out, "; also: exit code %d", ev->exit_code);
}

/* Whether a component is the program's own failure: the same on any node,
 * so no evidence against the one it ran on (the report's suspects). */
static int programs_own(const char *component)
{
    static const cause *const own[] = {&C_SWBUG, &C_DEP, &C_OOM_GPU};
    for (size_t i = 0; component && i < sizeof own / sizeof own[0]; i++)
        if (!strcasecmp(component, own[i]->component))
            return 1;
    return 0;
}

void fb__diag_classify(const fb__diag_evidence *ev, fb__diag_class *out)
{
    memset(out, 0, sizeof *out);
    const char *kind = ev->kind ? ev->kind : "";
    if (ev->category && *ev->category) {
        keep_recorded(ev, out);
    } else if (!strcmp(kind, "interrupted")) {
        set(out, C_PLANNED, FB__DIAG_BY_KIND, "the run was interrupted on purpose "
            "(operator or scheduler stop): %.200s", ev->detail ? ev->detail : "");
    } else {
        kfind kbest;
        memset(&kbest, 0, sizeof kbest);
        int krank = kernel_best(ev->kernel_log, ev->pid, &kbest);
        if (ev->injected && *ev->injected)
            from_injected(ev->injected, out);
        else
            decide(ev, kind, krank, &kbest, out);
        also(ev, krank, &kbest, out);
    }
    out->programs_own = programs_own(out->component);
}

void fb__diag_cause_text(const fb__diag_class *c, char *buf, size_t size)
{
    const char *cat = c->category ? c->category : "Unknown";
    const char *comp = c->component ? c->component : cat;
    int same = !strcmp(cat, comp);
    snprintf(buf, size, "%s%s%s%s", cat, c->injected ? " (injected)" : "",
             same ? "" : " / ", same ? "" : comp);
}

/* ---- stored form ------------------------------------------------------- */

static const char *const rule_names[FB__DIAG_NRULES] = {
    [FB__DIAG_BY_SUPERVISOR] = "supervisor", [FB__DIAG_BY_INJECTED] = "injected",
    [FB__DIAG_BY_KERNEL_LOG] = "kernel_log", [FB__DIAG_BY_HEALTH] = "health",
    [FB__DIAG_BY_XID] = "xid", [FB__DIAG_BY_LOG] = "log",
    [FB__DIAG_BY_STORAGE] = "storage", [FB__DIAG_BY_SIGNAL] = "signal",
    [FB__DIAG_BY_EXIT_CODE] = "exit_code",
    [FB__DIAG_BY_FLIGHT_RECORDER] = "flight_recorder",
    [FB__DIAG_BY_KIND] = "kind", [FB__DIAG_BY_NONE] = "none"};

const char *fb__diag_rule_name(fb__diag_rule r)
{
    return (unsigned)r < FB__DIAG_NRULES ? rule_names[r] : "?";
}

void fb__diag_format_stored(const fb__diag_class *c, char *buf, size_t size)
{
    snprintf(buf, size, "[by %s] %s", fb__diag_rule_name(c->rule), c->evidence);
}

fb__diag_rule fb__diag_stored_rule(const char *evidence)
{
    if (!evidence || strncmp(evidence, "[by ", 4))
        return FB__DIAG_BY_SUPERVISOR;
    for (int i = 0; i < FB__DIAG_NRULES; i++) {
        size_t n = strlen(rule_names[i]);
        if (!strncmp(evidence + 4, rule_names[i], n) && evidence[4 + n] == ']')
            return (fb__diag_rule)i;
    }
    return FB__DIAG_BY_SUPERVISOR;
}
