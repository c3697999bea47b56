/*
 * watcher.c -- the per-node watcher of the slurm launcher (`firebreak
 * watch`, watcher.h, docs/slurm.md).  It reads this node's rank segments
 * and pidfds and writes what it sees as fbw1 lines (fbw1.h), the protocol
 * whose reader is slurm.c.  Every line goes through fb__fbw1_format: a
 * message the reader would refuse is never written.
 *
 * A segment is written by its rank, which may scribble over it: the
 * watcher checks each segment before reading it (fb__seg_check), reads
 * at most one ring of reports per pass, and never reads a corrupt one
 * again.  `--health` instead runs this node's health checks once.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/tier.h"
#include "common/rundir.h"
#include "common/util.h"
#include "firebreak/firebreak.h"
#include "health/health.h"
#include "lib/segment.h"
#include "supervisor/policy.h"
#include "supervisor/proc.h"
#include "supervisor/watcher.h"

static volatile sig_atomic_t g_stop;
static int g_keep; /* the supervisor said `keep` (on_request, main thread) */
/* The step the supervisor named to replicate (`fbw1 send`), -1 none yet:
 * every node sends the named steps first, so the same ones are copied
 * everywhere; between them, its own newest. */
static int64_t g_send = -1;
/* Test hook (FB_TEST_HOOKS): this watcher has gone silent, standing for
 * its node's death (FIREBREAK_TEST_WATCH_MUTE_NODE). */
static int g_mute;

#ifdef FB_TEST_HOOKS
static int g_trace;
#endif

static void on_stop(int sig)
{
    g_stop = 1;
#ifdef FB_TEST_HOOKS
    if (g_trace) { /* async-signal-safe: one write of a fixed-size line */
        char line[] = "firebreak watch: signal ..\n";
        line[24] = (char)('0' + sig / 10 % 10);
        line[25] = (char)('0' + sig % 10);
        ssize_t w = write(STDERR_FILENO, line, sizeof line - 1);
        (void)w;
    }
#else
    (void)sig;
#endif
}

/* Test hook (FB_TEST_HOOKS): FIREBREAK_TEST_WATCH_LOG_DIR=DIR sends this
 * watcher's stderr to DIR/watch-NODE.err, with a timed line at each stage
 * of its stop, so that a test whose supervisor is killed (and its srun,
 * which carried the watchers' stderr, with it) still sees where a
 * watcher's stop went (tests/slurm/peer.sh, case 6). */
#ifdef FB_TEST_HOOKS
static void trace_open(const char *node)
{
    const char *dir = getenv("FIREBREAK_TEST_WATCH_LOG_DIR");
    char path[PATH_MAX];
    if (!dir || !dir[0] || fb__fmt(path, sizeof path, "%s/watch-%s.err", dir, node))
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    if (dup2(fd, STDERR_FILENO) >= 0)
        g_trace = 1;
    close(fd);
}

static void trace(const char *what)
{
    if (!g_trace)
        return;
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%02d:%02d:%02d.%03ld firebreak watch (pid %d): %s\n", tm.tm_hour,
            tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000, (int)getpid(), what);
}
#else
static void trace_open(const char *node) { (void)node; }
static void trace(const char *what) { (void)what; }
#endif

/* Write one message; one that does not format (a value out of the
 * protocol's bounds, e.g. from a scribbled segment) is not written, as the
 * reader would drop it. */
static void emit(FILE *out, const fb__fbw1_msg *m)
{
    char line[FB__FBW1_LINE_MAX + 2];
    int n = fb__fbw1_format(m, line, sizeof line);
    if (n > 0 && !g_mute)
        fwrite(line, 1, (size_t)n, out);
}

void fb__watch_node_name(const char *opt, char buf[FB__FBW1_NODE_MAX])
{
    const char *v = opt ? opt : fb__getenv("SLURMD_NODENAME");
    if (v)
        snprintf(buf, FB__FBW1_NODE_MAX, "%s", v);
    else if (gethostname(buf, FB__FBW1_NODE_MAX - 1))
        snprintf(buf, FB__FBW1_NODE_MAX, "unknown");
    buf[FB__FBW1_NODE_MAX - 1] = '\0';
    if (!fb__fbw1_node_name_ok(buf))
        snprintf(buf, FB__FBW1_NODE_MAX, "unknown");
}

/* ---- --health ---- */

