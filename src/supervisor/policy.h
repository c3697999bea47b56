/*
 * policy.h -- the supervisor's decisions as pure functions: what kind of
 * failure ended an attempt, which rank is to blame, whether to restart
 * (and after what back-off) or stop, and how often the next attempt's
 * standby shims are forked.
 *
 * Nothing here does I/O, reads a clock or touches global state: the I/O
 * loops (supervisor.c, watch.c) gather what they know into the small
 * structs below and act on the answer.  tests/supervisor/test_policy.c
 * tests every rule from a table of cases (docs/supervisor.md, "Where the
 * rules live").
 */
#ifndef FB_SUPERVISOR_POLICY_H
#define FB_SUPERVISOR_POLICY_H

#include <stdint.h>

#include "lib/segment.h"

/* ---- failure kinds ---- */

/* What ended an attempt (fb__sup_failure.kind), and the other incidents the
 * supervisor journals.  The names are the journal's and --json's
 * (docs/journal.md): never renamed. */
typedef enum {
    FB__SUP_FAIL_NONE = 0,
    FB__SUP_FAIL_HANG,             /* no heartbeat within the phase's limit */
    FB__SUP_FAIL_CRASH,            /* a fatal signal, or vanished           */
    FB__SUP_FAIL_ERROR_EXIT,       /* exited with a non-zero code           */
    FB__SUP_FAIL_LAUNCH_FAILURE,   /* cannot be started: never restarted    */
    FB__SUP_FAIL_SEGMENT_CORRUPT,  /* its segment failed fb__seg_check      */
    FB__SUP_FAIL_SEGMENT_NOT_OURS, /* a file under its name is not ours     */
    FB__SUP_FAIL_NODE_FAILURE,     /* slurm: a whole node lost (its watcher
                                      silent): docs/slurm.md                */
    /* incidents that do not end an attempt */
    FB__SUP_FAIL_SAVE_FAILED,      /* a rank could not save a checkpoint    */
    FB__SUP_FAIL_RESTORE_FALLBACK, /* a complete checkpoint was rejected    */
    FB__SUP_FAIL_SDC,              /* replicas disagree (sdc.c): ends the
                                      attempt                               */
    FB__SUP_FAIL_KIND_COUNT
} fb__sup_fail_kind;

/* "hang", "crash", ...; "none" for FB__SUP_FAIL_NONE, "unknown" out of
 * range. */
const char *fb__sup_fail_kind_name(fb__sup_fail_kind kind);

/* The real-time priority (SCHED_FIFO) the supervisor takes from the
 * detection of a failure of `kind` until the attempt's ranks are stopped,
 * given --supervisor-rt `rt` and whether the ranks run on the supervisor's
 * node (the local and mpirun launchers, not slurm): 0 for none.  Its work
 * then (the evidence, the stop's signals) competes with ranks still
 * training; a hang's is the ranks' dumps and their analysis, which the
 * supervisor waits for or computes at length: none (docs/supervisor.md,
 * "Priority"). */
int fb__sup_stop_rt_priority(int rt, int same_node, fb__sup_fail_kind kind);

/* Whether replicas found to disagree after step `sdc_step` are the cause
 * of an attempt that had already failed with `kind` at `fail_step` (-1:
 * unknown), and so its failure instead (kind `sdc`, docs/sdc.md).  A
 * corrupted replica surfaces in data-parallel ranks as an exit (their own
 * end check of the weights), a crash (a NaN, an index out of range) or a
 * hang (ranks on different paths); when the supervisor reads the hashes
 * only after such an end -- held back, or the end came quickly -- the
 * disagreement is still the earlier event when its step is not after the
 * failing rank's.  Other kinds (a launch that failed, a segment not ours,
 * a node lost, ...) stand. */
int fb__sup_sdc_supersedes(fb__sup_fail_kind kind, int64_t fail_step, int64_t sdc_step);

/* ---- how one rank ended ---- */

