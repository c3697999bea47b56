/*
 * watch.c -- what the supervisor learns from the ranks' segments: who has
 * attached, progress and step times (sampled into the journal), the
 * reports ranks send (checkpoints, restores, injected faults), hangs, and
 * how a rank that went away ended.
 *
 * A segment is written by the rank, which may be buggy or hostile: only
 * segments that are ours are attached (fb__seg_open_as), identity comes
 * from the copy made at attach, every pass starts with fb__seg_check, and
 * a segment that fails it once is never read again; the rank is failed
 * with kind "segment_corrupt" (docs/segment.md, "Readers").
 *
 * What kind of failure a rank's end was, which rank is to blame and
 * whether (and on whom) a hang is declared are policy.c's decisions; this
 * file gathers the facts and records them.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "supervisor/ranklog.h"
#include "supervisor/sup.h"

const char *fb__sup_phase_name(uint32_t phase)
{
    static const char *const names[] = {"init", "train", "checkpoint",
                                        "restore", "done"};
    return phase < 5 ? names[phase] : "unknown";
}

static const char *report_kind_name(uint32_t k)
{
    static const char *const names[] = {
        [FB__REPORT_NONE] = "none", [FB__REPORT_CKPT_BEGIN] = "ckpt_begin",
        [FB__REPORT_CKPT_COMMITTED] = "ckpt_committed",
        [FB__REPORT_CKPT_FAILED] = "ckpt_failed",
        [FB__REPORT_CKPT_SKIPPED] = "ckpt_skipped",
        [FB__REPORT_RESTORE_BEGIN] = "restore_begin",
        [FB__REPORT_RESTORE_DONE] = "restore_done",
        [FB__REPORT_RESTORE_FALLBACK] = "restore_fallback",
        [FB__REPORT_RESTORE_NONE] = "restore_none",
        [FB__REPORT_INJECT] = "inject", [FB__REPORT_NOTE] = "note",
        [FB__REPORT_CKPT_DELETED] = "ckpt_deleted",
    };
    return k < sizeof names / sizeof names[0] && names[k] ? names[k] : "unknown";
}

/* The live header of rank r's segment, or NULL when not attached or no
 * longer trusted. */
static fb__seg_header *live_hdr(const fb__sup *s, int r)
{
    const fb__sup_rank *rk = &s->ranks[r];
    return rk->seg && !rk->seg_corrupt ? fb__seg_hdr(rk->seg) : NULL;
}

/* The first failure of the attempt decides; a segment problem is one.
 * It happened after the segment last looked sound (or at attach time). */
static void segment_failure(fb__sup *s, int rank, fb__sup_fail_kind kind,
                            const char *detail)
{
    if (s->fail.set) {
        fb__sup_log(s, "%s", detail); /* record_failure logs the deciding one */
        return;
    }
    fb__sup_failure *f = &s->fail;
    memset(f, 0, sizeof *f);
    f->set = 1;
    f->kind = kind;
    f->rank = rank;
    f->step = -1;
    f->detected_ns = f->occurred_ns = fb__now_ns();
    if (s->ranks[rank].seg_ok_ns && s->ranks[rank].seg_ok_ns < f->detected_ns)
        f->occurred_ns = s->ranks[rank].seg_ok_ns;
    snprintf(f->phase, sizeof f->phase, "unknown");
    snprintf(f->detail, sizeof f->detail, "%s", detail);
    snprintf(f->injected, sizeof f->injected, "%s", s->ranks[rank].injected);
}

/* Check rank r's segment before reading it.  0, or -1 when it is (or has
 * just been found) corrupt: then it is never read again. */
static int check_segment(fb__sup *s, int r)
{
    fb__sup_rank *rk = &s->ranks[r];
    if (!rk->seg || rk->seg_corrupt)
        return -1;
    char why[128];
    if (fb__seg_check(rk->seg, why, sizeof why) == 0) {
        rk->seg_ok_ns = fb__now_ns();
        return 0;
    }
    rk->seg_corrupt = 1;
    char name[FB__SEG_NAME_MAX] = "";
    fb__seg_name(name, sizeof name, s->job_id, s->attempt, r);
    char detail[400];
    snprintf(detail, sizeof detail, "segment of rank %d (/dev/shm%s) is corrupt: "
             "%s; no longer read, the rank is treated as failed", r, name, why);
    segment_failure(s, r, FB__SUP_FAIL_SEGMENT_CORRUPT, detail);
    return -1;
}

/* A report's code as an injected fault's kind; a rank may send anything. */
static fb__inject_kind inject_kind_of(int32_t code)
{
    return code > FB__INJECT_NONE && code <= FB__INJECT_LAST_ ? (fb__inject_kind)code
                                                                  : FB__INJECT_NONE;
}

