/*
 * lateness.c -- live lateness: which rank keeps arriving last at the
 * job's collectives (fr.h, docs/flight-recorder.md "Live lateness").
 *
 * The supervisor feeds each rank's ring a few times a second.  A feed
 * copies only the entries written since the rank's previous feed (under
 * the ring's sequence check, ring.h), so the cost of a pass follows the
 * collectives done since the last one, never the length of the history.
 *
 * Only collectives on a communicator of the whole job count (comm_size ==
 * world; the member's index is its comm_rank): the default process group,
 * MPI_COMM_WORLD and its dups.  Arrivals of one collective, keyed by
 * (comm_id, coll_seq), wait in a small linear-probing table of OPEN_MAX
 * slots (at most 3/4 used) until every member arrived; then each member's lateness (its
 * arrival minus the mean arrival of the others, as `fr analyze` counts
 * it) and whether it came last go into its sliding window.  A collective
 * some member never reaches is given up when the table is full (the
 * oldest goes first).
 *
 * Memory: OPEN_MAX x world arrival times plus world x window entries:
 * about 1.5 MiB at 1,024 ranks.
 */
#include "fr/fr.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "fr/ring.h"
#include "lib/segment.h"

#define OPEN_MAX 128u        /* collectives being gathered (power of two) */
#define WORLD_MAX (1 << 20)
#define WINDOW_MAX 4096
/* Offsets past an hour count as an hour: world x this and window x this
 * stay far inside int64. */
#define OFFSET_MAX_NS 3600000000000ull

typedef struct open_coll {
    uint64_t comm_id, coll_seq; /* coll_seq 0: the slot is free            */
    uint64_t opened;            /* order of opening, for eviction          */
    uint32_t arrived;
    uint64_t *t_ns;             /* per member; 0: not yet                  */
} open_coll;

typedef struct rank_state {
    uint64_t next;              /* next ring index to read                 */
    uint32_t pos, n, last;      /* window: next slot, entries, last count  */
    int64_t sum_ns;             /* sum of the window's lateness            */
    int flagged;
} rank_state;

struct fb__fr_late {
    fb__fr_late_rule rule;
    int world;
    rank_state *rk;
    int64_t *win_ns;            /* world x window lateness                 */
    uint8_t *win_last;          /* world x window: came last               */
    open_coll open[OPEN_MAX];
    uint64_t *t_all;            /* OPEN_MAX x world arrival times          */
    uint32_t nopen;             /* slots in use                            */
    uint64_t opened, complete, dropped;
    int update_from;            /* where the last update stopped (fair)    */
};

void fb__fr_late_rule_init(fb__fr_late_rule *rule)
{
    rule->window = 64;
    rule->min_collectives = 32;
    rule->last_share_on = 0.5;
    rule->late_on_s = 5e-3;
    rule->late_step_frac = 0.05;
    rule->last_share_off = 0.25;
    rule->off_ratio = 0.5;
}

int fb__fr_late_judge(const fb__fr_late_rule *rule, const fb__fr_late_window *w,
                      double step_s, int flagged)
{
    double threshold = rule->late_on_s;
    if (step_s > 0 && rule->late_step_frac * step_s > threshold)
        threshold = rule->late_step_frac * step_s;
    if (w->n == 0 || (int)w->n < rule->min_collectives)
        return flagged; /* too little seen to change its mind */
    double share = (double)w->last / (double)w->n;
    if (flagged)
        return share >= rule->last_share_off && w->mean_s >= rule->off_ratio * threshold;
    return share >= rule->last_share_on && w->mean_s >= threshold;
}

int fb__fr_late_new(fb__fr_late **out, int world, const fb__fr_late_rule *rule)
{
    *out = NULL;
    fb__fr_late_rule def;
    if (!rule) {
        fb__fr_late_rule_init(&def);
        rule = &def;
    }
    if (world < 1 || world > WORLD_MAX || rule->window < 1 ||
        rule->window > WINDOW_MAX)
        return -EINVAL;
    fb__fr_late *t = fb__calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->rule = *rule;
    t->world = world;
    size_t w = (size_t)world, win = (size_t)rule->window;
    t->rk = fb__calloc(w, sizeof *t->rk);
    t->win_ns = fb__calloc(w * win, sizeof *t->win_ns);
    t->win_last = fb__calloc(w * win, 1);
    t->t_all = fb__calloc(OPEN_MAX * w, sizeof *t->t_all);
    if (!t->rk || !t->win_ns || !t->win_last || !t->t_all) {
        fb__fr_late_free(t);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < OPEN_MAX; i++)
        t->open[i].t_ns = t->t_all + (size_t)i * w;
    *out = t;
    return 0;
}