/* What the supervisor knows when a rank goes away. */
typedef struct fb__sup_rank_end {
    int wstatus_known;         /* local launcher: from the shim's waitpid   */
    int wstatus;
    int exec_errno;            /* the program could not be executed         */
    uint32_t end_kind;         /* its own end record (fb__end_kind), or
                                  FB__END_NONE when its segment is not read  */
    int end_code;
    fb__inject_kind injected;  /* a fault that fired in it, or NONE         */
} fb__sup_rank_end;

typedef enum {
    FB__SUP_END_OK = 0,        /* exit code 0 or fb_finalize(): no failure  */
    FB__SUP_END_LAUNCH,        /* exec failed                               */
    FB__SUP_END_SIGNAL,        /* a fatal signal (wait status or record)    */
    FB__SUP_END_EXIT,          /* a non-zero exit code                      */
    FB__SUP_END_INJECTED_KILL, /* no word, but it recorded an injected kill */
    FB__SUP_END_VANISHED       /* no word at all (SIGKILL or similar)       */
} fb__sup_end_how;

typedef struct fb__sup_end_verdict {
    fb__sup_end_how how;
    fb__sup_fail_kind kind;    /* NONE when how is OK                       */
    int signal;                /* 0: none known                             */
    int has_exit_code, exit_code;
    int launch_error;          /* a restart would fail the same way         */
} fb__sup_end_verdict;

/* The wait status when known (local), else the rank's own end record. */
void fb__sup_judge_end(const fb__sup_rank_end *e, fb__sup_end_verdict *v);

/* A rank's own end record says it died of a failure (a signal, or a
 * non-zero exit): what fb__sup_judge_end makes of it alone. */
int fb__sup_record_is_fatal(uint32_t end_kind, int end_code);

/* ---- which rank is to blame ---- */

/* Another rank, as seen when one vanished. */
typedef struct fb__sup_end_record {
    int ended;                 /* its end was already handled               */
    int readable;              /* its segment is attached and trusted       */
    uint32_t end_kind;         /* fb__end_kind                              */
    int end_code;
} fb__sup_end_record;

/* The first failure of an attempt decides, with one exception: a rank
 * that vanished without a word (under mpirun or srun typically the
 * launcher's teardown after another rank died) yields to a rank that has
 * recorded a fatal end but whose death has not been noticed yet.  Given
 * rank `self`'s verdict and every rank's record (recs[0..n)), returns the
 * rank to blame instead -- the lowest-numbered such rank -- or -1 to blame
 * `self`.  An injected kill is not "without a word": it is blamed on the
 * rank it was injected in. */
int fb__sup_blame_instead(const fb__sup_end_verdict *self_verdict, int self,
                          const fb__sup_end_record *recs, int n);

/* Under Slurm, the rank whose held end is released first, and so the
 * failure (slurm.c, end_held): srun's first-named task `named` (-1: srun
 * named none yet), unless another held end is a fault injected in its
 * rank (--inject kill: the SIGKILL the rank recorded, then sent itself)
 * and the named one is not.  srun prints the nodes' reports in the order
 * they reach it, which is mostly the order the tasks ended (docs/slurm.md:
 * a rank SIGKILLed unrecorded is rightly named before the peers whose
 * recorded aborts were heard first); once it named a task its own
 * teardown had killed on another node before the rank that killed itself.
 * An injected kill is the cause by construction: the earliest-heard one
 * is returned instead.  held_ns[r]: when rank r's end was heard (0: not
 * held); injected_kill[r]: that end is an injected kill. */
int fb__sup_held_first(int named, const uint64_t *held_ns,
                       const unsigned char *injected_kill, int n);

/* When a rank's failure occurred (CLOCK_MONOTONIC ns): when its end was
 * noticed (`noticed_ns`, or `detected_ns` when 0), or earlier: its own
 * record of its end when it has one, else the injected fault's time when
 * that was less than 5 s before.  A time later than noticed is not
 * believed.  end_ns and inject_ns are 0 when unknown. */
