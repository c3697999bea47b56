/*
 * watcher.h -- the per-node watcher of the slurm launcher (`firebreak
 * watch`, docs/slurm.md): the far end of slurm.c.  Not to be confused with
 * watch.c, the supervisor's own event loop.
 *
 * The supervisor starts one watcher per node with `srun
 * --ntasks-per-node=1`; it maps that node's rank segments
 * (/dev/shm/fb.<job>.<attempt>.<rank>), holds a pidfd on each rank and
 * writes fbw1 lines (fbw1.h) that Slurm forwards to the supervisor.
 * src/cli/cmd_watch.c only parses the command line and calls these.
 */
#ifndef FB_SUPERVISOR_WATCHER_H
#define FB_SUPERVISOR_WATCHER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "supervisor/fbw1.h"

#define FB__WATCH_MAX_LOCAL 1024 /* ranks one watcher watches */

typedef struct fb__watch_opts {
    const char *job;        /* the job id of the segments' names         */
    int attempt;
    int ranks_per_node;     /* 1..FB__WATCH_MAX_LOCAL                    */
    int world;
    long long node_id;      /* watches ranks node_id*P .. node_id*P+P-1  */
    double interval_s;      /* between beat lines, > 0                   */
    const char *node;       /* this node's name (fb__watch_node_name)    */
    FILE *out;              /* where the lines go (stdout)               */
    int in_fd;              /* where requests (`snap`) come from: 0, the
                               step's stdin (srun --input=all); -1: none */
    const char *mem_dir;    /* the node's memory tier; NULL: none        */
    int peer_port;          /* the peer tier (peer.c); 0: none           */
    const char *peer_to;    /* its peers' addresses, '+'-separated; NULL:
                               send none                                 */
} fb__watch_opts;

/* This node's name: `opt`, else SLURMD_NODENAME, else the hostname;
 * "unknown" when that is not a node name fbw1 can carry. */
void fb__watch_node_name(const char *opt, char buf[FB__FBW1_NODE_MAX]);

/* Watch the ranks until every one has ended (then `bye`) or until SIGTERM,
 * SIGINT or SIGHUP (installed here; SIGUSR1 and SIGPIPE are ignored).
 * `alive` every interval_s, but never within 0.5 s after a rank's end
 * without a record (`vanished`), and exactly then, even when stopped: the
 * supervisor's proof that the node outlived the rank (docs/slurm.md).
 * A `snap` request on in_fd for this attempt asks the ranks whose Python
 * hooks listen for their dumps (at most 3 s), then writes the segment of every
 * rank of this node that attached to $FIREBREAK_RUN_DIR/fr/attempt-N/
 * rank-R.fbseg (the flight-recorder snapshot, on the shared filesystem),
 * then says `snapped`.  Returns 0. */
int fb__watch_run(const fb__watch_opts *o);

/* Run this node's health checks once and write one `health` line to out
 * (test hook: FIREBREAK_HEALTH_ROOT_<NODE>, else FIREBREAK_HEALTH_ROOT, is
 * the fixture tree).  Returns 0: a check that could not run is the verdict
 * `error`, which the supervisor reads. */
int fb__watch_health(const char *node, FILE *out);

/* 0 when `job` is a job id (1 to 48 of [A-Za-z0-9_-]: it names
 * /dev/shm/fb.<job>.*; fb__job_id_ok), else 2 with why on err. */
int fb__watch_check_job(const char *job, FILE *err);

/* `firebreak watch --sweep`: remove this node's segments of every attempt
 * of `job` and its Open MPI directory (/dev/shm/fb.<job>.ompi), our own
 * files only: the supervisor's step at the end of a run whose ranks were
 * stopped (srun ends a stopped step's tasks, its watchers among them, by
 * SIGKILL, before they remove anything).  Says how many on err.
 * 0, or 2 for a job id that is not one. */
int fb__watch_sweep(const char *job, const char *node, FILE *err);

/* The node-memory checkpoint tier under the slurm launcher (nodemem.c;
 * docs/slurm.md, "Checkpoint tiers").
 * `firebreak watch --mem-finish`: copy this node's shards of `step` (-1:
 * none) from /dev/shm/fb.<job>.mem to ckpt_dir where ckpt_dir lacks them,
 * each verified by hash first, then remove the directory.  from_peer
 * (R:NODE,..., NULL: none) names ranks whose shard this node, when NODE is
 * `node`, copies from its peer directory instead (their only copies left).
 * 0, or 1 when a copy failed (said on err). */
