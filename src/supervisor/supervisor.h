/*
 * supervisor.h -- `firebreak run`: launch a job's ranks, watch them, decide,
 * restart.  The supervisor is the only writer of the run's journal.
 *
 * One call, fb__sup_run(), runs a whole job (every attempt) and fills a
 * result; the CLI and `firebreak demo` both call it.
 */
#ifndef FB_SUPERVISOR_SUPERVISOR_H
#define FB_SUPERVISOR_SUPERVISOR_H

#include <limits.h>
#include <stdint.h>

struct fb__sup_result;

typedef enum {
    FB__LAUNCH_LOCAL = 0, /* ranks as child processes, torchrun's env      */
    FB__LAUNCH_MPIRUN = 1,/* through mpirun (Open MPI)                      */
    FB__LAUNCH_SLURM = 2  /* srun inside an allocation (docs/slurm.md)      */
} fb__launcher;

/* --on-no-nodes: what the slurm launcher does when too few healthy nodes
 * remain (docs/slurm.md). */
typedef enum {
    FB_ON_NO_NODES_STOP = 0,   /* stop the run                              */
    FB_ON_NO_NODES_REQUEUE,    /* ask Slurm to requeue the job              */
    FB_ON_NO_NODES_COUNT_
} fb__on_no_nodes;

/* --on-straggler: what the supervisor does about a rank that keeps
 * arriving late at the job's collectives (lateness.c, docs/supervisor.md). */
typedef enum {
    FB_ON_STRAGGLER_WARN = 0,  /* incident, warning, metrics; no restart    */
    FB_ON_STRAGGLER_OFF,       /* no live lateness analysis                  */
    FB_ON_STRAGGLER_COUNT_
} fb__on_straggler;

/* The failure domain of node in spec (NODE=DOMAIN,...: --peer-domains or
 * FIREBREAK_CKPT_PEER_DOMAINS) into buf, "" when not named.  0, -EINVAL
 * (an entry without NODE= or a DOMAIN, or a domain over size - 1 bytes),
 * -E2BIG (over 64 KiB).  With node "" it only checks spec. */
int fb__peer_domain_of(const char *spec, const char *node, char *buf, size_t size);

const char *fb__sup_on_straggler_name(fb__on_straggler v);
int fb__sup_on_straggler_from_name(const char *name);

/* The options' names ("local", "mpirun", "slurm"; "stop", "requeue"):
 * the one table each, for parsing and for output.  A name of a value out
 * of range is "unknown"; the value of an unknown name is -1. */
const char *fb__sup_launcher_name(fb__launcher l);
int fb__sup_launcher_from_name(const char *name);
const char *fb__sup_on_no_nodes_name(fb__on_no_nodes v);
int fb__sup_on_no_nodes_from_name(const char *name);