uint64_t fb__sup_end_time(uint64_t noticed_ns, uint64_t detected_ns,
                          uint32_t end_kind, uint64_t end_ns, uint64_t inject_ns);

/* ---- which rank a hang is blamed on ---- */

/* One rank as a watch pass read its segment (watch.c). */
typedef struct fb__sup_hang_rank {
    int readable;              /* its segment is attached and trusted       */
    int watched;               /* readable and its end not yet noticed: its
                                  silence counts                            */
    uint64_t last_beat_ns;     /* its heartbeat, CLOCK_MONOTONIC            */
    uint64_t limit_ns;         /* its phase's limit (--hang-timeout,
                                  --ckpt-timeout, --startup-timeout); 0:
                                  none                                      */
    uint32_t phase;            /* fb__phase                                 */
    int64_t step;              /* its last step, -1 none yet                */
    fb__inject_kind injected;  /* the fault its segment records as fired    */
} fb__sup_hang_rank;

/* What is known of a hang. */
typedef struct fb__sup_hang_facts {
    uint64_t now_ns;
    const fb__sup_hang_rank *ranks; /* ranks[0..world); NULL when declared */
    int world;
    int declared;              /* the rank the hang is already blamed on
                                  (an earlier call, --attach-timeout, a
                                  node watcher), or -1: decide from ranks   */
    /* The flight recorder's analysis of the hang, once it has run. */
    int fr_hang;               /* its verdict is "hang"                     */
    const int *fr_culprits;    /* the first of its culprits                 */
    int fr_nculprits;          /* how many it names in all                  */
    int fr_analyzed;           /* the flight recorder has had its say (it
                                  ran, or could not read anything)          */
    int declared_by_silence;   /* `declared` was chosen by rule 1 alone     */
} fb__sup_hang_facts;

typedef enum {
    FB__SUP_HANG_NONE = 0,     /* no rank silent past its limit: no hang    */
    FB__SUP_HANG_OLDEST_BEAT,  /* the rank silent the longest past its limit */
    FB__SUP_HANG_INJECTED,     /* the rank recorded a fired hang injection  */
    FB__SUP_HANG_DECLARED,     /* facts.declared, kept                      */
    FB__SUP_HANG_FR_CULPRIT,   /* the flight recorder's one culprit         */
    FB__SUP_HANG_UNDECIDED     /* a hang, but no rank can be blamed         */
} fb__sup_hang_basis;

typedef struct fb__sup_hang_blame {
    int rank;                  /* -1: no hang                               */
    fb__sup_hang_basis basis;
    int alone;                 /* OLDEST_BEAT: no other rank silent (each
                                  ended, or beat within a quarter of the
                                  rank's limit): rule 4 does not apply     */
    int fr_named;              /* the flight recorder found a hang and named
                                  its culprits: its summary belongs in the
                                  incident's detail                         */
} fb__sup_hang_blame;

/* Which rank a hang is blamed on.  Every rank of a collective job stalls
 * when one does, so the heartbeats are weak evidence, and later evidence
 * overrides it:
 *   1. no declared rank: a hang is a watched rank silent for longer than
 *      its phase's limit (now > last beat + limit); the one silent the
 *      longest, the lowest-numbered on a tie.  None: no hang (rank -1).
 *      `alone` when every other rank ended (its end noticed) or beat
 *      within a quarter of that rank's limit: the others went on (no
 *      collective held them, or they finished), so its silence is its
 *      own, not the wait every rank of a stalled collective shares (a
 *      rank without a readable segment says nothing: not alone; nor is
 *      the rank of a one-rank job, with no other to compare);
 *   2. then a readable rank whose segment records a fired hang injection
 *      (the lowest-numbered), ended or not, is direct evidence;
 *   3. then the flight recorder, when its verdict is a hang that names
 *      exactly one culprit, a rank of the job: that rank.  Several
 *      culprits leave the blame as it was;
 *   4. a hang blamed on silence alone (rule 1, in a job of more than one
 *      rank) that the flight recorder, once it has run, does not pin on
 *      exactly one rank is blamed on none: rank -1, basis UNDECIDED.
 *      The rank silent the longest is not the rank that stopped first (in
 *      a collective every rank waits), so it is reported only as that.
 * The watch pass calls it without the flight recorder's verdict, and the
 * analysis after the snapshots calls it again with `declared` the rank
 * the first call (or whoever declared the hang) chose. */
