/*
 * nodemem.c -- the node-memory checkpoint tier under the slurm launcher
 * (docs/slurm.md, "Checkpoint tiers"; docs/checkpoint.md, "Tiers").
 *
 * Each node's /dev/shm/fb.<job>.mem holds only the shards of the ranks
 * that ran there, so no one directory can show that a step is complete,
 * and the supervisor, on no node, cannot look.  It decides from what the
 * ranks report instead: every `ckpt_committed` says where the shard went
 * (node memory or storage), every `persisted to storage` note adds the
 * storage copy, and the rank's node at that moment is known.  Before each
 * launch, once the attempt's nodes are placed, the step every rank will
 * restore is the newest one of which each rank has a copy it can read
 * from where it will run: in storage, or in the memory of the very node
 * it is placed on again.  The ranks get it as FIREBREAK_CKPT_RESTORE_STEP
 * (src/ckpt/tier.c), restore it from their node's memory, else storage,
 * and never an older one.
 *
 * The directory itself belongs to each node's watcher (cmd_watch.c
 * creates it and writes its pid file); at the end of the run one more
 * step on every node not left out (`firebreak watch --mem-finish`) copies
 * the chosen step's shards to storage where storage lacks them, each
 * verified by hash, and removes the directory.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt/store.h"
#include "ckpt/tier.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "lib/segment.h"
#include "supervisor/fbw1.h"
#include "supervisor/watcher.h"
#include "supervisor/sup.h"

/* Copies remembered per rank, newest last: ranks that do not wait for
 * each other (no collective) can be dozens of checkpoints apart when one
 * is lost. */
#define NM_KEEP 128

typedef struct nm_copy {
    int64_t step;
    int storage;                    /* else the memory of `node`        */
    char node[FB__FBW1_NODE_MAX];
} nm_copy;

typedef struct nm_rank {
    nm_copy c[NM_KEEP];
    int n;
} nm_rank;

static nm_rank *g_ranks;
static int g_world;

static int active(const fb__sup *s)
{
    return s->slurm && s->mem_dir[0];
}

static nm_rank *rank_of(fb__sup *s, int rank)
{
    if (!g_ranks || g_world != s->world) {
        free(g_ranks);
        g_world = 0;
        g_ranks = calloc((size_t)s->world, sizeof *g_ranks);
        if (!g_ranks)
            return NULL;
        g_world = s->world;
    }
    return rank >= 0 && rank < g_world ? &g_ranks[rank] : NULL;
}

static void remember(nm_rank *k, int64_t step, int storage, const char *node)
{
    for (int i = 0; i < k->n; i++)
        if (k->c[i].step == step && k->c[i].storage == storage &&
            (storage || !strcmp(k->c[i].node, node)))
            return;
    if (k->n == NM_KEEP) {
        memmove(k->c, k->c + 1, sizeof k->c[0] * (NM_KEEP - 1));
        k->n--;
    }
    nm_copy *c = &k->c[k->n++];
    memset(c, 0, sizeof *c);
    c->step = step;
    c->storage = storage;
    snprintf(c->node, sizeof c->node, "%s", storage ? "" : node);
}

void fb__sup_nodemem_on_report(fb__sup *s, int rank, const fb__seg_report *r)
{
    if (!active(s))
        return;
    nm_rank *k = rank_of(s, rank);
    if (!k)
        return;
    const char *node, *host;
    fb__sup_rank_where(s, rank, &node, &host);
    char text[FB__REPORT_TEXT_MAX + 1];
    memcpy(text, r->text, FB__REPORT_TEXT_MAX);
    text[FB__REPORT_TEXT_MAX] = '\0';
    if (r->kind == FB__REPORT_CKPT_COMMITTED) {
        int storage = strstr(text, ", in storage") != NULL;
        if (storage || (node && strstr(text, ", in node memory")))
            remember(k, (int64_t)r->step, storage, node ? node : "");
    } else if (r->kind == FB__REPORT_NOTE &&
               !strncmp(text, "persisted to storage", 20)) {
        remember(k, (int64_t)r->step, 1, "");
    } else if (r->kind == FB__REPORT_RESTORE_FALLBACK && r->code == FB_ECORRUPT) {
        /* The memory copy the rank was sent to is not there (or failed its
         * hashes): not to be chosen again. */
        for (int i = 0; i < k->n; i++)
            if (k->c[i].step == (int64_t)r->step && !k->c[i].storage) {
                memmove(k->c + i, k->c + i + 1, sizeof k->c[0] * (size_t)(k->n - i - 1));
                k->n--;
                i--;
            }
    }
}

/* Can rank read its copy of step from where it is placed now? */
static int readable(const fb__sup *s, const nm_rank *k, int rank, int64_t step,
                    int *from_memory)
{
    const char *node, *host;
    fb__sup_rank_where(s, rank, &node, &host);
    int storage = 0;
    for (int i = 0; i < k->n; i++) {
        if (k->c[i].step != step)
            continue;
        if (!k->c[i].storage && node && !strcmp(k->c[i].node, node)) {
            *from_memory = 1;
            return 1;
        }
        storage |= k->c[i].storage;
    }
    *from_memory = 0;
    return storage;
}

