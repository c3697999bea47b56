/*
 * sdc.c -- the supervisor's side of the silent-data-corruption check
 * (docs/sdc.md): read the hashes ranks publish in their segments' SDC
 * rings (segment.h, minor 3), compare the same piece of the same tensor
 * across every rank, and fail the attempt with an incident of kind `sdc`
 * naming the rank that disagrees with the majority.  Before the restart,
 * checkpoints newer than the last step at which that piece agreed are set
 * aside (renamed .sdc-step-N), so the ranks restore one taken before the
 * corruption.
 *
 * Bounds: what a rank wrote is copied out under its sequence check
 * (fb__seg_read_sdc); at most one ring's worth of records per rank and
 * pass; pieces waiting for other ranks and the agreement history are
 * fixed tables whose oldest entries are dropped when full.  Lookups are
 * linear scans of those tables: cheap for tens of ranks; thousands of
 * ranks on one supervisor would want a hashed index.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/store.h"
#include "common/util.h"
#include "health/health.h"
#include "supervisor/sdc.h"
#include "supervisor/sup.h"

#define PENDING_MAX 512
#define AGREED_MAX 2048

typedef struct piece_key {
    uint64_t step, offset, length;
    uint32_t tensor, flags;
} piece_key;

typedef struct pending {
    int used;
    piece_key k;
    char name[FB__SEG_SDC_NAME_MAX];
    int have;            /* ranks that published this piece      */
    uint64_t order;      /* age, for dropping the oldest          */
    uint64_t *hash;      /* [world]                               */
    unsigned char *got;  /* [world]                               */
} pending;

typedef struct agreed {
    uint32_t tensor;
    uint64_t offset, length;
    int64_t step;        /* newest step at which every rank agreed */
    int used;
} agreed;

struct fb__sup_sdc {
    int world;
    int attempt;
    uint64_t *next;      /* [world]: next record index per rank   */
    uint64_t *nread;     /* [world]: records read this attempt     */
    pending pend[PENDING_MAX];
    uint64_t order;
    agreed ag[AGREED_MAX];
    int nag;
    int64_t clean_step;  /* after a mismatch: newest trustworthy step, -1 */
    uint64_t compared, lost;  /* this attempt: pieces compared, records dropped */
    uint64_t overrun;    /* of lost: overwritten in a ring before read */
    int mismatched;
    int noted;           /* this attempt: a disagreement after another failure said */
    int readable;        /* ranks whose segments are read (this pass) */
};

static int sdc_init(fb__sup *s)
{
    if (s->sdc)
        return 0;
    fb__sup_sdc *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    d->world = s->world;
    d->attempt = -1;
    d->clean_step = -1;
    d->next = calloc((size_t)s->world, sizeof *d->next);
    d->nread = calloc((size_t)s->world, sizeof *d->nread);
    if (!d->next || !d->nread) {
        free(d->next);
        free(d->nread);
        free(d);
        return -ENOMEM;
    }
    for (int i = 0; i < PENDING_MAX; i++) {
        d->pend[i].hash = calloc((size_t)s->world, sizeof(uint64_t));
        d->pend[i].got = calloc((size_t)s->world, 1);
        if (!d->pend[i].hash || !d->pend[i].got) {
            s->sdc = d;
            fb__sup_sdc_free(s);
            return -ENOMEM;
        }
    }
    s->sdc = d;
    return 0;
}

void fb__sup_sdc_free(fb__sup *s)
{
    fb__sup_sdc *d = s->sdc;
    if (!d)
        return;
    for (int i = 0; i < PENDING_MAX; i++) {
        free(d->pend[i].hash);
        free(d->pend[i].got);
    }
    free(d->next);
    free(d->nread);
    free(d);
    s->sdc = NULL;
}

static int same_key(const piece_key *a, const piece_key *b)
{
    return a->step == b->step && a->offset == b->offset && a->length == b->length &&
           a->tensor == b->tensor && a->flags == b->flags;
}