void fb__sup_blame_hang(const fb__sup_hang_facts *f, fb__sup_hang_blame *b);

/* A rank's last heartbeat as the supervisor (or a node's watcher) may
 * take it: `hb` itself, or for a beat from the future, the time `now` the
 * reader first saw that value (kept in *odd and *odd_seen_ns, zero at the
 * start).  Ranks and their readers share a host's CLOCK_MONOTONIC, so a
 * later time is a scribbled value: taken as it is, the rank was never
 * silent, and one that wrote it and stopped was never declared hung. */
uint64_t fb__sup_trusted_beat(uint64_t hb, uint64_t now, uint64_t *odd,
                              uint64_t *odd_seen_ns);

/* ---- restart or stop ---- */

typedef struct fb__sup_restart_limits {
    int max_restarts;          /* --max-restarts                            */
    int crash_loop;            /* --crash-loop; 0: never stop early         */
} fb__sup_restart_limits;

/* What the policy remembers between attempts.  Start with
 * fb__sup_history_init. */
typedef struct fb__sup_history {
    int restarts;              /* restarts so far                            */
    int64_t prev_fail_step;    /* the previous failure's step; -2: none     */
    fb__sup_fail_kind prev_fail_kind;
    int prev_fail_code;
    int same_in_a_row;         /* failures of this kind, code and step       */
    int no_progress;           /* failed attempts in a row without progress */
} fb__sup_history;

void fb__sup_history_init(fb__sup_history *h);

/* How an attempt ended, as the policy needs it. */
typedef struct fb__sup_attempt_end {
    int completed;             /* the program completed                      */
    int stop_signal;           /* a signal asked the run to stop, or 0      */
    fb__sup_fail_kind kind;    /* the failure that ended it                  */
    int code;                  /* its exit code, or 1000 + its signal; 0     */
    int64_t step;              /* where it failed, -1 unknown                */
    int launch_error;
    int64_t durable_before;    /* newest complete checkpoint at its launch   */
    int64_t durable_after;     /* ... and at its end (-1: none)              */
} fb__sup_attempt_end;

typedef enum {
    FB__SUP_DO_RESTART = 0,
    FB__SUP_DO_COMPLETED,      /* stop: the program completed               */
    FB__SUP_DO_INTERRUPTED,    /* stop: a signal                             */
    FB__SUP_DO_STOP_LAUNCH,    /* stop: a restart would fail the same way   */
    FB__SUP_DO_STOP_CRASH_LOOP,/* stop: the same failure (kind, exit code or
                                  signal) at the same step                    */
    FB__SUP_DO_STOP_MAX_RESTARTS
} fb__sup_action;

typedef struct fb__sup_decision {
    fb__sup_action action;
    double delay_s;            /* RESTART: back off this long first         */
    int same_in_a_row;         /* CRASH_LOOP: how many                      */
} fb__sup_decision;

/* Decide after an attempt, in this order: completed; stopped by a signal;
 * a launch failure is not restarted; the same failure kind at the same
 * step `crash_loop` attempts in a row is a crash loop; after
 * `max_restarts` restarts stop; else restart, at once when the attempt
 * made progress (failed later than the one before, or made a new complete
 * checkpoint), else after fb__sup_backoff_s.  Updates *h (a restart is
 * counted in h->restarts). */
