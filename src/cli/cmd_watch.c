/*
 * cmd_watch.c -- `firebreak watch`: the per-node watcher of the slurm
 * launcher (docs/slurm.md).  Started by the supervisor with `srun
 * --ntasks-per-node=1`, it maps this node's rank segments
 * (/dev/shm/fb.<job>.<attempt>.<rank>), holds a pidfd on each rank, and
 * writes fbw1 status lines (src/supervisor/slurm.h) to stdout, which
 * Slurm forwards to the supervisor.  `--health` instead runs this node's
 * health checks once and prints one fbw1 health line.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "firebreak/firebreak.h"
#include "common/util.h"
#include "health/health.h"
#include "lib/segment.h"
#include "supervisor/proc.h"
#include "supervisor/slurm.h"

#define MAX_LOCAL 1024

static volatile sig_atomic_t g_stop;

static void on_stop(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: firebreak watch --job ID --attempt N --ranks-per-node P --world W\n"
"                       [--node NAME] [--node-id K] [--interval DUR]\n"
"       firebreak watch --health [--node NAME]\n"
"\n"
"The per-node watcher of `firebreak run --launcher slurm`, started by the\n"
"supervisor on every node with `srun --ntasks-per-node=1`.  Watches ranks\n"
"K*P .. K*P+P-1 of the job (K: --node-id, default SLURM_NODEID) through\n"
"their segments in /dev/shm and prints one status line per event on stdout\n"
"(protocol fbw1, docs/slurm.md); exits when every rank has ended, or on\n"
"SIGTERM.  SIGUSR1 is ignored (it is meant for the ranks).\n"
"\n"
"  --health        run this node's health checks (`firebreak health`) once\n"
"                  and print `fbw1 health NODE VERDICT REASON`.  Test hook:\n"
"                  FIREBREAK_HEALTH_ROOT_<NODE> (non-alphanumerics as _), else\n"
"                  FIREBREAK_HEALTH_ROOT, is read as the fixture tree (--root)\n"
"  --node NAME     this node's name (default SLURMD_NODENAME, else hostname)\n"
"  --interval DUR  heartbeat lines every DUR (default 1s)\n"
"  -h, --help      this help\n");
}

static void node_name(const char *opt, char *buf, size_t size)
{
    const char *v = opt ? opt : fb__getenv("SLURMD_NODENAME");
    if (v)
        snprintf(buf, size, "%s", v);
    else if (gethostname(buf, size - 1))
        snprintf(buf, size, "unknown");
    buf[size - 1] = '\0';
    if (!fb__slurm_node_name_ok(buf))
        snprintf(buf, size, "unknown");
}

static int health_mode(const char *node)
{
    char var[128];
    size_t k = snprintf(var, sizeof var, "FIREBREAK_HEALTH_ROOT_");
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
    fb__health_result *r = NULL;
    char err[256] = "";
    int rc = fb__health_run(&o, &r, err, sizeof err);
    if (rc) {
        printf("fbw1 health %s error firebreak: could not check: %s\n", node,
               err[0] ? err : fb_strerror(rc));
        return 0;
    }
    char reason[256] = "";
    fb__health_status v = fb__health_verdict(r);
    fb__health_reason(r, reason, sizeof reason);
    for (char *p = reason; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    printf("fbw1 health %s %s %s\n", node, fb__health_status_name(v),
           reason[0] ? reason : "all checks passed");
    fb__health_free(r);
    return 0;
}

typedef struct wrank {
    int rank;
    fb__seg *seg;
    int pidfd;
    int ended;
    uint64_t report_idx; /* next report of the rank's ring to forward */
    int sent_first_step; /* a beat went out after its first step       */
    int refused;         /* a file under its name is not ours           */
    int corrupt;         /* failed fb__seg_check: no longer read        */
} wrank;

/* Forward the rank's new reports (checkpoints, restores, injected faults):
 * the supervisor may be on another host and cannot read the segment. */