/*
 * The commits of a step, counted (reset at each attempt: a rank of this
 * attempt that commits a step the last one also saved adds to this
 * attempt's count only).  Looked up newest first: commits come for the
 * newest steps.  Room is made by dropping a complete step first (nothing
 * more comes for it), else the oldest: dropping the oldest whatever it was
 * made a step still waiting for a rank far behind the others start a new
 * count at that rank's commit, so that a step every rank had committed
 * stayed "partial" (1 of 256 ranks) in the journal and the durable step
 * stayed behind (256 toy ranks on 2 cores: the slowest 60 checkpoints
 * behind the fastest).
 */
static fb__sup_ckpt *ckpt_track(fb__sup *s, int64_t step)
{
    for (int i = s->nckpts - 1; i >= 0; i--)
        if (s->ckpts[i].step == step)
            return &s->ckpts[i];
    if (s->nckpts == SUP_MAX_CKPT_TRACK) {
        int drop = 0;
        for (int i = 0; i < s->nckpts; i++)
            if (s->ckpts[i].complete) {
                drop = i;
                break;
            }
        memmove(s->ckpts + drop, s->ckpts + drop + 1,
                sizeof s->ckpts[0] * (size_t)(SUP_MAX_CKPT_TRACK - 1 - drop));
        s->nckpts--;
    }
    fb__sup_ckpt *c = &s->ckpts[s->nckpts++];
    memset(c, 0, sizeof *c);
    c->step = step;
    return c;
}

/* A checkpoint completed at a step older than one this attempt restored
 * or completed: the program's step count went back, most likely to 0
 * after its restore.  A restart restores the newer one, not this state,
 * and retention (the newest steps kept) may delete this one at once: said
 * once an attempt, on the console. */
static void newest_checkpoint(fb__sup *s, int64_t step, const char *how)
{
    int64_t newest = s->attempt_newest;
    if (step >= newest) {
        s->attempt_newest = step;
        return;
    }
    if (s->older_said++)
        return;
    fb__sup_warn(s, "checkpoint %lld is older than checkpoint %lld, which this attempt "
                 "%s: a restart restores %lld, not this state, and the checkpoint "
                 "directory's retention (the newest steps kept) may delete %lld at once; "
                 "does the program count its steps from 0 after a restore? (said once "
                 "an attempt; docs/checkpoint.md, \"Steps\")", (long long)step,
                 (long long)newest, how, (long long)newest, (long long)step);
}