void fb__fr_late_free(fb__fr_late *t)
{
    if (!t)
        return;
    free(t->rk);
    free(t->win_ns);
    free(t->win_last);
    free(t->t_all);
    free(t);
}

static uint32_t hash_key(uint64_t comm_id, uint64_t seq)
{
    uint64_t h = (comm_id ^ (seq * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
    return (uint32_t)(h >> 40) & (OPEN_MAX - 1);
}

/* Free slot i of the linear-probing table, moving later entries of its
 * probe run back so every lookup still stops at the first free slot
 * (deletion without tombstones). */
static void slot_free(fb__fr_late *t, uint32_t i)
{
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & (OPEN_MAX - 1);
        open_coll *c = &t->open[j];
        if (!c->coll_seq)
            break;
        uint32_t k = hash_key(c->comm_id, c->coll_seq);
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays)
            continue;
        open_coll tmp = t->open[i];
        t->open[i] = *c;
        *c = tmp;
        i = j;
    }
    open_coll *c = &t->open[i];
    memset(c->t_ns, 0, (size_t)t->world * sizeof *c->t_ns);
    c->coll_seq = 0;
    c->arrived = 0;
    t->nopen--;
}

/* An arrival's offset from the earliest, clamped: the ring is the rank's
 * to write, and a time a day off must not overflow the sums. */
static int64_t offset_ns(uint64_t t_ns, uint64_t base)
{
    uint64_t d = t_ns - base;
    return d > OFFSET_MAX_NS ? (int64_t)OFFSET_MAX_NS : (int64_t)d;
}

/* Every member arrived: each one's lateness into its window. */
static void close_coll(fb__fr_late *t, open_coll *c)
{
    int n = t->world;
    uint64_t base = c->t_ns[0], tmax = 0;
    for (int k = 1; k < n; k++)
        if (c->t_ns[k] < base)
            base = c->t_ns[k];
    int64_t sum = 0;
    for (int k = 0; k < n; k++) {
        sum += offset_ns(c->t_ns[k], base);
        if (c->t_ns[k] > tmax)
            tmax = c->t_ns[k];
    }
    size_t win = (size_t)t->rule.window;
    for (int k = 0; k < n; k++) {
        int64_t mine = offset_ns(c->t_ns[k], base);
        int64_t late = n > 1 ? mine - (sum - mine) / (n - 1) : 0;
        uint8_t last = n > 1 && c->t_ns[k] == tmax;
        rank_state *r = &t->rk[k];
        size_t at = (size_t)k * win + r->pos;
        if (r->n == win) {
            r->sum_ns -= t->win_ns[at];
            r->last -= t->win_last[at];
        } else {
            r->n++;
        }
        t->win_ns[at] = late;
        t->win_last[at] = last;
        r->sum_ns += late;
        r->last += last;
        r->pos = (uint32_t)((r->pos + 1) % win);
    }
    t->complete++;
    slot_free(t, (uint32_t)(c - t->open));
}

/* The open slot of (comm_id, seq), opened when new.  The table is kept
 * at most 3/4 full: opening one more first gives up the oldest. */
static open_coll *find_open(fb__fr_late *t, uint64_t comm_id, uint64_t seq)
{
    uint32_t h = hash_key(comm_id, seq);
    for (;;) {
        open_coll *c = &t->open[h];
        if (!c->coll_seq)
            break;
        if (c->comm_id == comm_id && c->coll_seq == seq)
            return c;
        h = (h + 1) & (OPEN_MAX - 1);
    }
    if (t->nopen >= OPEN_MAX / 4 * 3) {
        uint32_t old = 0;
        for (uint32_t i = 0; i < OPEN_MAX; i++)
            if (t->open[i].coll_seq &&
                (!t->open[old].coll_seq || t->open[i].opened < t->open[old].opened))
                old = i;
        slot_free(t, old);
        t->dropped++;
        return find_open(t, comm_id, seq); /* the run may have moved */
    }
    open_coll *c = &t->open[h];
    c->comm_id = comm_id;
    c->coll_seq = seq;
    c->opened = ++t->opened;
    t->nopen++;
    return c;
}

