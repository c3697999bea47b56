/*
 * sup.h -- the supervisor's internal state, shared by its files:
 * supervisor.c (attempt loop, decisions), launch.c (building rank
 * environments and starting units), watch.c (reading segments: progress,
 * reports, hangs), status.c (console output), policy.c (the decisions,
 * as pure functions: failure kinds, blame, restart or stop).
 */
#ifndef FB_SUPERVISOR_SUP_H
#define FB_SUPERVISOR_SUP_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "ckpt/tier.h"
#include "journal/journal.h"
#include "lib/lib.h"
#include "lib/segment.h"
#include "supervisor/errorfile.h"
#include "supervisor/policy.h"
#include "supervisor/proc.h"
#include "supervisor/sdc.h"
#include "supervisor/supervisor.h"

/* A rank's output on its way to its log and the console (tee.c). */
#define FB__SUP_TEE_LINE 2048
typedef struct fb__sup_tee {
    int fd;               /* the pipe's read end (non-blocking); -1 at EOF */
    int log_fd;           /* logs/rank-<R>.log                              */
    int rank;
    int cutting;          /* inside a line longer than the buffer          */
    int log_failed;       /* said once                                      */
    size_t len;
    char line[FB__SUP_TEE_LINE];
} fb__sup_tee;

/* A process the supervisor started (through a shim): one rank (local) or
 * the whole job's mpirun. */
typedef struct fb__sup_unit {
    pid_t shim;
    int msg_fd;
    pid_t child;          /* rank or mpirun, once the shim said so        */
    int rank;             /* local: its rank; mpirun: -1                   */
    int ended;
    int wstatus, exec_errno;
    uint64_t end_ns;
    fb__sup_tee *tee;     /* --console-ranks chose this rank; else NULL   */
} fb__sup_unit;

typedef struct fb__sup_rank {
    fb__seg *seg;         /* NULL until the rank created its segment       */
    pid_t pid;
    int pidfd;            /* mpirun: watch a process that is not our child */
    int ended;
    uint64_t report_idx;
    uint64_t reports_lost; /* overwritten in its ring before we read them */
    uint64_t last_sample_ns;
    uint64_t last_sample_step;
    char injected[128];   /* an injected fault that fired in this rank     */
    fb__inject_kind injected_kind; /* ... its kind (NONE: none)            */
    uint64_t inject_ns;
    char log_path[PATH_MAX];
    uint64_t remote_ready_ns; /* first step seen by the node's watcher    */
    int seg_refused;      /* a file under its name is not ours: logged     */
    int seg_corrupt;      /* its segment failed fb__seg_check: no longer
                             read (watch.c, docs/segment.md)               */
    uint64_t seg_ok_ns;   /* when its segment last passed fb__seg_check    */
    int ckpt_code;        /* its last failed save's code (-errno), 0 none  */
    uint64_t odd_beat, odd_beat_seen_ns; /* fb__sup_trusted_beat's        */
    char where[160];      /* where its Python main thread was when asked
                             for a dump (a NOTE_WHERE report), "" unknown  */
} fb__sup_rank;

typedef struct fb__sup_ckpt {
    int64_t step;
    int ranks;
    int complete; /* every rank's shard, or one rank's whole state */
    int64_t bytes;
    double stall_ms, persist_ms;
} fb__sup_ckpt;

/* Steps whose commits are counted at once (watch.c, ckpt_track): ranks that
 * do not wait for each other (or one slowed far behind) spread a step's
 * commits over many later steps of the others. */
#define SUP_MAX_CKPT_TRACK 1024

/* The failure that ends an attempt. */
typedef struct fb__sup_failure {
    int set;
    fb__sup_fail_kind kind;
    int rank;
    int signal;
    int has_exit_code, exit_code;
    int64_t step;
    char phase[16];
    uint64_t occurred_ns, detected_ns;   /* CLOCK_MONOTONIC */
    char detail[512];
    char injected[128];
    int launch_error;                    /* cannot be fixed by a restart */
    int by_silence;                      /* a hang blamed on the rank silent
                                            the longest: nothing so far tells
                                            which rank stopped first */
} fb__sup_failure;

