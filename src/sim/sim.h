/*
 * sim.h -- the reliability simulator behind `firebreak sim`.
 *
 * A discrete-event Monte Carlo of one training job over a wall-clock
 * horizon: failures arrive from per-category Poisson processes (or from one
 * exponential process in model-checking mode), planned maintenance comes
 * on a schedule, and every interruption costs detection, perhaps a wait for
 * a replacement node, a restart and the work since the last durable
 * checkpoint.  Each trial returns where its wall-clock time went; trials
 * are independent, seeded from (seed, trial index), so results do not
 * depend on the number of threads.
 *
 * Files: sim_model.c (presets, validation, derived quantities),
 * sim_rates.c (the rates-file parser), sim_engine.c (one trial, threads,
 * aggregation), sim_search.c (optimal interval, Young, Daly), sim_out.c
 * (text, JSON, CSV, SVG), sim_journal.c (costs measured by a real run).
 * The model and the formats are described in docs/sim.md.
 */
#ifndef FB_SIM_SIM_H
#define FB_SIM_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FB_SIM_MAX_CATEGORIES 32
#define FB_SIM_NAME_MAX 32
#define FB_SIM_MAX_TRIALS 1000000L
#define FB_SIM_MAX_GPUS 100000000L
#define FB_SIM_JSON_VERSION 1
/* The longest duration an option or a measured cost may give: 100 years
 * (--days stops at 36500 too). */
#define FB_SIM_MAX_SECONDS (36500 * 86400.0)

enum fb__sim_kind { FB_SIM_CRASH = 0, FB_SIM_HANG = 1 };
/* A node-scoped failure takes one node out: the job needs a replacement
 * (spare or wait for repair), and lemon nodes concentrate it.  A
 * job-scoped failure (network, software) restarts on the same nodes. */
enum fb__sim_scope { FB_SIM_SCOPE_JOB = 0, FB_SIM_SCOPE_NODE = 1 };

/* Checkpoint tiers (docs/sim.md, "Checkpoint tiers"): where a restore
 * reads the checkpoint from, nearest first. */
enum fb__sim_tier {
    FB_SIM_TIER_MEMORY = 0,   /* the node's own memory                   */
    FB_SIM_TIER_PEER = 1,     /* a copy in k peer nodes' memory          */
    FB_SIM_TIER_STORAGE = 2,  /* shared storage                          */
    FB_SIM_NTIERS = 3
};
#define FB_SIM_MAX_PEERS 64

typedef struct fb__sim_category {
    char name[FB_SIM_NAME_MAX];
    double rate_per_gpu_s;  /* failures per GPU-second (scales with GPUs) */
    double rate_per_job_s;  /* failures per job-second (does not scale)   */
    int kind;               /* enum fb__sim_kind  */
    int scope;              /* enum fb__sim_scope */
} fb__sim_category;

/* The progress of one command's runs, shown on stderr (cmd_sim.c): each
 * run adds the events of every block of trials it finishes, and its
 * calling thread draws the line (fb__sim_progress_add).  On a terminal a
 * line redrawn every 0.5 s after the first second; otherwise a line every
 * 10 s, so a run shorter than that prints nothing. */
typedef struct fb__sim_progress {
    _Atomic uint64_t done;    /* events simulated so far                 */
    double total;             /* expected, fb__sim_expected_events()     */
    uint64_t start_ns, last_ns;
    int on_tty;
    int drawn;                /* a line is on the terminal               */
} fb__sim_progress;

typedef struct fb__sim_config {
    /* Failure model. */
    int exponential;          /* 1: one process, rate 1/mtbf_s, no extras */
    double mtbf_s;            /* exponential mode: whole-job MTBF         */
    int ncat;
    fb__sim_category cat[FB_SIM_MAX_CATEGORIES];
    double planned_per_job_s; /* planned maintenance events per second    */
    double maint_down_s;      /* downtime of one planned maintenance      */

    /* Job. */
    long gpus;
    int gpus_per_node;
    double horizon_s;         /* wall clock (--days)                      */

    /* Checkpointing: compute interval_s, block stall_s, then persist_s in
     * the background; the checkpoint is durable only when persisted. */
    double interval_s;
    double stall_s;
    double persist_s;

    /* Checkpoint tiers; tiers == 0: one tier, every checkpoint durable
     * persist_s after its stall (the model without tiers).  With tiers
     * every checkpoint is in node memory at the end of its stall, in k
     * peers' memory peer_s later, and every persist_every-th one is on
     * storage persist_s after its stall; restart_s then excludes the
     * restore, which costs restore_s[tier] of the tier it reads. */
    int tiers;
    int peers;                /* k copies, each on another node          */
    double peer_s;            /* stall end -> all k peer copies complete */
    int persist_every;        /* M: every M-th checkpoint to storage     */
    double restore_s[FB_SIM_NTIERS];
    double double_failure;    /* share of node failures that also take
                                 their peers' copies (a shared domain)   */

    /* Recovery. */
    double detect_crash_s, detect_hang_s;
    double restart_s;         /* relaunch + initialization + restore
                                 (with tiers: without the restore)       */
    long spares;              /* spare nodes; -1: 1% of the job's nodes  */
    double repair_s;          /* a failed node is back after this         */
    double drain_repair_s;    /* a drained node is back after this        */
    double lemon_fraction;    /* share of nodes that are lemons           */
    double lemon_factor;      /* their failure rate / a normal node's     */
    int drain;                /* drain a node after its first failure     */

    /* Monte Carlo. */
    long trials;
    uint64_t seed;
    int threads;              /* 0: number of online CPUs                 */
    fb__sim_progress *progress; /* NULL: none; not owned                  */
} fb__sim_config;

