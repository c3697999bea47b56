/*
 * report.h -- `firebreak report`: where a run's time went and why it failed.
 *
 * A run directory's journal.sqlite (written by the supervisor, read here
 * read-only) is loaded into an fb__report_run, its wall time is split into
 * six parts that add up exactly (account.c, docs/report.md), every incident
 * gets a Llama 3 root-cause category with the evidence that decided it
 * (src/diag, diag.h), and the result is written as text, one-line JSON or a
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

#include "diag/diag.h"

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

/* The classifier is src/diag's (diag.h), shared with the supervisor, which
 * stores its answer with the incident; the report classifies incidents of
 * journals that have none, under the same rules. */
typedef fb__diag_evidence fb__report_evidence;
typedef fb__diag_class fb__report_class;

static inline void fb__report_classify(const fb__report_evidence *ev,
                                       fb__report_class *out)
{
    fb__diag_classify(ev, out);
}

static inline int fb__report_find_xid(const char *text)
{
    return fb__diag_find_xid(text);
}

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
    double occurred_at, detected_at;
    double detect_ms;          /* < 0: unknown (not in [0, DETECT_MS_MAX]) */
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
    double committed_at, stall_ms, persist_ms; /* persist_ms: 0 unknown */
    char status[12];
} fb__report_ckpt;

/* One agent sample (time, and NAN where the column is absent). */
typedef struct fb__report_env {
    double time, temp_c, power_w;
} fb__report_env;

/* One event of the agent (agent.sqlite `events`, docs/agent.md). */
typedef struct fb__report_agent_event {
    double time;
    char kind[32], subject[32], severity[8];
    char *detail;
} fb__report_agent_event;

/* The supervisor's live lateness (journal events "lateness", "straggler",
 * "straggler_end"; docs/supervisor.md "Stragglers"), by time. */
typedef enum {
    FB__LATE_SAMPLE = 0,   /* "lateness": a rank's window at a moment      */
    FB__LATE_NAMED,        /* "straggler" (incident or event): named       */
    FB__LATE_ENDED,        /* "straggler_end": no longer late              */
    FB__LATE_KIND_COUNT_
} fb__report_late_kind;

typedef struct fb__report_late {
    double time;
    int rank;
    fb__report_late_kind kind;
    int attempt;                   /* index into run->attempts, -1: unknown */
    int64_t step;                  /* -1: unknown */
    double late_ms;                /* mean lateness over the window; NAN */
    int64_t last, collectives;     /* last in `last` of them; -1: unknown */
} fb__report_late;

#define FB__REPORT_LATE_MAX 20000

/* The agent's events read, at most (the rest are counted, not kept). */
#define FB__REPORT_AGENT_EVENTS_MAX 10000

/* A node the supervisor drained under --drain (journal event "drain",
 * docs/report.md "Fleet"): node, reason, scontrol's exit (0: drained). */
typedef struct fb__report_drain {
    double time;
    int attempt;                   /* index into run->attempts, -1: unknown */
    int code;
    char node[128], reason[256];
} fb__report_drain;

#define FB__REPORT_DRAINS_MAX 1000

/* What the lost reports mean, after "N reports of the ranks lost (rank R
 * first): " in the text and HTML reports alike. */
#define FB__REPORT_LOST_WHY                                                  \
    "overwritten in their segments before the supervisor read them; the "  \
    "journal lacks those steps and checkpoint commits"

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
    fb__report_agent_event *events; /* agent.sqlite, by time            */
    size_t nevents, events_total;  /* kept; in the file                 */
    fb__report_late *late;         /* lateness rows, by time            */
    size_t nlate, late_total;      /* kept; in the journal              */
    fb__report_drain *drains;      /* journal events "drain", in order  */
    size_t ndrains, drains_total;  /* kept; in the journal              */
    uint64_t reports_lost;         /* journal events "reports_lost": the
                                      ranks' reports overwritten in their
                                      segments before the supervisor read
                                      them (their codes, summed)        */
    int reports_lost_first;        /* the first such event's rank, or -1 */
    int64_t run_id;                /* the journal's run row reported     */
    int runs_in_journal;           /* run rows (a reused run directory:
                                      more than 1; the newest is loaded,
                                      its own rows only)                 */
} fb__report_run;