/* The marks of a relaunch (fb__sup.relaunch.at), in their order. */
enum {
    FB__RL_DETECTED, FB__RL_EARLIER, FB__RL_EVIDENCE, FB__RL_STOPPED, FB__RL_SWEPT, FB__RL_CLOSED,
    FB__RL_STARTED, FB__RL_CHECKED, FB__RL_FORKED, FB__RL_EXECS, FB__RL_MARKS
};

typedef struct fb__sup {
    const fb__sup_options *o;
    fb__sup_result *res;
    char run_dir[PATH_MAX];
    int made_run_dir;                    /* this run created it (2: its
                                            --run-root too): a setup that
                                            fails removes them again     */
    char ckpt_dir[PATH_MAX];
    char logs_dir[PATH_MAX];
    /* The local ranks' program as found on PATH, when it is an ELF file
     * (check_inputs): exec'd without execvp's /bin/sh fallback, so that a
     * corrupt or foreign binary fails its exec ("Exec format error"), not
     * under a shell reading it as a script.  "" otherwise. */
    char elf_path[PATH_MAX];
    char job_id[49];
    char name[64];
    char hostname[64];
    fb__journal *j;
    int sigfd;
    int world;
    int attempt;
    int64_t attempt_id;
    uint64_t run_start_ns;
    uint64_t attempt_start_ns;
    uint64_t attempt_ready_ns;           /* 0 until every attached rank stepped */
    uint64_t work_over_ns;               /* when a watch pass first found no
                                            rank working (each one ended or
                                            in phase done); 0 while one is
                                            (--exit-timeout counts from it) */
    /* Where a relaunch's time goes (said at the launch after a failure):
     * the monotonic time at the end of each part, from the detection
     * (fail.detected_ns) to the last new rank's exec; 0 not reached. */
    struct {
        uint64_t at[FB__RL_MARKS];
        int standing;                    /* the launch's shims forked ahead */
        uint64_t warm_ns;                /* of the forks part: waiting for the
                                          * warm pool's imports (warm.c); a
                                          * sum, not a mark: the waits come
                                          * rank by rank among the forks */
        int rt;                          /* the stop's real-time priority, 0 */
    } relaunch;
    /* The real-time priority the main thread holds from a failure's
     * detection until its ranks are stopped (policy.h,
     * fb__sup_stop_rt_priority); 0 none.  rt_refused: the kernel said no
     * once, and the log said why. */
    int rt_prio;
    int rt_refused;
    /* stop_all ran: under slurm, the stopped ranks' segments on other
     * hosts were left (srun SIGKILLs the watchers with their step), for
     * fb__sup_slurm_sweep at the run's end. */
    int stopped_any;
    int master_port;
    /* torch's version as the program's interpreter reports it (launch.c,
     * probed once per run); "" unknown */
    char torch_version[64];
    int torch_probed;

    fb__sup_unit *units;
    int nunits;
    fb__sup_rank *ranks;
    fb__sup_hang_rank *hang_facts;       /* per rank, as the last watch
                                            pass read it (watch.c)         */

    fb__inject_plan plan;                /* supervisor-side faults (after=) */
    int plan_fired[FB__INJECT_MAX];

    fb__sup_ckpt ckpts[SUP_MAX_CKPT_TRACK];
    int nckpts;
    int64_t durable_step;                /* newest complete checkpoint, -1 */
    uint64_t durable_ns;                 /* when it became complete         */
    int64_t restored_step;               /* this attempt, -1 fresh          */
    int64_t attempt_newest;              /* newest checkpoint this attempt
                                            restored or completed, -1      */
    int older_said;                      /* this attempt warned of a
                                            checkpoint older than that     */
    double restore_s;

    fb__sup_failure fail;
    int64_t fail_incident_id;            /* the failure's journal row, 0    */
    int stop_signal;                     /* SIGINT/SIGTERM received         */
    int stop_again;                      /* another one since: no more grace */
    int64_t max_step;                    /* this attempt, over ranks        */
    double useful_s;                     /* all attempts so far             */
    int any_attached;                    /* some rank attached, ever        */
    int remote_only;                     /* test hook: never map segments
                                            (FIREBREAK_SLURM_REMOTE_ONLY)   */
    uint64_t last_status_ns;
    int status_on_tty;
    uint64_t tee_dropped;                /* console lines lost, not yet said */
    uint64_t tee_dropped_total;
    /* launcher slurm (slurm.c) */
    struct fb__sup_slurm *slurm;         /* NULL for other launchers        */
    char launch_detail[256];             /* why a launch failed, or ""      */
    /* segment snapshots taken at a failure, written once the next attempt
     * is launched (supervisor.c, snapshot_segments) */
    struct fb__sup_snap *snaps;
    int nsnaps;
    /* rundir.c: ownership and access */
    int lock_fd[2];                      /* run dir, checkpoint dir; -1     */
    int shared;                          /* --shared-group given            */
    gid_t shared_gid;
    mode_t user_umask;                   /* restored when the run ends      */
    int umask_set;
    char mem_dir[PATH_MAX];              /* node-memory tier; "": none (tiers.c) */
    char mem_kept[PATH_MAX];             /* the tier kept at the end: its copy
                                          * to storage failed (tiers.c) */
    /* the journal's health, as last reported (supervisor.c) */
    int journal_failing;
    uint64_t journal_dropped_seen;
    uint64_t journal_tick_ns;
    /* lateness.c: the live straggler check, per attempt */
    struct fb__fr_late *late;            /* NULL until the first pass       */
    uint64_t late_pass_ns, late_event_ns, late_prom_ns;
    uint8_t *late_warned;                /* per rank: incident written      */
    int late_off;                        /* could not start: said once      */
    /* silent-data-corruption comparison (sdc.c); NULL until first used */
    struct fb__sup_sdc *sdc;
    /* warm.c: interpreters started ahead for the next attempt */
    struct fb__sup_warm *warm;           /* NULL: none now                  */
    int warm_said, warm_failed;
    /* launch.c: the next attempt's shims, forked ahead */
    struct fb__sup_standby *standby;     /* NULL: none now                  */
    struct fb__sup_diag *diag;           /* the diagnoses whose health checks
                                            run, oldest first (diagnose.c);
                                            NULL: none                      */
    int standby_said, standby_failed;
} fb__sup;

