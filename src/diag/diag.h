/*
 * diag.h -- the root cause of an incident, from evidence, by documented
 * rules (docs/report.md "Root cause").  Pure functions: the supervisor
 * calls fb__diag_classify when it records an incident (and stores the
 * answer in the journal's category, component and evidence columns); the
 * report calls it for incidents of older journals that have none.
 *
 *   fb__diag_evidence ev = {.kind = "crash", .signal = 9,
 *                           .kernel_log = "...", .health = json};
 *   fb__diag_class c;
 *   fb__diag_classify(&ev, &c);     // c.category "GPU", c.component
 *                                   // "Faulty GPU", c.evidence the chain
 *
 * The kernel log around the incident is read by fb__diag_kmsg_scan
 * (kernel.c): a bounded reader of /dev/kmsg or of a file in its record
 * format that keeps only the lines that can be evidence (NVIDIA XIDs,
 * machine checks, EDAC, the OOM killer).  Every input is untrusted and
 * bounded; fuzz target fuzz/diag.c.
 */
#ifndef FB_DIAG_DIAG_H
#define FB_DIAG_DIAG_H

#include <stddef.h>
#include <stdint.h>

/* What classify looks at (any field may be NULL / 0). */
typedef struct fb__diag_evidence {
    const char *kind;        /* incident kind: crash, hang, error_exit, ... */
    const char *phase;       /* the rank's phase (init, train, ..., done), or
                                NULL: unknown */
    const char *injected;    /* the injected fault that fired, or NULL      */
    const char *detail, *last_lines;
    const char *fr_verdict;  /* flight-recorder verdict (JSON)              */
    const char *health;      /* health verdict taken after it (JSON)        */
    const char *kernel_log;  /* kernel-log lines around it, one a line      */
    /* a classification already recorded (journal columns): kept */
    const char *category, *component, *evidence;
    int signal;              /* 0: none */
    int has_exit_code, exit_code;
    int ckpt_code;           /* a failed save's code (-28: disk full); 0    */
    int pid;                 /* the failed rank's pid, 0: unknown           */
} fb__diag_evidence;

/* The rule that decided (docs/report.md "Root cause"); its name is
 * fb__diag_rule_name's, also the stored form's "[by NAME]". */
typedef enum {
    FB__DIAG_BY_SUPERVISOR,  /* recorded already (an older journal: any text) */
    FB__DIAG_BY_INJECTED, FB__DIAG_BY_KERNEL_LOG, FB__DIAG_BY_HEALTH,
    FB__DIAG_BY_XID, FB__DIAG_BY_LOG, FB__DIAG_BY_STORAGE, FB__DIAG_BY_SIGNAL,
    FB__DIAG_BY_EXIT_CODE, FB__DIAG_BY_FLIGHT_RECORDER, FB__DIAG_BY_KIND,
    FB__DIAG_BY_NONE, FB__DIAG_NRULES
} fb__diag_rule;

const char *fb__diag_rule_name(fb__diag_rule r);

/* The answer.  category / component / decided_by are static strings;
 * evidence is the chain: the sentence of the rule that decided, then
 * "; also: ..." for other evidence seen.  Truncated, NUL-terminated. */
typedef struct fb__diag_class {
    const char *category, *component;
    fb__diag_rule rule;
    const char *decided_by; /* fb__diag_rule_name(rule) */
    int injected;           /* an injected fault: the category is the one
                               it imitates */
    int programs_own;       /* the program's own failure (a software bug, a
                               dependency, its GPU memory): no evidence
                               against the node it ran on */
    char evidence[1024];
} fb__diag_class;

/* Classify one incident.  Never fails: no evidence gives "Unknown". */
void fb__diag_classify(const fb__diag_evidence *ev, fb__diag_class *out);

/* The cause as people read it: "GPU / Faulty GPU", "GPU (injected) /
 * Faulty GPU", and the component only where it is not the category
 * ("Unknown (injected)", not "Unknown / Unknown").  Into buf, truncated. */
void fb__diag_cause_text(const fb__diag_class *c, char *buf, size_t size);

/* The evidence column as the supervisor stores it: "[by RULE] chain".
 * fb__diag_stored_rule reads the rule back (FB__DIAG_BY_SUPERVISOR when
 * the text has no such prefix: an older journal's). */
void fb__diag_format_stored(const fb__diag_class *c, char *buf, size_t size);
fb__diag_rule fb__diag_stored_rule(const char *evidence);

/* The NVIDIA XID named in text ("Xid (PCI:...): 79,", "XID 48",
 * "xid=119"), or -1.  Bounded: looks at most at the first 64 KiB. */
int fb__diag_find_xid(const char *text);

/* ---- the kernel log (kernel.c) ---- */

typedef enum {
    FB__KLINE_NONE = 0,
    FB__KLINE_XID,          /* NVRM: Xid (PCI:...): N, ...                  */
    FB__KLINE_MCE,          /* machine check / "[Hardware Error]"           */
    FB__KLINE_EDAC_UE,      /* EDAC uncorrectable memory error               */
    FB__KLINE_OOM_KILL,     /* the OOM killer killed a process              */
    FB__KLINE_NVME,         /* NVMe / block I/O errors                      */
    FB__KLINE_NIC,          /* InfiniBand / mlx5 port or device errors      */
} fb__kline_kind;

typedef struct fb__kline {
    fb__kline_kind kind;
    int xid;                /* XID number, -1                               */
    int pid;                /* OOM kill: the killed process, 0 unknown      */
    char name[32];          /* OOM kill: its name                           */
} fb__kline;

/* Which evidence one kernel-log text line is (len bytes, need not be
 * NUL-terminated).  Returns the kind (FB__KLINE_NONE: not evidence). */
fb__kline_kind fb__diag_kernel_line(const char *text, size_t len,
                                    fb__kline *out);
const char *fb__diag_kline_name(fb__kline_kind k);

/* Bounds of a scan: the kept lines (the newest when there are more) and
 * the bytes read from a file. */
#define FB__DIAG_KLINES_MAX 32
#define FB__DIAG_KMSG_FILE_MAX (64ull << 20)

/* A line of `dmesg` output, "[  123.456789] text" (exactly 6 digits after
 * the point), as a record (prio 6): 0 or FB_EFORMAT. */
struct fb__kmsg_record;
int fb__diag_dmesg_parse(const char *line, size_t len, struct fb__kmsg_record *rec);

/*
 * Read the kernel log at `path` (/dev/kmsg, or a plain file of records
 * "prio,seq,usec,flags;text" or of dmesg lines "[  123.456789] text", one
 * a line, mixed as they come) and keep the evidence lines whose
 * time since boot is within [from_us, to_us], as "[SECONDS] text\n" into
 * buf (the newest FB__DIAG_KLINES_MAX; text with control bytes as '?').
 * Never blocks (/dev/kmsg is read until it has nothing more; a FIFO is
 * refused).  Returns the number of lines kept, or -errno / FB_ENOTREG.
 */
int fb__diag_kmsg_scan(const char *path, uint64_t from_us, uint64_t to_us,
                       char *buf, size_t size);

#endif
