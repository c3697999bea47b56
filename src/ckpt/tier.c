/*
 * tier.c -- the node-memory tier of checkpoints (see tier.h and
 * docs/checkpoint.md, "Tiers").
 *
 * The memory tier is a second checkpoint directory, so everything about
 * shards, completeness and retention is store.c's and shard.c's: a step in
 * memory counts only when every rank's shard of it is committed there, as
 * in storage.  What this file adds is where a save goes, the copy to
 * storage, the node's cap, and restoring from the nearest tier.
 *
 * The cap's decision must be the same on every rank of a node, or a step
 * would end up split between the tiers and complete in neither: it depends
 * only on the step's size (this rank's shard times the node's ranks) and
 * the cap, never on what the directory holds at that moment.  A step fits
 * when the cap holds two steps of its size: the newest complete one, which
 * is never evicted, and the one being written.  Room for it is then made by
 * evicting steps older than the newest complete one, oldest first.
 */
#include "ckpt/tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/engine.h"
#include "ckpt/shard.h"
#include "ckpt/store.h"
#include "common/util.h"
#include "lib/lib.h"

#define SHM_DIR "/dev/shm"
#define MEM_PID_FILE "firebreak.pid"
#define MEM_KEPT_FILE "firebreak.kept"
#define MEM_OWNER_FILE "firebreak.owner"

static const char *const source_names[FB__TIER_COUNT_] = {
    [FB__TIER_MEMORY] = "memory",
    [FB__TIER_PEER] = "peer",
    [FB__TIER_STORAGE] = "storage",
};

const char *fb__tier_source_name(fb__tier_source t)
{
    return (unsigned)t < FB__TIER_COUNT_ ? source_names[t] : NULL;
}

fb__tier_source fb__tier_source_from_name(const char *name)
{
    for (int t = 1; name && t < FB__TIER_COUNT_; t++)
        if (!strcmp(name, source_names[t]))
            return (fb__tier_source)t;
    return FB__TIER_NONE;
}

/* ------------------------------------------------------------------------
 * Rank side
 * ---------------------------------------------------------------------- */

