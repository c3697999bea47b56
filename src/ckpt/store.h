/*
 * store.h -- the checkpoint directory on disk, shared by the engine (rank
 * side) and the `firebreak ckpt` tool.
 *
 *   <dir>/step-<NNNNNNNNNN>/rank-<RRRRR>.safetensors   committed shards
 *   <dir>/step-<N>/.rank-<RRRRR>.<pid>.tmp              a shard being written
 *   <dir>/.deleted-step-<N>.<pid>                        being deleted
 *
 * A shard is committed when it has its final name (rename after fsync, then
 * fsync of the step directory).  A checkpoint is complete when the shards
 * of ranks 0 .. world_size-1 are all committed; world_size comes from the
 * reader (the rank's own) or from a shard's metadata.  Completeness is
 * computed from the directory alone, so it holds on a filesystem shared by
 * many nodes.
 */
#ifndef FB_CKPT_STORE_H
#define FB_CKPT_STORE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* Wait until no checkpoint handle open in this process has a save in
 * flight (engine.c): each one's newest shard is then committed or failed.
 * For the injected `corrupt` fault, which must hit the newest shard. */
void fb__ckpt_wait_open_saves(void);

typedef struct fb__ckpt_entry {
    uint64_t step;
    int world_size;     /* from the caller or the first shard; -1 unknown */
    int shards;         /* committed shards of ranks < world_size          */
    int beyond;         /* committed shards of ranks >= world_size: saved
                           by a job of more ranks (world_size > 0)        */
    int complete;
    uint64_t bytes;     /* sum of committed shard sizes (with_sizes)       */
    int64_t mtime_s;    /* newest shard's mtime (with_sizes)               */
    int error;          /* -errno: its directory could not be read (EACCES,
                           EIO): listed, not complete, said by its readers */
} fb__ckpt_entry;

int fb__ckpt_step_path(char *buf, size_t size, const char *dir, uint64_t step);
int fb__ckpt_shard_path(char *buf, size_t size, const char *dir, uint64_t step,
                        int rank);

/*
 * List the checkpoints in dir, newest first, into a malloc'd array.
 * world_size > 0: the expected world size; 0: read it from the lowest
 * rank's shard.  with_sizes: stat every shard.  0, -errno.
 */
int fb__ckpt_scan(const char *dir, int world_size, int with_sizes,
                  fb__ckpt_entry **out, size_t *count);

/* The world size a shard records in its metadata, -1 when it has none or
 * cannot be read (missing, malformed, truncated header), -ENOMEM. */
int fb__ckpt_shard_world_size(const char *path);

/*
 * How a step's committed shards stand to a job of world_size ranks: 1 every
 * one records world_size (this job's, or a save of it cut short; also a
 * step with no shard); 0 one is of another size (a job relaunched with
 * more or fewer ranks saved it: never removed by this job), known without
 * reading when a shard's rank is world_size or more; -1 none is of another
 * size but one cannot say (no metadata, unreadable), or world_size <= 0;
 * -ENOMEM.  Reads every shard's header otherwise: for the few steps a
 * removal is decided on, not for a whole listing.
 */
/* Ranks of the committed shards (rank-R.safetensors) in one step
 * directory, sorted, into a malloc'd *out.  0, or -errno (-ENOENT: no
 * such step directory). */
int fb__ckpt_list_ranks(const char *dir, uint64_t step, int **out, int *count);
int fb__ckpt_step_world(const char *dir, uint64_t step, int world_size);

/* A listed step that counts as one of this job's complete checkpoints (the
 * job whose world size the listing was made with): ranks 0 .. world_size-1
 * committed and none beyond (a 4-rank step holds ranks 0 and 1 of a 2-rank
 * job's, and is not its checkpoint).  From the listing alone, reading no
 * shard (a restore that reads storage must say so, and retention runs at
 * every save); a restore verifies the world size each shard records. */
int fb__ckpt_job_complete(const fb__ckpt_entry *e);

/*
 * Remove the temporaries of rank `rank` (.rank-R.<pid>.tmp) in the step
 * directory of `step`, but for the one of pid `keep_pid`.  A rank's
 * temporaries are written only by the process that is that rank, one
 * save at a time, so when that process begins a save or a restore, every
 * other one of them was left by a writer that is gone (a crashed save of
 * an earlier attempt); other ranks' temporaries are theirs to clean, as
 * they may be writing them now.  Returns how many were removed, or -errno.
 */
int fb__ckpt_clean_tmp(const char *dir, uint64_t step, int rank, int keep_pid);

/* The same in every step directory of dir (hidden ones, being deleted,
 * aside): once per process and directory, at its first save there
 * (engine.c) or its restore, rather than a listing of the step's
 * directory, which holds every rank's shard, by every rank at every save.
 * Returns how many were removed, or -errno. */
int fb__ckpt_clean_tmp_all(const char *dir, int rank, int keep_pid);

/*
 * Write-behind for a shard being written sequentially: after each write,
 * fb__ckpt_write_behind(fd, &wb, end) starts the writeback of what was
 * written since the last call (so the disk works while the writer copies,
 * and the final fsync has little left), then waits for the data written
 * more than FB__CKPT_WRITE_BEHIND bytes before `end` to reach the disk and
 * drops it from the page cache (which would otherwise hold a second copy
 * of the checkpoint).  Only hints: errors are left to the fsync that
 * follows.  Start with wb = {first byte written, same}.
 */
#define FB__CKPT_WRITE_BEHIND ((uint64_t)64 << 20)
typedef struct fb__write_behind {
    uint64_t started;   /* writeback started below this offset          */
    uint64_t synced;    /* on disk and out of the page cache below this  */
} fb__write_behind;
void fb__ckpt_write_behind(int fd, fb__write_behind *wb, uint64_t end);