static void send_reports(wrank *w)
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
            char text[sizeof rep.text];
            size_t i = 0;
            for (; rep.text[i] && i + 1 < sizeof text; i++) {
                unsigned char c = (unsigned char)rep.text[i];
                text[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
            }
            text[i] = '\0';
            printf("fbw1 report %d %llu %u %d %llu %llu %llu %llu %llu %s\n", w->rank,
                   (unsigned long long)w->report_idx, rep.kind, rep.code,
                   (unsigned long long)rep.step, (unsigned long long)rep.bytes,
                   (unsigned long long)rep.value1, (unsigned long long)rep.value2,
                   (unsigned long long)rep.wall_ns, text);
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
static void check(wrank *w)
{
    char why[128];
    if (w->corrupt || fb__seg_check(w->seg, why, sizeof why) == 0)
        return;
    w->corrupt = 1;
    char text[FB__REPORT_TEXT_MAX];
    snprintf(text, sizeof text, "segment of rank %d is corrupt: %s; no longer read",
             w->rank, why);
    fprintf(stderr, "firebreak watch: %s\n", text);
    printf("fbw1 report %d %llu %u 0 0 0 0 0 %llu %s\n", w->rank,
           (unsigned long long)w->report_idx, (unsigned)FB_REPORT_NOTE,
           (unsigned long long)fb__wall_ns(), text);
    w->report_idx++;
}

static void report_end(wrank *w)
{
    check(w);
    send_reports(w); /* what it said before it went comes first */
    fb__seg_header *h = fb__seg_hdr(w->seg);
    uint32_t kind = w->corrupt ? FB_END_NONE
                  : atomic_load_explicit(&h->end_kind, memory_order_acquire);
    int code = w->corrupt ? 0 : atomic_load_explicit(&h->end_code, memory_order_relaxed);
    fb__slurm_end_how how = kind == FB_END_EXIT ? FB_SLURM_END_EXIT
                          : kind == FB_END_SIGNAL ? FB_SLURM_END_SIGNAL
                          : kind == FB_END_FINALIZED ? FB_SLURM_END_FINALIZED
                                                     : FB_SLURM_END_VANISHED;
    if (how == FB_SLURM_END_FINALIZED || how == FB_SLURM_END_VANISHED)
        code = 0;
    printf("fbw1 end %d %s %d\n", w->rank, fb__slurm_end_how_name(how), code);
    w->ended = 1;
}

static void try_attach(const char *job, int attempt, wrank *w)
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
    printf("fbw1 attach %d %d\n", w->rank, pid);
    w->pidfd = pid > 0 ? fb__pidfd_open(pid) : -1;
    if (w->pidfd < 0)
        report_end(w); /* already gone */
}

static void beat(wrank *w, uint64_t now)
{
    fb__seg_header *h = fb__seg_hdr(w->seg);
    uint64_t done = atomic_load_explicit(&h->steps_done, memory_order_relaxed);
    long long step = done ? (long long)atomic_load_explicit(&h->step, memory_order_relaxed) : -1;
    uint32_t phase = atomic_load_explicit(&h->phase, memory_order_relaxed);
    uint64_t hb = atomic_load_explicit(&h->heartbeat_mono_ns, memory_order_acquire);
    long long age = now > hb ? (long long)((now - hb) / 1000000ull) : 0;
    printf("fbw1 beat %d %lld %u %lld\n", w->rank, step, phase > 15 ? 15 : phase, age);
}