static int same_dir(const char *a, const char *b)
{
    struct stat x, y;
    return !stat(a, &x) && !stat(b, &y) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

static int env_num(const char *name, long long lo, long long hi, long long *out)
{
    const char *v = fb__getenv(name);
    if (!v || !*v)
        return 0;
    if (fb__parse_int(v, lo, hi, out)) {
        fb__say("%s=%s: expected a whole number from %lld to "
                "%lld\n", name, v, lo, hi);
        return -EINVAL;
    }
    return 1;
}

int fb__tier_open(fb_ckpt *ck, const char *opt_dir)
{
    fb__tier *t = &ck->tier;
    memset(t, 0, sizeof *t);
    const char *mem = fb__getenv("FIREBREAK_CKPT_MEM_DIR");
    if (!mem || !*mem)
        return 0;
    /* Only the supervisor's checkpoint directory has a memory tier: a
     * handle of the program's own elsewhere is left alone. */
    const char *sup = fb__lib_ckpt_dir();
    if (opt_dir && (!sup || !same_dir(opt_dir, sup)))
        return 0;
    long long every = 1, cap = 0, local = ck->world_size;
    if (env_num("FIREBREAK_CKPT_PERSIST_EVERY", 0, 1000000000, &every) < 0 ||
        env_num("FIREBREAK_CKPT_MEM_MAX", 0, FB__CKPT_MEM_MAX_BYTES, &cap) < 0 ||
        env_num("LOCAL_WORLD_SIZE", 1, 1000000, &local) < 0)
        return -EINVAL;
    long long per_node = 0, restore_step = -1;
    if (env_num("FIREBREAK_CKPT_MEM_PER_NODE", 0, 1, &per_node) < 0 ||
        env_num("FIREBREAK_CKPT_RESTORE_STEP", -1, 9999999999LL,
                &restore_step) < 0)
        return -EINVAL;
    /* Under slurm the node's watcher owns the directory but may start
     * after the ranks: the first to come creates it (the watcher then
     * writes its pid file into it). */
    if (per_node && mkdir(mem, 0700) && errno != EEXIST)
        fb__say("rank %d: creating %s: %s\n", ck->rank, mem,
                strerror(errno));
    struct stat st;
    int bad = stat(mem, &st) ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    if (bad) {
        fb__say("rank %d: node-memory checkpoints in %s: %s; "
                "saving to storage only\n", ck->rank, mem, strerror(bad));
        return 0;
    }
    if (fb__fmt(t->mem_dir, sizeof t->mem_dir, "%s", mem)) {
        t->mem_dir[0] = '\0';
        return -ENAMETOOLONG;
    }
    t->persist_every = (int)every;
    t->mem_max_bytes = (uint64_t)cap;
    t->node_ranks = (int)local;
    t->per_node = (int)per_node;
    t->restore_step = restore_step;
    return 0;
}

/* The shard's size, the same on every rank with the same tensors: data,
 * and the header at its longest (names and shapes in the metadata and the
 * index). */
static uint64_t shard_estimate(const fb_ckpt *ck)
{
    uint64_t b = 8 + 512;
    for (size_t i = 0; i < ck->n; i++)
        b += ck->t[i].bytes + 3 * strlen(ck->t[i].name) + 64 +
             (uint64_t)ck->t[i].ndim * 3 * 21 + 128;
    return b;
}

/* Remove a step directory of the memory tier: hidden name first (as
 * store.c does), so no one takes a half-removed step for a checkpoint.  1
 * removed by us, 0 gone already (another rank evicted it). */
static int evict_step(const char *dir, uint64_t step)
{
    char from[PATH_MAX], to[PATH_MAX];
    if (fb__ckpt_step_path(from, sizeof from, dir, step) ||
        fb__fmt(to, sizeof to, "%s/.deleted-step-%010llu.%d", dir,
                (unsigned long long)step, (int)getpid()))
        return 0;
    if (rename(from, to))
        return 0;
    fb__rm_rf(to);
    return 1;
}

/* Make room for `need` bytes of step `step` under the cap (cap 0: none,
 * every step older than the newest complete one goes): evict steps older
 * than the newest complete one, oldest first.  How many went. */
static int make_room(fb_ckpt *ck, uint64_t step, uint64_t need, uint64_t cap,
                     const char *why)
{
    int evicted = 0;
    fb__tier *t = &ck->tier;
    fb__ckpt_entry *v = NULL;
    size_t n = 0;
    if (fb__ckpt_scan(t->mem_dir, ck->world_size, 1, &v, &n))
        return 0;
    uint64_t used = 0, newest_complete = 0;
    int have_complete = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].step != step)
            used += v[i].bytes;
        if (v[i].complete && !have_complete && v[i].step != step) {
            newest_complete = v[i].step;
            have_complete = 1;
        }
    }
    for (size_t i = n; i-- > 0 && (!cap || used + need > cap);) {
        if (!have_complete || v[i].step >= newest_complete)
            break; /* never the newest complete, nor anything newer */
        used -= v[i].bytes;
        if (evict_step(t->mem_dir, v[i].step)) {
            evicted++;
            fb__lib_report(FB__REPORT_CKPT_DELETED, 0, v[i].step, v[i].bytes, 0, 0,
                           why);
        }
    }
    free(v);
    return evicted;
}

int fb__tier_evict_older(fb_ckpt *ck, uint64_t step)
{
    if (!ck->tier.mem_dir[0])
        return 0;
    return make_room(ck, step, 0, 0, "evicted from node memory (full)");
}