/* The newest step of which every rank has a copy it can read where it is
 * placed now; how many ranks read it from memory; -1 none (*lacking: the
 * first rank without a copy of rank 0's newest step). */
static int64_t choose(const fb__sup *s, int *from_memory, int *lacking)
{
    const nm_rank *k0 = &g_ranks[0];
    int64_t best = -1;
    *from_memory = 0;
    *lacking = -1;
    for (int i = 0; i < k0->n; i++) {
        int64_t step = k0->c[i].step;
        if (step <= best)
            continue;
        int ok = 1, mem = 0, r = 0;
        for (; r < g_world && ok; r++) {
            int m = 0;
            ok = readable(s, &g_ranks[r], r, step, &m);
            mem += m;
        }
        if (ok) {
            best = step;
            *from_memory = mem;
        } else if (i == k0->n - 1) {
            *lacking = r - 1;
        }
    }
    return best;
}

int64_t fb__sup_nodemem_restore_step(fb__sup *s)
{
    if (!active(s) || !rank_of(s, 0))
        return -1;
    int mem, lacking;
    int64_t best = choose(s, &mem, &lacking);
    if (best >= 0)
        fb__sup_log(s, "attempt %d will restore checkpoint %lld: %d of %d ranks "
                    "from their node's memory, the others from storage",
                    s->attempt, (long long)best, mem, g_world);
    else if (g_ranks[0].n)
        fb__sup_log(s, "attempt %d: no checkpoint every rank can read where it "
                    "runs now (rank %d has no copy of step %lld there)", s->attempt,
                    lacking, (long long)g_ranks[0].c[g_ranks[0].n - 1].step);
    return best;
}

void fb__sup_nodemem_finish(fb__sup *s)
{
    if (!active(s))
        return;
    int64_t step = -1;
    int mem, lacking;
    if (rank_of(s, 0))
        step = choose(s, &mem, &lacking);
    char st[32], world[16], log_path[PATH_MAX];
    snprintf(st, sizeof st, "%lld", (long long)step);
    snprintf(world, sizeof world, "%d", s->world);
    snprintf(log_path, sizeof log_path, "%s/slurm-mem-finish.log", s->logs_dir);
    const char *args[] = {"--mem-finish", "--job", s->job_id, "--ckpt-dir",
                          s->ckpt_dir, "--world", world, "--step", st, NULL};
    int rc = fb__sup_slurm_on_nodes(s, args, log_path, 60000);
    if (rc)
        fb__sup_warn(s, "end of run: the node-memory step on the nodes failed "
                        "(%s; %s)", rc > 0 ? "exit status" : fb_strerror(rc), log_path);
    else
        fb__sup_log(s, "end of run: node memory removed on every node%s",
                    step >= 0 ? ", its newest checkpoint copied to storage where "
                                "storage lacked it" : "");
    free(g_ranks);
    g_ranks = NULL;
    g_world = 0;
}

/* ---- on the node (`firebreak watch --mem-finish`) ---- */

int fb__nodemem_finish_here(const char *job, const char *ckpt_dir, int world,
                            long long step, FILE *err)
{
    char dir[PATH_MAX], why[1024];
    if (strchr(job, '/') || !strcmp(job, "..") ||
        fb__ckpt_mem_dir_path(dir, sizeof dir, job)) {
        fprintf(err, "firebreak watch: --job: not a job id: %s\n", job);
        return 2;
    }
    int failed = 0;
    for (int r = 0; step >= 0 && r < world; r++) {
        char from[PATH_MAX], to[PATH_MAX];
        if (fb__ckpt_shard_path(from, sizeof from, dir, (uint64_t)step, r) ||
            fb__ckpt_shard_path(to, sizeof to, ckpt_dir, (uint64_t)step, r) ||
            access(from, F_OK) || !access(to, F_OK))
            continue;
        int rc = fb__ckpt_copy_shard(dir, ckpt_dir, (uint64_t)step, r, 1, why,
                                     sizeof why);
        if (rc) {
            fprintf(err, "firebreak watch: rank %d's shard of step %lld not "
                         "copied to storage: %s\n", r, step, why);
            failed = 1;
        }
    }
    fb__ckpt_mem_dir_remove(dir);
    return failed;
}

void fb__nodemem_own(FILE *err)
{
    const char *dir = fb__getenv("FIREBREAK_CKPT_MEM_DIR");
    if (!dir || !*dir)
        return;
    int rc = fb__ckpt_mem_dir_create(dir);
    if (rc)
        fprintf(err, "firebreak watch: node-memory checkpoints in %s: %s\n", dir,
                fb_strerror(rc));
}
