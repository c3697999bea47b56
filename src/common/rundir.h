/*
 * rundir.h -- the layout of a run directory (docs/supervisor.md, "Run
 * directory").  The supervisor writes its parts and the tools (`ckpt`,
 * `fr analyze`, `report`) find them through these names, so the two
 * agree on where each part lives.
 */
#ifndef FB_COMMON_RUNDIR_H
#define FB_COMMON_RUNDIR_H

#include <limits.h>
#include <stddef.h>

typedef enum fb__rundir_part {
    FB__RUNDIR_JOURNAL,    /* journal.sqlite (a file, as is mpirun.log; the
                              other parts are directories) */
    FB__RUNDIR_CKPT,       /* checkpoints: --ckpt-dir's default */
    FB__RUNDIR_LOGS,       /* logs */
    FB__RUNDIR_MPIRUN_LOG, /* logs/mpirun.log: mpirun's own output (a file) */
    FB__RUNDIR_MPIRUN_OUT, /* logs/mpirun-attempt-<N>: the ranks' output under
                              mpirun (its --output-filename) */
    FB__RUNDIR_SLURM_LOGS, /* logs/slurm-attempt-<N>: srun's and the ranks'
                              output under Slurm */
    FB__RUNDIR_FR,         /* fr: the flight recorders */
    FB__RUNDIR_FR_ATTEMPT, /* fr/attempt-<N>: the segments' snapshots at attempt N's failure */
    FB__RUNDIR_FR_TORCH    /* fr/torch/attempt-<N>: PyTorch's dumps of attempt N */
} fb__rundir_part;

/* RUN's PART (of attempt ATTEMPT for the per-attempt parts) into buf: 0,
 * or -ENAMETOOLONG.  RUN NULL: the part's path inside the run
 * ("logs/mpirun.log"), as messages name it. */
int fb__rundir_path(char *buf, size_t size, const char *run, fb__rundir_part part,
                    long attempt);

/* The same two per-attempt parts from a run's fr/ directory FR. */
int fb__rundir_fr_path(char *buf, size_t size, const char *fr, fb__rundir_part part,
                       long attempt);

/* Does directory PATH hold PART (ATTEMPT's), as a regular file for the
 * journal and mpirun.log and a directory for the others?  1 and its path
 * in buf, or 0. */
int fb__rundir_has(const char *path, fb__rundir_part part, long attempt, char *buf,
                   size_t size);

/* The attempt-<N> directories in DIR (a run's fr/ or fr/torch/): the
 * highest N, or -1 when there is none (DIR unreadable included); *count
 * how many there are. */
long fb__rundir_newest_attempt(const char *dir, int *count);

/* The run directory PATH is inside (the nearest of PATH's parents that
 * holds a journal), as an absolute path into buf: 1, or 0 when PATH is in
 * none. */
int fb__rundir_enclosing(const char *path, char *buf, size_t size);

/* Where the runs are, for a directory PATH that is not one: right below
 * it (a --run-root), in PATH/runs (where `firebreak run` was started), or
 * around it (PATH is inside a run).  For the tools' errors. */
typedef struct fb__rundir_where {
    int runs;              /* run directories right below `below`, 0 none   */
    char below[PATH_MAX];  /* PATH, or PATH/runs                            */
    char newest[PATH_MAX]; /* below/<the run whose journal changed last>    */
    char inside[PATH_MAX]; /* with no runs below: the run PATH is inside
                              (fb__rundir_enclosing), or ""                 */
} fb__rundir_where;

void fb__rundir_where_find(const char *path, fb__rundir_where *w);

/* What fb__rundir_where_find found for PATH, as the tools say it, into
 * buf (paths through fb__safe_text): "it holds 3 run directories (the
 * newest runs/c)" or "runs holds ..." (FB__RUNDIR_WHERE_BELOW: give one),
 * "it is inside the run directory /a/b" (FB__RUNDIR_WHERE_INSIDE: give
 * that one), or "" (0: nothing found). */
enum { FB__RUNDIR_WHERE_BELOW = 1, FB__RUNDIR_WHERE_INSIDE = 2 };
int fb__rundir_where_say(const fb__rundir_where *w, const char *path, char *buf,
                         size_t size);

#endif