static fb__fbw1_verdict verdict_of(fb__health_status v)
{
    switch (v) {
    case FB_HEALTH_OK: return FB_FBW1_OK;
    case FB_HEALTH_WARN: return FB_FBW1_WARN;
    case FB_HEALTH_FAIL: return FB_FBW1_FAIL;
    default: return FB_FBW1_ERROR; /* fb__health_verdict gives none other */
    }
}

int fb__watch_health(const char *node, FILE *out)
{
    char var[128];
    size_t k = (size_t)snprintf(var, sizeof var, "FIREBREAK_HEALTH_ROOT_");
    for (const char *p = node; *p && k + 1 < sizeof var; p++) {
        char c = *p;
        int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9');
        var[k++] = alnum ? c : '_';
    }
    var[k] = '\0';
    fb__health_opts o;
    fb__health_opts_init(&o);
    o.root = fb__getenv(var);
    if (!o.root)
        o.root = fb__getenv("FIREBREAK_HEALTH_ROOT");
    fb__fbw1_msg m;
    memset(&m, 0, sizeof m);
    m.kind = FB_FBW1_HEALTH;
    snprintf(m.node, sizeof m.node, "%s", node);
    fb__health_result *r = NULL;
    char err[256] = "";
    int rc = fb__health_run(&o, &r, err, sizeof err);
    if (rc) {
        m.verdict = FB_FBW1_ERROR;
        snprintf(m.reason, sizeof m.reason, "firebreak: could not check: %s",
                 err[0] ? err : fb_strerror(rc));
        emit(out, &m);
        return 0;
    }
    m.verdict = verdict_of(fb__health_verdict(r));
    fb__health_reason(r, m.reason, sizeof m.reason);
    for (char *p = m.reason; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    if (!m.reason[0])
        snprintf(m.reason, sizeof m.reason, "all checks passed");
    emit(out, &m);
    fb__health_free(r);
    return 0;
}

/* ---- watching the ranks ---- */

typedef struct wrank {
    int rank;
    fb__seg *seg;
    int pidfd;
    int ended;
    uint64_t report_idx; /* next report of the rank's ring to forward */
    int sent_first_step; /* a beat went out after its first step       */
    int refused;         /* a file under its name is not ours           */
    int corrupt;         /* failed fb__seg_check: no longer read        */
    int64_t mem_step;    /* newest step it committed in node memory; -1 */
    int vanished;        /* ended without a record, just reported        */
    uint64_t odd_beat, odd_beat_seen_ns; /* fb__sup_trusted_beat's       */
} wrank;

static void msg_init(fb__fbw1_msg *m, fb__fbw1_kind kind, int rank)
{
    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->rank = rank;
}

/* Forward the rank's new reports (checkpoints, restores, injected faults):
 * the supervisor may be on another host and cannot read the segment. */
static void send_reports(FILE *out, wrank *w)
{
    fb__seg_report rep;
    int got;
    if (w->corrupt)
        return;
    /* At most one ring's worth per pass: a hostile head cannot keep us. */
    uint32_t budget = fb__seg_ident(w->seg)->report_capacity + 1;
    while (budget-- > 0 &&
           (got = fb__seg_read_report(w->seg, w->report_idx, &rep)) != 0) {
        if (got > 0) {
            fb__fbw1_msg m;
            msg_init(&m, FB_FBW1_REPORT, w->rank);
            m.rep_idx = (long long)w->report_idx;
            m.rep_kind = rep.kind > INT32_MAX ? -1 : (int)rep.kind;
            m.rep_code = rep.code;
            m.rep_step = (long long)rep.step;
            m.rep_bytes = (long long)rep.bytes;
            m.rep_v1 = (long long)rep.value1;
            m.rep_v2 = (long long)rep.value2;
            m.rep_wall_ns = (long long)rep.wall_ns;
            /* rep.text need not be terminated; control bytes become '?' */
            size_t n = strnlen(rep.text, sizeof rep.text - 1);
            memcpy(m.rep_text, rep.text, n);
            m.rep_text[n] = '\0';
            if (rep.kind == FB__REPORT_CKPT_COMMITTED &&
                strstr(m.rep_text, ", in node memory") && m.rep_step > w->mem_step)
                w->mem_step = m.rep_step; /* the peer tier's to send */
            emit(out, &m);
            w->report_idx++;
        } else {
            w->report_idx = fb__seg_report_next(w->seg, w->report_idx); /* lost */
        }
    }
}

/* Check the segment before reading it; a corrupt one is said once (a
 * note report, which the supervisor journals as an event naming the
 * segment, and stderr) and never read again: its beats stop, and the
 * supervisor's hang timeout takes over. */
static void check(FILE *out, wrank *w)
{
    char why[128];
    if (w->corrupt || fb__seg_check(w->seg, why, sizeof why) == 0)
        return;
    w->corrupt = 1;
    fb__fbw1_msg m;
    msg_init(&m, FB_FBW1_REPORT, w->rank);
    m.rep_idx = (long long)w->report_idx;
    m.rep_kind = FB__REPORT_NOTE;
    m.rep_wall_ns = (long long)fb__wall_ns();
    snprintf(m.rep_text, FB__REPORT_TEXT_MAX,
             "segment of rank %d is corrupt: %s; no longer read", w->rank, why);
    fprintf(stderr, "firebreak watch: %s\n", m.rep_text);
    emit(out, &m);
    w->report_idx++;
}

/* Reports rank w's end; returns 1 when it went without a record (the
 * supervisor then waits for this node's next `alive`, fb__watch_run). */
static int report_end(FILE *out, wrank *w)
{
    check(out, w);
    send_reports(out, w); /* what it said before it went comes first */
    fb__seg_header *h = fb__seg_hdr(w->seg);
    uint32_t kind = w->corrupt ? FB__END_NONE
                  : atomic_load_explicit(&h->end_kind, memory_order_acquire);
    int code = w->corrupt ? 0 : atomic_load_explicit(&h->end_code, memory_order_relaxed);
    fb__fbw1_msg m;
    msg_init(&m, FB_FBW1_END, w->rank);
    m.how = kind == FB__END_EXIT ? FB_FBW1_END_EXIT
          : kind == FB__END_SIGNAL ? FB_FBW1_END_SIGNAL
          : kind == FB__END_FINALIZED ? FB_FBW1_END_FINALIZED
                                     : FB_FBW1_END_VANISHED;
    m.code = m.how == FB_FBW1_END_EXIT || m.how == FB_FBW1_END_SIGNAL ? code : 0;
    /* A rank that recorded the injected SIGKILL it then sent itself ended
     * as recorded, as the supervisor reads it on its own host. */
    if (m.how == FB_FBW1_END_VANISHED && !w->corrupt &&
        atomic_load_explicit(&h->inject_kind, memory_order_acquire) == FB__INJECT_KILL) {
        m.how = FB_FBW1_END_SIGNAL;
        m.code = SIGKILL;
    }
    emit(out, &m);
    w->ended = 1;
    return m.how == FB_FBW1_END_VANISHED;
}

static void try_attach(FILE *out, const char *job, int attempt, wrank *w)
{
    char name[FB__SEG_NAME_MAX];
    struct stat st;
    memset(&st, 0, sizeof st);
    if (w->refused || fb__seg_name(name, sizeof name, job, attempt, w->rank))
        return;
    int rc = fb__seg_open_as(&w->seg, name, geteuid(), &st);
    if (rc == FB_ENOTOURS || rc == FB_ENOTREG) {
        w->refused = 1;
        fprintf(stderr, "firebreak watch: segment of rank %d is not ours: owner "
                "uid %u mode %04o (/dev/shm%s); refusing to read it\n", w->rank,
                (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), name);
        return;
    }
    if (rc)
        return;
    int pid = fb__seg_ident(w->seg)->pid;
    fb__fbw1_msg m;
    msg_init(&m, FB_FBW1_ATTACH, w->rank);
    m.pid = pid;
    emit(out, &m);
    w->pidfd = pid > 0 ? fb__pidfd_open(pid) : -1;
    if (w->pidfd < 0 && report_end(out, w)) /* already gone */
        w->vanished = 1;
}

static void beat(FILE *out, wrank *w, uint64_t now)
{
    fb__seg_header *h = fb__seg_hdr(w->seg);
    uint64_t done = atomic_load_explicit(&h->steps_done, memory_order_relaxed);
    uint32_t phase = atomic_load_explicit(&h->phase, memory_order_relaxed);
    uint64_t hb = fb__sup_trusted_beat(
        atomic_load_explicit(&h->heartbeat_mono_ns, memory_order_acquire), now,
        &w->odd_beat, &w->odd_beat_seen_ns);
    fb__fbw1_msg m;
    msg_init(&m, FB_FBW1_BEAT, w->rank);
    m.step = done ? (long long)atomic_load_explicit(&h->step, memory_order_relaxed) : -1;
    m.phase = phase > FB__FBW1_PHASE_MAX ? FB__FBW1_PHASE_MAX : (int)phase;
    m.age_ms = now > hb ? (long long)((now - hb) / 1000000ull) : 0;
    emit(out, &m);
}

/* One pass over the ranks after poll: attach, forward, first-step beats. */
static void pass(const fb__watch_opts *o, wrank *ranks, int n, uint64_t now)
{
    for (int i = 0; i < n; i++) {
        wrank *w = &ranks[i];
        if (!w->seg || w->ended)
            continue;
        check(o->out, w);
        if (w->corrupt)
            continue;
        send_reports(o->out, w);
        /* The first step is news at once: the attempt's start-up ends. */
        fb__seg_header *h = fb__seg_hdr(w->seg);
        if (!w->sent_first_step &&
            atomic_load_explicit(&h->steps_done, memory_order_relaxed)) {
            w->sent_first_step = 1;
            beat(o->out, w, now);
        }
    }
}

/* Remove the segment of a rank of this node: on another host than the
 * supervisor's nobody else will (a rank killed by SIGKILL leaves it).
 * Only our own regular file goes, as the supervisor's cleanup does. */
static void remove_segment(const fb__watch_opts *o, const wrank *w)
{
    char name[FB__SEG_NAME_MAX], path[PATH_MAX];
    struct stat st;
    if (fb__seg_name(name, sizeof name, o->job, o->attempt, w->rank) ||
        fb__fmt(path, sizeof path, "/dev/shm%s", name))
        return;
    if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid())
        unlink(path);
}