const char *fb__tier_save_dir(fb_ckpt *ck, uint64_t step)
{
    fb__tier *t = &ck->tier;
    if (!t->mem_dir[0])
        return ck->dir;
    t->saves++;
    if (!t->mem_max_bytes)
        return t->mem_dir;
    uint64_t need = shard_estimate(ck) * (uint64_t)t->node_ranks;
    if (need > t->mem_max_bytes / 2) {
        char text[FB__REPORT_TEXT_MAX];
        snprintf(text, sizeof text, "does not fit in node memory: %" PRIu64
                 " bytes for %d rank(s), --memory-ckpt-max %" PRIu64 " holds two "
                 "steps of %" PRIu64 " at most; saved to storage",
                 need, t->node_ranks, t->mem_max_bytes, t->mem_max_bytes / 2);
        fb__say("rank %d: checkpoint step %llu %s\n", ck->rank,
                (unsigned long long)step, text);
        fb__lib_report(FB__REPORT_NOTE, 0, step, need, 0, 0, text);
        return ck->dir;
    }
    char why[FB__REPORT_TEXT_MAX];
    snprintf(why, sizeof why, "evicted from node memory (--memory-ckpt-max %" PRIu64
             " bytes)", t->mem_max_bytes);
    (void)make_room(ck, step, need, t->mem_max_bytes, why);
    return t->mem_dir;
}

void fb__tier_committed(fb_ckpt *ck, uint64_t step, const char *dir)
{
    fb__tier *t = &ck->tier;
    if (!t->mem_dir[0] || dir != t->mem_dir)
        return;
    if (t->persist_every > 0 && t->saves % (uint64_t)t->persist_every == 0) {
        char why[FB__REPORT_TEXT_MAX + 300];
        int rc = fb__ckpt_copy_shard(t->mem_dir, ck->dir, step, ck->rank, 0, why,
                                     sizeof why);
        char text[FB__REPORT_TEXT_MAX];
        if (rc) {
            fb__say("rank %d: copying checkpoint step %llu to "
                    "storage failed: %s; it stays in node memory\n",
                    ck->rank, (unsigned long long)step, why);
            fb__lib_report(FB__REPORT_CKPT_FAILED, rc, step, 0, 0, 0, why);
        } else {
            snprintf(text, sizeof text, "persisted to storage (save %llu, "
                     "--persist-every %d)", (unsigned long long)t->saves,
                     t->persist_every);
            fb__lib_report(FB__REPORT_NOTE, 0, step, 0, 0, 0, text);
        }
    }
    if (ck->rank == 0 && ck->keep > 0)
        (void)fb__ckpt_retain(t->mem_dir, ck->world_size, ck->keep, 0, NULL, NULL);
}

static void tier_fallback(const fb_ckpt *ck, uint64_t step, int code,
                          fb__tier_source src, const char *why)
{
    char text[FB__REPORT_TEXT_MAX + 700];
    snprintf(text, sizeof text, "%s copy: %s", fb__tier_source_name(src), why);
    fb__say("rank %d: not restoring checkpoint step %llu: %s\n",
            ck->rank, (unsigned long long)step, text);
    fb__lib_report(FB__REPORT_RESTORE_FALLBACK, code, step, 0, 0, 0, text);
}

/* Per node: step is at or below the step the supervisor chose for every
 * rank, so an older one must not be taken (it would split the job). */
static int vouched_missed(const fb_ckpt *ck, uint64_t step)
{
    return ck->tier.per_node && ck->tier.restore_step >= 0 &&
           step <= (uint64_t)ck->tier.restore_step;
}

/* A tier's listing, newest step first, and where the walk is in it. */
typedef struct tier_list {
    const fb__ckpt_entry *v;
    size_t n, at;
    const char *dir;
    fb__tier_source src;
} tier_list;

/*
 * Every step in any tier, newest first; for each, node memory when it is
 * complete there, then a peer's copy (per node: <mem_dir>/peer, received
 * by the node's watcher), then storage; each shard verified (restore.c).
 * A step complete in none is an abandoned timeline: this rank's shards of
 * it are removed from its own tiers.
 */
