/*
 * classify.c -- root cause of an incident, in Llama 3's categories
 * (REFERENCE.md §1, Table 5; docs/report.md "Root cause").
 *
 * The journal's evidence is weighed in a fixed order and the first rule
 * that matches decides; `decided_by` and `evidence` say which and why:
 *
 *   1. a category the supervisor already recorded (kept as is)
 *   2. kind `interrupted`: a planned stop, not a failure
 *   3. the injected fault that fired (we know the cause for certain)
 *   4. a failing health check (its category, name and detail)
 *   5. an NVIDIA XID in the health verdict, the detail or the last lines
 *   6. the failing rank's last lines (ECC errors, collective timeouts)
 *   7. the fatal signal or exit code of a crash (not of a hang: there the
 *      signal is the supervisor's own kill)
 *   8. the flight-recorder verdict (a collective mismatch is a software
 *      bug; a culprit rank with nothing else is a watchdog timeout)
 *   9. the kind alone (a hang: watchdog timeout), else Unknown.
 *
 * "Unknown" is an honest answer; a guess is not.  The JSON inputs (health
 * and flight-recorder verdicts) come from other programs: they are parsed
 * with explicit bounds and any malformed part is simply not evidence.
 */
#include "report/report.h"

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

static void set(fb__report_class *out, cause c, const char *by, const char *fmt,
                ...) __attribute__((format(printf, 4, 5)));
static void set(fb__report_class *out, cause c, const char *by, const char *fmt,
                ...)
{
    out->component = c.component;
    out->category = c.category;
    out->decided_by = by;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->evidence, sizeof out->evidence, fmt, ap);
    va_end(ap);
}

static void append(fb__report_class *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void append(fb__report_class *out, const char *fmt, ...)
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

int fb__report_find_xid(const char *text)
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

/* NVIDIA's XID catalogue, the rows that matter for root cause. */
static cause xid_cause(int xid, const char **why)
{
    switch (xid) {
    case 48: case 63: case 64: case 92: case 94: case 95:
        *why = "memory ECC / row remapping";
        return C_HBM;
    case 119: case 120:
        *why = "GPU system processor (GSP) error";
        return C_GSP;
    case 13: case 31: case 43:
        *why = "usually raised by the application's own kernels";
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

/* Health verdict: the first check whose status is fail/error/critical. */
static int from_health(const char *health, fb__report_class *out, int commit)
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
        int xid = fb__report_find_xid(detail);
        if (named)
            k = *named;
        else if (xid >= 0)
            k = xid_cause(xid, &why);
        else if (!hw_cause(name, cat, detail, &k))
            continue; /* a failing check that names no component */
        found = 1;
        if (commit)
            set(out, k, xid >= 0 && !named ? "xid" : "health",
                "health check '%s'%s%s%s failed: %.200s%s%s", name ? name : "?",
                cat ? " (" : "", cat ? cat : "", cat ? ")" : "",
                detail ? detail : "", *why ? "; " : "", why);
        else
            append(out, "; also: health check '%s' failed (%s)",
                   name ? name : "?", k.component);
    }
    fb__json_free(doc);
    return found;
}

/* Ranks of a JSON array as "1,5" into buf. */
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

/* Flight-recorder verdict (docs/flight-recorder.md): verdict hang,
 * mismatch, slow, ok or undecided; summary; culprits; findings with
 * kind/group/seq/ranks/detail.  A mismatch (ranks disagree on a
 * collective's type, size or dtype) is a program bug; a hang or a slow
 * rank with a culprit and nothing else is a watchdog timeout. */
static int from_fr(const char *fr, fb__report_class *out)
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
        set(out, mismatch ? C_SWBUG : C_WATCHDOG, "flight_recorder",
            "flight recorder: %s: %s; culprit rank(s) [%s]%s",
            verdict ? verdict : "finding", what, ranks,
            mismatch ? " (ranks disagree on the collective: a program bug)"
                     : " (no hardware evidence)");
    }
    fb__json_free(doc);
    return decided;
}

/* The failing rank's own words. */
static int from_log(const char *text, fb__report_class *out)
{
    static const struct {
        const char *word;
        const cause *c;
        const char *why;
    } words[] = {
        {"uncorrectable ECC error", &C_HBM, "GPU memory ECC error in the log"},
        {"ECC error", &C_HBM, "GPU memory ECC error in the log"},
        {"Watchdog caught collective operation timeout", &C_WATCHDOG,
         "collective watchdog timeout in the log"},
        {"illegal memory access", &C_SWBUG, "illegal memory access in the log"},
        {"Segmentation fault", &C_SWBUG, "segmentation fault in the log"},
    };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (has_word(text, words[i].word)) {
            set(out, *words[i].c, "log", "%s: '%s'", words[i].why, words[i].word);
            return 1;
        }
    return 0;
}

static const char *signame_(int sig)
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

static void from_signal(int sig, const char *how, fb__report_class *out)
{
    switch (sig) {
    case 4: case 6: case 7: case 8: case 11:
        set(out, C_SWBUG, "signal", "%s %s (%d): the program faulted or "
            "aborted itself; no hardware evidence", how, signame_(sig), sig);
        return;
    default:
        set(out, C_UNKNOWN, "signal", "%s %s (%d) sent from outside the process "
            "by an unknown sender; no other evidence", how, signame_(sig), sig);
    }
}