typedef struct fb__sup_options {
    char *const *argv;        /* the program and its arguments            */
    int nproc_per_node;       /* ranks on this node (local, mpirun)        */
    int nnodes;               /* slurm: nodes to use (0: allocation)       */
    fb__launcher launcher;
    const char *master_addr;  /* MASTER_ADDR (local, mpirun); NULL:
                                 127.0.0.1 (slurm: the first node's)      */
    int master_port;          /* MASTER_PORT of every attempt; 0: a free
                                 port, new for each (launch.c decides)    */
    int max_restarts;
    double hang_timeout_s;    /* train phase                               */
    double startup_timeout_s; /* init and restore phases                   */
    double ckpt_timeout_s;    /* checkpoint phase                          */
    double attach_timeout_s;  /* 0: ranks that never attach are only
                                 watched for exits                         */
    double exit_timeout_s;    /* phase done (after fb_finalize) until the
                                 process is gone; 0: no limit              */
    double grace_s;           /* SIGTERM -> SIGKILL                         */
    int crash_loop;           /* consecutive failures at the same step     */
    int sup_nice;             /* nice steps above the ranks (0: none)      */
    int sup_rt;               /* SCHED_FIFO priority from a failure's
                                 detection to its ranks' stop (0: none)    */
    const char *run_dir;      /* NULL: <run_root>/<name>-<timestamp>        */
    const char *run_root;     /* default "runs"                              */
    const char *name;         /* NULL: the program's base name               */
    const char *inject;       /* fault spec (docs/inject.md), or NULL        */
    const char *ckpt_dir;     /* NULL: <run_dir>/checkpoints                 */
    const char *shared_group; /* NULL: private (0700/0600); else a group that
                                 may read the run (02750/0640)               */
    int preload_fr;           /* mpirun: preload libfirebreak-mpi.so        */
    int no_python_hooks;      /* do not put firebreak's hooks on the ranks'
                                 PYTHONPATH (docs/pytorch.md)               */
    int no_warm_pool;         /* restarts start fresh interpreters
                                 (docs/supervisor.md, "Warm pool")          */
    const char *mpirun;       /* mpirun binary, NULL: "mpirun"              */
    char *const *mpirun_args; /* extra arguments for mpirun                  */
    int quiet;                /* no progress output                          */
    int fr_capacity;          /* 0: default                                  */
    /* Node-memory checkpoints (docs/checkpoint.md, "Tiers"): on when
     * persist_every >= 0 or memory_ckpt_max > 0. */
    int persist_every;        /* every M-th save also to storage; -1: no
                                 memory tier (1 when only the cap is given) */
    uint64_t memory_ckpt_max; /* the node's cap in bytes; 0: none          */
    const char *peer_domains; /* slurm: NODE=DOMAIN,... (the peer tier's
                                 failure domains); NULL: the variable
                                 FIREBREAK_CKPT_PEER_DOMAINS, else none     */
    const char *peer_copies;  /* slurm: --peer-copies K as given; NULL: the
                                 variable FIREBREAK_CKPT_PEER_COPIES, else 1 */
    const char *console_ranks;/* local: ranks whose output is also shown on
                                 stderr, "[rankR]: " first ("all", "0,2-3");
                                 NULL or "none": logs only                    */
    /* slurm */
    int spare_nodes;
    double node_timeout_s;    /* a node's watcher silent this long: lost    */
    int drain;
    int health_check;         /* health check nodes before launch           */
    /* diagnosis after a failure (diagnose.c; local and mpirun launchers) */
    const char *kmsg_path;    /* kernel log; NULL: /dev/kmsg; "none": off    */
    int incident_health;      /* run the health check after a failure       */
    const char *health_root;  /* its --root (a fixture tree), or NULL       */
    fb__on_no_nodes on_no_nodes;
    fb__on_straggler on_straggler;
    /* Called after the journal is closed, before the summary is printed,
     * to replace the live estimates (useful_s, ettr, incidents' lost_s) by
     * the exact accounting of the journal (the report's).  May be NULL. */
    void (*account)(struct fb__sup_result *res);
} fb__sup_options;

void fb__sup_options_init(fb__sup_options *o);

/* A --console-ranks value: "all", "none", or ranks and ranges ("0,2-3").
 * fb__sup_rank_in_spec: 1 when rank is in it, 0 when not, -1 when the
 * value is not one. */
int fb__sup_rank_in_spec(const char *spec, int rank);
int fb__sup_rank_spec_valid(const char *spec);

#define FB__SUP_MAX_INCIDENTS 64

typedef struct fb__sup_incident {
    char kind[24];            /* crash, hang, error_exit, ...                */
    int rank;                 /* -1 unknown                                   */
    int64_t step;             /* -1 unknown                                   */
    int attempt;
    double detect_ms, lost_s;
    int signal, exit_code;
    char detail[640];
    /* The root cause, as the report decides it (filled by the account
     * hook from the journal; "" when not known) */
    char category[48], component[48], decided_by[24];
    char injected[128];       /* the injected fault, "" none                 */
} fb__sup_incident;

typedef struct fb__sup_result {
    int completed;            /* the program completed                       */
    int exit_code;            /* what `firebreak run` exits with             */
    int restarts;
    int attempts;
    double wall_s, useful_s, ettr;
    int ettr_known;           /* 0 when no rank ever attached          */
    int64_t last_step;
    int64_t checkpoint_step;  /* newest complete checkpoint, -1 none: what a
                               * run with the same --run-dir resumes from */
    char run_dir[PATH_MAX];
    char reason[512];
    int nincidents;
    fb__sup_incident incidents[FB__SUP_MAX_INCIDENTS];
    /* The journal lost writes (exit status 3): how many, and why. */
    int journal_incomplete;
    uint64_t journal_dropped_rows, journal_dropped_samples;
    char journal_error[256];
} fb__sup_result;

/* Exit status when the run's journal could not be written completely. */
#define FB__SUP_EXIT_JOURNAL 3

/* Run the job to the end.  Returns 0 when the run could be carried out
 * (whether or not the program completed: see res->completed and
 * res->exit_code), or a negative code for a setup error, with a message
 * already printed. */
int fb__sup_run(const fb__sup_options *o, fb__sup_result *res);

/* Path of libfirebreak-mpi.so next to the running binary, or NULL. */
const char *fb__sup_fr_preload_path(void);

#endif