static int restore_tiers(fb_ckpt *ck, tier_list *t, int nt, uint64_t *step_out,
                         uint64_t t0)
{
    char why[FB__REPORT_TEXT_MAX + 600];
    for (;;) {
        int have = 0;
        uint64_t step = 0;
        for (int k = 0; k < nt; k++)
            if (t[k].at < t[k].n && (!have || t[k].v[t[k].at].step > step)) {
                step = t[k].v[t[k].at].step;
                have = 1;
            }
        if (!have)
            break;
        int idx[3] = {-1, -1, -1}, any = 0;
        for (int k = 0; k < nt; k++)
            if (t[k].at < t[k].n && t[k].v[t[k].at].step == step)
                idx[k] = (int)t[k].at++;
        for (int k = 0; k < nt && !vouched_missed(ck, step + 1); k++) {
            if (idx[k] < 0 || !t[k].v[idx[k]].complete)
                continue;
            any = 1;
            uint64_t bytes = 0;
            int r = fb__ckpt_try_step(ck, t[k].dir, step, &bytes, why, sizeof why);
            if (r == -ENOMEM || r == FB_EMISMATCH) {
                fb__say("rank %d: restoring checkpoint step "
                        "%llu: %s\n", ck->rank, (unsigned long long)step, why);
                fb__lib_report(FB__REPORT_RESTORE_FALLBACK, r, step, 0, 0, 0, why);
                return r;
            }
            if (r) {
                tier_fallback(ck, step, r, t[k].src, why);
                continue;
            }
            fb__lib_report(FB__REPORT_RESTORE_DONE, 0, step, bytes,
                           fb__now_ns() - t0, 0, fb__tier_source_name(t[k].src));
            *step_out = step;
            return 0;
        }
        if (vouched_missed(ck, step)) {
            /* The step the supervisor chose for every rank was not
             * restored: an older one would split the job between steps. */
            break;
        }
        if (!any) {
            int m = idx[0], s = idx[nt - 1];
            fb__ckpt_say(why, sizeof why, "incomplete in every tier (%d of %d "
                         "shards in memory, %d in storage)",
                         m >= 0 ? t[0].v[m].shards : 0, ck->world_size,
                         s >= 0 ? t[nt - 1].v[s].shards : 0);
            fb__lib_report(FB__REPORT_RESTORE_FALLBACK, FB_ENOCKPT, step, 0, 0, 0, why);
            fb__say("rank %d: not restoring checkpoint step "
                    "%llu: %s\n", ck->rank, (unsigned long long)step, why);
            if (m >= 0)
                fb__ckpt_drop_own_shard(ck, ck->tier.mem_dir, step);
            if (s >= 0)
                fb__ckpt_drop_own_shard(ck, ck->dir, step);
        }
    }
    if (ck->tier.per_node && ck->tier.restore_step >= 0) {
        fb__ckpt_say(why, sizeof why, "checkpoint step %lld, chosen by the "
                     "supervisor, is in no tier of this node",
                     (long long)ck->tier.restore_step);
        fb__say("rank %d: %s\n", ck->rank, why);
        fb__lib_report(FB__REPORT_RESTORE_FALLBACK, FB_ECORRUPT,
                       (uint64_t)ck->tier.restore_step, 0, 0, 0, why);
        return FB_ECORRUPT;
    }
    return FB_ENOCKPT;
}

/* Per node: the node may hold other ranks' shards of a step (the ranks
 * that ran here before a node was replaced), not this one's. */
static int own_shard_here(const fb_ckpt *ck, const char *dir, uint64_t step)
{
    char path[PATH_MAX];
    return !fb__ckpt_shard_path(path, sizeof path, dir, step, ck->rank) &&
           access(path, F_OK) == 0;
}