void fb__sup_decide(const fb__sup_restart_limits *lim, fb__sup_history *h,
                    const fb__sup_attempt_end *a, fb__sup_decision *d);

/* The back-off after `no_progress` attempts in a row without progress:
 * 0, then 0.5 s, doubling, at most 30 s. */
double fb__sup_backoff_s(int no_progress);

/* Which spellings of PyTorch's flight-recorder variables a rank's torch
 * reads.  torch 2.7 renamed TORCH_NCCL_TRACE_BUFFER_SIZE and
 * TORCH_NCCL_DEBUG_INFO_TEMP_FILE to TORCH_FR_BUFFER_SIZE and
 * TORCH_FR_DUMP_TEMP_FILE, and warns "... is deprecated" for each old name
 * set.  A bit mask of these: */
enum {
    FB__SUP_TORCH_FR_OLD = 1,  /* TORCH_NCCL_TRACE_BUFFER_SIZE, ..._TEMP_FILE */
    FB__SUP_TORCH_FR_NEW = 2   /* TORCH_FR_BUFFER_SIZE, TORCH_FR_DUMP_TEMP_FILE */
};

/* The names to set for torch `version` (torch.__version__: "2.7.0",
 * "2.10.0a0+git1234", "1.13.1+cpu"): the new ones from 2.7 on, the old
 * ones before.  NULL or a string that does not start MAJOR.MINOR (not a
 * Python program, no torch, the probe timed out): both, as the safe side
 * (a deprecation warning, not a missing dump). */
int fb__sup_torch_fr_names(const char *version);

/* ---- the standby's schedule (launch.c, docs/supervisor.md "At scale") ----
 *
 * How much of the supervisor's time forking the next attempt's standby
 * shims takes, pass by pass of its loop:
 *   - while the ranks start (FB__SUP_STANDBY_STARTING): at most
 *     FB__SUP_STANDBY_TICK_NS_STARTING a pass, and a pass waits as long as
 *     it took before the next (at most half the loop's time, however slow
 *     a fork is: the loop still reads the ranks' reports and events);
 *   - for FB__SUP_STANDBY_BURST_NS once every rank has stepped
 *     (FB__SUP_STANDBY_BURST): at most FB__SUP_STANDBY_TICK_NS_BURST a pass
 *     and 1/FB__SUP_STANDBY_DUTY_INV_BURST of the supervisor's CPU (10%),
 *     so that a failure in the first second of training finds most ranks
 *     standing by (issue 14: at 1/200 from the start, 2 of 16 and 3 of 64
 *     ranks were, 0.6 s into training);
 *   - then (FB__SUP_STANDBY_TRAINING) at most
 *     FB__SUP_STANDBY_TICK_NS_TRAINING a pass, a pass every
 *     FB__SUP_STANDBY_PERIOD_NS at most, never closer than the pass's own
 *     wall time, and 1/FB__SUP_STANDBY_DUTY_INV of the supervisor's CPU
 *     (0.5% of a core): a fork of the supervisor costs more the more
 *     ranks it watches (several ms at 1,024), so at that size the standby
 *     takes minutes to complete; a failure before then forks what it lacks.
 * Both shares are of the supervisor's CPU time in the pass (its thread's
 * clock): on a loaded machine a fork's wall time is mostly waiting for a
 * CPU (issue 14: at 256 ranks, 9 forks ahead took 1.8 s of wall time and
 * 6 ms of CPU; at 1/200 of the wall time, one 200 ms fork bought a 40 s
 * wait).  What the pass's clock leaves out, the copy-on-write faults the
 * supervisor takes in the rounds after it, cannot be told apart from the
 * loop's own work there (at 256 ranks checkpointing every 100 ms a round
 * took 100-450 ms of CPU, a pass 1-2 ms); the supervisor's whole CPU at
 * 1,024 ranks, faults included, is what bench_supervisor_scale holds to
 * its target.  The child's side (its faults, its rank's exec ahead) is the
 * next attempt's start, paid once per rank with or without a standby.
 * The loop wakes for a pass only while the ranks start and in
 * the burst (fb__sup_standby_due_ms). */