int fb__cmd_watch(int argc, char **argv)
{
    const char *job = NULL, *node_opt = NULL;
    long long attempt = -1, ppn = -1, world = -1, node_id = -1;
    double interval_s = 1.0;
    int health = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (fb__cli_is_help(a)) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--health")) {
            health = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "firebreak watch: %s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int bad = 0;
        if (!strcmp(a, "--job")) job = v;
        else if (!strcmp(a, "--node")) node_opt = v;
        else if (!strcmp(a, "--attempt")) bad = fb__parse_int(v, 0, 1 << 30, &attempt);
        else if (!strcmp(a, "--ranks-per-node")) bad = fb__parse_int(v, 1, MAX_LOCAL, &ppn);
        else if (!strcmp(a, "--world")) bad = fb__parse_int(v, 1, 1 << 24, &world);
        else if (!strcmp(a, "--node-id")) bad = fb__parse_int(v, 0, 1 << 20, &node_id);
        else if (!strcmp(a, "--interval")) bad = fb__parse_duration(v, &interval_s) || interval_s <= 0;
        else {
            fprintf(stderr, "firebreak watch: unknown option '%s' (see --help)\n", a);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "firebreak watch: %s: bad value '%s'\n", a, v);
            return 2;
        }
    }
    char node[FB__SLURM_NODE_MAX];
    node_name(node_opt, node, sizeof node);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (health)
        return health_mode(node);
    if (!job || attempt < 0 || ppn < 1 || world < 1) {
        fprintf(stderr, "firebreak watch: --job, --attempt, --ranks-per-node and "
                "--world are required (see --help)\n");
        return 2;
    }
    if (node_id < 0) {
        const char *e = fb__getenv("SLURM_NODEID");
        if (!e || fb__parse_int(e, 0, 1 << 20, &node_id)) {
            fprintf(stderr, "firebreak watch: no --node-id and no SLURM_NODEID\n");
            return 2;
        }
    }
    struct sigaction sa = {.sa_handler = on_stop};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGUSR1, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);

    wrank ranks[MAX_LOCAL];
    int n = 0;
    for (long long r = node_id * ppn; r < (node_id + 1) * ppn && r < world; r++) {
        memset(&ranks[n], 0, sizeof ranks[n]);
        ranks[n].rank = (int)r;
        ranks[n].pidfd = -1;
        n++;
    }
    printf("fbw1 hello %s %lld %d\n", node, node_id, (int)getpid());
    uint64_t interval_ns = (uint64_t)(interval_s * 1e9), last_beat = 0;
    int left = n;
    while (!g_stop && left > 0) {
        struct pollfd pfd[MAX_LOCAL];
        int map[MAX_LOCAL], np = 0;
        for (int i = 0; i < n; i++) {
            if (ranks[i].ended)
                continue;
            if (!ranks[i].seg)
                try_attach(job, (int)attempt, &ranks[i]);
            if (ranks[i].seg && !ranks[i].ended && ranks[i].pidfd >= 0) {
                pfd[np].fd = ranks[i].pidfd;
                pfd[np].events = POLLIN;
                map[np++] = i;
            }
        }
        int rc = poll(pfd, (nfds_t)np, 50);
        for (int k = 0; rc > 0 && k < np; k++)
            if (pfd[k].revents)
                report_end(&ranks[map[k]]);
        uint64_t now = fb__now_ns();
        for (int i = 0; i < n; i++) {
            if (!ranks[i].seg || ranks[i].ended)
                continue;
            check(&ranks[i]);
            if (ranks[i].corrupt)
                continue;
            send_reports(&ranks[i]);
            /* The first step is news at once: the attempt's start-up ends. */
            fb__seg_header *h = fb__seg_hdr(ranks[i].seg);
            if (!ranks[i].sent_first_step &&
                atomic_load_explicit(&h->steps_done, memory_order_relaxed)) {
                ranks[i].sent_first_step = 1;
                beat(&ranks[i], now);
            }
        }
        if (now - last_beat >= interval_ns) {
            last_beat = now;
            for (int i = 0; i < n; i++)
                if (ranks[i].seg && !ranks[i].ended && !ranks[i].corrupt)
                    beat(&ranks[i], now);
        }
        left = 0;
        for (int i = 0; i < n; i++)
            left += !ranks[i].ended;
    }
    if (!left)
        printf("fbw1 bye %s\n", node);
    for (int i = 0; i < n; i++) {
        if (ranks[i].pidfd >= 0)
            close(ranks[i].pidfd);
        if (ranks[i].seg)
            fb__seg_close(ranks[i].seg);
    }
    return 0;
}
