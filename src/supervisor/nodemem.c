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
#include "common/rundir.h"
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
#define NM_FETCH_TIMEOUT "60s"     /* `watch --mem-fetch`'s own limit     */
#define NM_FETCH_STEP_MS 90000     /* the srun step's                     */

typedef enum {
    NM_STORAGE,                     /* the shared checkpoint directory   */
    NM_MEMORY,                      /* the memory of the rank's node then */
    NM_PEER                         /* a peer copy in `node`'s memory     */
} nm_kind;

typedef struct nm_copy {
    int64_t step;
    nm_kind kind;
    char node[FB__FBW1_NODE_MAX];   /* MEMORY, PEER: the node holding it  */
} nm_copy;

typedef struct nm_rank {
    nm_copy c[NM_KEEP];
    int n;
} nm_rank;

/* How a rank placed on a node reads a step, best first. */
typedef enum {
    NM_WAY_MEMORY,                  /* its own copy, in this node's memory */
    NM_WAY_PEER,                    /* a peer copy in this node's memory   */
    NM_WAY_FETCH,                   /* a copy on another live node, moved
                                       here before the launch             */
    NM_WAY_STORAGE,
    NM_WAY_NONE
} nm_way;

static nm_rank *g_ranks;
static int g_world;
static int g_decided_attempt = -1;  /* the attempt g_decided is for       */
static int64_t g_decided;
static int g_news;                  /* a copy was added since the last drop */
static int64_t g_dropped = -1;      /* older steps were dropped on the nodes */
static int64_t g_dropped_keep[FB__FBW1_DROP_KEEP_MAX]; /* ... but these     */
static int g_dropped_nkeep;
static uint64_t g_drop_ns;          /* when the last drop was considered    */
/* The step the watchers were told to replicate (`fbw1 send`), -1 none:
 * every node copies the same steps, so that one step at least has its
 * copies on other nodes for every rank. */
static int64_t g_target = -1;
static int g_target_attempt = -1;   /* the attempt whose watchers were told */
static uint64_t g_target_ns;        /* when                                 */
static int g_target_said;           /* its lateness was logged              */
#define TARGET_LATE_NS 120000000000ull

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

static void remember(nm_rank *k, int64_t step, nm_kind kind, const char *node)
{
    if (kind == NM_STORAGE)
        node = "";
    for (int i = 0; i < k->n; i++)
        if (k->c[i].step == step && k->c[i].kind == kind && !strcmp(k->c[i].node, node))
            return;
    if (k->n == NM_KEEP) {
        memmove(k->c, k->c + 1, sizeof k->c[0] * (NM_KEEP - 1));
        k->n--;
    }
    g_news = 1;
    nm_copy *c = &k->c[k->n++];
    memset(c, 0, sizeof *c);
    c->step = step;
    c->kind = kind;
    snprintf(c->node, sizeof c->node, "%s", node);
}

/* Forget rank k's copies in node memory that match (step -1: any step;
 * node NULL: any node). */
static void forget(nm_rank *k, int64_t step, const char *node)
{
    for (int i = 0; i < k->n; i++)
        if (k->c[i].kind != NM_STORAGE && (step < 0 || k->c[i].step == step) &&
            (!node || !strcmp(k->c[i].node, node))) {
            memmove(k->c + i, k->c + i + 1, sizeof k->c[0] * (size_t)(k->n - i - 1));
            k->n--;
            i--;
        }
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
            remember(k, (int64_t)r->step, storage ? NM_STORAGE : NM_MEMORY,
                     node ? node : "");
    } else if (r->kind == FB__REPORT_NOTE &&
               !strncmp(text, "persisted to storage", 20)) {
        remember(k, (int64_t)r->step, NM_STORAGE, "");
    } else if (r->kind == FB__REPORT_RESTORE_FALLBACK && r->code == FB_ECORRUPT) {
        /* The memory copy the rank was sent to is not there (or failed its
         * hashes): not to be chosen again, nor any other node's. */
        forget(k, (int64_t)r->step, NULL);
    }
}

void fb__sup_nodemem_on_peer(fb__sup *s, const char *node, int64_t step, int rank0,
                             int count)
{
    if (!active(s))
        return;
    for (int r = rank0; r < rank0 + count; r++) {
        nm_rank *k = rank_of(s, r);
        if (k)
            remember(k, step, NM_PEER, node);
    }
}

