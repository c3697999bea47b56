/*
 * tier.h -- the node-memory tier of checkpoints (docs/checkpoint.md,
 * "Tiers").
 *
 * A node's memory tier is a checkpoint directory on tmpfs with the same
 * layout and commit rules as the storage directory (store.h):
 *
 *   /dev/shm/fb.<job>.mem/firebreak.pid                 owner (supervisor)
 *   /dev/shm/fb.<job>.mem/step-<N>/rank-<R>.safetensors  committed shards
 *
 * The supervisor creates it per run, hands it to the ranks
 * (FIREBREAK_CKPT_MEM_DIR), and removes it when the run ends, however it
 * ends; one left by a supervisor killed with SIGKILL is removed by the next
 * supervisor's start (its pid file names a process that is gone).  It
 * outlives every rank process, so a rank that crashed restores from it
 * without reading storage.
 *
 * Rank side (libfirebreak, engine.c and restore.c call these): a save goes
 * to node memory; every M-th (FIREBREAK_CKPT_PERSIST_EVERY) the rank's
 * shard is also copied to storage; a save that cannot fit under the
 * node's cap (FIREBREAK_CKPT_MEM_MAX) goes to storage instead.  Restore
 * walks the steps newest first and takes each from memory, else (under
 * slurm) a peer's copy the node's watcher received, else storage, each
 * verified by hash.
 *
 * Supervisor side: the directory's life, and copying the newest complete
 * memory checkpoint to storage (SIGUSR1, the end of the run).
 */
#ifndef FB_CKPT_TIER_H
#define FB_CKPT_TIER_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* Where a restore's shard came from: event.source in the journal. */
typedef enum {
    FB__TIER_NONE = 0,
    FB__TIER_MEMORY,   /* this node's memory                             */
    FB__TIER_PEER,     /* another node's memory (replicate.c)            */
    FB__TIER_STORAGE,  /* the shared checkpoint directory                */
    FB__TIER_COUNT_
} fb__tier_source;

/* "memory", "peer", "storage" (NULL for NONE or out of range); the one
 * name table.  fb__tier_source_from_name: FB__TIER_NONE when not one. */
const char *fb__tier_source_name(fb__tier_source t);
fb__tier_source fb__tier_source_from_name(const char *name);

/* Under slurm, the copies a node's watcher received from other nodes
 * (the peer tier, src/supervisor/peer.c): <mem_dir>/peer/step-<N>/... */
#define FB__TIER_PEER_SUBDIR "peer"

/* A handle's memory tier (a field of fb_ckpt; all zero: none). */
typedef struct fb__tier {
    char mem_dir[PATH_MAX];   /* "": no memory tier                      */
    int persist_every;        /* every M-th save also to storage; 0 never */
    uint64_t mem_max_bytes;   /* the node's cap; 0: none                  */
    int node_ranks;           /* ranks sharing the node's memory          */
    uint64_t saves;           /* saves by this handle so far              */
    /* Slurm (FIREBREAK_CKPT_MEM_PER_NODE): the node's memory holds only its
     * own ranks' shards, so completeness there is the supervisor's word:
     * restore_step is the newest step every rank committed somewhere it
     * can still be read (-1: none; docs/slurm.md, "Checkpoint tiers"). */
    int per_node;
    int64_t restore_step;
} fb__tier;

/* ---- rank side (engine.c, restore.c) ---- */
struct fb_ckpt;
/* Read the supervisor's FIREBREAK_CKPT_MEM_DIR etc. into ck->tier when the
 * handle uses the supervisor's checkpoint directory (opt_dir NULL or the
 * same directory).  0, or -EINVAL for a malformed variable. */
int fb__tier_open(struct fb_ckpt *ck, const char *opt_dir);
/* Before writing step's shard: the directory it goes to (the memory tier,
 * or the storage directory when there is none or it cannot fit: said on
 * stderr and reported).  Evicts old memory steps to make room. */