/*
 * Write the data section of a shard, [data_off, data_off + bytes) of the
 * file open as fd (written with plain writes), with O_DIRECT through a
 * second descriptor of path: the bytes go from memory to the disk without
 * a copy in the page cache (and without its writeback, which costs the
 * CPU most of a buffered write on a busy machine).  A tensor's whole
 * 4 KiB blocks whose source (fb__ckpt_source) is at the same phase in
 * memory as in the file are written from the source itself; a second
 * thread hashes them meanwhile, and gathers every other 8 MiB
 * of the section into one of two aligned buffers, hashing each piece as
 * it copies it, while this one writes; the partial 4 KiB blocks at the
 * two ends go through fd.  *st (may be NULL): the bytes written from
 * their source without a copy, and the second thread's CPU time.  Returns
 * 0 when written,
 * with every tensor's `hash` set (when `hash`; else the caller hashes); 1
 * when this file cannot take direct I/O (nothing to undo: write it, and
 * hash, the plain way); or -errno.
 */
/* The data section starts at a multiple of FB__CKPT_DATA_ALIGN in shards
 * whose data is FB__CKPT_DIRECT_MIN bytes or more (the header is padded
 * with spaces): a tensor whose source sits at the same phase in memory
 * (staging is allocated so) goes to the disk from where it is, without
 * the gathering copy.  FB__CKPT_DATA_ALIGN is also O_DIRECT's alignment
 * here. */
#define FB__CKPT_DATA_ALIGN ((uint64_t)4096)
#define FB__CKPT_DIRECT_MIN ((uint64_t)1 << 20)
struct fb_ckpt;
/* pwritev / pwrite until everything is written (modifies iov): 0, or
 * -errno (-EIO when no byte was taken). */
struct iovec;
int fb__ckpt_pwritev_all(int fd, struct iovec *iov, int cnt, uint64_t off);
int fb__ckpt_pwrite_all(int fd, const void *buf, size_t n, uint64_t off);
typedef struct fb__direct_stats {
    uint64_t direct_bytes;  /* written from the source as it is        */
    uint64_t gather_cpu_ns; /* the gathering and hashing thread's CPU  */
} fb__direct_stats;
int fb__ckpt_write_direct(const char *path, int fd, struct fb_ckpt *ck,
                          int from_staging, int hash, uint64_t data_off,
                          uint64_t bytes, fb__direct_stats *st);

/* Called between the steps of a deletion or a shard's commit (tests
 * crash there). */
typedef void (*fb__ckpt_hook)(const char *point, uint64_t step);

/*
 * Writing one shard, the same steps for the engine's save and for a copy
 * between tiers (tier.c):
 *
 *   fb__shard_out_begin    the step directory (made if missing) and the
 *                          temporary .rank-R.<pid>.tmp in it, created
 *                          empty, `bytes` reserved up front (a full disk
 *                          fails here, before any data is written; not
 *                          posix_fallocate, which glibc emulates by
 *                          writing where unsupported);
 *   (the caller writes fd)
 *   fb__shard_out_commit   fsync, close, hook("before_rename", step),
 *                          rename to rank-R.safetensors, fsync of the step
 *                          directory;
 *   fb__shard_out_abort    after a failure: close, remove the temporary
 *                          and the step directory when it is empty.
 *
 * Each returns 0 or -errno with `why` naming the file and what failed.  A
 * failed begin or commit has cleaned up, but for a commit whose directory
 * fsync failed: the shard is in place, maybe not durable, and is kept.
 */
typedef struct fb__shard_out {
    char sdir[PATH_MAX], tmp[PATH_MAX], final[PATH_MAX];
    int fd;
} fb__shard_out;

int fb__shard_out_begin(fb__shard_out *o, const char *dir, uint64_t step,
                        int rank, uint64_t bytes, char *why, size_t why_size);
int fb__shard_out_commit(fb__shard_out *o, uint64_t step, fb__ckpt_hook hook,
                         char *why, size_t why_size);
void fb__shard_out_abort(fb__shard_out *o);

/*
 * Keep the newest `keep` complete checkpoints (fb__ckpt_job_complete);
 * delete every step directory older than the oldest kept one (complete or
 * not), but for one holding a shard of another world size, which is
 * another job's (fb__ckpt_step_world).  Nothing newer than a kept checkpoint is touched.  A deletion first renames the step directory
 * to a hidden name and fsyncs the parent, so no crash leaves a
 * half-deleted directory that looks like a checkpoint; then, unless
 * `defer`, the hidden directories' bytes are removed (fb__ckpt_purge, with
 * the leftovers of interrupted deletions).  With `defer` they are left for
 * the caller's fb__ckpt_purge: removing a big file takes long on some
 * filesystems (ext4 mounted with `discard`: 0.18 s a GiB here), and the
 * engine's writer does it when no save waits (engine.c).  deleted_cb (may
 * be NULL) is told each deleted step.  Returns how many were deleted, or
 * -errno.
 */
int fb__ckpt_retain(const char *dir, int world_size, int keep, int defer,
                    fb__ckpt_hook hook, void (*deleted_cb)(uint64_t step));

/* Remove the hidden directories of deleted steps (.deleted-step-*, any
 * process's), file by file; before each file, yield(arg) (may be NULL)
 * may ask to stop.  0: none left; 1: stopped with some left; -errno: a
 * removal failed (the rest was still removed). */
int fb__ckpt_purge(const char *dir, int (*yield)(void *), void *arg);

#endif