int fb__watch_check_job(const char *job, FILE *err)
{
    if (fb__job_id_ok(job))
        return 0;
    char safe[64];
    fprintf(err, "firebreak watch: --job: not a job id: %s\n",
            fb__safe_text(safe, sizeof safe, job));
    return 2;
}

int fb__watch_sweep(const char *job, const char *node, FILE *err)
{
    if (fb__watch_check_job(job, err))
        return 2;
    int n = fb__seg_remove_job(job, -1);
    if (n > 0)
        fprintf(err, "firebreak watch: %s: removed %d segment%s of job %s left by "
                "stopped ranks\n", node, n, n == 1 ? "" : "s", job);
    return 0;
}

/* A hang: copy the segment (and with it the flight-recorder ring) of
 * every rank of this node into the run directory, where the supervisor
 * analyzes them with those of the other nodes; then say how many.  The
 * supervisor asks before it stops anything, so the rings are as the hang
 * left them. */
#define DUMP_LISTENING UINT64_MAX /* dump_done of a rank whose hooks listen */
#define DUMP_WAIT_MS 3000          /* as the supervisor's own (pyhooks.c)   */

/* Ranks whose Python hooks listen (docs/pytorch.md) are asked for their
 * dumps first, as the supervisor asks those on its own host: PyTorch's
 * flight-recorder dump lands in the run directory, where the main thread
 * is comes back as a report (forwarded by the next pass).  The request
 * number is the supervisor's (attempt + 1), so a rank asked by both
 * answers once.  At most DUMP_WAIT_MS: a rank holding the GIL never
 * answers. */