int fb__tier_restore(fb_ckpt *ck, uint64_t *step_out)
{
    fb_phase before = fb__ckpt_phase();
    fb__lib_report(FB__REPORT_RESTORE_BEGIN, 0, 0, 0, 0, 0, NULL);
    fb_set_phase(FB_PHASE_RESTORE);
    uint64_t t0 = fb__now_ns();
    fb__ckpt_entry *vm = NULL, *vp = NULL, *vs = NULL;
    size_t nm = 0, np = 0, ns = 0;
    char peer_dir[PATH_MAX] = "";
    /* Per node, the copies the node's watcher received from other nodes
     * (src/supervisor/peer.c) are kept apart: a restore from them is a
     * restore from a peer. */
    if (ck->tier.per_node &&
        fb__fmt(peer_dir, sizeof peer_dir, "%s/" FB__TIER_PEER_SUBDIR, ck->tier.mem_dir))
        peer_dir[0] = '\0';
    int rc = fb__ckpt_scan(ck->tier.mem_dir, ck->world_size, 0, &vm, &nm);
    if (rc == -ENOENT)
        nm = 0, rc = 0;
    int rp = rc || !peer_dir[0] ? 0 : fb__ckpt_scan(peer_dir, ck->world_size, 0, &vp, &np);
    if (rp == -ENOENT || rp == -ENOTDIR)
        np = 0, rp = 0;
    int rs = rc || rp ? 0 : fb__ckpt_scan(ck->dir, ck->world_size, 0, &vs, &ns);
    if (rs == -ENOENT)
        ns = 0, rs = 0;
    if (rc || rp || rs) {
        fb__say("restore: listing %s: %s\n",
                rc ? ck->tier.mem_dir : rp ? peer_dir : ck->dir,
                fb_strerror(rc ? rc : rp ? rp : rs));
        rc = rc ? rc : rp ? rp : rs;
        goto out;
    }
    /* Per node (slurm), these directories hold some ranks only: a step
     * counts there when the supervisor says every rank has it. */
    for (size_t i = 0; ck->tier.per_node && i < nm; i++)
        vm[i].complete = (int64_t)vm[i].step == ck->tier.restore_step &&
                         own_shard_here(ck, ck->tier.mem_dir, vm[i].step);
    for (size_t i = 0; i < np; i++)
        vp[i].complete = (int64_t)vp[i].step == ck->tier.restore_step &&
                         own_shard_here(ck, peer_dir, vp[i].step);
    for (size_t i = 0; i < nm; i++)
        (void)fb__ckpt_clean_tmp(ck->tier.mem_dir, vm[i].step, ck->rank, (int)getpid());
    for (size_t i = 0; i < ns; i++)
        (void)fb__ckpt_clean_tmp(ck->dir, vs[i].step, ck->rank, (int)getpid());
    tier_list t[3] = {
        {vm, nm, 0, ck->tier.mem_dir, FB__TIER_MEMORY},
        {vp, np, 0, peer_dir, FB__TIER_PEER},
        {vs, ns, 0, ck->dir, FB__TIER_STORAGE}};
    uint64_t step = 0;
    rc = restore_tiers(ck, t, 3, &step, t0);
    if (rc == 0 && step_out)
        *step_out = step;
    if (rc == FB_ENOCKPT)
        fb__lib_report(FB__REPORT_RESTORE_NONE, 0, 0, 0, 0, 0, NULL);
out:
    free(vm);
    free(vp);
    free(vs);
    fb_set_phase(before);
    return rc;
}

/* ------------------------------------------------------------------------
 * Copying a shard between tiers
 * ---------------------------------------------------------------------- */