/* fb__sup_unit.rank of the slurm launcher's watcher step. */
#define FB__SUP_UNIT_WATCHERS (-2)

/* CLOCK_MONOTONIC ns -> Unix seconds. */
double fb__sup_mono_to_wall(uint64_t mono_ns);

/* launch.c */
int fb__sup_launch(fb__sup *s);
/* Standby shims (docs/supervisor.md, "At scale"): fork a few more of the
 * next attempt's (tick, once per pass of the watch loop); the shims to
 * spare from sweeps (keep); a reaped one (reaped: 1 when it was one);
 * once the launch that took them is recorded (after_launch); kill them
 * all (close). */
void fb__sup_standby_tick(fb__sup *s);
/* ms until the next pass of standby forks is due (0: now), -1 when none
 * is or the watch pass's wake-ups serve: the loop wakes for it. */
int fb__sup_standby_due_ms(const fb__sup *s);
void fb__sup_standby_after_launch(fb__sup *s);
int fb__sup_standby_keep(const fb__sup *s, pid_t *keep, int max);
/* The shims standing by for this attempt's launch (what it will adopt). */
int fb__sup_standby_count(const fb__sup *s);
int fb__sup_standby_reaped(fb__sup *s, pid_t pid);
void fb__sup_standby_close(fb__sup *s);
/* warm.c (docs/supervisor.md, "Warm pool"): start the pool once the
 * attempt stepped (tick); hand rank's slot its argv, environment and
 * output (take: 0, or a normal launch); the shims to spare from sweeps
 * (keep); a reaped shim of the pool (reaped: 1 when it was one); close. */
#define FB__SUP_MAX_WARM 1024 /* ranks; a larger node gets no pool */
int fb__sup_warm_enabled(const fb__sup *s);
void fb__sup_warm_tick(fb__sup *s);
int fb__sup_warm_take(fb__sup *s, int rank, char *const *envp, int out_fd,
                      fb__sup_unit *u);