static void arrive(fb__fr_late *t, const fb__fr_event *e, uint64_t wall_off_ns)
{
    if ((e->flags & FB__FR_F_P2P) || e->coll_seq == 0 ||
        e->comm_size != t->world || e->comm_rank < 0 || e->comm_rank >= t->world)
        return;
    uint64_t when = e->begin_mono_ns + wall_off_ns;
    if (!when)
        when = 1; /* 0 marks "not yet" */
    open_coll *c = find_open(t, e->comm_id, e->coll_seq);
    if (c->t_ns[e->comm_rank])
        return; /* a rank that writes one seq twice counts once */
    c->t_ns[e->comm_rank] = when;
    if (++c->arrived == (uint32_t)t->world)
        close_coll(t, c);
}

uint32_t fb__fr_late_feed_ring(fb__fr_late *t, int rank, const void *area,
                               uint32_t capacity, uint64_t head,
                               uint64_t wall_off_ns, uint32_t budget)
{
    if (!t || rank < 0 || rank >= t->world || !area)
        return 0;
    uint32_t slots = fb__fr_ring_slots(capacity);
    if (!slots)
        return 0;
    const fb__fr_event *ring = (const fb__fr_event *)(const void *)(
        (const char *)area + (size_t)fb__fr_comm_slots(capacity) * FB__SEG_FR_ENTRY_SIZE);
    rank_state *r = &t->rk[rank];
    if (head < r->next)
        r->next = head; /* a head that went back: start over from it */
    if (head - r->next > slots)
        r->next = head - slots; /* wrapped past us: the rest is gone */
    uint32_t read = 0;
    while (r->next < head && read < budget) {
        fb__fr_event e;
        if (!fb__fr_read_event(ring, slots, r->next, &e)) {
            uint64_t seq = atomic_load_explicit(
                &((fb__fr_event *)&ring[r->next % slots])->seq, memory_order_acquire);
            if (seq == 0)
                break; /* being written: next time */
            r->next++; /* overwritten: gone */
            continue;
        }
        arrive(t, &e, wall_off_ns);
        r->next++;
        read++;
    }
    return read;
}

uint32_t fb__fr_late_feed_seg(fb__fr_late *t, int rank, const struct fb__seg *seg,
                              uint32_t budget)
{
    uint32_t cap;
    const void *area = seg ? fb__seg_fr_area(seg, &cap) : NULL;
    if (!area)
        return 0;
    const fb__seg_identity *id = fb__seg_ident(seg);
    fb__seg_header *h = fb__seg_hdr((fb__seg *)seg);
    uint64_t head = atomic_load_explicit(&h->fr_head, memory_order_acquire);
    return fb__fr_late_feed_ring(t, rank, area, cap, head,
                                 id->created_wall_ns - id->created_mono_ns, budget);
}

static void window_of(const fb__fr_late *t, int rank, fb__fr_late_window *w)
{
    const rank_state *r = &t->rk[rank];
    w->n = r->n;
    w->last = r->last;
    w->mean_s = r->n ? (double)r->sum_ns / (double)r->n / 1e9 : 0;
}

int fb__fr_late_update(fb__fr_late *t, double step_s, int *changed, int max)
{
    int nc = 0;
    if (!t)
        return 0;
    for (int i = 0; i < t->world && nc < max; i++) {
        int k = (t->update_from + i) % t->world;
        fb__fr_late_window w;
        window_of(t, k, &w);
        int now = fb__fr_late_judge(&t->rule, &w, step_s, t->rk[k].flagged);
        if (now != t->rk[k].flagged) {
            t->rk[k].flagged = now;
            changed[nc++] = k;
            if (nc == max)
                t->update_from = (k + 1) % t->world;
        }
    }
    return nc;
}

int fb__fr_late_get(const fb__fr_late *t, int rank, fb__fr_late_window *w,
                    int *flagged)
{
    if (!t || rank < 0 || rank >= t->world)
        return -EINVAL;
    window_of(t, rank, w);
    if (flagged)
        *flagged = t->rk[rank].flagged;
    return 0;
}

uint64_t fb__fr_late_complete(const fb__fr_late *t)
{
    return t ? t->complete : 0;
}

uint64_t fb__fr_late_dropped(const fb__fr_late *t)
{
    return t ? t->dropped : 0;
}