static pending *find_or_add(fb__sup_sdc *d, const piece_key *k)
{
    pending *free_slot = NULL, *oldest = NULL;
    for (int i = 0; i < PENDING_MAX; i++) {
        pending *p = &d->pend[i];
        if (!p->used) {
            if (!free_slot)
                free_slot = p;
            continue;
        }
        if (same_key(&p->k, k))
            return p;
        if (!oldest || p->order < oldest->order)
            oldest = p;
    }
    pending *p = free_slot ? free_slot : oldest;
    if (!free_slot)
        d->lost++; /* some rank never sent its part of the oldest piece */
    p->used = 1;
    p->k = *k;
    p->have = 0;
    p->order = ++d->order;
    memset(p->got, 0, (size_t)d->world);
    return p;
}

/* The newest step before `before` at which every rank agreed on a piece
 * covering bytes [off, off + len) of tensor t, or -1.  Agreements from
 * earlier attempts count: up to the step they were seen at, those
 * attempts trained the same state. */
static int64_t last_agreed(const fb__sup_sdc *d, uint32_t t, uint64_t off,
                           uint64_t len, uint64_t before)
{
    int64_t best = -1;
    for (int i = 0; i < d->nag; i++) {
        const agreed *a = &d->ag[i];
        if (a->used && a->tensor == t && a->offset <= off && a->step < (int64_t)before &&
            a->offset + a->length >= off + len && a->step > best)
            best = a->step;
    }
    return best;
}

static void note_agreed(fb__sup_sdc *d, const piece_key *k)
{
    int oldest = -1;
    for (int i = 0; i < d->nag; i++) {
        agreed *a = &d->ag[i];
        if (a->tensor == k->tensor && a->offset == k->offset && a->length == k->length) {
            if ((int64_t)k->step > a->step)
                a->step = (int64_t)k->step;
            return;
        }
        if (oldest < 0 || a->step < d->ag[oldest].step)
            oldest = i;
    }
    agreed *a = d->nag < AGREED_MAX ? &d->ag[d->nag++] : &d->ag[oldest];
    a->used = 1;
    a->tensor = k->tensor;
    a->offset = k->offset;
    a->length = k->length;
    a->step = (int64_t)k->step;
}

/* On one host the suspect node is this one: check its health now, for
 * the incident (under Slurm the relaunch health-checks the suspect node
 * and drains it under --drain: slurm.c). */
static void health_now(fb__sup *s, char *buf, size_t size)
{
    buf[0] = '\0';
    if (s->slurm)
        return;
    fb__health_opts o;
    fb__health_opts_init(&o);
    o.ckpt_dir = s->ckpt_dir;
    fb__health_result *r = NULL;
    char err[128];
    if (fb__health_run(&o, &r, err, sizeof err)) {
        snprintf(buf, size, "; health check of this node failed to run: %s", err);
        return;
    }
    char reason[200];
    fb__health_reason(r, reason, sizeof reason);
    snprintf(buf, size, "; health check of node %s: %s%s%s", s->hostname,
             fb__health_status_name(fb__health_verdict(r)), reason[0] ? ", " : "",
             reason);
    fb__health_free(r);
}