void fb__sup_nodemem_on_node_lost(fb__sup *s, const char *node)
{
    if (!active(s) || !rank_of(s, 0))
        return;
    for (int r = 0; r < g_world; r++)
        forget(&g_ranks[r], -1, node);
}

int fb__sup_nodemem_peer_port(const fb__sup *s)
{
    if (!active(s) || fb__sup_slurm_nnodes(s) < 2 || fb__sup_slurm_peer_copies(s) < 1)
        return 0;
    const char *v = fb__getenv("FIREBREAK_CKPT_PEER");
    if (v && !strcmp(v, "0"))
        return 0;
    long long port;
    v = fb__getenv("FIREBREAK_CKPT_PEER_PORT");
    if (v && !fb__parse_int(v, 1, 65534, &port))
        return (int)port;
    /* Two ports per job, 40000..59999, apart for jobs sharing a node. */
    uint32_t h = 2166136261u;
    for (const char *p = s->job_id; *p; p++)
        h = (h ^ (unsigned char)*p) * 16777619u;
    return 40000 + 2 * (int)(h % 10000);
}

/* Whether two nodes share a failure domain (NULL or "": one of its own). */
static int same_domain(const char *a, const char *b)
{
    return a && a[0] && b && b[0] && !strcmp(a, b);
}

/* Whether node j may hold copies of node i's steps: another node, and
 * outside i's domain when some node is (spread). */
static int peer_ok(const char *const *domain, int i, int j, int spread)
{
    return j != i && (!spread || !same_domain(domain[i], domain[j]));
}

int fb__peer_place(const char *const *domain, int n, int k, int *peer)
{
    int short_of = 0;
    for (int i = 0; i < n; i++) {
        /* Domains that hold every node say nothing: the next nodes. */
        int spread = 0;
        for (int d = 1; d < n && !spread; d++)
            spread = !same_domain(domain[i], domain[(i + d) % n]);
        /* First the next nodes each of a domain no copy is in yet, then
         * the next others outside i's domain: K copies over as many
         * domains as there are. */
        int got = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int d = 1; d < n && got < k; d++) {
                int j = (i + d) % n, taken = 0;
                if (!peer_ok(domain, i, j, spread))
                    continue;
                for (int c = 0; c < got && !taken; c++)
                    taken = peer[i * k + c] == j ||
                            (!pass && same_domain(domain[peer[i * k + c]], domain[j]));
                if (!taken)
                    peer[i * k + got++] = j;
            }
        if (got < k)
            short_of++;
        for (int c = got; c < k; c++)
            peer[i * k + c] = -1;
    }
    return short_of;
}

void fb__peer_ring(const char *const *domain, int n, int *peer)
{
    (void)fb__peer_place(domain, n, 1, peer);
}

int fb__peer_domain_of(const char *spec, const char *node, char *buf, size_t size)
{
    buf[0] = '\0';
    if (!spec)
        return 0;
    if (strlen(spec) > FB__PEER_PLAN_MAX)
        return -E2BIG;
    size_t nl = strlen(node);
    for (const char *p = spec; *p;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq || eq == p || eq == p + len - 1 || (size_t)(p + len - eq - 1) >= size)
            return -EINVAL;
        if ((size_t)(eq - p) == nl && !strncmp(p, node, nl)) {
            memcpy(buf, eq + 1, (size_t)(p + len - eq - 1));
            buf[p + len - eq - 1] = '\0';
        }
        p = c ? c + 1 : p + len;
    }
    return 0;
}

/* How rank reads its copy of step from where it is placed now (*src: the
 * copy to fetch, for NM_WAY_FETCH). */