static void on_report(fb__sup *s, int rank, const fb__seg_report *r)
{
    double t = (double)r->wall_ns / 1e9;
    double value_ms = -1;
    if (r->kind == FB__REPORT_CKPT_COMMITTED || r->kind == FB__REPORT_RESTORE_DONE)
        value_ms = (double)r->value1 / 1e6;
    fb__journal_event ev = {.attempt_id = s->attempt_id, .time = t, .rank = rank,
                            .kind = report_kind_name(r->kind),
                            .step = (int64_t)r->step, .code = r->code,
                            .bytes = (int64_t)r->bytes, .value_ms = value_ms,
                            .detail = r->text};
    /* The tier that served a restore: the rank's text, taken only when it
     * is one of the names (it comes from another process). */
    if (r->kind == FB__REPORT_RESTORE_DONE)
        ev.source = fb__tier_source_name(fb__tier_source_from_name(r->text));
    fb__journal_add_event(s->j, &ev);
    fb__sup_nodemem_on_report(s, rank, r); /* where each copy is (slurm) */

    switch (r->kind) {
    case FB__REPORT_CKPT_COMMITTED: {
        fb__sup_ckpt *c = ckpt_track(s, (int64_t)r->step);
        c->ranks++;
        c->bytes += (int64_t)r->bytes;
        double stall = (double)r->value1 / 1e6, persist = (double)r->value2 / 1e6;
        if (stall > c->stall_ms)
            c->stall_ms = stall;
        if (persist > c->persist_ms)
            c->persist_ms = persist;
        /* The script's own checkpoint (Python hooks) is the job's whole
         * state at that step, whichever rank wrote it. */
        int was = c->complete;
        if (c->ranks >= s->world || r->code == FB__COMMIT_WHOLE)
            c->complete = 1;
        int complete = c->complete;
        if (complete && !was)
            newest_checkpoint(s, c->step, s->attempt_newest == s->restored_step
                                              ? "restored" : "saved");
        fb__journal_checkpoint(s->j, s->attempt_id, c->step, t, c->ranks, c->bytes,
                               c->stall_ms, c->persist_ms,
                               complete ? "complete" : "partial");
        if (complete && c->step > s->durable_step) {
            /* Durable when the rank committed it (the report's wall time),
             * not when a watch pass read the report, up to a pass later:
             * the lost work of a failure counts from here.  Not before the
             * attempt (a clock stepped, another host's). */
            uint64_t now = fb__now_ns(), wall = fb__wall_ns();
            uint64_t age = wall > r->wall_ns ? wall - r->wall_ns : 0;
            uint64_t at = now > age ? now - age : 0;
            s->durable_step = c->step;
            s->durable_ns = at > s->attempt_start_ns ? at : s->attempt_start_ns;
        }
        break;
    }
    case FB__REPORT_CKPT_FAILED: {
        fb__sup_ckpt *c = ckpt_track(s, (int64_t)r->step);
        fb__journal_checkpoint(s->j, s->attempt_id, c->step, t, c->ranks, c->bytes,
                               c->stall_ms, c->persist_ms, "failed");
        char detail[320];
        snprintf(detail, sizeof detail, "rank %d could not save checkpoint %llu: %s",
                 rank, (unsigned long long)r->step, r->text);
        fb__journal_incident inc = {.attempt_id = s->attempt_id, .kind = fb__sup_fail_kind_name(FB__SUP_FAIL_SAVE_FAILED),
            .occurred_at = t, .detected_at = fb__wall_s(), .rank = rank,
            .has_exit_code = 0, .phase = "checkpoint", .step = (int64_t)r->step,
            .lost_s = -1, .detail = detail};
        inc.detect_ms = (inc.detected_at - t) * 1e3;
        s->ranks[rank].ckpt_code = (int)r->code;
        char evidence[1200];
        fb__sup_classify_row(&inc, (int)r->code, evidence, sizeof evidence);
        fb__journal_add_incident(s->j, &inc, NULL);
        fb__sup_log(s, "%s", detail);
        break;
    }
    case FB__REPORT_RESTORE_DONE:
        s->restored_step = (int64_t)r->step;
        newest_checkpoint(s, s->restored_step, "restored");
        if ((double)r->value1 / 1e9 > s->restore_s)
            s->restore_s = (double)r->value1 / 1e9;
        fb__journal_attempt_int(s->j, s->attempt_id, "restored_step", s->restored_step);
        fb__journal_attempt_real(s->j, s->attempt_id, "restore_s", s->restore_s);
        break;
    case FB__REPORT_RESTORE_FALLBACK: {
        /* A partial checkpoint left by the failed attempt is expected (the
         * event row keeps it); only a rejected complete one is an incident. */
        if (r->code == FB_ENOCKPT)
            break;
        char detail[320];
        snprintf(detail, sizeof detail,
                 "rank %d rejected checkpoint %llu and fell back: %s", rank,
                 (unsigned long long)r->step, r->text);
        fb__journal_incident inc = {.attempt_id = s->attempt_id,
            .kind = fb__sup_fail_kind_name(FB__SUP_FAIL_RESTORE_FALLBACK),
            .occurred_at = t,
            .detected_at = fb__wall_s(), .rank = rank, .phase = "restore",
            .step = (int64_t)r->step, .lost_s = -1, .detail = detail};
        inc.detect_ms = (inc.detected_at - t) * 1e3;
        char evidence[1200];
        fb__sup_classify_row(&inc, 0, evidence, sizeof evidence);
        fb__journal_add_incident(s->j, &inc, NULL);
        fb__sup_log(s, "%s", detail);
        break;
    }
    case FB__REPORT_NOTE:
        if (r->code == FB__NOTE_WHERE) /* answering a dump request */
            fb__safe_text(s->ranks[rank].where, sizeof s->ranks[rank].where, r->text);
        break;
    case FB__REPORT_INJECT:
        /* The text is the evidence for the journal; the code, the kind
         * that fired (inject.c), is what blame looks at. */
        snprintf(s->ranks[rank].injected, sizeof s->ranks[rank].injected, "%s", r->text);
        s->ranks[rank].injected_kind = inject_kind_of(r->code);
        break;
    default:
        break;
    }
}

/* n more of rank rk's reports overwritten before they were read. */
static void reports_lost_add(fb__sup_rank *rk, uint64_t n)
{
    rk->reports_lost = rk->reports_lost > UINT64_MAX - n ? UINT64_MAX : rk->reports_lost + n;
}

void fb__sup_deliver_report(fb__sup *s, int rank, uint64_t idx,
                            const fb__seg_report *rep)
{
    fb__sup_rank *rk = &s->ranks[rank];
    if (idx < rk->report_idx)
        return; /* already seen through the other path */
    /* Reports skipped: overwritten in the segment before a node's watcher
     * read them (it forwards in order, by index), said at the end. */
    reports_lost_add(rk, idx - rk->report_idx);
    rk->report_idx = idx + 1;
    on_report(s, rank, rep);
}

static void read_reports(fb__sup *s, int r)
{
    fb__sup_rank *rk = &s->ranks[r];
    fb__seg_report rep;
    int got;
    if (!live_hdr(s, r))
        return;
    /* At most one ring's worth per pass: a hostile head cannot keep us. */
    uint32_t budget = fb__seg_ident(rk->seg)->report_capacity + 1;
    while (budget-- > 0 &&
           (got = fb__seg_read_report(rk->seg, rk->report_idx, &rep)) != 0) {
        if (got > 0) {
            fb__sup_deliver_report(s, r, rk->report_idx, &rep);
        } else { /* overwritten before we could read it: said at the end */
            uint64_t next = fb__seg_report_next(rk->seg, rk->report_idx);
            reports_lost_add(rk, next - rk->report_idx); /* to the oldest held */
            rk->report_idx = next;
        }
    }
}