static void request_dumps(const fb__watch_opts *o, wrank *ranks, int n)
{
    uint64_t req = (uint64_t)o->attempt + 1;
    int asked = 0;
    static char wait[FB__WATCH_MAX_LOCAL];
    for (int i = 0; i < n; i++) {
        wrank *w = &ranks[i];
        char name[FB__SEG_NAME_MAX];
        wait[i] = 0;
        if (!w->seg || w->corrupt || w->ended ||
            atomic_load_explicit(&fb__seg_hdr(w->seg)->dump_done, memory_order_acquire) !=
                DUMP_LISTENING ||
            fb__seg_name(name, sizeof name, o->job, o->attempt, w->rank) ||
            fb__seg_request_dump(w->seg, name, req))
            continue;
        wait[i] = 1;
        asked++;
    }
    uint64_t t0 = fb__now_ns();
    while (asked > 0 && fb__now_ns() - t0 < DUMP_WAIT_MS * 1000000ull) {
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
        for (int i = 0; i < n; i++)
            if (wait[i] && atomic_load_explicit(&fb__seg_hdr(ranks[i].seg)->dump_done,
                                                memory_order_acquire) == req) {
                wait[i] = 0;
                asked--;
            }
    }
    for (int i = 0; i < n; i++)
        if (ranks[i].seg && !ranks[i].ended)
            send_reports(o->out, &ranks[i]); /* where each one was */
}