int fb__nodemem_finish_here(const char *job, const char *ckpt_dir, int world,
                            long long step, const char *from_peer, const char *node,
                            FILE *err);

/* `firebreak watch`: take over the node's directory named by
 * FIREBREAK_CKPT_MEM_DIR (create it, or write this process's pid into the
 * one a rank or an earlier attempt's watcher created).  Nothing without
 * the variable; errors said on err. */
void fb__nodemem_own(FILE *err);

/* ---- the peer tier (peer.c; docs/slurm.md, "Checkpoint tiers") ---- */

#define FB__PEER_PLAN_MAX (64 << 10) /* bytes of a --mem-fetch plan        */

/* <mem_dir>/peer (FB__TIER_PEER_SUBDIR, ckpt/tier.h).  0, or -ENAMETOOLONG. */
int fb__peer_dir_path(char *buf, size_t size, const char *mem_dir);

typedef struct fb__peer fb__peer;

typedef struct fb__peer_opts {
    const char *mem_dir;    /* this node's memory tier                   */
    const char *node;       /* this node's name (the `peer` lines')       */
    int port;               /* listen on it; send to `to` on it           */
    const char *to;         /* the peers' addresses, '+'-separated (up to
                               FB__PEER_COPIES_MAX); NULL: send none      */
    int world, rank0, nranks; /* this node's ranks: rank0 .. +nranks-1    */
    FILE *out;
    void (*emit)(FILE *out, const fb__fbw1_msg *m); /* writes a line      */
} fb__peer_opts;

/* Start the receiver (listens on o->port; stores what arrives in
 * <mem_dir>/peer, verified, and writes a `peer` line for what it holds
 * after each connection) and, with o->to, the senders: two lanes (named
 * steps, the newest step), each with a sender per peer, so a stalled peer
 * holds up only its own copies.  All are threads of the calling watcher.
 * 0 or -errno. */
int fb__peer_start(fb__peer **out, const fb__peer_opts *o);
/* Every rank of this node committed `step` in its memory: send it to each
 * peer, in the background.  A step the supervisor named (`named`, fbw1
 * `send`) is sent to a peer unless it went there whole already, and only
 * a newer named one replaces it before it begins; an unnamed one (the
 * node's newest) replaces an unnamed one not yet begun.  Per peer, both
 * lanes never send the same step at once. */
void fb__peer_offer(fb__peer *p, int64_t step, int named);
/* Stop every thread (cutting transfers short) and free p; NULL: nothing.
 * The idle-priority scrub is waited for at most 0.2 s: one that got no
 * CPU by then ends, and frees p, by itself once it runs (it touches
 * nothing else after the stop). */
void fb__peer_stop(fb__peer *p);

/* `fbw1 drop STEP [KEEP...]`: remove the steps older than `step` from this
 * node's memory, its own ranks' and the peer copies, but the nkeep steps
 * in keep[].  How many step directories went. */
int fb__peer_drop_older(const char *mem_dir, int world, int64_t step,
                        const long long *keep, int nkeep);

/* `firebreak watch --mem-fetch`: carry out the part of `plan` that
 * concerns this node: entries RANK:SRC:m|p:DST:ADDR, comma-separated, say
 * that node SRC sends rank RANK's shard of `step` from its memory (m) or
 * its peer directory (p) to node DST at ADDR, port `port`, which stores it
 * in its peer directory, verified by hash.  0 when every part of it
 * succeeded within timeout_ms, 1 when not (said on err), 2 usage. */
int fb__peer_fetch_here(const char *job, const char *node, int port, int world,
                        long long step, const char *plan, int timeout_ms, FILE *err);


