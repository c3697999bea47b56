/*
 * report.h -- `firebreak report`: where a run's time went and why it failed.
 *
 * A run directory's journal.sqlite (written by the supervisor, read here
 * read-only) is loaded into an fb__report_run, its wall time is split into
 * six parts that add up exactly (account.c, docs/report.md), every incident
 * gets a Llama 3 root-cause category with the evidence that decided it
 * (classify.c), and the result is written as text, one-line JSON or a
 * self-contained HTML page with inline SVG charts (out_*.c).  agent.sqlite,
 * when present beside the journal, adds temperature and power.
 *
 * Times inside the accounting are integer microseconds since the run
 * started, so the parts sum to the wall time with no rounding.
 */
#ifndef FB_REPORT_REPORT_H
#define FB_REPORT_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FB__REPORT_JSON_VERSION "1.0"

/* The partition of wall time (order is the order of every output). */
typedef enum {
    FB__T_USEFUL, FB__T_CKPT, FB__T_LOST, FB__T_DETECT, FB__T_RESTART,
    FB__T_RESTORE, FB__T_N
} fb__report_part;

/* JSON key ("useful", "checkpoint", ...) and a label for people. */
const char *fb__report_part_key(int part);
const char *fb__report_part_label(int part);

/* ---- root cause ------------------------------------------------------- */

/* What classify looks at: the incident's columns (any may be NULL / 0). */
typedef struct fb__report_evidence {
    const char *kind, *injected, *detail, *last_lines, *fr_verdict, *health;
    const char *category, *component, *evidence; /* set by the supervisor */
    int signal;              /* 0: none */
    int has_exit_code, exit_code;
} fb__report_evidence;

/* The answer.  category/component are static strings; evidence is
 * written into the caller's buffer (truncated, always NUL-terminated)
 * unless the supervisor's own evidence was kept. */
typedef struct fb__report_class {
    const char *category, *component;
    const char *decided_by; /* supervisor, injected, health, xid, signal,
                               exit_code, log, flight_recorder, kind, none */
    char evidence[512];
} fb__report_class;

/* Classify one incident.  Never fails: no evidence gives "Unknown". */
void fb__report_classify(const fb__report_evidence *ev, fb__report_class *out);

/* The NVIDIA XID named in a kernel-log style line ("Xid (PCI:...): 79,")
 * within text, or -1.  Bounded: looks at most at the first 64 KiB. */
int fb__report_find_xid(const char *text);

/* ---- loaded runs ------------------------------------------------------ */

typedef struct fb__report_incident {
    int64_t id, attempt_id;
    int attempt;               /* index into run->attempts, -1: unknown */
    char *kind, *node, *phase, *injected, *detail, *last_lines;
    char *host;                /* the node's machine (schema 1.1), or NULL */
    char *fr_verdict, *health, *sup_category, *sup_component, *sup_evidence;
    int rank;                  /* -1: not one rank */
    int signal, has_exit_code, exit_code;
    int64_t step;              /* -1: unknown */
    double occurred_at, detected_at, detect_ms;
    double lost_s;             /* journal value; < 0: unknown */
    double lost_acc_s;         /* accounted lost work; < 0: not accounted */
    int ends_attempt;          /* the failure that ended its attempt */
    int injected_from_event;   /* injected: from an `inject` event */
    fb__report_class cls;
} fb__report_incident;

/* One node of an attempt and the ranks it ran (journal placement, 1.1). */
typedef struct fb__report_node {
    char *node, *host;         /* host: NULL when not known */
    int *ranks;                /* ascending */
    size_t nranks;
} fb__report_node;

typedef struct fb__report_attempt {
    int64_t id;
    int number;
    double started_at, launched_at, ready_at, ended_at; /* NAN: unknown */
    double restore_s;                                   /* NAN: unknown */
    int64_t restored_step, start_step, end_step;        /* -1: unknown */
    char outcome[16];
    int64_t start_us, end_us;      /* clamped interval, µs since run start */
    int64_t ready_us, fail_us, detected_us; /* cut points r, f, d */
    int64_t us[FB__T_N];           /* its partition, sums to end_us-start_us */
    int64_t ckpt_stall_us;         /* sum of per-step max stalls */
    const char *lost_from;         /* "steps", "incident", "none" */
    int failure;                   /* incident index that ended it, -1 */
    size_t sample_lo, sample_hi;   /* its samples: run->samples[lo, hi) */
    fb__report_node *nodes;        /* where its ranks ran, in rank order */
    size_t nnodes;                 /* 0: not journaled (schema 1.0)       */
} fb__report_attempt;