void fb__sup_reports_lost_say(fb__sup *s)
{
    uint64_t total = 0;
    int nranks = 0, first = -1;
    for (int r = 0; r < s->world; r++) {
        uint64_t n = s->ranks[r].reports_lost;
        if (!n)
            continue;
        total = total > UINT64_MAX - n ? UINT64_MAX : total + n;
        if (first < 0)
            first = r;
        nranks++;
        char detail[200];
        snprintf(detail, sizeof detail, "%llu report%s of rank %d overwritten in its "
                 "segment before the supervisor read them", (unsigned long long)n,
                 n == 1 ? "" : "s", r);
        fb__journal_event ev = {.attempt_id = s->attempt_id, .time = fb__wall_s(),
                                .rank = r, .kind = "reports_lost", .step = -1,
                                .code = n > INT32_MAX ? INT32_MAX : (int)n,
                                .value_ms = -1, .detail = detail};
        fb__journal_add_event(s->j, &ev);
    }
    if (total)
        fb__sup_log(s, "attempt %d: %llu report%s of %d rank%s (rank %d first) were "
                    "overwritten in their segments before they were read (a ring of %u "
                    "each): the journal lacks those events, and a checkpoint whose "
                    "commit was among them shows as partial or not at all; checkpoints "
                    "are verified on disk before each restore all the same", s->attempt,
                    (unsigned long long)total, total == 1 ? "" : "s", nranks,
                    nranks == 1 ? "" : "s", first, (unsigned)FB__SEG_REPORT_CAPACITY);
}

void fb__sup_try_attach(fb__sup *s, int r)
{
    if (s->remote_only)
        return;
    fb__sup_rank *rk = &s->ranks[r];
    char name[FB__SEG_NAME_MAX];
    if (rk->seg_refused || fb__seg_name(name, sizeof name, s->job_id, s->attempt, r))
        return;
    fb__seg *seg;
    struct stat st;
    memset(&st, 0, sizeof st);
    int rc = fb__seg_open_as(&seg, name, geteuid(), &st);
    if (rc == FB_ENOTOURS || rc == FB_ENOTREG) {
        /* Planted by someone else before the rank could create it: the
         * rank cannot record (fb_init refuses the name), and nothing in
         * the file is to be believed. */
        rk->seg_refused = 1;
        char detail[400];
        snprintf(detail, sizeof detail, "segment of rank %d is not ours: owner "
                 "uid %u mode %04o (/dev/shm%s%s); refusing to read it, the rank "
                 "cannot record", r, (unsigned)st.st_uid,
                 (unsigned)(st.st_mode & 07777), name,
                 rc == FB_ENOTREG ? ", not a regular file" : "");
        segment_failure(s, r, FB__SUP_FAIL_SEGMENT_NOT_OURS, detail);
        return;
    }
    if (rc == FB_EFORMAT) {
        /* The magic is stored last, so a half-created segment reads as
         * -ENOENT: a malformed one was written that way. */
        rk->seg_refused = 1;
        char detail[400];
        snprintf(detail, sizeof detail, "segment of rank %d (/dev/shm%s) is "
                 "corrupt: its sizes and offsets do not fit the file; not read, "
                 "the rank is treated as failed", r, name);
        segment_failure(s, r, FB__SUP_FAIL_SEGMENT_CORRUPT, detail);
        return;
    }
    if (rc)
        return;
    rk->seg = seg;
    /* Not into the shims forked while it is mapped (the standby shims,
     * launch.c): they would keep the attempt's segments alive after their
     * files are removed, and each mapping is one more to copy per fork. */
    madvise(fb__seg_base(seg), fb__seg_size(seg), MADV_DONTFORK);
    s->any_attached = 1;
    const fb__seg_identity *id = fb__seg_ident(seg);
    if (rk->pid <= 0)
        rk->pid = id->pid;
    if (s->o->launcher != FB__LAUNCH_LOCAL && rk->pidfd < 0 && id->pid > 0) {
        rk->pidfd = fb__pidfd_open(id->pid);
        if (rk->pidfd < 0 && rk->pidfd != -ENOSYS)
            /* Already gone: the next pass notices through the end record. */
            rk->pidfd = -1;
    }
}