static void from_injected(const char *inj, fb__report_class *out)
{
    char kind[16] = "";
    size_t i = 0;
    while (inj[i] && inj[i] != ':' && i + 1 < sizeof kind) {
        kind[i] = inj[i];
        i++;
    }
    kind[i] = '\0';
    if (!strcmp(kind, "kill"))
        set(out, C_MAINT, "injected", "injected fault '%.200s': SIGKILL from "
            "outside the process, an external stop of a healthy rank (counted "
            "as Llama 3's unplanned host maintenance)", inj);
    else if (!strcmp(kind, "segv"))
        set(out, C_SWBUG, "injected", "injected fault '%.200s': the program "
            "crashed itself with SIGSEGV (software bug)", inj);
    else if (!strcmp(kind, "exit"))
        set(out, C_SWBUG, "injected", "injected fault '%.200s': the program "
            "exited with an error code (software bug)", inj);
    else if (!strcmp(kind, "hang"))
        set(out, C_WATCHDOG, "injected", "injected fault '%.200s': a rank "
            "stopped making progress (collective watchdog timeout)", inj);
    else if (!strcmp(kind, "corrupt"))
        set(out, C_SSD, "injected", "injected fault '%.200s': a checkpoint "
            "shard was corrupted on storage", inj);
    else
        set(out, C_UNKNOWN, "injected", "injected fault '%.200s' (no Llama 3 "
            "category for it)", inj);
}

void fb__report_classify(const fb__report_evidence *ev, fb__report_class *out)
{
    memset(out, 0, sizeof *out);
    const char *kind = ev->kind ? ev->kind : "";
    if (ev->category && *ev->category) {
        out->category = ev->category;
        out->component = ev->component && *ev->component ? ev->component
                                                         : ev->category;
        out->decided_by = "supervisor";
        snprintf(out->evidence, sizeof out->evidence, "%s",
                 ev->evidence && *ev->evidence ? ev->evidence
                                               : "recorded by the supervisor");
        return;
    }
    if (!strcmp(kind, "interrupted")) {
        set(out, C_PLANNED, "kind", "the run was interrupted on purpose "
            "(operator or scheduler stop): %.200s", ev->detail ? ev->detail : "");
        return;
    }
    int crashed = !strcmp(kind, "crash") || !strcmp(kind, "error_exit") ||
                  !strcmp(kind, "launch_failure") || !strcmp(kind, "node_failure");
    int xid = -1;
    const char *why = "";
    if (ev->injected && *ev->injected) {
        from_injected(ev->injected, out);
        from_health(ev->health, out, 0);
    } else if (from_health(ev->health, out, 1)) {
        /* decided */
    } else if ((xid = fb__report_find_xid(ev->detail)) >= 0 ||
               (xid = fb__report_find_xid(ev->last_lines)) >= 0) {
        set(out, xid_cause(xid, &why), "xid", "NVIDIA XID %d in the %s: %s",
            xid, fb__report_find_xid(ev->detail) >= 0 ? "detail" : "last lines",
            why);
    } else if (from_log(ev->last_lines, out) || from_log(ev->detail, out)) {
        /* decided */
    } else if (crashed && ev->signal > 0) {
        from_signal(ev->signal, "killed by", out);
    } else if (crashed && ev->has_exit_code && ev->exit_code > 128 &&
               ev->exit_code < 160) {
        from_signal(ev->exit_code - 128, "exit code reports", out);
    } else if (!strcmp(kind, "launch_failure")) {
        set(out, C_DEP, "kind", "the job could not be launched: %.200s",
            ev->detail ? ev->detail : "");
    } else if (!strcmp(kind, "segment_corrupt")) {
        set(out, C_SWBUG, "kind", "the rank wrote over its own firebreak "
            "segment (a wild write in the program): %.200s",
            ev->detail ? ev->detail : "");
    } else if (!strcmp(kind, "segment_not_ours")) {
        set(out, C_UNKNOWN, "kind", "another local user's file held the "
            "rank's segment name, so the rank could not record: %.200s",
            ev->detail ? ev->detail : "");
    } else if (crashed && ev->has_exit_code && ev->exit_code != 0) {
        set(out, C_SWBUG, "exit_code", "exit code %d: the program stopped "
            "itself with an error; no hardware evidence", ev->exit_code);
    } else if (from_fr(ev->fr_verdict, out)) {
        /* decided */
    } else if (!strcmp(kind, "restore_fallback") && ev->detail &&
               strstr(ev->detail, "incomplete")) {
        set(out, C_UNKNOWN, "kind", "the checkpoint was incomplete: a rank "
            "stopped before its shard committed, a consequence of the "
            "interruption before it, not a fault of its own");
    } else if (!strcmp(kind, "restore_fallback") && ev->detail &&
               (strstr(ev->detail, "corrupt") || strstr(ev->detail, "hash"))) {
        set(out, C_UNKNOWN, "kind", "a checkpoint shard failed its hash check "
            "(corrupted on storage or before it was written); what corrupted "
            "it is not recorded");
    } else if (!strcmp(kind, "hang")) {
        set(out, C_WATCHDOG, "kind", "no progress until the hang timeout; no "
            "flight-recorder culprit and no hardware evidence");
    } else {
        set(out, C_UNKNOWN, "none", "no evidence in the journal for this %s",
            *kind ? kind : "incident");
    }
}