void fb__sup_warm_after_launch(fb__sup *s);
int fb__sup_warm_keep(const fb__sup *s, pid_t *keep, int max);
int fb__sup_warm_reaped(fb__sup *s, pid_t pid);
void fb__sup_warm_close(fb__sup *s);
/* --console-ranks (tee.c): a pipe for rank's output (its write end for
 * the rank, *write_fd; the caller closes it once the rank is started);
 * read what is there (up to max_bytes); drain, close and free. */
int fb__sup_tee_open(int rank, int log_fd, fb__sup_tee **out, int *write_fd);
int fb__sup_tee_read(fb__sup *s, fb__sup_tee *t, size_t max_bytes);
void fb__sup_tee_poll_read(fb__sup *s, fb__sup_tee *t);
void fb__sup_tee_close(fb__sup *s, fb__sup_tee *t);
/* The console side as pure functions over bytes (fuzz/sup_tee.c): split
 * a rank's output into lines, calling fn for each (a line longer than
 * FB__SUP_TEE_LINE once, its first FB__SUP_TEE_LINE bytes, cut = 1; the
 * rest of it is skipped); end: the unterminated last line, if any. */
typedef void fb__sup_tee_line_fn(void *ctx, const char *line, size_t len, int cut);
void fb__sup_tee_split(fb__sup_tee *t, const char *buf, size_t n, fb__sup_tee_line_fn *fn,
                       void *ctx);
void fb__sup_tee_end(fb__sup_tee *t, fb__sup_tee_line_fn *fn, void *ctx);
/* One console line in out: head (the status line's erase, a note; the
 * supervisor's own), "[rank<R>]: ", the line (len <= FB__SUP_TEE_LINE
 * bytes) made safe for the terminal (fb__safe_text, a NUL as '?'), the cut
 * marker when cut, and one "\n".  Its length (< size), 0 when head does
 * not leave room. */
#define FB__SUP_TEE_OUT 4096
size_t fb__sup_tee_format(char *out, size_t size, const char *head, int rank,
                          const char *line, size_t len, int cut);

/* TORCHELASTIC_ERROR_FILE: rank's path in this attempt (errorfile.c;
 * reading one: errorfile.h). */
int fb__sup_error_file_path(const fb__sup *s, int rank, char *buf, size_t size);
/* Run argv (stdin /dev/null), capture up to size-1 bytes of its stdout;
 * stderr to err_fd (-1: inherit).  Returns the exit status (0..255),
 * 128+signal, or -errno (-ETIMEDOUT: killed after timeout_ms). slurm.c */
int fb__sup_run_capture(char *const argv[], char *out, size_t size, int err_fd,
                        int timeout_ms);
/* The same child started, not waited for: its pid and the read end of
 * its stdout (close-on-exec); the caller reads, reaps and closes. */
int fb__sup_spawn_capture(char *const argv[], int err_fd, pid_t *pid, int *out_fd);
/* The directory for Open MPI's shared-memory files of this job. */
int fb__sup_mpi_shm_dir(const fb__sup *s, char *buf, size_t size);
/* 1 when that directory is one this process may use and remove: a
 * directory (not a symlink) of our uid that nobody else can write.
 * /dev/shm is everyone's: another user can make the name first (the job
 * id is in every segment's name) and swap what is inside. */
int fb__sup_mpi_shm_dir_ours(const char *dir);

/* watch.c: act on rank `rank`'s report number `idx`, read from its
 * segment or forwarded by its node's watcher; each index counts once, and
 * those skipped since the last (the watcher lost them) count as lost. */
void fb__sup_deliver_report(fb__sup *s, int rank, uint64_t idx,
                            const fb__seg_report *rep);
/* watch.c: map rank r's segment if it exists by now. */
void fb__sup_try_attach(fb__sup *s, int r);
/* watch.c: at an attempt's end, say how many of each rank's reports were
 * overwritten in its segment before a pass read them (a `reports_lost`
 * event per such rank, one line in the log); nothing when none. */