static nm_way way(const fb__sup *s, const nm_rank *k, int rank, int64_t step,
                  int fetch, const nm_copy **src)
{
    const char *node, *host;
    fb__sup_rank_where(s, rank, &node, &host);
    nm_way best = NM_WAY_NONE;
    for (int i = 0; i < k->n; i++) {
        const nm_copy *c = &k->c[i];
        nm_way w = NM_WAY_NONE;
        if (c->step != step)
            continue;
        if (c->kind == NM_STORAGE)
            w = NM_WAY_STORAGE;
        else if (node && !strcmp(c->node, node))
            w = c->kind == NM_MEMORY ? NM_WAY_MEMORY : NM_WAY_PEER;
        else if (fetch && node && fb__sup_slurm_node_up(s, c->node))
            w = NM_WAY_FETCH;
        if (w < best || (w == NM_WAY_FETCH && best == NM_WAY_FETCH &&
                         c->kind == NM_MEMORY)) {
            best = w;
            if (w == NM_WAY_FETCH)
                *src = c;
        }
    }
    return best;
}

/* The newest step of which every rank has a copy it can read where it is
 * placed now; per way, how many ranks read it so; -1 none (*lacking: the
 * first rank without a copy of rank 0's newest step). */
static int64_t choose(const fb__sup *s, int fetch, int counts[NM_WAY_NONE],
                      int *lacking)
{
    const nm_rank *k0 = &g_ranks[0];
    int64_t best = -1;
    *lacking = -1;
    memset(counts, 0, sizeof(int) * NM_WAY_NONE);
    for (int i = 0; i < k0->n; i++) {
        int64_t step = k0->c[i].step;
        if (step <= best)
            continue;
        int n[NM_WAY_NONE] = {0}, r = 0, ok = 1;
        for (; r < g_world && ok; r++) {
            const nm_copy *src = NULL;
            nm_way w = way(s, &g_ranks[r], r, step, fetch, &src);
            ok = w != NM_WAY_NONE;
            if (ok)
                n[w]++;
        }
        if (ok) {
            best = step;
            memcpy(counts, n, sizeof n);
        } else if (i == k0->n - 1) {
            *lacking = r - 1;
        }
    }
    return best;
}

/* Append to a comma-separated list; -1 when it does not fit. */
static int add(char *buf, size_t size, size_t *len, const char *item)
{
    int w = snprintf(buf + *len, size - *len, "%s%s", *len ? "," : "", item);
    if (w < 0 || (size_t)w >= size - *len)
        return -1;
    *len += (size_t)w;
    return 0;
}

/* Move the shards of `step` that ranks will read from other nodes to the
 * nodes they are placed on (`firebreak watch --mem-fetch` there and on
 * the nodes holding them).  0 when every one arrived. */
static int fetch(fb__sup *s, int64_t step, int port)
{
    static char plan[FB__PEER_PLAN_MAX], nodes[FB__PEER_PLAN_MAX];
    static char seen[FB__FBW1_NODEID_MAX + 1][FB__FBW1_NODE_MAX];
    size_t plen = 0, nlen = 0;
    int nseen = 0;
    for (int r = 0; r < g_world; r++) {
        const nm_copy *src = NULL;
        const char *node, *host;
        if (way(s, &g_ranks[r], r, step, 1, &src) != NM_WAY_FETCH)
            continue;
        fb__sup_rank_where(s, r, &node, &host);
        char item[16 + 3 * FB__FBW1_NODE_MAX];
        snprintf(item, sizeof item, "%d:%s:%c:%s:%s", r, src->node,
                 src->kind == NM_MEMORY ? 'm' : 'p', node,
                 fb__sup_slurm_node_addr(s, node));
        if (add(plan, sizeof plan, &plen, item))
            return -E2BIG;
        const char *both[2] = {src->node, node};
        for (int j = 0; j < 2; j++) {
            int i = 0;
            while (i < nseen && strcmp(seen[i], both[j]))
                i++;
            if (i < nseen)
                continue;
            if (nseen == FB__FBW1_NODEID_MAX + 1 || add(nodes, sizeof nodes, &nlen, both[j]))
                return -E2BIG;
            snprintf(seen[nseen++], sizeof seen[0], "%s", both[j]);
        }
    }
    char st[32], world[16], pt[16], log_path[PATH_MAX];
    snprintf(st, sizeof st, "%lld", (long long)step);
    snprintf(world, sizeof world, "%d", s->world);
    snprintf(pt, sizeof pt, "%d", port + 1);
    char dir[PATH_MAX];
    if (fb__rundir_path(dir, sizeof dir, s->run_dir, FB__RUNDIR_SLURM_LOGS, s->attempt) ||
        fb__fmt(log_path, sizeof log_path, "%s/mem-fetch.log", dir))
        return -ENAMETOOLONG;
    const char *args[] = {"--mem-fetch", "--job", s->job_id, "--world", world,
                          "--step", st, "--port", pt, "--plan", plan, "--timeout",
                          NM_FETCH_TIMEOUT, NULL};
    return fb__sup_slurm_on_nodes(s, nodes, args, log_path, NM_FETCH_STEP_MS);
}