#define FB__SUP_STANDBY_TICK_NS_STARTING 20000000ull
#define FB__SUP_STANDBY_TICK_NS_BURST 5000000ull
#define FB__SUP_STANDBY_TICK_NS_TRAINING 2000000ull
#define FB__SUP_STANDBY_BURST_NS 1000000000ull
#define FB__SUP_STANDBY_PERIOD_NS 250000000ull
#define FB__SUP_STANDBY_DUTY_INV_BURST 10ull
#define FB__SUP_STANDBY_DUTY_INV 200ull

enum {
    FB__SUP_STANDBY_STARTING = 0,
    FB__SUP_STANDBY_BURST = 1,
    FB__SUP_STANDBY_TRAINING = 2
};

/* The phase at `now_ns` of an attempt whose every rank first stepped at
 * `ready_ns` (0: not yet). */
int fb__sup_standby_phase(uint64_t ready_ns, uint64_t now_ns);

/* How long one pass of `phase` may fork for. */
uint64_t fb__sup_standby_budget_ns(int phase);

/* How long after a pass of `wall_ns`, `cpu_ns` of them the supervisor's
 * own, the next pass of `phase` may come. */
uint64_t fb__sup_standby_wait_ns(int phase, uint64_t wall_ns, uint64_t cpu_ns);

/* ---- slurm: a rank that vanished on another node ---- */

/* A rank's end its node watcher reports without a record (SIGKILLed: no
 * exit code, no signal written) may be the rank's own crash or the first
 * sign of its node's death, when the watcher saw the rank go before it
 * was killed itself.  What the supervisor knows of it (slurm.c). */
typedef struct fb__sup_vanished_facts {
    int alive_after;          /* the node's watcher said `alive` after the
                                 end (it never does within 0.5 s of one:
                                 watcher.c): the node outlived the rank    */
    int watchers_gone;        /* the watchers' step has ended and all its
                                 lines were read: nothing more can come    */
    uint64_t last_heard_ns;   /* the node's watcher's last line            */
    uint64_t now_ns;
    double node_timeout_s;    /* --node-timeout; <= 0: no node is lost     */
} fb__sup_vanished_facts;

typedef enum {
    FB__SUP_VANISHED_WAIT = 0,  /* hold the end (and the attempt's others) */
    FB__SUP_VANISHED_RANK,      /* the node lives: the rank's own end      */
    FB__SUP_VANISHED_NODE_LOST  /* the node went silent with it: lost      */
} fb__sup_vanished_verdict;

/* The node proved alive: the rank's end.  Else the node is lost once its
 * watcher has been silent for --node-timeout, or at once when the
 * watchers are gone without its `alive` (a live node's watcher sends one
 * even when stopped); until then, wait.  Without a node timeout, the
 * rank's end, as before node losses were told. */
fb__sup_vanished_verdict fb__sup_judge_vanished(const fb__sup_vanished_facts *f);

/* ---- the launch's own mpirun options ---- */

/* Is ARG (one --mpirun-arg word) an mpirun option that firebreak sets
 * itself, so that the user's would silently take its place?  The reason,
 * said after the option's name, or NULL.  The rank count (-np and its
 * spellings: mpirun starts that many while the supervisor waits for
 * --nproc-per-node's), the ranks' output directory (where the supervisor
 * reads each rank's output and tells "mpirun started none"), the host
 * list (under Slurm the allocation's nodes, less any drained; without,
 * this node: the supervisor watches the ranks in its /dev/shm), and under
 * Slurm the mapping.  Open MPI 4's spellings: `--np=N` is not one of
 * them. */
const char *fb__sup_mpirun_arg_owned(const char *arg, int slurm);

#endif