static void snapshot(const fb__watch_opts *o, wrank *ranks, int n)
{
    request_dumps(o, ranks, n);
    fb__fbw1_msg m;
    msg_init(&m, FB_FBW1_SNAPPED, 0);
    snprintf(m.node, sizeof m.node, "%s", o->node);
    m.attempt = o->attempt;
    const char *run = fb__getenv("FIREBREAK_RUN_DIR");
    char dir[PATH_MAX];
    if (!run || fb__rundir_path(dir, sizeof dir, run, FB__RUNDIR_FR_ATTEMPT, o->attempt) ||
        fb__mkdir_p(dir, 0755)) {
        fprintf(stderr, "firebreak watch: no flight-recorder snapshot: %s\n",
                run ? "cannot create its directory in the run" : "FIREBREAK_RUN_DIR not set");
        emit(o->out, &m);
        return;
    }
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX];
        if (!ranks[i].seg || fb__fmt(path, sizeof path, "%s/rank-%d.fbseg", dir, ranks[i].rank))
            continue;
        int rc = fb__seg_dump(ranks[i].seg, path);
        if (rc)
            fprintf(stderr, "firebreak watch: snapshot of rank %d: %s\n", ranks[i].rank,
                    fb_strerror(rc));
        else if (m.count < FB__FBW1_COUNT_MAX)
            m.count++;
    }
    emit(o->out, &m);
}

/* Requests from the supervisor: fbw1 lines on in_fd, read as they come
 * (bounded buffer; an over-long line is skipped to its end, a line that
 * does not parse is dropped).  EOF or an error closes the channel. */
typedef struct wreq {
    int fd;
    char buf[2 * FB__FBW1_LINE_MAX];
    size_t len;
    int dropping;
} wreq;

struct req_ctx {
    const fb__watch_opts *o;
    wrank *ranks;
    int n;
};

static void on_request(void *ctx, const char *line, size_t len)
{
    const struct req_ctx *c = ctx;
    fb__fbw1_msg m;
    if (fb__fbw1_parse(line, len, 1, &m))
        return;
    if (m.kind == FB_FBW1_SNAP && m.attempt == c->o->attempt)
        snapshot(c->o, c->ranks, c->n);
    else if (m.kind == FB_FBW1_DROP && c->o->mem_dir && c->o->mem_dir[0])
        (void)fb__peer_drop_older(c->o->mem_dir, c->o->world, m.step, m.keep, m.nkeep);
    else if (m.kind == FB_FBW1_SEND)
        g_send = m.step;
    else if (m.kind == FB_FBW1_KEEP)
        g_keep = 1;
}