/* The index in run->attempts of the attempt with this journal id, or -1
 * (attempts are loaded in id order: a binary search). */
int fb__report_attempt_index(const fb__report_run *run, int64_t id);

/* Whether a row of the journal is of the run loaded, given
 * fb__report_attempt_index of its attempt id: with one run in the journal
 * every row is; with several, only rows of its attempts.  The one rule,
 * for every kind of row. */
static inline int fb__report_row_is_ours(const fb__report_run *run, int attempt_index)
{
    return run->runs_in_journal <= 1 || attempt_index >= 0;
}

/*
 * Load RUN_DIR/journal.sqlite (or a path to the .sqlite file itself),
 * account and classify.  Returns 0, or: -ENOENT (no journal), FB_EFORMAT
 * (not a firebreak journal, corrupted, empty run, never started),
 * FB_EVERSION (another schema major), -EBUSY (locked by another process),
 * -ENOMEM.  err names the file and what to do.
 */
int fb__report_load(const char *run_dir, fb__report_run **out, char *err,
                    size_t errsz);
/* The same for the journal's nth run row (0: the first, by id; -1: the
 * newest, what fb__report_load takes): a reused run directory holds one
 * per `firebreak run` (run->runs_in_journal). */
int fb__report_load_nth(const char *run_dir, int nth, fb__report_run **out, char *err,
                        size_t errsz);
void fb__report_free(fb__report_run *run);
/* The journals read so far, so that one run given twice ("runs/a",
 * "runs/a/", "runs/a/journal.sqlite", or inside a directory of runs as
 * well) is counted once: a set of (device, inode) of RUN_DIR/journal.sqlite
 * or of the file itself.  Zero-initialised is empty. */
typedef struct fb__report_seen {
    uint64_t (*slot)[2]; /* open addressing, at most half full; {0,0} free */
    size_t n, cap;
} fb__report_seen;
/* 1 when RUN_DIR's journal is in the set already; 0 when it was not (now
 * it is), or cannot be stat()ed (the load then says why); -ENOMEM. */
int fb__report_seen_add(fb__report_seen *s, const char *run_dir);
void fb__report_seen_free(fb__report_seen *s);

/* The journal's lateness rows of run (lateness.c), after its attempts and
 * incidents are loaded: 0 or a negative code (message from the journal). */
struct fb__journal_ro;
int fb__report_load_lateness(struct fb__journal_ro *jr, fb__report_run *run);
const char *fb__report_late_kind_name(fb__report_late_kind k);
/* The "lateness" section of the text and JSON outputs (nothing, or an
 * empty list, when the run has none). */
void fb__report_lateness_text(FILE *f, const fb__report_run *run);
struct fb__jsonw;
void fb__report_lateness_json(struct fb__jsonw *w, const fb__report_run *run);

/* The accounting (account.c); called by load, exposed for tests.
 * Returns 0, or FB_EFORMAT when the partition does not add up (a bug). */
int fb__report_account(fb__report_run *run, char *err, size_t errsz);

/* Seconds from microseconds. */
static inline double fb__report_s(int64_t us)
{
    return (double)us / 1e6;
}

/* ---- the environment beside throughput (env.c) ------------------------ */

#define FB__REPORT_ENV_BUCKETS 60

/* Bucket means over the run's wall time (NAN: no data in the bucket) and
 * the Pearson correlation of temperature and of power with throughput
 * over the buckets where both are known (NAN: fewer than 3 such buckets,
 * or a series that does not vary; n_*: the buckets used). */
typedef struct fb__report_envcorr {
    double wall_s;
    double x_s[FB__REPORT_ENV_BUCKETS];        /* bucket centres, s */
    double throughput[FB__REPORT_ENV_BUCKETS]; /* steps/s per rank */
    double temp_c[FB__REPORT_ENV_BUCKETS], power_w[FB__REPORT_ENV_BUCKETS];
    double r_temp, r_power;
    int n_temp, n_power;
} fb__report_envcorr;

void fb__report_env_corr(const fb__report_run *run, fb__report_envcorr *out);
/* "r = 0.812 (40 buckets)" or "n/a", the number between b0 and b1 (markup
 * or ""), as every output prints it. */