int64_t fb__sup_nodemem_restore_step(fb__sup *s)
{
    if (!active(s) || !rank_of(s, 0))
        return -1;
    if (g_decided_attempt == s->attempt)
        return g_decided;
    int n[NM_WAY_NONE], lacking, port = fb__sup_nodemem_peer_port(s);
    int64_t best = choose(s, port > 0, n, &lacking);
    if (best >= 0 && n[NM_WAY_FETCH]) {
        int rc = fetch(s, best, port);
        if (rc) {
            fb__sup_warn(s, "attempt %d: moving %d rank(s)' shards of checkpoint %lld "
                         "from other nodes failed (%s; slurm-attempt-%d/mem-fetch.log); "
                         "choosing without them", s->attempt, n[NM_WAY_FETCH],
                         (long long)best, rc > 0 ? "exit status" : fb_strerror(rc),
                         s->attempt);
            best = choose(s, 0, n, &lacking);
        }
    }
    if (best >= 0)
        fb__sup_log(s, "attempt %d will restore checkpoint %lld: %d of %d ranks "
                    "from their node's memory, %d from a peer's copy (%d moved "
                    "before the launch), the others from storage", s->attempt,
                    (long long)best, n[NM_WAY_MEMORY], g_world,
                    n[NM_WAY_PEER] + n[NM_WAY_FETCH], n[NM_WAY_FETCH]);
    else if (g_ranks[0].n)
        fb__sup_log(s, "attempt %d: no checkpoint every rank can read where it "
                    "runs now (rank %d has no copy of step %lld there)", s->attempt,
                    lacking, (long long)g_ranks[0].c[g_ranks[0].n - 1].step);
    g_decided_attempt = s->attempt;
    g_decided = best;
    return best;
}

/* At most every DROP_EVERY_NS, after new copies: the newest step every
 * rank can restore where it runs now, or the newest every rank has in
 * storage when that is older; older steps leave every node's memory
 * (`fbw1 drop`). */
#define DROP_EVERY_NS 500000000ull

/* The newest step every rank has in storage; -1 none. */
static int64_t storage_newest(void)
{
    int64_t best = -1;
    const nm_rank *k0 = &g_ranks[0];
    for (int i = 0; i < k0->n; i++) {
        int64_t step = k0->c[i].step;
        if (k0->c[i].kind != NM_STORAGE || step <= best)
            continue;
        int all = 1;
        for (int r = 1; r < g_world && all; r++) {
            all = 0;
            for (int j = 0; j < g_ranks[r].n && !all; j++)
                all = g_ranks[r].c[j].kind == NM_STORAGE && g_ranks[r].c[j].step == step;
        }
        if (all)
            best = step;
    }
    return best;
}

/* The newest step that outlives the loss of any one node: every rank has
 * it in storage, or on two live nodes (its own node's memory and a peer
 * copy, or two peer copies); -1 none. */
static int64_t safe_newest(const fb__sup *s)
{
    int64_t best = -1;
    const nm_rank *k0 = &g_ranks[0];
    for (int i = 0; i < k0->n; i++) {
        int64_t step = k0->c[i].step;
        if (step <= best)
            continue;
        int all = 1;
        for (int r = 0; r < g_world && all; r++) {
            const nm_rank *k = &g_ranks[r];
            const char *first = NULL;
            all = 0;
            for (int j = 0; j < k->n && !all; j++) {
                const nm_copy *c = &k->c[j];
                if (c->step != step)
                    continue;
                if (c->kind == NM_STORAGE)
                    all = 1;
                else if (!fb__sup_slurm_node_up(s, c->node))
                    continue;
                else if (!first)
                    first = c->node;
                else if (strcmp(first, c->node))
                    all = 1;
            }
        }
        if (all)
            best = step;
    }
    return best;
}