typedef struct fb__report_sample {
    double time;
    int64_t step;
    float step_time_ms;            /* NAN: unknown */
    int32_t rank, attempt;         /* attempt: index, -1 unknown */
} fb__report_sample;

typedef struct fb__report_ckpt {
    int attempt;
    int64_t step;
    double committed_at, stall_ms;
    char status[12];
} fb__report_ckpt;

/* One agent sample (time, and NAN where the column is absent). */
typedef struct fb__report_env {
    double time, temp_c, power_w;
} fb__report_env;

typedef struct fb__report_run {
    char *dir, *name, *status, *reason, *hostname;
    char schema_version[32];
    int nproc, nnodes, finished;   /* finished: run.ended_at known */
    double started_at, ended_at;   /* ended_at: journal or last seen */
    int64_t wall_us, us[FB__T_N];
    fb__report_attempt *attempts;
    size_t nattempts;
    fb__report_incident *incidents;
    size_t nincidents;
    fb__report_sample *samples;    /* grouped by attempt (in its order) */
    size_t nsamples;
    fb__report_ckpt *ckpts;
    size_t nckpts;
    fb__report_env *env;           /* agent.sqlite, sorted by time */
    size_t nenv;
    char agent_note[256];          /* why agent data is absent, or "" */
} fb__report_run;

/*
 * Load RUN_DIR/journal.sqlite (or a path to the .sqlite file itself),
 * account and classify.  Returns 0, or: -ENOENT (no journal), FB_EFORMAT
 * (not a firebreak journal, corrupted, empty run, never started),
 * FB_EVERSION (another schema major), -EBUSY (locked by another process),
 * -ENOMEM.  err names the file and what to do.
 */
int fb__report_load(const char *run_dir, fb__report_run **out, char *err,
                    size_t errsz);
void fb__report_free(fb__report_run *run);

/* The accounting (account.c); called by load, exposed for tests.
 * Returns 0, or FB_EFORMAT when the partition does not add up (a bug). */
int fb__report_account(fb__report_run *run, char *err, size_t errsz);

/* Seconds from microseconds. */
static inline double fb__report_s(int64_t us)
{
    return (double)us / 1e6;
}

/* ---- outputs ---------------------------------------------------------- */

int fb__report_write_text(FILE *f, fb__report_run *const *runs, size_t n);
/* The one-line JSON object (no newline) into w's buffer; see docs. */
struct fb__jsonw;
int fb__report_write_json(struct fb__jsonw *w, fb__report_run *const *runs,
                          size_t n);
int fb__report_write_html(FILE *f, fb__report_run *const *runs, size_t n);
/* The page into the file `path`, every write checked: a regular file (or
 * a new one) through a temporary file, fsync and rename; a device or FIFO
 * already there (/dev/stdout) written in place.  0, or a negative code
 * with err naming the file and the error. */
int fb__report_write_html_file(const char *path, fb__report_run *const *runs,
                               size_t n, char *err, size_t errsz);

/*
 * For `firebreak demo` and others: load run_dir and write its HTML report
 * to html_path (atomically).  Returns 0 or a negative code with err set.
 */
int fb__report_html(const char *run_dir, const char *html_path, char *err,
                    size_t errsz);

/* ---- across runs (aggregate.c) ---------------------------------------- */

typedef struct fb__report_row {
    const char *component, *category;
    size_t count;
} fb__report_row;

/* An unexpected interruption: the incident ended its attempt and was not
 * a planned stop.  Table 5 and suspects count only these; the other
 * incidents (a failed save, a restore that fell back) are listed, not
 * counted. */
int fb__report_is_interruption(const fb__report_incident *in);

/* Table 5 rows over the interruptions of all runs, most frequent first;
 * *rows_out is malloc'd, *total_out (may be NULL) the interruptions.
 * Returns the number of rows or -ENOMEM. */
long fb__report_table(fb__report_run *const *runs, size_t n,
                      fb__report_row **rows_out, size_t *total_out);

typedef struct fb__report_suspect {
    char what[160];        /* "node gpu-07" or "rank 3" */
    size_t failures, runs;
} fb__report_suspect;

/* Nodes and ranks whose failures ended attempts in at least two runs
 * (several run dirs) or two attempts (one run dir).  Returns the count or
 * -ENOMEM; *out is malloc'd. */
long fb__report_suspects(fb__report_run *const *runs, size_t n,
                         fb__report_suspect **out);

#endif