static uint64_t timeout_ns(const fb__sup *s, uint32_t phase)
{
    double t;
    switch (phase) {
    case FB_PHASE_TRAIN: t = s->o->hang_timeout_s; break;
    case FB_PHASE_CHECKPOINT: t = s->o->ckpt_timeout_s; break;
    case FB_PHASE_INIT:
    case FB_PHASE_RESTORE: t = s->o->startup_timeout_s; break;
    /* After fb_finalize: the teardown (exit handlers, NCCL's and gloo's
     * shutdown), counted from the finalize's own beat. */
    case FB_PHASE_DONE: t = s->o->exit_timeout_s; break;
    default: t = s->o->hang_timeout_s; break; /* not a phase: scribbled */
    }
    return t > 0 ? (uint64_t)(t * 1e9) : 0;
}

static void declare_hang(fb__sup *s, int rank, uint64_t last_ns, uint64_t now,
                         uint32_t phase, int64_t step, const char *why)
{
    fb__sup_failure *f = &s->fail;
    memset(f, 0, sizeof *f);
    f->set = 1;
    f->kind = FB__SUP_FAIL_HANG;
    f->rank = rank;
    f->step = step;
    snprintf(f->phase, sizeof f->phase, "%s", fb__sup_phase_name(phase));
    f->occurred_ns = last_ns;
    f->detected_ns = now;
    snprintf(f->detail, sizeof f->detail, "%s", why);
    if (rank >= 0)
        snprintf(f->injected, sizeof f->injected, "%s", s->ranks[rank].injected);
}

/* What one pass over the ranks found (what a hang is, s->hang_facts). */
typedef struct watch_pass {
    int all_ready, attached;
    uint64_t ready_max;       /* the last rank's first step               */
    int64_t max_step;
} watch_pass;

/* Journal rank r's step time, at most once a second and per new step. */
static void sample_steps(fb__sup *s, int r, fb__seg_header *h, int64_t step, uint64_t now)
{
    fb__sup_rank *rk = &s->ranks[r];
    if (now - rk->last_sample_ns < 1000000000ull || (uint64_t)step == rk->last_sample_step)
        return;
    double ewma = (double)atomic_load_explicit(&h->step_ewma_ns, memory_order_relaxed) / 1e6;
    fb__journal_sample(s->j, s->attempt_id, r, fb__wall_s(), step, ewma);
    rk->last_sample_ns = now;
    rk->last_sample_step = (uint64_t)step;
}

#ifdef FB_TEST_HOOKS
/* FIREBREAK_TEST_ATTACH_AFTER_MS=N: watch passes attach no segment in the
 * first N ms of an attempt, as if the ranks came and went between two
 * passes (tests/supervisor/mpirun_launcher.sh). */
static int attach_held(const fb__sup *s, uint64_t now)
{
    static long long ms = -1; /* read once: passes look per rank */
    if (ms < 0) {
        const char *v = getenv("FIREBREAK_TEST_ATTACH_AFTER_MS");
        if (!v || fb__parse_int(v, 0, 600000, &ms))
            ms = 0;
    }
    return ms && now < s->attempt_start_ns + (uint64_t)ms * 1000000u;
}
#else
static int attach_held(const fb__sup *s, uint64_t now)
{
    (void)s;
    (void)now;
    return 0;
}
#endif

/* Rank r's part of a pass: attach, check, reports, progress, and its
 * facts for fb__sup_blame_hang into *hf. */
static void watch_rank(fb__sup *s, int r, uint64_t now, watch_pass *p,
                       fb__sup_hang_rank *hf)
{
    fb__sup_rank *rk = &s->ranks[r];
    memset(hf, 0, sizeof *hf);
    hf->step = -1;
    if (!rk->seg && !attach_held(s, now))
        fb__sup_try_attach(s, r);
    if (!rk->seg) {
        /* Not on this host: ready once its node's watcher saw a step. */
        if (rk->remote_ready_ns) {
            p->attached++;
            s->any_attached = 1;
            if (rk->remote_ready_ns > p->ready_max)
                p->ready_max = rk->remote_ready_ns;
        } else {
            p->all_ready = 0;
        }
        return;
    }
    p->attached++;
    if (check_segment(s, r))
        return;
    fb__seg_header *h = fb__seg_hdr(rk->seg);
    read_reports(s, r);
    uint64_t done = atomic_load_explicit(&h->steps_done, memory_order_relaxed);
    int64_t step = done ? (int64_t)atomic_load_explicit(&h->step, memory_order_relaxed) : -1;
    uint32_t phase = atomic_load_explicit(&h->phase, memory_order_relaxed);
    uint64_t hb = fb__sup_trusted_beat(
        atomic_load_explicit(&h->heartbeat_mono_ns, memory_order_acquire), now,
        &rk->odd_beat, &rk->odd_beat_seen_ns);
    /* Shrunk since the check: what was just read is zeros, which would
     * look like a heartbeat from boot time (a hang).  The truncation
     * is the failure to report. */
    if (fb__seg_truncated(rk->seg, NULL) && check_segment(s, r))
        return;
    if (step > p->max_step)
        p->max_step = step;
    if (!done) {
        p->all_ready = 0;
    } else {
        uint64_t first = atomic_load_explicit(&h->first_step_mono_ns, memory_order_relaxed);
        if (first > p->ready_max)
            p->ready_max = first;
        sample_steps(s, r, h, step, now);
    }
    hf->readable = 1;
    hf->watched = !rk->ended;
    hf->last_beat_ns = hb;
    hf->limit_ns = timeout_ns(s, phase);
    hf->phase = phase;
    hf->step = step;
    hf->injected = inject_kind_of(
        (int32_t)atomic_load_explicit(&h->inject_kind, memory_order_acquire));
    /* The supervisor's own after= hang (SIGSTOP) is as direct as a
     * recorded one: the stopped rank cannot record it. */
    if (hf->injected == FB__INJECT_NONE && rk->injected_kind == FB__INJECT_HANG)
        hf->injected = FB__INJECT_HANG;
}

