/*
 * nodemem.h -- the node's side of the node-memory checkpoint tier under
 * the slurm launcher (nodemem.c; docs/slurm.md, "Checkpoint tiers").
 */
#ifndef FB_SUPERVISOR_NODEMEM_H
#define FB_SUPERVISOR_NODEMEM_H

#include <stdio.h>

/* `firebreak watch --mem-finish`: copy this node's shards of `step` (-1:
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