int fb__ckpt_verify_shard(const char *path, uint64_t step, int rank, char *why,
                          size_t why_size)
{
    int fd = -1;
    fb__st_header *h = NULL;
    int rc = fb__st_open(path, &fd, &h, why, why_size);
    if (!rc && !(rc = fb__shard_check_place(h, path, step, rank, 0, why, why_size)) &&
        !(rc = fb__shard_check_meta(h, path, why, why_size)))
        rc = fb__shard_read_verify(fd, h, path, NULL, 2, NULL, NULL, NULL, NULL,
                                   why, why_size);
    fb__st_free(h);
    if (fd >= 0)
        close(fd);
    return rc;
}

int fb__ckpt_copy_shard(const char *from_dir, const char *to_dir, uint64_t step,
                        int rank, int verify, char *why, size_t why_size)
{
    char src[PATH_MAX];
    if (fb__ckpt_shard_path(src, sizeof src, from_dir, step, rank)) {
        fb__ckpt_say(why, why_size, "checkpoint path too long");
        return -ENAMETOOLONG;
    }
    int rc;
    if (verify && (rc = fb__ckpt_verify_shard(src, step, rank, why, why_size)))
        return rc;
    int in = fb__open_regular(src, 0);
    if (in < 0) {
        fb__ckpt_say(why, why_size, "open %s: %s", src, strerror(-in));
        return in;
    }
    struct stat st;
    fb__shard_out out;
    if (fstat(in, &st)) {
        rc = -errno;
        fb__ckpt_say(why, why_size, "stat %s: %s", src, strerror(-rc));
        close(in);
        return rc;
    }
    /* The step directory, the temporary, its blocks (store.h). */
    if ((rc = fb__shard_out_begin(&out, to_dir, step, rank, (uint64_t)st.st_size,
                                  why, why_size))) {
        close(in);
        return rc;
    }
    off_t off = 0;
    while (off < st.st_size) {
        ssize_t r = sendfile(out.fd, in, &off, (size_t)(st.st_size - off));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = r < 0 ? -errno : -EIO;
            fb__ckpt_say(why, why_size, "copy %s to %s: %s", src, out.tmp,
                         strerror(-rc));
            fb__shard_out_abort(&out);
            close(in);
            return rc;
        }
    }
    close(in);
    return fb__shard_out_commit(&out, step, NULL, why, why_size);
}

/* ------------------------------------------------------------------------
 * Supervisor side: the directory's life
 * ---------------------------------------------------------------------- */

int fb__ckpt_mem_dir_path(char *buf, size_t size, const char *job_id)
{
    return fb__fmt(buf, size, SHM_DIR "/fb.%s.mem", job_id);
}

int fb__ckpt_mem_dir_create(const char *path)
{
    if (mkdir(path, 0700) && errno != EEXIST)
        return -errno;
    char pidfile[PATH_MAX], text[32];
    if (fb__fmt(pidfile, sizeof pidfile, "%s/" MEM_PID_FILE, path))
        return -ENAMETOOLONG;
    snprintf(text, sizeof text, "%d\n", (int)getpid());
    /* Held locked: alive for a supervisor in another pid namespace too (a
     * container sharing /dev/shm), which read our pid as gone and removed
     * the directory of a running job.  One tier per process. */
    static int lock_fd = -1;
    return fb__write_file_atomic_held(pidfile, text, strlen(text), &lock_fd);
}

/*
 * Ranks may still be writing into the directory while it goes: a node
 * watcher whose supervisor died removes it while the ranks run on until
 * Slurm ends the allocation, and a walk that removes entry by entry misses
 * a step directory made behind it, so the directory stayed (slurm_peer
 * case 6, CI at 38a9151).  Ranks make their files by path (store.c), so it
 * is first renamed to a name none of them writes under, then removed
 * there.  The name keeps the form fb.<name>.mem: a remover killed midway
 * leaves it to the stale sweep below (its pid file names a process that
 * is gone).  A removal that still finds the directory not empty (a file
 * opened before the rename, renamed into it after) tries again a few
 * times.
 */
#define MEM_REMOVE_TRIES 20