/* With peers: name the next step to replicate once the one named before
 * has its copies on other nodes for every rank (or none was named to this
 * attempt's watchers); and say so once when a named step is late. */
static void replicate_next(fb__sup *s, int64_t c, int64_t safe, uint64_t now)
{
    if (g_target_attempt != s->attempt) {
        g_target = -1; /* new watchers: nothing named to them yet */
        g_target_attempt = s->attempt;
    }
    if (c > g_target && (g_target < 0 || safe >= g_target)) {
        if (fb__sup_slurm_send(s, c))
            return;
        g_target = c;
        g_target_ns = now;
        g_target_said = 0;
    } else if (g_target >= 0 && safe < g_target && !g_target_said &&
               now - g_target_ns > TARGET_LATE_NS) {
        g_target_said = 1;
        fb__sup_warn(s, "the peer copies of checkpoint %lld are not all there %llu s "
                     "after the watchers were told to send it: no newer step is "
                     "replicated until they are (a node loss restores step %lld "
                     "from peers, or storage)", (long long)g_target,
                     (unsigned long long)((now - g_target_ns) / 1000000000ull),
                     (long long)safe);
    }
}

/* The next step to replicate is named at most this often (a step taken
 * is named within it when the one before has its copies), old steps are
 * dropped at most every DROP_EVERY_NS. */
#define NAME_EVERY_NS 100000000ull
static uint64_t g_name_ns;

void fb__sup_nodemem_tick(fb__sup *s, uint64_t now)
{
    if (!active(s) || !rank_of(s, 0))
        return;
    int late = g_target >= 0 && !g_target_said && now - g_target_ns > TARGET_LATE_NS;
    if (!g_news && !late)
        return;
    int peers = fb__sup_nodemem_peer_port(s) > 0;
    int drop_due = now - g_drop_ns >= DROP_EVERY_NS;
    int name_due = peers && (late || now - g_name_ns >= NAME_EVERY_NS);
    if (!drop_due && !name_due)
        return;
    int n[NM_WAY_NONE], lacking;
    int64_t c = choose(s, peers, n, &lacking);
    /* Not below the newest step storage holds for every rank: when the
     * copies of a step are lost on two nodes, the ranks left restore that
     * one, from memory while it is there. */
    int64_t in_storage = storage_newest();
    if (in_storage >= 0 && in_storage < c)
        c = in_storage;
    int64_t safe = peers && c >= 0 ? safe_newest(s) : -1;
    if (name_due && c >= 0) {
        g_name_ns = now;
        replicate_next(s, c, safe, now);
    }
    if (!drop_due)
        return; /* g_news stays: the drop is still to come */
    g_news = 0;
    g_drop_ns = now;
    /* With peers, two older steps may stay: the newest that outlives a
     * node's loss (its peer copies are there), and the one being
     * replicated; the others older than c go. */
    int64_t keep[FB__FBW1_DROP_KEEP_MAX];
    int nkeep = 0;
    if (peers && c >= 0) {
        if (safe >= 0 && safe < c)
            keep[nkeep++] = safe;
        if (g_target >= 0 && g_target < c && g_target != safe)
            keep[nkeep++] = g_target;
    }
    /* Again when c moved on, or a step kept before is kept no more. */
    int again = c > g_dropped;
    for (int i = 0; i < g_dropped_nkeep && !again && c >= 0; i++)
        again = !fb__sup_step_kept(g_dropped_keep[i], keep, nkeep);
    if (c < 0 || !again || fb__sup_slurm_drop(s, c, keep, nkeep))
        return;
    g_dropped = c;
    memcpy(g_dropped_keep, keep, sizeof keep);
    g_dropped_nkeep = nkeep;
    for (int r = 0; r < g_world; r++) {
        nm_rank *k = &g_ranks[r];
        for (int i = 0; i < k->n; i++)
            if (k->c[i].kind != NM_STORAGE && k->c[i].step < c &&
                !fb__sup_step_kept(k->c[i].step, keep, nkeep)) {
                memmove(k->c + i, k->c + i + 1, sizeof k->c[0] * (size_t)(k->n - i - 1));
                k->n--;
                i--;
            }
    }
}

