/*
 * tool.h -- tool-side checkpoint operations (library fb_ckpt_tool): what
 * `firebreak ckpt ls|verify|inspect` prints, and the check the supervisor
 * runs before a restart so that every rank restores the same step.
 */
#ifndef FB_CKPT_TOOL_H
#define FB_CKPT_TOOL_H

#include <stdint.h>
#include <stdio.h>

/* The checkpoint directory `firebreak ckpt` works on for PATH: PATH/checkpoints
 * when PATH is a directory that holds no step-* entry but that directory (a
 * run directory, where the supervisor keeps them), in buf; else PATH.
 * *steps: whether the directory returned holds a step-* entry. */
const char *fb__ckpt_tool_dir(const char *path, char *buf, size_t size, int *steps);

/* `ckpt ls DIR`: exit code 0, or 2 when DIR cannot be read. */
int fb__ckpt_ls(const char *dir, int json, FILE *out);

/* `ckpt verify DIR`: every shard of every checkpoint (or only `step` when
 * has_step): a regular file, recorded step and rank its place, world size
 * the step's (its lowest rank's), every hash.  A step with any failed
 * shard is reported FAILED, never complete.  Progress on stderr when it
 * is a terminal.  Exit code 0 all verify and one is restorable (`step`,
 * else any), 1 any failure (each named) or none restorable (all
 * incomplete: said), 2 unreadable DIR or nothing to verify (no
 * checkpoint, or none at `step`). */
int fb__ckpt_verify(const char *dir, int has_step, uint64_t step, int threads,
                    int json, FILE *out);

/* `ckpt verify DIR --replicas` (replicas.c, docs/sdc.md): in every
 * checkpoint of 2 or more ranks (or only `step`), compare the recorded
 * hash of each whole tensor across the ranks' shards; a rank whose hash
 * differs from the majority's fails, naming step, rank and tensor.  A
 * tensor on which no two ranks agree is per-rank state (listed, not
 * failed); names matching a `per_rank` glob are skipped.  Exit code 0, 1
 * any disagreement, 2 unreadable DIR. */
int fb__ckpt_verify_replicas(const char *dir, int has_step, uint64_t step,
                             char *const *per_rank, int nper, int json, FILE *out);

/* `ckpt inspect PATH`: a shard file, or DIR (newest step, or `step`) and
 * `rank`.  Exit code 0, 1 malformed shard, 2 not found. */
int fb__ckpt_inspect(const char *path, int has_step, uint64_t step, int rank,
                     int json, FILE *out);

/*
 * Before launching ranks (every attempt, the first included): find the
 * newest complete checkpoint of `world_size` ranks (0: from its metadata)
 * whose every shard verifies -- readable regular file, recorded step,
 * rank and world size matching its place, every hash; newer complete ones
 * that fail are set aside (renamed to .corrupt-step-N, kept for evidence)
 * so that no rank restores them.  Ranks verify only their own shard, so
 * without this check one corrupt shard makes that rank fall back alone.
 * *step_out gets the step; returns 0, FB_ENOCKPT (none), -ECANCELED (stop
 * said so; nothing more is set aside), or -errno.  why_cb (may be NULL)
 * is told each checkpoint passed over and why: set_aside 1 for one set
 * aside, 0 for one of another job size (rank 0's shard records a world
 * size other than `world_size`: a job relaunched with more or fewer
 * ranks), never chosen but stays where it is: a program that restores
 * across world sizes takes the newest complete one of any size, so the
 * newest of them complete for its own size is verified as a whole too
 * (every shard of that size) and set aside when bad (set_aside 1); 2 for
 * an incomplete one removed (`drop_incomplete`).  With drop_incomplete, every
 * incomplete checkpoint newer than the one chosen (all of them when none
 * is) is removed once the choice is made: a save cut short left shards of
 * the abandoned timeline there, and the new attempt's saves of those step
 * numbers would complete them with shards of another run, a checkpoint
 * every rank takes for whole (the caller must know no rank and no writer
 * of its own is running).  stop
 * (may be NULL) is asked
 * on the calling thread between shards and every 8 MiB read, so a signal
 * can end a long verification; a read blocked in the kernel (a hung hard
 * NFS mount) still waits for the kernel.
 */
int fb__ckpt_prepare_restore(const char *dir, int world_size, int threads,
                             int drop_incomplete, uint64_t *step_out,
                             void (*why_cb)(void *arg, uint64_t step,
                                            int set_aside, const char *why),
                             int (*stop)(void *arg), void *arg);

/*
 * The removal prepare_restore does with drop_incomplete, alone: the
 * incomplete checkpoints of `world_size` ranks newer than `after` (every
 * one without has_after) are removed, each told to why_cb (set_aside 2).
 * For a directory no restore reads this time (storage, when node memory
 * serves) whose cut-short steps the new attempt's saves would complete
 * with shards of another run.  0, or -errno of the listing (none: 0).
 */
int fb__ckpt_drop_incomplete(const char *dir, int world_size, int has_after,
                             uint64_t after,
                             void (*why_cb)(void *arg, uint64_t step,
                                            int set_aside, const char *why),
                             void *arg);

#endif
