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
#include <stdio.h>

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
} fb__watch_opts;

/* This node's name: `opt`, else SLURMD_NODENAME, else the hostname;
 * "unknown" when that is not a node name fbw1 can carry. */
void fb__watch_node_name(const char *opt, char buf[FB__FBW1_NODE_MAX]);

/* Watch the ranks until every one has ended (then `bye`) or until SIGTERM,
 * SIGINT or SIGHUP (installed here; SIGUSR1 and SIGPIPE are ignored).
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

/* The node-memory checkpoint tier under the slurm launcher (nodemem.c;
 * docs/slurm.md, "Checkpoint tiers").
 * `firebreak watch --mem-finish`: copy this node's shards of `step` (-1:
 * none) from /dev/shm/fb.<job>.mem to ckpt_dir where ckpt_dir lacks them,
 * each verified by hash first, then remove the directory.  0, or 1 when a
 * copy failed (said on err). */
int fb__nodemem_finish_here(const char *job, const char *ckpt_dir, int world,
                            long long step, FILE *err);

/* `firebreak watch`: take over the node's directory named by
 * FIREBREAK_CKPT_MEM_DIR (create it, or write this process's pid into the
 * one a rank or an earlier attempt's watcher created).  Nothing without
 * the variable; errors said on err. */
void fb__nodemem_own(FILE *err);

#endif