void fb__sup_nodemem_finish(fb__sup *s)
{
    if (!active(s))
        return;
    int64_t step = -1;
    int n[NM_WAY_NONE], lacking;
    if (rank_of(s, 0))
        step = choose(s, 0, n, &lacking);
    /* Ranks whose only copies of the step are peer copies: the node
     * holding one copies it to storage (one node per rank, so no two
     * write the same shard). */
    static char from_peer[FB__PEER_PLAN_MAX];
    size_t len = 0;
    from_peer[0] = '\0';
    for (int r = 0; step >= 0 && r < g_world; r++) {
        const nm_copy *peer = NULL;
        int other = 0;
        for (int i = 0; i < g_ranks[r].n; i++) {
            const nm_copy *c = &g_ranks[r].c[i];
            if (c->step != step || (c->kind != NM_STORAGE &&
                                    !fb__sup_slurm_node_up(s, c->node)))
                continue;
            if (c->kind == NM_PEER && !peer)
                peer = c;
            else if (c->kind != NM_PEER)
                other = 1;
        }
        char item[16 + FB__FBW1_NODE_MAX];
        snprintf(item, sizeof item, "%d:%s", r, peer ? peer->node : "");
        if (peer && !other && add(from_peer, sizeof from_peer, &len, item))
            break;
    }
    char st[32], world[16], log_path[PATH_MAX];
    snprintf(st, sizeof st, "%lld", (long long)step);
    snprintf(world, sizeof world, "%d", s->world);
    snprintf(log_path, sizeof log_path, "%s/slurm-mem-finish.log", s->logs_dir);
    const char *args[] = {"--mem-finish", "--job", s->job_id, "--ckpt-dir",
                          s->ckpt_dir, "--world", world, "--step", st,
                          len ? "--from-peer" : NULL, from_peer, NULL};
    int rc = fb__sup_slurm_on_nodes(s, NULL, args, log_path, 60000);
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
    g_decided_attempt = -1;
    g_dropped = -1;
    g_dropped_nkeep = 0;
    g_target = -1;
    g_target_attempt = -1;
    g_name_ns = 0;
    g_news = 0;
}

/* ---- on the node (`firebreak watch --mem-finish`) ---- */

/* Is rank r assigned to this node in from_peer (R:NODE,...)? */
static int mine(const char *from_peer, int r, const char *node)
{
    char item[16 + FB__FBW1_NODE_MAX];
    snprintf(item, sizeof item, "%d:%s", r, node);
    size_t n = strlen(item);
    for (const char *p = from_peer; p && *p;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == n && !strncmp(p, item, n))
            return 1;
        p = c ? c + 1 : p + len;
    }
    return 0;
}

int fb__nodemem_finish_here(const char *job, const char *ckpt_dir, int world,
                            long long step, const char *from_peer, const char *node,
                            FILE *err)
{
    char dir[PATH_MAX], peer_dir[PATH_MAX], why[1024];
    if (!fb__job_id_ok(job) ||
        fb__ckpt_mem_dir_path(dir, sizeof dir, job) ||
        fb__peer_dir_path(peer_dir, sizeof peer_dir, dir)) {
        fprintf(err, "firebreak watch: --job: not a job id: %s\n", job);
        return 2;
    }
    int failed = 0;
    for (int r = 0; step >= 0 && r < world; r++) {
        char from[PATH_MAX], to[PATH_MAX];
        /* Its own copy, else the peer copy the supervisor gave this node. */
        const char *src = mine(from_peer, r, node) ? peer_dir : dir;
        if (fb__ckpt_shard_path(from, sizeof from, src, (uint64_t)step, r) ||
            fb__ckpt_shard_path(to, sizeof to, ckpt_dir, (uint64_t)step, r) ||
            access(from, F_OK) || !access(to, F_OK))
            continue;
        int rc = fb__ckpt_copy_shard(src, ckpt_dir, (uint64_t)step, r, 1, why,
                                     sizeof why);
        if (rc) {
            fprintf(err, "firebreak watch: rank %d's shard of step %lld not "
                         "copied to storage: %s\n", r, step, why);
            failed = 1;
        }
    }
    fb__ckpt_mem_dir_remove(dir);
    /* the end of the run: segments stopped ranks left, as --sweep */
    (void)fb__watch_sweep(job, node, err);
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