/* A pass found a rank silent past its limit: declare the hang on the
 * rank policy.c blames (b). */
static void blame_hang(fb__sup *s, const fb__sup_hang_blame *b, uint64_t now)
{
    const fb__sup_hang_rank *k = &s->hang_facts[b->rank];
    if (b->basis == FB__SUP_HANG_INJECTED)
        read_reports(s, b->rank); /* the injection's text, for the incident */
    /* Silence is what the watch pass measured, not who stopped first:
     * the wording says only that (analyze_hang in supervisor.c adds what
     * the flight recorder could or could not tell). */
    char why[384], last[32];
    fb__sup_step_words(last, sizeof last, k->step, 1);
    snprintf(why, sizeof why,
             "no progress from rank %d for %.1f s in phase %s (limit %.1f s), "
             "%s%s; %s", b->rank, (double)(now - k->last_beat_ns) / 1e9,
             fb__sup_phase_name(k->phase), (double)timeout_ns(s, k->phase) / 1e9,
             last,
             /* fb_finalize's beat, and the process still there */
             k->phase == FB_PHASE_DONE ? ", after it had finished: a hang in its "
                                         "teardown (exit handlers, NCCL's or gloo's "
                                         "shutdown; --exit-timeout)"
                                       : "",
             b->basis == FB__SUP_HANG_INJECTED ? "the rank recorded an injected hang"
             : b->alone ? "it alone was silent: every other rank had ended or was "
                          "still stepping"
                        : "it was silent the longest");
    declare_hang(s, b->rank, k->last_beat_ns, now, k->phase, k->step, why);
    /* Silence names the rank only when it was the one silent rank. */
    s->fail.by_silence = b->basis == FB__SUP_HANG_OLDEST_BEAT && !b->alone;
}

/* --attach-timeout: a rank that never attached counts as hung in init. */
static void check_attach_timeout(fb__sup *s, int attached, uint64_t now)
{
    if (s->o->attach_timeout_s <= 0 || attached >= s->world ||
        now - s->attempt_start_ns <= (uint64_t)(s->o->attach_timeout_s * 1e9))
        return;
    for (int r = 0; r < s->world; r++) {
        if (s->ranks[r].seg || s->ranks[r].ended)
            continue;
        char why[256];
        snprintf(why, sizeof why, "rank %d never attached to firebreak within "
                 "%.1f s (--attach-timeout)", r, s->o->attach_timeout_s);
        declare_hang(s, r, s->attempt_start_ns, now, FB_PHASE_INIT, -1, why);
        return;
    }
}

int fb__sup_watch_period_ms(const fb__sup *s)
{
    /* A pass costs the same for every rank, so its rate, not a rank's
     * share, sets the supervisor's CPU at thousands of ranks; the rate
     * follows the limits it checks against. */
    enum { MIN_MS = 50, MAX_MS = 250 };
    /* Until every rank has taken a step: attach soon after each creates
     * its segment, as before. */
    if (!s->attempt_ready_ns || s->slurm) /* slurm: node watchers' ages */
        return MIN_MS;
    for (int i = 0; i < s->plan.count; i++)
        if (s->plan.faults[i].has_after)
            return MIN_MS;
    double lim = s->o->hang_timeout_s;
    if (s->o->startup_timeout_s > 0 && s->o->startup_timeout_s < lim)
        lim = s->o->startup_timeout_s;
    if (s->o->ckpt_timeout_s > 0 && s->o->ckpt_timeout_s < lim)
        lim = s->o->ckpt_timeout_s;
    if (s->o->attach_timeout_s > 0 && s->o->attach_timeout_s < lim)
        lim = s->o->attach_timeout_s;
    if (s->o->exit_timeout_s > 0 && s->o->exit_timeout_s < lim)
        lim = s->o->exit_timeout_s;
    double ms = lim * 1e3 / 40;
    return ms < MIN_MS ? MIN_MS : ms > MAX_MS ? MAX_MS : (int)ms;
}