static void read_requests(const fb__watch_opts *o, wreq *q, wrank *ranks, int n)
{
    ssize_t got = read(q->fd, q->buf + q->len, sizeof q->buf - q->len);
    if (got < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (got <= 0) {
        q->fd = -1;
        return;
    }
    struct req_ctx c = {o, ranks, n};
    q->len = fb__fbw1_lines(q->buf, q->len + (size_t)got, &q->dropping, on_request, &c);
}

/* The newest step every rank of this node committed in its memory; -1. */
static int64_t complete_in_memory(const wrank *ranks, int n)
{
    int64_t low = n ? INT64_MAX : -1;
    for (int i = 0; i < n; i++)
        if (ranks[i].mem_step < low)
            low = ranks[i].mem_step;
    return low;
}

/* The peer tier, when the run has one (docs/slurm.md, "Checkpoint
 * tiers"): a receiver for the previous node's copies, a sender to the
 * next node.  Without it the node's memory is its only fast copy. */
static fb__peer *start_peer(const fb__watch_opts *o, int rank0, int n)
{
    if (!o->mem_dir || !o->mem_dir[0] || o->peer_port <= 0)
        return NULL;
    fb__peer_opts po = {.mem_dir = o->mem_dir, .node = o->node, .port = o->peer_port,
                        .to = o->peer_to, .world = o->world, .rank0 = rank0,
                        .nranks = n, .out = o->out, .emit = emit};
    fb__peer *p = NULL;
    int rc = fb__peer_start(&p, &po);
    if (rc)
        fprintf(stderr, "firebreak watch: %s: no peer tier (port %d): %s\n", o->node,
                o->peer_port, fb_strerror(rc));
    return p;
}

/* After a rank's end without a record (SIGKILLed, or its node dying
 * under it), the next `alive` is sent this long after it, never sooner:
 * the supervisor takes an `alive` heard after such an end as proof that
 * the node outlived the rank (docs/slurm.md, "A killed node or a killed
 * rank"), so none may leave in the instant a node's processes are all
 * killed together.  The watcher stays (even when stopped) to send it. */
#define VANISHED_PROOF_NS 500000000ull

/* VANISHED_PROOF_NS, or under the test hook FIREBREAK_TEST_WATCH_PROOF_MS
 * that many ms (tests/slurm/watchstop.sh: room for a slow test). */
static uint64_t proof_wait_ns(void)
{
#ifdef FB_TEST_HOOKS
    long long ms;
    const char *v = getenv("FIREBREAK_TEST_WATCH_PROOF_MS");
    if (v && fb__parse_int(v, 0, 600000, &ms) == 0)
        return (uint64_t)ms * 1000000u;
#endif
    return VANISHED_PROOF_NS;
}

/* Waiting for the supervisor's word once the watching is over: at most
 * this long after the ranks ended by themselves (it stops the watchers
 * then), and this long after a stop.  The supervisor's own stop never
 * reaches a watcher as SIGTERM (srun turns the SIGTERM it is sent into a
 * SIGKILL of its tasks); a SIGTERM is Slurm's -- the step or the
 * allocation ending, scancel -- with a `keep` written just before it at
 * most a moment behind (srun forwards lines and signals apart).  Slurm
 * SIGKILLs the tasks KillWait after its SIGTERM (30 s by default, 2 s on
 * the test cluster): waiting 3 s here lost that race under load, and the
 * node kept the memory of a job nobody would run again (slurm_peer case 6,
 * 2026-12-04).  So the wait is short, and the removal comes right after. */
#define KEEP_WAIT_IDLE_MS 30000
#define KEEP_WAIT_STOPPED_MS 300

/* Whether this watcher still owns dir: its pid file names this process. */
static int owns(const char *dir)
{
    char path[PATH_MAX], text[32] = "";
    if (fb__fmt(path, sizeof path, "%s/firebreak.pid", dir))
        return 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int ok = fgets(text, sizeof text, f) && atoi(text) == (int)getpid();
    fclose(f);
    return ok;
}

/*
 * The node's memory when the watching is over (docs/slurm.md,
 * "Checkpoint tiers").  The supervisor says `keep` before every stop of
 * the watchers it makes; a stop without it (the end of the allocation,
 * scancel) or the input's end means the supervisor is gone, and with it
 * the job: its id is never used again, so the node's memory is removed
 * (own steps, peer copies, the receive pool).  Ranks that ended by
 * themselves are followed by the supervisor's stop; nothing heard within
 * KEEP_WAIT_IDLE_MS leaves the memory where it is.  stop_ns: when the stop
 * signal was seen, 0 not yet (the wait for a `keep` counts from it).
 */
static void settle_memory(const fb__watch_opts *o, wreq *q, wrank *ranks, int n,
                          uint64_t stop_ns)
{
    if (!o->mem_dir || !o->mem_dir[0])
        return;
    uint64_t t0 = fb__now_ns();
    /* Until the input ends (nothing more can come) or the wait is over;
     * what is already in the pipe is read even then (a `keep` sent while
     * the stop's earlier stages ran; a few reads at most, the pipe may be
     * kept full). */
    int late = 0;
    while (!g_keep && q->fd >= 0) {
        uint64_t now = fb__now_ns();
        if (g_stop && !stop_ns)
            stop_ns = now;
        uint64_t end = stop_ns ? stop_ns + KEEP_WAIT_STOPPED_MS * 1000000ull
                               : t0 + KEEP_WAIT_IDLE_MS * 1000000ull;
        if (now >= end && ++late > 8)
            break;
        uint64_t ms = now >= end ? 0 : (end - now + 999999) / 1000000;
        struct pollfd pfd = {.fd = q->fd, .events = POLLIN};
        if (poll(&pfd, 1, (int)(ms > 50 ? 50 : ms)) > 0)
            read_requests(o, q, ranks, n);
        else if (now >= end)
            break;
    }
    if (g_keep || !(stop_ns || q->fd < 0) || !owns(o->mem_dir)) {
        trace(g_keep ? "memory kept: the supervisor said keep"
                     : !(stop_ns || q->fd < 0) ? "memory kept: no stop, input open"
                                               : "memory kept: its pid file names another");
        return;
    }
    fprintf(stderr, "firebreak watch: %s: stopped without the supervisor's word "
            "(it is gone): removing node memory %s\n", o->node, o->mem_dir);
    fb__ckpt_mem_dir_remove(o->mem_dir);
}

int fb__watch_run(const fb__watch_opts *o)
{
    struct sigaction sa = {.sa_handler = on_stop};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGUSR1, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    trace_open(o->node);
    trace("started");

    static wrank ranks[FB__WATCH_MAX_LOCAL];
    int n = 0;
    for (long long r = o->node_id * o->ranks_per_node;
         r < (o->node_id + 1) * o->ranks_per_node && r < o->world &&
         n < FB__WATCH_MAX_LOCAL; r++) {
        memset(&ranks[n], 0, sizeof ranks[n]);
        ranks[n].rank = (int)r;
        ranks[n].pidfd = -1;
        ranks[n].mem_step = -1;
        n++;
    }
    /* An earlier attempt's stopped ranks left their segments here: srun
     * ends a stopped step's tasks, that attempt's watcher among them, by
     * SIGKILL, so it removed none but those of ranks already gone; no one
     * else on this host would. */
    fb__seg_remove_older(o->job, o->attempt);
    fb__fbw1_msg m;
    memset(&m, 0, sizeof m);
    m.kind = FB_FBW1_HELLO;
    snprintf(m.node, sizeof m.node, "%s", o->node);
    m.nodeid = o->node_id > INT32_MAX ? -1 : (int)o->node_id;
    m.pid = getpid();
    /* The machine under the Slurm node name (often the same name); one
     * that is not a valid name is left out rather than sent. */
    if (gethostname(m.host, sizeof m.host - 1) || !fb__fbw1_node_name_ok(m.host))
        m.host[0] = '\0';
    emit(o->out, &m);
    fb__peer *peer = start_peer(o, n ? ranks[0].rank : 0, n);
    uint64_t interval_ns = (uint64_t)(o->interval_s * 1e9), last_beat = 0;
    int left = n;
    static wreq req;
    memset(&req, 0, sizeof req);
    req.fd = o->in_fd;
    /* A watcher started by hand in the background of a terminal (`&`):
     * reading it would stop the watcher (SIGTTIN) as soon as someone types,
     * and its `alive` lines with it.  Requests come from srun's stdin. */
    if (req.fd >= 0 && isatty(req.fd) && tcgetpgrp(req.fd) != getpgrp()) {
        fprintf(stderr, "firebreak watch: stdin is a terminal this watcher runs in "
                "the background of: no requests are read from it\n");
        req.fd = -1;
    }
    uint64_t proof_ns = 0; /* the `alive` owed after a vanished rank; 0 none */
#ifdef FB_TEST_HOOKS
    const char *mute = getenv("FIREBREAK_TEST_WATCH_MUTE_NODE");
    /* FIREBREAK_TEST_ATTACH_AFTER_MS=N: no segment attached in the first N
     * ms, while the ranks fill their report rings (tests/slurm/watchend.sh;
     * the supervisor's own passes read the same, watch.c). */
    long long hold_ms = 0;
    const char *hold = getenv("FIREBREAK_TEST_ATTACH_AFTER_MS");
    if (!hold || fb__parse_int(hold, 0, 600000, &hold_ms))
        hold_ms = 0;
    uint64_t attach_from = fb__now_ns() + (uint64_t)hold_ms * 1000000u;
#else
    uint64_t attach_from = 0;
#endif
    while (!g_stop && (left > 0 || proof_ns || g_mute)) {
        struct pollfd pfd[FB__WATCH_MAX_LOCAL + 1];
        int map[FB__WATCH_MAX_LOCAL], np = 0;
        for (int i = 0; i < n; i++) {
            if (ranks[i].ended)
                continue;
            if (!ranks[i].seg && fb__now_ns() >= attach_from)
                try_attach(o->out, o->job, o->attempt, &ranks[i]);
            if (ranks[i].seg && !ranks[i].ended && ranks[i].pidfd >= 0) {
                pfd[np].fd = ranks[i].pidfd;
                pfd[np].events = POLLIN;
                map[np++] = i;
            }
        }
        if (req.fd >= 0) {
            pfd[np].fd = req.fd;
            pfd[np].events = POLLIN;
            pfd[np].revents = 0;
        }
        int rc = poll(pfd, (nfds_t)np + (req.fd >= 0), 50);
        /* A snapshot first: the rings as the hang left them. */
        if (rc > 0 && req.fd >= 0 && pfd[np].revents)
            read_requests(o, &req, ranks, n);
        for (int k = 0; rc > 0 && k < np; k++)
            if (pfd[k].revents && report_end(o->out, &ranks[map[k]]))
                ranks[map[k]].vanished = 1;
        uint64_t now = fb__now_ns();
        for (int i = 0; i < n; i++) {
            if (!ranks[i].vanished)
                continue;
            ranks[i].vanished = 0;
            proof_ns = now + proof_wait_ns();
#ifdef FB_TEST_HOOKS
            /* This node "dies" right after its rank: nothing more from it. */
            if (mute && !strcmp(mute, o->node))
                g_mute = 1;
#endif
        }
        pass(o, ranks, n, now);
        if (peer) {
            /* The named step first, once every local rank has it (or a
             * newer one: it stays, the supervisor keeps it); else this
             * node's newest, which the supervisor may drop before it is
             * sent (then its sending fails, said in the log). */
            int64_t done = complete_in_memory(ranks, n);
            if (g_send >= 0 && done >= g_send)
                fb__peer_offer(peer, g_send, 1);
            fb__peer_offer(peer, done, 0);
        }
        int proof_due = proof_ns && now >= proof_ns;
        if ((now - last_beat >= interval_ns && !proof_ns) || proof_due) {
            last_beat = now;
            proof_ns = 0;
            /* The node is alive, with ranks attached or not yet: the
             * supervisor tells a lost node by its watcher's silence. */
            msg_init(&m, FB_FBW1_ALIVE, 0);
            snprintf(m.node, sizeof m.node, "%s", o->node);
            emit(o->out, &m);
            for (int i = 0; i < n; i++)
                if (ranks[i].seg && !ranks[i].ended && !ranks[i].corrupt)
                    beat(o->out, &ranks[i], now);
        }
        left = 0;
        for (int i = 0; i < n; i++)
            left += !ranks[i].ended;
    }
    uint64_t stop_ns = g_stop ? fb__now_ns() : 0;
    trace(g_stop ? "stop signal seen" : "every local rank ended");
    if (proof_ns && !g_mute) {
        /* Stopped before the `alive` owed: it still goes, on time, unless
         * the input ends meanwhile -- the supervisor is gone, nobody would
         * read it, and Slurm's KillWait runs (settle_memory).  The
         * supervisor's `keep` is read while waiting. */
        uint64_t now;
        while ((now = fb__now_ns()) < proof_ns && req.fd >= 0) {
            struct pollfd pfd = {.fd = req.fd, .events = POLLIN};
            uint64_t ms = (proof_ns - now + 999999) / 1000000;
            if (poll(&pfd, 1, (int)(ms > 1000 ? 1000 : ms)) > 0)
                read_requests(o, &req, ranks, n);
        }
        if (now < proof_ns)
            trace("the alive owed after a rank's end not waited for: the input ended");
        msg_init(&m, FB_FBW1_ALIVE, 0);
        snprintf(m.node, sizeof m.node, "%s", o->node);
        emit(o->out, &m);
    }
    if (!left) {
        msg_init(&m, FB_FBW1_BYE, 0);
        snprintf(m.node, sizeof m.node, "%s", o->node);
        emit(o->out, &m);
    }
    trace("last lines written");
    fb__peer_stop(peer);
    trace("peer tier stopped");
    settle_memory(o, &req, ranks, n, stop_ns);
    trace("node memory settled");
    /* Stopped by SIGTERM (scancel, the job's end; a step srun stops ends
     * by SIGKILL, and the supervisor's sweeps remove what is left: the
     * next attempt's watcher, the end of the run's `--sweep`): the ranks
     * are being stopped too; give them up to a second to go before their
     * segments are removed.  A rank still alive keeps its segment. */
    for (int t = 0; left > 0 && t < 20; t++) {
        struct pollfd pfd[FB__WATCH_MAX_LOCAL];
        int map[FB__WATCH_MAX_LOCAL], np = 0;
        for (int i = 0; i < n; i++)
            if (!ranks[i].ended && ranks[i].pidfd >= 0) {
                pfd[np].fd = ranks[i].pidfd;
                pfd[np].events = POLLIN;
                map[np++] = i;
            }
        if (np == 0)
            break;
        if (poll(pfd, (nfds_t)np, 50) > 0)
            for (int k = 0; k < np; k++)
                if (pfd[k].revents)
                    ranks[map[k]].ended = 1;
    }
    for (int i = 0; i < n; i++) {
        if (ranks[i].pidfd >= 0)
            close(ranks[i].pidfd);
        if (ranks[i].seg) {
            fb__seg_close(ranks[i].seg);
            if (ranks[i].ended)
                remove_segment(o, &ranks[i]);
        }
    }
    trace("done");
    return 0;
}