void fb__report_corr_phrase(double r, int n, const char *b0, const char *b1,
                            char *buf, size_t size);

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
    size_t injected;       /* of count: injected faults imitating it */
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
 * (several run dirs) or two attempts (one run dir).  Not counted: injected
 * faults, software bugs against the node, and the node or rank when the
 * runs had only one.  Returns the count or -ENOMEM; *out is malloc'd. */
long fb__report_suspects(fb__report_run *const *runs, size_t n,
                         fb__report_suspect **out);

/* ---- the fleet: nodes across runs (fleet.c) ---------------------------- */

/* Lemon flags (docs/report.md "Fleet"). */
enum { FB__FLEET_REPEAT, FB__FLEET_HARDWARE, FB__FLEET_HEALTH, FB__FLEET_RATE,
       FB__FLEET_DRAIN, FB__FLEET_NFLAGS };
const char *fb__fleet_flag_name(int flag);

typedef struct fb__fleet_thresholds {
    int repeat_runs;     /* interruptions in at least this many runs   (2) */
    int hardware;        /* hardware root causes, at least             (2) */
    int health;          /* failed health verdicts after incidents     (2) */
    double rate_factor;  /* interruptions per run >= factor x fleet's  (3) */
    int rate_min;        /* ... with at least this many interruptions  (2) */
    int drains;          /* drains by firebreak (--drain), at least    (2) */
} fb__fleet_thresholds;
void fb__fleet_thresholds_init(fb__fleet_thresholds *t);

/* One incident (or drain: kind "drain", id -1) behind a node's counts. */
typedef struct fb__fleet_ev {
    char run[64];
    int attempt;
    int64_t id;
    char kind[24], category[48], component[48], checks[200];
    char why[400];
    int interruption, hardware, health_fail, drain;
} fb__fleet_ev;

typedef struct fb__fleet_node {
    char name[128];
    size_t runs;          /* runs it appears in (host or incident node)  */
    size_t runs_failed;   /* runs with an interruption on it             */
    size_t interruptions, hardware, health_fails, drains;
    double rate;          /* interruptions / runs                        */
    unsigned flags;       /* 1 << FB__FLEET_*                            */
    fb__fleet_ev *ev;     /* the first EV_PER_NODE_MAX                    */
    size_t nev, nevidence;
    size_t last_run, last_failed_run; /* while adding                    */
} fb__fleet_node;

typedef struct fb__fleet {
    fb__fleet_thresholds t;
    fb__fleet_node *nodes;
    size_t nnodes, cap;
    size_t nruns, skipped, interruptions;
    fb__report_seen seen; /* the run directories read                   */
    size_t repeated;      /* run directories given again: read once      */
    double rate;          /* interruptions per node-run, the fleet's     */
} fb__fleet;

#define FB__FLEET_RUNS_MAX 100000

/* Add DIR: a run directory, or a directory whose subdirectories are run
 * directories (read in name order; FB__FLEET_RUNS_MAX runs in all).  A run
 * that cannot be read is skipped, counted and said on errf.  0 or -ENOMEM. */
int fb__fleet_add_dir(fb__fleet *f, const char *dir, FILE *errf);
/* Add a loaded run's facts (0 or -ENOMEM); then finish: judge and rank. */
int fb__fleet_add_run(fb__fleet *f, const fb__report_run *run);
void fb__fleet_finish(fb__fleet *f);
/* The policy, pure: set n->rate and n->flags from its counts. */
void fb__fleet_judge(const fb__fleet_thresholds *t, double fleet_rate,
                     fb__fleet_node *n);
int fb__fleet_write_text(FILE *out, const fb__fleet *f);
int fb__fleet_write_json(struct fb__jsonw *w, const fb__fleet *f);
/* The fleet as an HTML page (out_html.c); into a file as
 * fb__report_write_html_file writes one: 0 or -errno with err set. */
int fb__fleet_write_html(FILE *f, const fb__fleet *fl);
int fb__fleet_write_html_file(const char *path, const fb__fleet *f, char *err,
                              size_t errsz);
void fb__fleet_free(fb__fleet *f);

#endif