/* --exit-timeout: a rank that finalized may wait in its teardown for
 * ranks still working (MPI_Finalize, a process group's last barrier), for
 * as long as their work takes.  So its limit runs only once no rank works
 * (every one ended or in phase done), and from then, not from its own
 * finalize (s->work_over_ns; slurm.c reads it for the watchers' ranks). */
static void teardown_limits(fb__sup *s, uint64_t now)
{
    int working = 0;
    for (int r = 0; r < s->world && !working; r++) {
        const fb__sup_hang_rank *k = &s->hang_facts[r];
        if (s->ranks[r].ended)
            continue;
        if (s->ranks[r].seg ? !(k->readable && k->phase == FB_PHASE_DONE)
                            : !fb__sup_slurm_rank_done(s, r))
            working = 1;
    }
    if (working)
        s->work_over_ns = 0;
    else if (!s->work_over_ns)
        s->work_over_ns = now;
    for (int r = 0; r < s->world; r++) {
        fb__sup_hang_rank *k = &s->hang_facts[r];
        if (!k->readable || k->phase != FB_PHASE_DONE)
            continue;
        if (working)
            k->limit_ns = 0;
        else if (k->last_beat_ns < s->work_over_ns)
            k->last_beat_ns = s->work_over_ns;
    }
}

void fb__sup_watch(fb__sup *s, uint64_t now)
{
    watch_pass p = {.all_ready = 1, .max_step = -1};
    for (int r = 0; r < s->world; r++)
        watch_rank(s, r, now, &p, &s->hang_facts[r]);
    teardown_limits(s, now);
    if (p.max_step > s->max_step)
        s->max_step = p.max_step;
    fb__sup_sdc_pass(s); /* replicas' hashes (sdc.c) */
    if (!s->attempt_ready_ns && p.all_ready && p.attached == s->world) {
        s->attempt_ready_ns = p.ready_max;
        fb__journal_attempt_real(s->j, s->attempt_id, "ready_at",
                                 fb__sup_mono_to_wall(p.ready_max));
    }
    if (s->fail.set)
        return;
    fb__sup_lateness(s, now);
    fb__sup_hang_facts hf = {.now_ns = now, .ranks = s->hang_facts,
                             .world = s->world, .declared = -1};
    fb__sup_hang_blame b;
    fb__sup_blame_hang(&hf, &b);
    if (b.rank >= 0)
        blame_hang(s, &b, now);
    else
        check_attach_timeout(s, p.attached, now);
}

/* Rank r's own end record, as far as its segment can be trusted. */
static void end_record(const fb__sup *s, int r, fb__sup_end_record *rec)
{
    fb__seg_header *h = live_hdr(s, r);
    rec->ended = s->ranks[r].ended;
    rec->readable = h != NULL;
    rec->end_kind = h ? atomic_load_explicit(&h->end_kind, memory_order_acquire)
                      : FB__END_NONE;
    rec->end_code = h ? atomic_load_explicit(&h->end_code, memory_order_relaxed) : 0;
}

/* The rank to blame instead of `rank`, which ended as `v` says, or -1
 * (policy.c: a rank that vanished without a word yields to one that has
 * recorded a fatal end). */
static int blame_instead(fb__sup *s, int rank, const fb__sup_end_verdict *v)
{
    if (v->how != FB__SUP_END_VANISHED)
        return -1;
    fb__sup_end_record *recs = calloc((size_t)s->world, sizeof *recs);
    if (!recs)
        return -1; /* blame the rank that vanished */
    /* A rank that came, recorded its end and is going between two watch
     * passes is not attached yet: its segment tells (and outlives it). */
    for (int r = 0; r < s->world; r++) {
        if (r != rank && !s->ranks[r].seg && !s->ranks[r].ended)
            fb__sup_try_attach(s, r);
        end_record(s, r, &recs[r]);
    }
    int other = fb__sup_blame_instead(v, rank, recs, s->world);
    free(recs);
    return other;
}

const char *fb__sup_step_words(char *buf, size_t size, int64_t step, int last)
{
    if (step < 0)
        snprintf(buf, size, "%s", last ? "no step taken" : "before its first step");
    else
        snprintf(buf, size, "%s step %lld", last ? "last" : "at", (long long)step);
    return buf;
}

