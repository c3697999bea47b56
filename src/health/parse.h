/*
 * parse.h -- bounded parsers for what the health checks and the agent read
 * from the kernel: /dev/kmsg records, NVIDIA XID lines, sysfs values and
 * PCIe AER counter files.  All input is untrusted (a fixture tree, a
 * truncated log, a broken driver): every function takes a length, never
 * reads past it, and reports malformed input by its return value.
 * Fuzzed by fuzz/health_kmsg.c and fuzz/health_sysfs.c.
 */
#ifndef FB_HEALTH_PARSE_H
#define FB_HEALTH_PARSE_H

#include <stddef.h>
#include <stdint.h>

#define FB__KMSG_TEXT_MAX 1024

/* One /dev/kmsg record: "prio,seq,usec,flags[,more];text". */
typedef struct fb__kmsg_record {
    int prio;                 /* facility << 3 | level */
    uint64_t seq;
    uint64_t usec;            /* since boot */
    char text[FB__KMSG_TEXT_MAX]; /* first line only, \xNN left as is */
} fb__kmsg_record;

/* A record the kernel logged itself: facility 0 (LOG_KERN).  What
 * userspace writes to /dev/kmsg gets LOG_USER or its own facility, never
 * 0 (devkmsg_write), so a daemon's forged "NVRM: Xid" line is not the
 * driver's.  A dmesg text line, whose priority is unknown, counts. */
static inline int fb__kmsg_is_kernel(const fb__kmsg_record *rec)
{
    return (rec->prio >> 3) == 0;
}

/* Parse one record from `line` (len bytes, no need for NUL; ends at the
 * first newline).  Returns 0, or FB_EFORMAT when it is not a record (a
 * continuation line " KEY=value" included). */
int fb__kmsg_parse(const char *line, size_t len, fb__kmsg_record *rec);

/* An NVIDIA XID in a kernel log line. */
typedef struct fb__xid_event {
    int xid;
    char pci[32];             /* "0000:2b:00" as printed (without "PCI:") */
    long long action;         /* XID 154: the new recovery action, else -1 */
    char action_name[32];     /* XID 154: "None", "GPU Reset Required"... */
    char msg[160];            /* the rest of the line after the number */
} fb__xid_event;

/* Read "NVRM: Xid (PCI:0000:2b:00): 79, ..." (also the older form without
 * "PCI:") at the start of a kernel record's text (blanks before it
 * skipped; elsewhere in the text it is not the driver's: the kernel
 * quotes process names, which anyone can set).  Returns 1 when found and
 * parsed, 0 when the text holds no XID, FB_EFORMAT when it looks like an
 * XID line but is malformed. */
int fb__xid_parse(const char *text, size_t len, fb__xid_event *ev);

/* A sysfs value: optional whitespace, a decimal integer, optional
 * whitespace.  0 or FB_EFORMAT (junk, empty, out of range). */
int fb__sysfs_parse_i64(const char *buf, size_t len, int64_t *out);

/* Read a sysfs integer file (at most 4 KiB): 0, -errno or FB_EFORMAT. */
int fb__sysfs_read_i64(const char *path, int64_t *out);

/* PCIe AER counter file ("NAME count" lines); the TOTAL_ERR_* line when
 * present, else the sum of the others.  0 or FB_EFORMAT. */
int fb__aer_parse(const char *buf, size_t len, uint64_t *total);

/* InfiniBand port state "4: ACTIVE": the number (0..5), else FB_EFORMAT. */
int fb__ib_state_parse(const char *buf, size_t len, int *state);

/* The verdict table of REFERENCE.md section 5 for one XID. */
typedef struct fb__xid_info {
    int status;               /* fb__health_status */
    const char *meaning;
    const char *category;     /* Llama 3 category, NULL when not a fault */
    const char *component;
    const char *action;
} fb__xid_info;

void fb__xid_lookup(const fb__xid_event *ev, fb__xid_info *info);

#endif

/* ---- reading the kernel log (kmsg.c) ---- */

/* Reads /dev/kmsg (one record per read(), non-blocking) or a plain file of
 * records, one per line (fixtures, saved logs).  Continuation lines
 * (" KEY=value") are skipped; malformed ones are counted.  A plain file is
 * read up to FB__KMSG_FILE_MAX bytes (the kernel's ring is far smaller),
 * then `truncated` is set and the rest is not read. */
#define FB__KMSG_FILE_MAX (256ull << 20)
typedef struct fb__kmsg_reader {
    int fd;
    int is_dev;
    int truncated;           /* a plain file past FB__KMSG_FILE_MAX */
    int skipping;            /* inside a line longer than buf: its rest is
                                not a record of its own */
    size_t len, pos;
    uint64_t records, malformed, lost, file_bytes;
    char buf[16384];
} fb__kmsg_reader;

/* 0, -errno, or FB_ENOTREG when path is neither the kernel's character
 * device nor a regular file (a FIFO would never end). */
int fb__kmsg_open(fb__kmsg_reader *k, const char *path);
/* Next record: 1 when *rec is filled, 0 when nothing more is there now
 * (`final`: a partial last line of a file counts as a record, as in a
 * truncated log), -errno on a read error. */
int fb__kmsg_next(fb__kmsg_reader *k, fb__kmsg_record *rec, int final);
void fb__kmsg_close(fb__kmsg_reader *k);