void fb__sup_reports_lost_say(fb__sup *s);
/* watch.c: one pass over every rank's segment. */
void fb__sup_watch(fb__sup *s, uint64_t now);
/* How often the watch pass runs (ms) when no event wakes the loop: 50
 * until every rank has taken a step (attaching), under the slurm launcher
 * (node watchers' heartbeats), and while a supervisor-side injection
 * (after=) is planned; then the smallest phase limit over 40
 * (hang detection within 2.5% of the limit), at least 50, at most 250. */
int fb__sup_watch_period_ms(const fb__sup *s);
/* A rank went away (mpirun: pidfd; local: through its shim). */
void fb__sup_rank_ended(fb__sup *s, int rank, int wstatus_known, int wstatus,
                        int exec_errno, uint64_t when_ns);
/* diagnose.c: after a failure (ranks stopped), the node's health, the
 * kernel log and the root cause, stored with the incident
 * s->fail_incident_id.  fb__sup_classify_row: the root cause of an incident
 * about to be written, from what it carries (buf holds its evidence). */
void fb__sup_diagnose(fb__sup *s, const char *fr_verdict);
/* The same, the health check not waited for: its child is started and
 * the evidence of the failure copied (the next attempt reuses s->fail and
 * s->ranks); fb__sup_diagnose_poll finishes it once the child has
 * answered (wait: until it has, at most its timeout), from the loop and
 * after the next launch, so that the check runs beside the relaunch
 * instead of before it.  Several may run at once: a failure does not
 * wait for the checks of those before it (up to 4 at once).
 * fb__sup_diagnose_reaped: pid was a check's child (the loop's waitpid
 * reaped it): 1. */
void fb__sup_diagnose_start(fb__sup *s, const char *fr_verdict);
void fb__sup_diagnose_poll(fb__sup *s, int wait);
int fb__sup_diagnose_reaped(fb__sup *s, pid_t pid, int wstatus);
/* The checks' children still running, kept from a sweep (max at most). */
#define FB__SUP_DIAG_KEEP_MAX 4
int fb__sup_diagnose_keep(const fb__sup *s, pid_t *keep, int max);
void fb__sup_classify_row(fb__journal_incident *inc, int ckpt_code, char *buf,
                          size_t size);
/* Read the tail of a rank's output for an incident. */
void fb__sup_last_lines(const fb__sup *s, int rank, char *buf, size_t size);
const char *fb__sup_phase_name(uint32_t phase);
/* A step in words, in buf (32 bytes are enough): "at step N", or "before
 * its first step" when step < 0 (none taken); with last, "last step N" or
 * "no step taken". */
const char *fb__sup_step_words(char *buf, size_t size, int64_t step, int last);

/* launch.c, for other launchers: the environment every rank gets
 * (NULL-terminated, NULL when out of memory); free with fb__sup_env_free. */
char **fb__sup_env_common(fb__sup *s);
void fb__sup_env_free(char **env);

/* slurm.c (docs/slurm.md) */
int fb__sup_slurm_init(fb__sup *s);          /* sets s->world; prints errors   */
int fb__sup_launch_slurm(fb__sup *s);
int fb__sup_slurm_fd(const fb__sup *s);      /* watchers' stdout to poll, -1   */
/* The node (Slurm name) of rank's place in this attempt, or NULL. */
const char *fb__sup_slurm_node_of_rank(const fb__sup *s, int rank);
/* 1 when rank's node watcher last said it is in phase done. */
int fb__sup_slurm_rank_done(const fb__sup *s, int rank);
void fb__sup_slurm_read(fb__sup *s);
void fb__sup_slurm_tick(fb__sup *s, uint64_t now);
/* The ranks' step ended: 1 when its status is not yet the failure, as a
 * rank of it vanished on a node not yet known to live (the tick decides,
 * then calls fb__sup_step_failure). */
int fb__sup_slurm_defer_step_end(fb__sup *s);
/* The ranks' step's (mpirun's, srun's) own status as the failure, when
 * it is one and none is set (supervisor.c). */