/* Where one trial's wall clock went (seconds; they sum to horizon_s). */
typedef struct fb__sim_time {
    double useful, checkpoint, lost, detect, restart, repair_wait, maintenance;
} fb__sim_time;

typedef struct fb__sim_trial {
    fb__sim_time t;
    uint32_t interruptions;   /* unexpected */
    uint32_t planned;
    uint32_t restores[FB_SIM_NTIERS]; /* with tiers: restores by tier   */
} fb__sim_trial;

typedef struct fb__sim_result {
    long trials;
    double ettr_mean, ettr_p5, ettr_p95;
    double interruptions_mean, planned_mean;
    double by_category_mean[FB_SIM_MAX_CATEGORIES];
    double restores_mean[FB_SIM_NTIERS]; /* with tiers               */
    fb__sim_time time_mean;
    fb__sim_trial *per_trial;  /* when asked for (CSV); owned, free below */
} fb__sim_result;

typedef struct fb__sim_optimum {
    double young_s, daly_s;   /* formulas (REFERENCE §2), may be < floor  */
    double search_s;          /* best interval the simulator found        */
    double search_ettr;       /* mean ETTR there                          */
    double floor_s;           /* shortest physical interval (persist)     */
    int bound_by_floor;       /* search optimum sits on the floor         */
    int young_below_floor, daly_below_floor;
    int evaluations;
} fb__sim_optimum;

/* ---- sim_model.c ---- */

/* Defaults: no preset applied, llama3-like costs (see docs/sim.md). */
void fb__sim_config_defaults(fb__sim_config *c);
/* Load preset "llama3", "rsc1" or "rsc2" (categories + planned rate).
 * Returns 0 or -ENOENT for an unknown name. */