/* Every rank sent piece p: agree, or fail the attempt. */
static void compare(fb__sup *s, pending *p)
{
    fb__sup_sdc *d = s->sdc;
    int world = d->world, voters = 0;
    d->compared++;
    /* The majority hash among the ranks that sent the piece: the one most
     * of them hold (Boyer-Moore, checked). */
    uint64_t cand = 0;
    int votes = 0;
    for (int r = 0; r < world; r++) {
        if (!p->got[r])
            continue;
        voters++;
        if (!votes)
            cand = p->hash[r], votes = 1;
        else
            votes += p->hash[r] == cand ? 1 : -1;
    }
    int agree = 0, first_bad = -1;
    for (int r = 0; r < world; r++)
        agree += p->got[r] && p->hash[r] == cand;
    if (agree == voters) {
        note_agreed(d, &p->k);
        return;
    }
    /* Whatever ends the attempt, the checkpoints after the last agreement
     * hold the corrupted replica: fb__sup_sdc_on_failure sets them aside. */
    int64_t clean = last_agreed(d, p->k.tensor, p->k.offset, p->k.length,
                                p->k.step);
    int64_t trust = clean >= 0 ? clean : (int64_t)p->k.step - 1;
    if (!d->mismatched || trust < d->clean_step)
        d->clean_step = trust;
    d->mismatched = 1;
    fb__sup_failure *f = &s->fail;
    if (f->set && (f->kind == FB__SUP_FAIL_SDC ||
                   !fb__sup_sdc_supersedes(f->kind, f->step, (int64_t)p->k.step))) {
        if (f->kind != FB__SUP_FAIL_SDC && !d->noted) {
            d->noted = 1;
            fb__sup_warn(s, "sdc: replicas of tensor %s also disagree after step %llu; "
                         "checkpoints after step %lld will be set aside",
                         p->name, (unsigned long long)p->k.step, (long long)d->clean_step);
        }
        return;
    }
    /* The attempt had ended another way, later than this step: that end
     * is taken as the corruption's consequence (fb__sup_sdc_supersedes);
     * it is said in full here and in short in the incident. */
    fb__sup_failure was = *f;
    if (was.set)
        fb__sup_log(s, "sdc: replicas disagree after step %llu, before the attempt's "
                    "failure at step %lld (%s: %s): the disagreement is recorded as "
                    "the cause", (unsigned long long)p->k.step, (long long)was.step,
                    fb__sup_fail_kind_name(was.kind), was.detail);
    int majority = agree * 2 > voters;
    for (int r = 0; r < world && first_bad < 0 && majority; r++)
        if (p->got[r] && p->hash[r] != cand)
            first_bad = r;

    char who[320] = "", node[64] = "?", bad_hash[17], good_hash[17];
    snprintf(good_hash, sizeof good_hash, "%016llx", (unsigned long long)cand);
    if (majority) {
        snprintf(bad_hash, sizeof bad_hash, "%016llx",
                 (unsigned long long)p->hash[first_bad]);
        const fb__seg_identity *id = s->ranks[first_bad].seg
                                         ? fb__seg_ident(s->ranks[first_bad].seg)
                                         : NULL;
        snprintf(node, sizeof node, "%s", id && id->hostname[0] ? id->hostname : s->hostname);
        char more[96] = "";
        size_t ml = 0;
        for (int r = first_bad + 1; r < world && ml < sizeof more - 12; r++)
            if (p->got[r] && p->hash[r] != cand)
                ml += (size_t)snprintf(more + ml, sizeof more - ml, "%s%d",
                                       ml ? "," : " (also off it: rank ", r);
        if (ml)
            snprintf(more + ml, sizeof more - ml, ")");
        snprintf(who, sizeof who, "rank %d on node %s hashed it %s, the majority "
                 "(%d of %d ranks) %s%s", first_bad, node, bad_hash, agree, voters,
                 good_hash, more);
    } else {
        snprintf(who, sizeof who, "no majority among the %d ranks: cannot tell "
                 "which replica is wrong", voters);
    }
    memset(f, 0, sizeof *f);
    f->set = 1;
    f->kind = FB__SUP_FAIL_SDC;
    f->rank = first_bad;
    f->step = (int64_t)p->k.step;
    f->detected_ns = f->occurred_ns = fb__now_ns();
    if (was.set) { /* the attempt's end was noticed then */
        f->detected_ns = was.detected_ns;
        f->occurred_ns = was.occurred_ns;
    }
    snprintf(f->phase, sizeof f->phase, "train");
    char health[300];
    health_now(s, health, sizeof health);
    char clean_text[96];
    if (clean >= 0)
        snprintf(clean_text, sizeof clean_text, "it last agreed at step %lld",
                 (long long)clean);
    else
        snprintf(clean_text, sizeof clean_text, "no earlier agreement on it was seen");
    snprintf(f->detail, sizeof f->detail,
             "silent data corruption: replicas of tensor %s disagree after step "
             "%llu (bytes %llu..%llu%s): %s; %s; %s%s; restarting "
             "from a checkpoint at or before step %lld", p->name,
             (unsigned long long)p->k.step, (unsigned long long)p->k.offset,
             (unsigned long long)(p->k.offset + p->k.length),
             p->k.flags & FB__SDC_FULL ? ", full check" : "", who, clean_text,
             majority ? "the node is suspect" : "no node can be named", health,
             (long long)d->clean_step);
    if (was.set) {
        size_t len = strlen(f->detail);
        snprintf(f->detail + len, sizeof f->detail - len, "; seen after the attempt "
                 "ended (%s of rank %d at step %lld), taken as its cause",
                 fb__sup_fail_kind_name(was.kind), was.rank, (long long)was.step);
    }
    if (first_bad >= 0)
        snprintf(f->injected, sizeof f->injected, "%s", s->ranks[first_bad].injected);
}