void fb__sup_step_failure(fb__sup *s, const fb__sup_unit *u);
void fb__sup_slurm_on_failure(fb__sup *s);   /* blame a node, before recording */
void fb__sup_slurm_snapshot(fb__sup *s);     /* a hang: watchers' fr snapshots */
int fb__sup_slurm_nnodes(const fb__sup *s);  /* nodes the job uses; 1 without */
/* Run `firebreak watch ARGS...` once on every node of the comma-separated
 * list `nodes` (NULL: every node not left out; one srun step); its output
 * to log_path.  0, an exit status, or -errno. */
int fb__sup_slurm_on_nodes(fb__sup *s, const char *nodes, const char *const *args,
                           const char *log_path, int timeout_ms);
/* Ask every watcher of the attempt to drop node-memory steps older than
 * step but the nkeep steps of keep[] (fbw1 `drop`).  0, or -errno when the
 * request was not written. */
int fb__sup_slurm_drop(fb__sup *s, int64_t step, const int64_t *keep, int nkeep);
/* Ask every watcher of the attempt to replicate step, and only it, to its
 * peers (fbw1 `send`).  0, or -errno. */
int fb__sup_slurm_send(fb__sup *s, int64_t step);
/* Tell every watcher node memory stays (fbw1 `keep`): before each stop of
 * the watchers; a watcher stopped without it takes the supervisor for gone
 * and removes its node's memory. */
void fb__sup_slurm_keep(fb__sup *s);
/* The end of a run whose ranks were stopped (stopped_any): `firebreak watch
 * --sweep` on every node not left out, which removes the job's segments
 * the stopped ranks left (srun ends a stopped step's tasks, the watchers
 * among them, by SIGKILL).  Not where the node-memory tier's end-of-run step ran (it
 * sweeps too).  A failure is said in the log and changes nothing else. */
void fb__sup_slurm_sweep(fb__sup *s);
/* Whether a node of the allocation can be reached (not left out, not
 * lost); its address (NodeAddr, else its name). */
int fb__sup_slurm_node_up(const fb__sup *s, const char *name);
const char *fb__sup_slurm_node_addr(const fb__sup *s, const char *name);

/* nodemem.c: the node-memory tier under slurm (docs/slurm.md) */
void fb__sup_nodemem_on_report(fb__sup *s, int rank, const fb__seg_report *r);
/* The step every rank can restore from where it is now placed; -1 none.
 * The first call of an attempt decides (and moves shards from the nodes
 * that hold them to the nodes that need them: the peer tier); later calls
 * of the same attempt return the same step. */
int64_t fb__sup_nodemem_restore_step(fb__sup *s);
/* Whether `step` is one of the nkeep steps of keep[]: the steps an fbw1
 * `drop` keeps, for the supervisor (nodemem.c) and the watcher (peer.c). */
static inline int fb__sup_step_kept(int64_t step, const int64_t *keep, int nkeep)
{
    for (int i = 0; i < nkeep; i++)
        if (keep[i] == step)
            return 1;
    return 0;
}
/* fbw1 `peer`: node holds a verified copy of ranks rank0..+count-1 of step. */
void fb__sup_nodemem_on_peer(fb__sup *s, const char *node, int64_t step, int rank0,
                             int count);
/* Called every tick: tells the watchers to drop the steps older than the
 * newest one every rank can restore (fbw1 `drop`). */
void fb__sup_nodemem_tick(fb__sup *s, uint64_t now);
/* A node lost: the copies in its memory are gone with it (also when it
 * comes back later). */
void fb__sup_nodemem_on_node_lost(fb__sup *s, const char *node);
/* The peer of each of n nodes, by index in the attempt's order: the next
 * one after it (a ring) whose failure domain differs from its own, else
 * the next one; -1 with one node.  A NULL or "" domain is a domain of its
 * own.  Pure: no I/O (tests/slurm/test_peer.c). */
void fb__peer_ring(const char *const *domain, int n, int *peer);
/* The k peers of each of n nodes (--peer-copies): peer[i*k .. i*k+k-1],
 * nodes after i in the attempt's order outside i's failure domain (any
 * other node when every node shares i's domain), each once: first the
 * next ones of a domain no copy is in yet, then the next others; -1
 * where fewer than k exist.  How many nodes got fewer than k.  Pure, as
 * fb__peer_ring (k = 1). */
