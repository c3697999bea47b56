/*
 * tiers.c -- the supervisor's part of the node-memory checkpoint tier
 * (docs/checkpoint.md, "Tiers"; src/ckpt/tier.h).
 *
 * The supervisor owns the tier's lifetime on its node: it creates
 * /dev/shm/fb.<job>.mem when the run starts (after sweeping those of dead
 * supervisors: one of this checkpoint directory is copied to storage
 * first), hands it to the ranks (launch.c), copies its newest complete
 * checkpoint to storage on SIGUSR1 (on a thread of its own, so watching
 * goes on) and when the run ends, and removes it at the end whatever the
 * outcome, unless that copy failed (then it is kept, for the user or the
 * next run of this checkpoint directory).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/store.h"
#include "ckpt/tier.h"
#include "common/util.h"
#include "supervisor/sup.h"

/* The copy in flight (one at a time). */
typedef struct persist_job {
    pthread_t tid;
    char mem_dir[PATH_MAX], dir[PATH_MAX];
    int world;
    atomic_int done;
    int rc;
    uint64_t step;
    char why[1024];
} persist_job;

static persist_job *job_in_flight;

static void say_result(fb__sup *s, const persist_job *j, const char *when);

static int same_dir(const char *a, const char *b)
{
    struct stat x, y;
    return !stat(a, &x) && !stat(b, &y) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/*
 * A tier left by a run that is gone (a supervisor SIGKILLed, or a kept
 * one).  One of this run's checkpoint directory may hold checkpoints
 * storage does not: its newest complete one storage lacks is copied there
 * first (claimed first, so no other start sweeps it meanwhile); kept when
 * that fails.  Another directory's is removed, but for one kept, which is
 * left to its user; either is said.  1: remove it.
 */
static int stale_tier(void *arg, const fb__mem_stale *t)
{
    fb__sup *s = arg;
    const char *owner = t->ckpt_dir[0] ? t->ckpt_dir : "not recorded";
    if (!t->ckpt_dir[0] || !same_dir(t->ckpt_dir, s->ckpt_dir)) {
        if (t->kept)
            fb__sup_warn(s, "node memory %s, left by a run of checkpoint directory "
                            "%s, is kept: it holds checkpoints that could not be "
                            "copied there (firebreak ckpt ls %s)", t->path, owner,
                         t->path);
        else
            fb__sup_log(s, "removing node memory %s, left by a run that is gone "
                           "(checkpoint directory %s)", t->path, owner);
        return !t->kept;
    }
    if (fb__ckpt_mem_dir_create(t->path))
        return 0;
    persist_job j;
    memset(&j, 0, sizeof j);
    snprintf(j.dir, sizeof j.dir, "%s", s->ckpt_dir);
    j.rc = fb__ckpt_mem_persist_newest(t->path, s->ckpt_dir, t->world, &j.step, j.why,
                                       sizeof j.why);
    char when[PATH_MAX + 64];
    snprintf(when, sizeof when, "node memory %s, left by a run that is gone", t->path);
    say_result(s, &j, when);
    if (j.rc < 0) {
        int rc = fb__ckpt_mem_dir_keep(t->path, j.why);
        fb__sup_warn(s, "node memory %s is %s", t->path,
                     rc ? "left, but cannot be marked kept: another start may remove it"
                        : "KEPT: the next run of this checkpoint directory tries again");
        return 0;
    }
    fb__sup_log(s, "removing node memory %s", t->path);
    return 1;
}

int fb__sup_tiers_setup(fb__sup *s)
{
    const fb__sup_options *o = s->o;
    s->mem_dir[0] = '\0';
    (void)fb__ckpt_mem_dir_cleanup_stale(stale_tier, s);
    if (o->persist_every < 0 && !o->memory_ckpt_max)
        return 0;
    int rc = fb__ckpt_mem_dir_path(s->mem_dir, sizeof s->mem_dir, s->job_id);
    if (!rc && s->slurm)
        return 0; /* one per node, made there (nodemem.c) */
    if (!rc)
        rc = fb__ckpt_mem_dir_create(s->mem_dir);
    char abs[PATH_MAX];
    if (!rc)
        rc = fb__ckpt_mem_dir_set_owner(s->mem_dir, realpath(s->ckpt_dir, abs)
                                        ? abs : s->ckpt_dir, s->world);
    if (rc) {
        fprintf(stderr, "firebreak run: cannot create the node-memory checkpoint "
                        "directory %s: %s\n", s->mem_dir, fb_strerror(rc));
        fb__ckpt_mem_dir_remove(s->mem_dir);
        s->mem_dir[0] = '\0';
        return rc;
    }
    return 0;
}

int fb__sup_tiers_storage_newer(fb__sup *s, uint64_t step)
{
    fb__ckpt_entry *v = NULL;
    size_t n = 0;
    if (fb__ckpt_scan(s->ckpt_dir, s->world, 0, &v, &n))
        return 0;
    int newer = 0;
    for (size_t i = 0; i < n && !newer; i++)
        newer = v[i].step > step && fb__ckpt_job_complete(&v[i]);
    free(v);
    return newer;
}

static void *persist_main(void *arg)
{
    persist_job *j = arg;
    j->rc = fb__ckpt_mem_persist_newest(j->mem_dir, j->dir, j->world, &j->step,
                                        j->why, sizeof j->why);
    atomic_store(&j->done, 1);
    return NULL;
}

static void say_result(fb__sup *s, const persist_job *j, const char *when)
{
    if (j->rc == 1 && j->why[0])
        fb__sup_warn(s, "%s: checkpoint %llu copied from node memory to %s; a "
                        "newer one could not be: %s", when,
                     (unsigned long long)j->step, j->dir, j->why);
    else if (j->rc == 1)
        fb__sup_log(s, "%s: checkpoint %llu copied from node memory to %s", when,
                    (unsigned long long)j->step, j->dir);
    else if (j->rc == 0)
        fb__sup_log(s, "%s: nothing to copy to storage: %s", when, j->why);
    else
        fb__sup_warn(s, "%s: copying node memory's newest checkpoint to storage "
                        "failed: %s", when, j->why);
}

/* Join the copy when it is done (wait: also when it is not). */
static void reap(fb__sup *s, int wait)
{
    persist_job *j = job_in_flight;
    if (!j || (!wait && !atomic_load(&j->done)))
        return;
    pthread_join(j->tid, NULL);
    say_result(s, j, "SIGUSR1");
    free(j);
    job_in_flight = NULL;
}

void fb__sup_tiers_poll(fb__sup *s)
{
    reap(s, 0);
}

void fb__sup_tiers_quiesce(fb__sup *s)
{
    reap(s, 1);
}

void fb__sup_tiers_persist_request(fb__sup *s)
{
    if (!s->mem_dir[0])
        return;
    if (s->slurm) {
        fb__sup_log(s, "SIGUSR1: node memory is copied to storage at the end of "
                       "the run (slurm)");
        return;
    }
    if (job_in_flight) {
        fb__sup_log(s, "SIGUSR1: a copy to storage is still running");
        return;
    }
    persist_job *j = calloc(1, sizeof *j);
    if (!j || fb__fmt(j->mem_dir, sizeof j->mem_dir, "%s", s->mem_dir) ||
        fb__fmt(j->dir, sizeof j->dir, "%s", s->ckpt_dir)) {
        free(j);
        return;
    }
    j->world = s->world;
    fb__sup_log(s, "SIGUSR1: copying node memory's newest complete checkpoint "
                   "to storage");
    if (pthread_create(&j->tid, NULL, persist_main, j)) {
        free(j);
        return;
    }
    job_in_flight = j;
}

/* The newest of this job's complete checkpoints in storage, -1 none. */
static int64_t storage_newest(fb__sup *s)
{
    fb__ckpt_entry *v = NULL;
    size_t n = 0;
    int64_t newest = -1;
    if (fb__ckpt_scan(s->ckpt_dir, s->world, 0, &v, &n))
        return -1;
    for (size_t i = 0; i < n && newest < 0; i++)
        if (fb__ckpt_job_complete(&v[i]))
            newest = (int64_t)v[i].step;
    free(v);
    return newest;
}

/*
 * The copy to storage failed: node memory holds a checkpoint storage does
 * not, and removing it would lose it.  It is kept, marked so that no
 * later start removes it (firebreak.kept, tier.c), and the log says where
 * it is and how to take it.  1 kept.
 */
static int keep_tier(fb__sup *s, const char *why)
{
    int rc = fb__ckpt_mem_dir_keep(s->mem_dir, why);
    snprintf(s->mem_kept, sizeof s->mem_kept, "%s", s->mem_dir);
    if (rc) /* /dev/shm full too: left all the same, never removed here */
        fb__sup_warn(s, "end of run: cannot mark node memory %s kept (%s): left "
                        "in place unmarked; the next run with the same checkpoint "
                        "directory copies it, a run of another directory would "
                        "remove it", s->mem_dir, fb_strerror(rc));
    fb__sup_warn(s, "end of run: node memory %s is KEPT, with checkpoints storage "
                    "does not have: `firebreak ckpt ls %s` lists them; once %s has "
                    "room, run again with the same checkpoint directory (its start "
                    "copies them there), or copy a step directory there yourself "
                    "(cp -a %s/step-N %s/) and remove %s", s->mem_dir, s->mem_dir,
                 s->ckpt_dir, s->mem_dir, s->ckpt_dir, s->mem_dir);
    return 1;
}

void fb__sup_tiers_finish(fb__sup *s)
{
    if (!s->mem_dir[0])
        return;
    if (s->slurm) {
        fb__sup_nodemem_finish(s);
        s->mem_dir[0] = '\0';
        return;
    }
    reap(s, 1);
    persist_job j;
    memset(&j, 0, sizeof j);
    snprintf(j.dir, sizeof j.dir, "%s", s->ckpt_dir);
    j.rc = fb__ckpt_mem_persist_newest(s->mem_dir, s->ckpt_dir, s->world, &j.step,
                                       j.why, sizeof j.why);
    say_result(s, &j, "end of run");
    /* A run resumes from storage only: the summary's step is storage's. */
    s->durable_step = storage_newest(s);
    if (j.rc < 0 && keep_tier(s, j.why)) {
        s->mem_dir[0] = '\0';
        return;
    }
    fb__ckpt_mem_dir_remove(s->mem_dir);
    s->mem_dir[0] = '\0';
}
