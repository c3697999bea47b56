/*
 * epilog.h -- the Slurm way of cleaning a node after a job, whatever
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
#ifndef FB_SUPERVISOR_EPILOG_H
#define FB_SUPERVISOR_EPILOG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

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