/* The failure's detail line, from how the rank ended. */
static void end_detail(const fb__sup *s, fb__sup_failure *f, fb__sup_end_how how,
                       int exec_errno, int attached)
{
    int rank = f->rank, sig = f->signal;
    char at[32];
    fb__sup_step_words(at, sizeof at, f->step, 0);
    switch (how) {
    case FB__SUP_END_LAUNCH:
        snprintf(f->detail, sizeof f->detail, "rank %d could not start %s: %s",
                 rank, s->o->argv[0], strerror(exec_errno));
        break;
    case FB__SUP_END_SIGNAL:
        if (attached)
            snprintf(f->detail, sizeof f->detail, "rank %d killed by signal %d (%s) "
                     "%s in phase %s%s", rank, sig, strsignal(sig), at, f->phase,
                     /* fb_finalize ran: the program's work was over */
                     strcmp(f->phase, "done") ? ""
                     : ", after it had finished: a crash in its teardown (exit "
                       "handlers, library destructors)");
        else
            snprintf(f->detail, sizeof f->detail, "rank %d killed by signal %d (%s); "
                     "not attached to firebreak, so its step is unknown", rank, sig,
                     strsignal(sig));
        break;
    case FB__SUP_END_EXIT:
        if (attached)
            snprintf(f->detail, sizeof f->detail, "rank %d exited with code %d %s "
                     "in phase %s", rank, f->exit_code, at, f->phase);
        else
            snprintf(f->detail, sizeof f->detail, "rank %d exited with code %d; "
                     "not attached to firebreak, so its step is unknown", rank,
                     f->exit_code);
        break;
    case FB__SUP_END_INJECTED_KILL:
        snprintf(f->detail, sizeof f->detail, "rank %d killed by SIGKILL (the "
                 "injected fault it recorded) %s in phase %s", rank, at, f->phase);
        break;
    case FB__SUP_END_VANISHED:
    case FB__SUP_END_OK:
        snprintf(f->detail, sizeof f->detail, "rank %d vanished without "
                 "recording an exit (SIGKILL or similar) %s in phase %s", rank, at,
                 f->phase);
        break;
    }
}

/* Make rank `rank`'s end, judged `v`, the attempt's failure. */
static void record_end(fb__sup *s, int rank, const fb__sup_rank_end *e,
                       const fb__sup_end_verdict *v, uint64_t when_ns)
{
    fb__seg_header *h = live_hdr(s, rank);
    fb__sup_failure *f = &s->fail;
    memset(f, 0, sizeof *f);
    f->set = 1;
    f->kind = v->kind;
    f->rank = rank;
    f->signal = v->signal;
    f->has_exit_code = v->has_exit_code;
    f->exit_code = v->exit_code;
    f->launch_error = v->launch_error;
    f->detected_ns = fb__now_ns();
    f->step = -1;
    snprintf(f->phase, sizeof f->phase, "unknown");
    uint64_t end_ns = 0, inj_ns = 0;
    if (h) {
        uint64_t done = atomic_load_explicit(&h->steps_done, memory_order_relaxed);
        f->step = done ? (int64_t)atomic_load_explicit(&h->step, memory_order_relaxed) : -1;
        snprintf(f->phase, sizeof f->phase, "%s",
                 fb__sup_phase_name(atomic_load_explicit(&h->phase, memory_order_relaxed)));
        end_ns = atomic_load_explicit(&h->end_mono_ns, memory_order_relaxed);
        inj_ns = atomic_load_explicit(&h->inject_mono_ns, memory_order_relaxed);
    }
    f->occurred_ns = fb__sup_end_time(when_ns, f->detected_ns, e->end_kind, end_ns,
                                      inj_ns);
    snprintf(f->injected, sizeof f->injected, "%s", s->ranks[rank].injected);
    end_detail(s, f, v->how, e->exec_errno, h != NULL);
}

void fb__sup_rank_ended(fb__sup *s, int rank, int wstatus_known, int wstatus,
                        int exec_errno, uint64_t when_ns)
{
    fb__sup_rank *rk = &s->ranks[rank];
    if (rk->ended)
        return;
    rk->ended = 1;
    if (!rk->seg)
        fb__sup_try_attach(s, rank);
    /* A segment it scribbled over before dying holds no record to trust. */
    if (rk->seg)
        check_segment(s, rank);
    read_reports(s, rank);
    fb__sup_end_record rec;
    end_record(s, rank, &rec);
    fb__sup_rank_end e = {.wstatus_known = wstatus_known, .wstatus = wstatus,
                          .exec_errno = exec_errno, .end_kind = rec.end_kind,
                          .end_code = rec.end_code, .injected = rk->injected_kind};
    fb__sup_end_verdict v;
    fb__sup_judge_end(&e, &v);
    /* The first failure of the attempt decides. */
    if (v.how == FB__SUP_END_OK || s->fail.set)
        return;
    int other = blame_instead(s, rank, &v);
    if (s->fail.set)
        return; /* attaching found a segment not to be trusted: that decides */
    if (other >= 0) {
        fb__sup_rank_ended(s, other, 0, 0, 0, when_ns);
        if (s->fail.set)
            return;
    }
    record_end(s, rank, &e, &v, when_ns);
}

void fb__sup_last_lines(const fb__sup *s, int rank, char *buf, size_t size)
{
    if (size)
        buf[0] = '\0';
    if (rank < 0 || rank >= s->world)
        return;
    fb__rank_log_tail(s->ranks[rank].log_path, buf, size);
}