int fb__sim_preset(fb__sim_config *c, const char *name);
/* Names of the presets, NULL-terminated. */
extern const char *const fb__sim_preset_names[];
/* Format a message into err (may be NULL) and return -EINVAL. */
int fb__sim_errf(char *err, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Check a configuration; on error writes a message naming the option and
 * returns -EINVAL. */
int fb__sim_validate(const fb__sim_config *c, char *err, size_t err_size);
/* Unexpected failures per second for the whole job at its start. */
double fb__sim_total_rate(const fb__sim_config *c);
/* Mean detection latency weighted by the categories' rates. */
double fb__sim_mean_detect(const fb__sim_config *c);
/* The shortest interval the checkpoint policy allows: the persist time
 * without tiers; with tiers, the peer copy's time and the persist time
 * shared by persist_every intervals. */
double fb__sim_floor(const fb__sim_config *c);
/* Tier names: "memory", "peer", "storage". */
const char *fb__sim_tier_name(int tier);
/* Persist time from bytes per GPU and aggregate storage bandwidth. */
double fb__sim_persist_time(double bytes_per_gpu, long gpus,
                            double bytes_per_s);

/* ---- sim_rates.c ---- */

/* Parse a rates file (text, len bytes, need not be NUL-terminated) into
 * c->cat / c->planned_per_job_s, replacing categories.  On error returns
 * -EINVAL and writes "line N: what" into err. */
int fb__sim_parse_rates(fb__sim_config *c, const char *text, size_t len,
                        char *err, size_t err_size);
/* Parse one rate "148/54/16384/gpu-day" into per-GPU and per-job rates
 * (per second).  0, -EINVAL, -ERANGE (negative) or -EDOM (more than one
 * a second, per GPU, node or job). */
int fb__sim_parse_rate(const char *s, int gpus_per_node,
                       double *per_gpu_s, double *per_job_s);

/* ---- sim_engine.c ---- */

/* Run c->trials trials.  keep_trials: also return per-trial records.
 * Returns 0, -ENOMEM, or -EINVAL (config not validated). */
int fb__sim_run(const fb__sim_config *c, int keep_trials, fb__sim_result *r);
void fb__sim_result_free(fb__sim_result *r);
/* Spare nodes in effect: c->spares, or 1% of the nodes when it is -1. */
long fb__sim_spares(const fb__sim_config *c);
/* Mean ETTR only (used by the search): same seeds, same trials. */
int fb__sim_mean_ettr(const fb__sim_config *c, double *ettr_out);

/* ---- sim_search.c ---- */

double fb__sim_young(double stall_s, double mttf_s);
double fb__sim_daly(double stall_s, double restart_s, double mttf_s);
/* Failures and planned stops that fb__sim_run simulates for c, plus
 * those of fb__sim_optimize when with_search: the work they will take. */
double fb__sim_expected_events(const fb__sim_config *c, int with_search);
/* More than this in one command runs for hours: refused. */
#define FB_SIM_MAX_EVENTS 1e11
/* Search the checkpoint interval with the best mean ETTR, at or above the
 * persist floor.  0 or negative errno. */
int fb__sim_optimize(const fb__sim_config *c, fb__sim_optimum *o);

/* ---- sim_journal.c ---- */

/* Costs that a real run measured. Fields < 0 were not found. */
typedef struct fb__sim_measured {
    double stall_s, persist_s, detect_crash_s, detect_hang_s, restart_s;
    double interval_s;
    long gpus;
    int64_t samples_stall, samples_detect, samples_restart;
    /* Restores (restore_done events): bytes per second a rank restored,
     * by the tier the event names (event.source, a later schema minor;
     * without it every restore counts as one from storage). */
    double restore_bps[FB_SIM_NTIERS];
    int64_t samples_restore[FB_SIM_NTIERS];
    double restore_s;         /* mean restore inside a restart (attempts) */
    double bytes_per_rank;    /* checkpoint bytes of one rank             */
} fb__sim_measured;

int fb__sim_read_run(const char *run_dir, fb__sim_measured *m,
                     char *err, size_t err_size);

/* ---- sim_out.c ---- */

/* Everything one `firebreak sim` run prints. */
typedef struct fb__sim_report {
    const fb__sim_config *c;
    const char *source;         /* "preset llama3", "rates FILE", ...    */
    const char *persist_from;   /* how persist_s was obtained            */
    const fb__sim_result *r;
    const fb__sim_optimum *o;    /* NULL: no search                       */
    const char *tiers_from;     /* how the tier costs were obtained      */
    const char *warning;        /* NULL, or what the projection stretches */
} fb__sim_report;

/* One point of --sweep gpus=A:B. */
typedef struct fb__sim_point {
    long gpus;
    int feasible;               /* 0: the policy is impossible here      */
    char why[200];              /* ... and why                           */
    double persist_s, young_s, daly_s;
    fb__sim_result r;            /* at the given interval                 */
    double best_interval_s;     /* max(Daly, persist floor)              */
    double ettr_at_best;        /* mean ETTR at best_interval_s          */
} fb__sim_point;

/* Add n simulated events to p; draw: the caller may draw the line (one
 * thread only).  fb__sim_progress_end clears a terminal's line (p may
 * be NULL). */
void fb__sim_progress_add(fb__sim_progress *p, uint64_t n, int draw);
void fb__sim_progress_end(fb__sim_progress *p);
/* Format seconds as "1h23m", "12m30s", "45s", "250ms". */
void fb__sim_fmt_duration(double s, char *buf, size_t size);
/* Category name for index i (the exponential mode has one, "failure"). */
const char *fb__sim_cat_name(const fb__sim_config *c, int i);
int fb__sim_cat_count(const fb__sim_config *c);

void fb__sim_print_text(FILE *f, const fb__sim_report *rep);
void fb__sim_print_csv(FILE *f, const fb__sim_report *rep);
/* One line, newline-terminated.  0, -ENOMEM or -EIO. */
int fb__sim_print_json(FILE *f, const fb__sim_report *rep);

void fb__sim_print_sweep_text(FILE *f, const fb__sim_config *c,
                              const fb__sim_point *pts, int n);
void fb__sim_print_sweep_csv(FILE *f, const fb__sim_point *pts, int n);
int fb__sim_print_sweep_json(FILE *f, const fb__sim_config *c,
                             const char *source, const fb__sim_point *pts,
                             int n);
/* Write the ETTR-versus-GPUs plot.  0 or -errno. */
int fb__sim_write_svg(const char *path, const fb__sim_config *c,
                      const char *source, const fb__sim_point *pts, int n);

#endif