/* ---- the Slurm Epilog (epilog.c) ----
 *
 * The Slurm way of cleaning a node after a job, whatever
 * happened to the supervisor (`firebreak slurm-epilog`, docs/slurm.md,
 * "Epilog").
 *
 * Under `--launcher slurm` a node's /dev/shm/fb.<job>.mem (node-memory
 * checkpoints and peer copies) belongs to the node's watcher, which
 * removes it when the supervisor is gone.  A supervisor killed between
 * two attempts (its watchers stopped with `keep`, the next ones not
 * started) leaves it with nobody to remove it.  So whoever creates or
 * takes over that directory on a node writes a marker into it naming the
 * Slurm job that owns it:
 *
 *   /dev/shm/fb.<job>.mem/slurm-job     "SLURM_JOB_ID=<decimal>\n"
 *
 * and Slurm's Epilog, which slurmd runs as root on every node of a job
 * when the job ends, removes every such directory whose marker names
 * that job, with the per-job entries of the same firebreak job on the
 * node (rank segments fb.<job>.<attempt>.<rank>, Open MPI's fb.<job>.ompi).
 *
 * /dev/shm is writable by every local user, so nothing found there is
 * trusted: a directory is removed only when it is a real directory (not
 * a symlink) on the same filesystem, owned by root or by the job's user,
 * writable by its owner alone, with a marker that is a regular file of
 * the same owner, at most FB__EPILOG_MARKER_MAX bytes, that parses.
 * Anything else is left alone and said.  Removal goes through directory
 * descriptors and never follows a symlink.
 */
#define FB__EPILOG_MARKER "slurm-job"   /* in the fb.<job>.mem directory      */
#define FB__EPILOG_MARKER_MAX 64        /* bytes of a marker read back, at most */
#define FB__EPILOG_MAX_JOBS 256         /* firebreak jobs one Epilog removes  */
#define FB__EPILOG_MAX_DEPTH 16         /* directory levels it descends       */

/* A Slurm job id as SLURM_JOB_ID gives it: decimal, 1..4294967295, no
 * sign, no spaces, at most 10 digits.  0, or -EINVAL. */
int fb__epilog_parse_job_id(const char *s, uint32_t *job);

/* The marker's text for `job` into buf (at least FB__EPILOG_MARKER_MAX
 * bytes); its length, or -ENAMETOOLONG. */
int fb__epilog_marker_format(char *buf, size_t size, uint32_t job);

/* Parse a marker's bytes (len at most FB__EPILOG_MARKER_MAX; not
 * terminated): exactly "SLURM_JOB_ID=" + a job id + an optional "\n".
 * 0 with *job set, or -EINVAL for anything else (*job untouched). */
int fb__epilog_marker_parse(const char *buf, size_t len, uint32_t *job);

/* Write the marker naming the Slurm job of this process (SLURM_JOB_ID)
 * into mem_dir, atomically (a temporary renamed over it); with create,
 * make mem_dir (0700) first when it is missing.  Nothing without
 * SLURM_JOB_ID (not under Slurm).  0, or -errno (said on err). */
int fb__epilog_mark(const char *mem_dir, int create, FILE *err);

/* The same for the firebreak job `job`'s /dev/shm/fb.<job>.mem, made
 * when missing (`watch --mem-fetch` may be the first to write there).
 * -EINVAL for a job id that is not one ([A-Za-z0-9_-], 1..48). */
int fb__epilog_mark_job(const char *job, FILE *err);

typedef struct fb__epilog_opts {
    const char *shm_dir;   /* where to look; NULL: /dev/shm              */
    uint32_t job;          /* the Slurm job that ended                   */
    int have_uid;          /* job_uid is known (SLURM_JOB_UID)           */
    uid_t job_uid;         /* its user: may own what is removed          */
    FILE *log;             /* one line per thing removed or left alone   */
    int syslog;            /* also to syslog (slurmd drops the output)   */
} fb__epilog_opts;

typedef struct fb__epilog_result {
    int jobs;      /* fb.<job>.mem directories of the Slurm job found */
    int removed;   /* entries of /dev/shm removed (directories, files) */
    int left;      /* candidates left alone (said in the log)          */
    int failed;    /* removals that failed (said in the log)           */
} fb__epilog_result;

/* Remove what the Slurm job o->job left in o->shm_dir (above).  Never
 * fails as a whole: what it could not do is counted and said.  Owners
 * allowed: root, this process's effective user, o->job_uid. */
void fb__epilog_clean(const fb__epilog_opts *o, fb__epilog_result *res);

#endif
