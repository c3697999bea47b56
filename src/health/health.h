/*
 * health.h -- node health checks (`firebreak health`), callable by the
 * supervisor before a launch and after a failure.
 *
 *   fb__health_opts o;  fb__health_opts_init(&o);  o.expect_gpus = 8;
 *   fb__health_result *r;
 *   if (fb__health_run(&o, &r) == 0) {
 *       if (fb__health_verdict(r) == FB_HEALTH_FAIL) ... fb__health_reason(r)
 *       fb__health_write_json(r, &w);   // the `--json` object
 *       fb__health_free(r);
 *   }
 *
 * Every check yields ok, warn, fail, skipped or unknown, with evidence
 * (`detail`), the Llama 3 category and component of a failure, and the
 * recommended action.  A check is unknown when its input could not be
 * read or made sense of (a sysfs value oversized, garbage or NUL bytes,
 * a FIFO or device in its place): it cannot say ok.  The outcome is fail
 * if any check fails, else unknown if any could not decide, else warn if
 * any warns, else ok (skipped does not count); it is the exit code (0 ok,
 * 1 warn, 2 fail, 3 unknown).  Sources: NVML (dlopen), the kernel log, sysfs, statvfs; with
 * `root` set they are read from a fixture tree that mirrors /sys, /proc and
 * /dev/kmsg (a plain file of kmsg records).  docs/health.md has the list.
 */
#ifndef FB_HEALTH_HEALTH_H
#define FB_HEALTH_HEALTH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/jsonw.h"

/* ok / warn / fail are also their Nagios exit codes; unknown exits 3. */
typedef enum {
    FB_HEALTH_OK = 0,
    FB_HEALTH_WARN = 1,
    FB_HEALTH_FAIL = 2,
    FB_HEALTH_SKIPPED = 3,
    FB_HEALTH_UNKNOWN = 4    /* could not decide: input unreadable or garbage */
} fb__health_status;
#define FB__HEALTH_NSTATUS 5

#define FB__HEALTH_JSON_VERSION "1.0"

typedef struct fb__health_opts {
    const char *root;        /* fixture tree; NULL: the real system */
    const char *nvml_lib;    /* NULL: FIREBREAK_NVML_LIB / the driver */
    int expect_gpus;         /* < 0: no expectation */
    double since_s;          /* kernel log: last since_s seconds; <= 0: boot */
    const char *ckpt_dir;    /* free-space check; NULL: none */
    uint64_t min_free_bytes; /* fail below (default 1 GiB) */
    int skip_gpu;            /* 1: no NVML checks at all */
} fb__health_opts;

typedef struct fb__health_check {
    char name[64];           /* "gpu3.ecc", "kernel.xid79.0000:2b:00" */
    fb__health_status status;
    char detail[512];        /* evidence */
    const char *category;    /* Llama 3 category or NULL */
    const char *component;   /* Llama 3 root-cause component or NULL */
    const char *action;      /* recommended action or NULL */
} fb__health_check;

typedef struct fb__health_result fb__health_result;

void fb__health_opts_init(fb__health_opts *o);

/* Run every check.  Returns 0 with *out (free with fb__health_free), or
 * -ENOMEM, or -ENOENT when `root` is not a directory (err says so). */
int fb__health_run(const fb__health_opts *o, fb__health_result **out,
                   char *err, size_t err_size);
void fb__health_free(fb__health_result *r);

/* The outcome: fail > unknown > warn > ok (see above). */
fb__health_status fb__health_outcome(const fb__health_result *r);
/* Its exit code: 0 ok, 1 warn, 2 fail, 3 unknown. */
int fb__health_exit_code(fb__health_status outcome);
/* ok / warn / fail only, for callers that know no "unknown" (`firebreak
 * watch --health` and the supervisor): an unknown outcome is warn -- the
 * node needs a look but is not shown to be bad. */
fb__health_status fb__health_verdict(const fb__health_result *r);
size_t fb__health_count(const fb__health_result *r);
const fb__health_check *fb__health_at(const fb__health_result *r, size_t i);
/* The Llama 3 category of the first check with the outcome's status, or
 * NULL when all is well. */
const char *fb__health_category(const fb__health_result *r);
/* A one-line reason naming the first check with the outcome's status
 * (the first failing one when any fails), for the journal and for
 * `scontrol ... Reason=` ("firebreak: gpu3.lost: ..."); bounded. */
void fb__health_reason(const fb__health_result *r, char *buf, size_t size);

const char *fb__health_status_name(fb__health_status s);

/* The `--json` object (version, host, verdict, exit, checks, counts). */
void fb__health_write_json(const fb__health_result *r, fb__jsonw *w);
/* Human-readable lines. */
void fb__health_print(const fb__health_result *r, int verbose, FILE *f);

/* Drain this node: argv for `scontrol update NodeName=<node> State=DRAIN
 * Reason=<reason>`, run without a shell.  node NULL: SLURMD_NODENAME, else
 * the hostname.  Returns scontrol's exit status, or -errno. */
int fb__health_drain(const fb__health_result *r, const char *node,
                     char *err, size_t err_size);

/* ---- used by the checks (checks_*.c) ---- */

fb__health_check *fb__health_add(fb__health_result *r, const char *name,
                                 fb__health_status st, const char *category,
                                 const char *component, const char *action,
                                 const char *fmt, ...)
    __attribute__((format(printf, 7, 8)));

/* A path under the root: root + abs ("/sys/..."); 0 or -ENAMETOOLONG. */
int fb__health_path(const fb__health_opts *o, char *buf, size_t size,
                    const char *abs_path);

void fb__health_check_gpus(const fb__health_opts *o, fb__health_result *r);
void fb__health_check_kernel_log(const fb__health_opts *o, fb__health_result *r);
void fb__health_check_host(const fb__health_opts *o, fb__health_result *r);

#endif