int fb__peer_place(const char *const *domain, int n, int k, int *peer);
/* The peer copies each node's steps get (--peer-copies,
 * FIREBREAK_CKPT_PEER_COPIES; default 1; 0 with no peer tier). */
int fb__sup_slurm_peer_copies(const fb__sup *s);
/* The peer tier's port (replication; fetches use port + 1), 0: no peer
 * tier (FIREBREAK_CKPT_PEER=0, one node, no node memory). */
int fb__sup_nodemem_peer_port(const fb__sup *s);
/* End of run: the chosen step to storage where missing, memory removed. */
void fb__sup_nodemem_finish(fb__sup *s);
/* Where a rank runs: its node (Slurm's name; the host's elsewhere) and the
 * machine's hostname; NULL where not known (rank -1 under Slurm, mpirun
 * inside an allocation). */
void fb__sup_rank_where(const fb__sup *s, int rank, const char **node,
                        const char **host);
/* The node and host of a failure: its rank's, or the lost node's. */
void fb__sup_failure_where(const fb__sup *s, const fb__sup_failure *f,
                           const char **node, const char **host);
/* Journal every rank's node and host (placement) and the attempt's nodes. */
void fb__sup_place_ranks(fb__sup *s);

/* rundir.c (one supervisor per directory; private or group modes) */
/* Resolve --shared-group and set the run's umask; prints errors. */
int fb__sup_access_init(fb__sup *s);
/* mkdir -p with the user's own umask (parents of the run's directories). */
int fb__sup_mkdir_parents(fb__sup *s, const char *path);
/* Give one of the run's directories its mode: 0700, or 02750 and the group. */
int fb__sup_secure_dir(fb__sup *s, const char *path);
/* Lock dir/supervisor.lock for this run (slot 0: run dir, 1: checkpoint
 * dir); -EBUSY, with a message naming the holder, when another run has it. */
int fb__sup_lock_dir(fb__sup *s, const char *dir, const char *what, int slot);
/* Drop the locks, restore the user's umask. */
void fb__sup_release_dirs(fb__sup *s);

/* lateness.c: feed the rings read since the last pass to the live
 * lateness analysis, name stragglers (a pass at most every 250 ms);
 * fb__sup_lateness_end at the end of an attempt. */
void fb__sup_lateness(fb__sup *s, uint64_t now);
void fb__sup_lateness_end(fb__sup *s);
/* pyhooks.c: a hang and the Python hooks (docs/supervisor.md).
 * fb__sup_request_dumps: ask every live rank that listens to dump its
 * flight recorders (PyTorch's, and where its main thread is), and wait a
 * bounded time for the answers; before the snapshot.
 * fb__sup_hang_undecided: the hang is blamed on no rank (policy.c rule 4):
 * rewrite the failure's rank and detail; `evidence` is what the flight
 * recorder said. */
void fb__sup_request_dumps(fb__sup *s);
void fb__sup_hang_undecided(fb__sup *s, const char *evidence);
/* Where the supervisor's copy of the firebreak Python package is (the
 * directory to put on PYTHONPATH), or -ENOENT. */
int fb__sup_python_dir(char *buf, size_t size);
/* tiers.c (node-memory checkpoints): create the tier (and remove dead
 * runs' ones); whether storage holds a complete checkpoint newer than
 * step; SIGUSR1's copy to storage (on a thread), reaped by poll; the end
 * of the run: copy the newest memory checkpoint to storage, remove it. */
int fb__sup_tiers_setup(fb__sup *s);
int fb__sup_tiers_storage_newer(fb__sup *s, uint64_t step);
void fb__sup_tiers_persist_request(fb__sup *s);
void fb__sup_tiers_poll(fb__sup *s);
/* Wait for the copy SIGUSR1 started, if any: after it no writer of the
 * supervisor's own touches storage (prepare_restore). */
void fb__sup_tiers_quiesce(fb__sup *s);
void fb__sup_tiers_finish(fb__sup *s);

/* status.c */
void fb__sup_log(fb__sup *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A problem the user must see, --quiet or not: "firebreak run: ..." */
void fb__sup_warn(fb__sup *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fb__sup_status(fb__sup *s, uint64_t now, int force);

#endif