/* Whether every rank whose segment the supervisor reads sent piece p. */
static int all_sent(const fb__sup *s, const pending *p)
{
    for (int r = 0; r < s->world; r++)
        if (s->ranks[r].seg && !s->ranks[r].seg_corrupt && !p->got[r])
            return 0;
    return 1;
}

/* Read at most `max` of rank r's new records; returns how many were read
 * (0: none waiting, or one being written). */
static uint64_t read_rank(fb__sup *s, int r, uint64_t max)
{
    fb__sup_sdc *d = s->sdc;
    fb__seg *seg = s->ranks[r].seg;
    const fb__seg_identity *id = fb__seg_ident(seg);
    uint64_t cap = id->sdc_capacity;
    if (!cap)
        return 0;
    uint64_t head = fb__seg_sdc_head(seg);
    if (head > d->next[r] && head - d->next[r] > cap) {
        d->lost += head - d->next[r] - cap;
        d->overrun += head - d->next[r] - cap;
        d->next[r] = head - cap;
    }
    uint64_t n = 0;
    for (; n < max && d->next[r] < head; n++) {
        fb__seg_sdc rec;
        int got = fb__seg_read_sdc(seg, d->next[r], &rec);
        if (got == 0)
            break; /* being written: next pass */
        d->next[r]++;
        d->nread[r]++;
        if (got < 0) {
            d->lost++;
            continue;
        }
        piece_key k = {.step = rec.step, .offset = rec.offset, .length = rec.length,
                       .tensor = rec.tensor, .flags = rec.flags & FB__SDC_FULL};
        pending *p = find_or_add(d, &k);
        if (p->got[r])
            continue; /* a rank repeating itself counts once */
        if (!p->have)
            snprintf(p->name, sizeof p->name, "%s", rec.name);
        p->got[r] = 1;
        p->hash[r] = rec.hash;
        if (++p->have >= d->readable && d->readable >= 2 && all_sent(s, p)) {
            compare(s, p);
            p->used = 0;
        }
    }
    return n;
}

/* Test hook FIREBREAK_TEST_SDC_DEFER=1: read no hashes until the attempt
 * has failed or every rank has ended, as a supervisor held back until
 * then would (supervisor_sdc).  Never in a release build. */
static int deferred(const fb__sup *s)
{
#ifdef FB_TEST_HOOKS
    static int defer = -1;
    if (defer < 0) {
        const char *v = getenv("FIREBREAK_TEST_SDC_DEFER");
        defer = v && !strcmp(v, "1");
    }
    if (!defer || s->fail.set)
        return 0;
    for (int r = 0; r < s->world; r++)
        if (!s->ranks[r].ended)
            return 1;
    return 0;
#else
    (void)s;
    return 0;
#endif
}

void fb__sup_sdc_pass(fb__sup *s)
{
    if (s->world < 2 || (!s->sdc && sdc_init(s)) || deferred(s))
        return;
    fb__sup_sdc *d = s->sdc;
    if (d->attempt != s->attempt) { /* new segments: new rings */
        d->attempt = s->attempt;
        memset(d->next, 0, sizeof *d->next * (size_t)d->world);
        memset(d->nread, 0, sizeof *d->nread * (size_t)d->world);
        for (int i = 0; i < PENDING_MAX; i++)
            d->pend[i].used = 0;
    }
    /* The ranks compared are those whose segments this supervisor reads:
     * every rank with the local and mpirun launchers, the ranks on its own
     * node under Slurm. */
    d->readable = 0;
    for (int r = 0; r < s->world; r++)
        d->readable += s->ranks[r].seg && !s->ranks[r].seg_corrupt;
    /* The ranks in turn, a few records each: a backlog (a supervisor held
     * back, its last look after the ranks ended) is compared piece by
     * piece as every rank's part arrives, instead of one rank's whole ring
     * filling the pending table and pushing out the pieces the others are
     * about to send.  At most one ring's worth per rank and pass. */
    enum { TURN = 32 };
    uint64_t budget = FB__SEG_SDC_CAPACITY, read;
    do {
        read = 0;
        uint64_t turn = budget < TURN ? budget : TURN;
        for (int r = 0; r < s->world; r++) {
            const fb__sup_rank *rk = &s->ranks[r];
            if (rk->seg && !rk->seg_corrupt)
                read += read_rank(s, r, turn);
        }
        budget -= turn;
    } while (read && budget);
}