void fb__ckpt_mem_dir_remove(const char *path)
{
    if (!path || !path[0])
        return;
    char gone[PATH_MAX];
    size_t n = strlen(path);
    int mem = n > 4 && !strcmp(path + n - 4, ".mem");
    const char *victim = path;
    if (!fb__fmt(gone, sizeof gone, "%.*s_gone%d%s", (int)(n - 4 * mem), path,
                 (int)getpid(), mem ? ".mem" : "") &&
        !rename(path, gone))
        victim = gone;
    for (int t = 0; fb__rm_rf(victim) == -ENOTEMPTY && t < MEM_REMOVE_TRIES; t++) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

int fb__ckpt_mem_dir_keep(const char *path, const char *why)
{
    char kept[PATH_MAX];
    if (fb__fmt(kept, sizeof kept, "%s/" MEM_KEPT_FILE, path))
        return -ENAMETOOLONG;
    return fb__write_file_atomic(kept, why, strlen(why));
}

int fb__ckpt_mem_dir_set_owner(const char *path, const char *ckpt_dir, int world)
{
    char f[PATH_MAX], text[PATH_MAX + 32];
    if (fb__fmt(f, sizeof f, "%s/" MEM_OWNER_FILE, path) ||
        fb__fmt(text, sizeof text, "%d\n%s", world, ckpt_dir))
        return -ENAMETOOLONG;
    return fb__write_file_atomic(f, text, strlen(text));
}

/* What the tier records of its run: "<world>\n<checkpoint directory>".
 * Left unknown when missing or not of that form. */
static void read_owner(fb__mem_stale *t)
{
    char f[PATH_MAX], *text = NULL;
    size_t len = 0;
    long long world;
    if (fb__fmt(f, sizeof f, "%s/" MEM_OWNER_FILE, t->path) ||
        fb__read_file(f, PATH_MAX + 32, &text, &len))
        return;
    char *nl = strchr(text, '\n');
    if (nl && nl[1] == '/' && strlen(nl + 1) == len - (size_t)(nl + 1 - text)) {
        *nl = '\0';
        if (!fb__parse_int(text, 1, INT_MAX, &world) &&
            !fb__fmt(t->ckpt_dir, sizeof t->ckpt_dir, "%s", nl + 1))
            t->world = (int)world;
        else
            t->ckpt_dir[0] = '\0';
    }
    free(text);
}

/* Stale: its pid file names a process that is gone; without a readable pid
 * file, when older than a minute (a supervisor killed between mkdir and
 * writing the file). */
static int mem_dir_stale(const char *path, const struct stat *st)
{
    char pidfile[PATH_MAX];
    int gone = fb__fmt(pidfile, sizeof pidfile, "%s/" MEM_PID_FILE, path)
                   ? -1 : fb__pid_file_gone(pidfile);
    if (gone >= 0)
        return gone;
    return time(NULL) - st->st_mtime >= 60;
}

int fb__ckpt_mem_dir_cleanup_stale(int (*fn)(void *arg, const fb__mem_stale *t),
                                   void *arg)
{
    DIR *d = opendir(SHM_DIR);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        char path[PATH_MAX];
        struct stat st;
        if (n < 8 || strncmp(e->d_name, "fb.", 3) || strcmp(e->d_name + n - 4, ".mem") ||
            fb__fmt(path, sizeof path, SHM_DIR "/%s", e->d_name) ||
            lstat(path, &st) || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
            continue; /* not ours to remove */
        if (!mem_dir_stale(path, &st))
            continue;
        fb__mem_stale t = {.world = 0};
        char kept[PATH_MAX];
        if (fb__fmt(t.path, sizeof t.path, "%s", path) ||
            fb__fmt(kept, sizeof kept, "%s/" MEM_KEPT_FILE, path))
            continue;
        t.kept = !access(kept, F_OK);
        read_owner(&t);
        /* A kept one holds checkpoints nowhere else: the user's to take,
         * or its own checkpoint directory's run's. */
        if ((fn ? fn(arg, &t) : !t.kept) && fb__rm_rf(path) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

/* Copy every shard of step from mem_dir to dir but those already there
 * (a rank's own every-M-th copy); on a failure, remove the shards this
 * copy made, so storage does not hold a step it cannot complete. */
static int persist_step(const char *mem_dir, const char *dir, int world, uint64_t step,
                        char *why, size_t why_size)
{
    int rc = 0, r = 0;
    unsigned char *made = calloc((size_t)world, 1);
    if (!made) {
        fb__ckpt_say(why, why_size, "out of memory");
        return -ENOMEM;
    }
    for (; r < world && !rc; r++) {
        char p[PATH_MAX];
        struct stat st;
        if (!fb__ckpt_shard_path(p, sizeof p, dir, step, r) && !lstat(p, &st))
            continue;
        rc = fb__ckpt_copy_shard(mem_dir, dir, step, r, 1, why, why_size);
        made[r] = !rc;
    }
    for (int k = 0; rc && k < r; k++) {
        char p[PATH_MAX];
        if (made[k] && !fb__ckpt_shard_path(p, sizeof p, dir, step, k))
            unlink(p);
    }
    if (rc) {
        char sdir[PATH_MAX];
        if (!fb__ckpt_step_path(sdir, sizeof sdir, dir, step))
            rmdir(sdir); /* only when empty */
    }
    free(made);
    return rc;
}

int fb__ckpt_mem_persist_newest(const char *mem_dir, const char *dir, int world,
                                uint64_t *step_out, char *why, size_t why_size)
{
    fb__ckpt_entry *vm = NULL, *vs = NULL;
    size_t nm = 0, ns = 0;
    int rc = fb__ckpt_scan(mem_dir, world, 0, &vm, &nm);
    if (rc) {
        fb__ckpt_say(why, why_size, "listing %s: %s", mem_dir, fb_strerror(rc));
        return rc == -ENOENT ? 0 : rc;
    }
    if (fb__ckpt_scan(dir, world, 0, &vs, &ns))
        ns = 0;
    int64_t newest_st = -1;
    for (size_t i = 0; i < ns && newest_st < 0; i++)
        if (fb__ckpt_job_complete(&vs[i]))
            newest_st = (int64_t)vs[i].step;
    free(vs);
    /* Newest first, each complete step newer than storage's until one is
     * copied whole: one bad shard of the newest must not lose the older
     * intact ones.  why keeps the newest failure. */
    int tried = 0, first_rc = 0, have = 0;
    char failed[FB__REPORT_TEXT_MAX + 600] = "";
    rc = 0;
    for (size_t i = 0; i < nm && rc != 1; i++) {
        if (!fb__ckpt_job_complete(&vm[i]))
            continue;
        have = 1;
        if ((int64_t)vm[i].step <= newest_st)
            break;
        char one[sizeof failed];
        int r = persist_step(mem_dir, dir, world, vm[i].step, one, sizeof one);
        if (!r) {
            *step_out = vm[i].step;
            rc = 1;
        } else if (!tried++) {
            first_rc = r;
            snprintf(failed, sizeof failed, "checkpoint %llu: %s",
                     (unsigned long long)vm[i].step, one);
        }
    }
    free(vm);
    if (rc == 1) {
        if (tried)
            fb__ckpt_say(why, why_size, "%s", failed);
        else
            why[0] = '\0';
        return 1;
    }
    if (tried) {
        fb__ckpt_say(why, why_size, "%s%s", failed, tried > 1 ?
                     "; no older complete checkpoint copied either" : "");
        return first_rc;
    }
    if (!have)
        fb__ckpt_say(why, why_size, "node memory holds no complete checkpoint yet");
    else
        fb__ckpt_say(why, why_size, "storage already holds checkpoint %lld, node memory's "
                     "newest complete one", (long long)newest_st);
    return 0;
}