const char *fb__tier_save_dir(struct fb_ckpt *ck, uint64_t step);
/* Node memory found full by a save of `step`: every step older than the
 * newest complete one is evicted (reported deleted).  How many went. */
int fb__tier_evict_older(struct fb_ckpt *ck, uint64_t step);
/* After the shard of `step` committed in `dir`: copy it to storage when
 * this save is due (every M-th), memory retention (rank 0). */
void fb__tier_committed(struct fb_ckpt *ck, uint64_t step, const char *dir);
/* fb_ckpt_restore for a handle with a memory tier. */
int fb__tier_restore(struct fb_ckpt *ck, uint64_t *step_out);

/* Verify the shard at path: a regular file, its recorded step and rank
 * these, its metadata, every hash.  0, or the error with why filled. */
int fb__ckpt_verify_shard(const char *path, uint64_t step, int rank, char *why,
                          size_t why_size);

/* Copy a committed shard from one checkpoint directory to another with
 * the commit protocol (temporary name, fsync, rename, fsync of the step
 * directory).  verify: check every hash of the source first.  0, or an
 * error with why filled. */
int fb__ckpt_copy_shard(const char *from_dir, const char *to_dir, uint64_t step,
                        int rank, int verify, char *why, size_t why_size);

/* The largest node cap a rank takes (FIREBREAK_CKPT_MEM_MAX, bytes): what
 * `firebreak run --memory-ckpt-max` accepts, so that no rank refuses the
 * cap it is given. */
#define FB__CKPT_MEM_MAX_BYTES INT64_MAX

/* ---- supervisor side ---- */
/* /dev/shm/fb.<job>.mem */
int fb__ckpt_mem_dir_path(char *buf, size_t size, const char *job_id);
/* Create it (0700) with a pid file naming this process.  0 or -errno. */
int fb__ckpt_mem_dir_create(const char *path);
/* Remove it and everything in it, ranks still writing into it or not
 * (renamed away first: see tier.c). */
void fb__ckpt_mem_dir_remove(const char *path);
/* Mark the tier kept: its newest checkpoint could not be copied to
 * storage when its run ended (why: the reason, for the person who finds
 * it).  0 or -errno. */
int fb__ckpt_mem_dir_keep(const char *path, const char *why);
/* Record the run the tier belongs to (firebreak.owner: its world size and
 * checkpoint directory), so that a later run of the same checkpoint
 * directory can take what it holds if this run cannot (SIGKILL).  0 or
 * -errno. */
int fb__ckpt_mem_dir_set_owner(const char *path, const char *ckpt_dir, int world);

/* A stale tier, as the sweep found it. */
typedef struct fb__mem_stale {
    char path[PATH_MAX];
    char ckpt_dir[PATH_MAX]; /* its run's checkpoint directory; "" unknown */
    int world;               /* its run's world size; 0 unknown            */
    int kept;                /* marked kept (fb__ckpt_mem_dir_keep)        */
} fb__mem_stale;

/*
 * Every /dev/shm/fb.*.mem of ours whose owner is gone, told to fn(arg, t),
 * which may copy from it and returns 1 to have it removed, 0 to leave it;
 * fn NULL: every one not marked kept is removed.  How many were removed.
 */
int fb__ckpt_mem_dir_cleanup_stale(int (*fn)(void *arg, const fb__mem_stale *t),
                                   void *arg);
/*
 * Copy the newest complete checkpoint of mem_dir to dir when dir has no
 * complete checkpoint as new: every shard verified, then copied; when a
 * step cannot be copied whole (a shard fails its hashes, storage is full),
 * the shards this copy made of it are removed and the next older complete
 * step newer than storage's is tried.  Returns 1 copied (*step_out; why
 * empty, or naming the newer step that failed), 0 nothing to do (why says
 * why: no complete checkpoint in memory, or storage holds one as new), or
 * the newest step's error with why filled (no step copied).
 */
int fb__ckpt_mem_persist_newest(const char *mem_dir, const char *dir, int world,
                                uint64_t *step_out, char *why, size_t why_size);

#endif