void fb__sup_sdc_attempt_end(fb__sup *s)
{
    fb__sup_sdc *d = s->sdc;
    if (!d || (!d->compared && !d->lost))
        return;
    /* Records read from each rank, when some were not compared and the
     * job is small enough to list them: which rank fell behind. */
    char per[320] = "";
    if (d->lost && d->world <= 16) {
        size_t len = (size_t)snprintf(per, sizeof per,
                                      "; %llu overwritten before read; records read per rank:",
                                      (unsigned long long)d->overrun);
        for (int r = 0; r < d->world && len < sizeof per; r++) {
            len += (size_t)snprintf(per + len, sizeof per - len, " %llu",
                                    (unsigned long long)d->nread[r]);
            /* None from this rank: whether its segment was read at all,
             * and what its ring's head said (which side fell silent). */
            const fb__sup_rank *rk = &s->ranks[r];
            if (!d->nread[r] && len < sizeof per)
                len += (size_t)(rk->seg
                    ? snprintf(per + len, sizeof per - len, " (ring head %llu)",
                               (unsigned long long)fb__seg_sdc_head(rk->seg))
                    : snprintf(per + len, sizeof per - len, " (not attached)"));
        }
    }
    fb__sup_log(s, "sdc check: %llu piece%s compared across %d ranks in attempt "
                "%d, %s; %llu record%s not compared (overwritten or a rank "
                "missing)%s", (unsigned long long)d->compared,
                d->compared == 1 ? "" : "s", d->readable, s->attempt,
                d->mismatched ? "a disagreement" : "all agreed",
                (unsigned long long)d->lost, d->lost == 1 ? "" : "s", per);
    d->compared = d->lost = d->overrun = 0;
    d->mismatched = 0;
    memset(d->nread, 0, sizeof *d->nread * (size_t)d->world);
}

void fb__sup_sdc_on_failure(fb__sup *s)
{
    fb__sup_sdc *d = s->sdc;
    if (!d || !d->mismatched) /* no disagreement this attempt */
        return;
    fb__ckpt_entry *e = NULL;
    size_t n = 0;
    int rc = fb__ckpt_scan(s->ckpt_dir, s->world, 0, &e, &n);
    if (rc) {
        if (rc != -ENOENT)
            fb__sup_warn(s, "cannot list the checkpoints in %s to set aside those "
                         "taken after step %lld: %s", s->ckpt_dir,
                         (long long)d->clean_step, fb_strerror(rc));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if ((int64_t)e[i].step <= d->clean_step)
            continue;
        char from[PATH_MAX], to[PATH_MAX];
        if (fb__ckpt_step_path(from, sizeof from, s->ckpt_dir, e[i].step) ||
            fb__fmt(to, sizeof to, "%s/.sdc-step-%010llu", s->ckpt_dir,
                    (unsigned long long)e[i].step))
            continue;
        if (rename(from, to) == 0)
            fb__sup_log(s, "checkpoint %llu set aside (%s): taken after the "
                        "last agreement of the corrupted replica (step %lld)",
                        (unsigned long long)e[i].step, to, (long long)d->clean_step);
        else
            fb__sup_warn(s, "cannot set aside checkpoint %llu: %s",
                         (unsigned long long)e[i].step, strerror(errno));
    }
    free(e);
    /* The disagreement is resolved by the restart: start comparing anew. */
    d->clean_step = -1;
}
