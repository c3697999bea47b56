/*
 * slurm.c -- the slurm launcher of `firebreak run` (docs/slurm.md).
 *
 * Inside an allocation (SLURM_JOB_ID set), each attempt:
 *   1. picks its nodes: the allocation's, in Slurm's order, less those
 *      found at fault; the first `need` of them (the rest are spares);
 *   2. with --health-check, first runs `firebreak watch --health` on every
 *      candidate node (one srun step); a node that fails is left out, and
 *      drained with firebreak's reason when --drain is given;
 *   3. starts the ranks: one step, `srun -K1 -m block -w NODES ...`
 *      (unit 0; the rank of task t is SLURM_PROCID, on node t / per-node);
 *   4. starts one watcher per node: `srun --ntasks-per-node=1 firebreak
 *      watch` (unit 1), whose stdout is a pipe the supervisor polls
 *      (fb__sup_slurm_fd): rank ends and heartbeats arrive as fbw1 lines,
 *      read here with fb__fbw1_parse (fbw1.h; the watcher is watcher.c).
 * When too few healthy nodes remain (nodes lost earlier checked again
 * first, recheck_lost) the attempt cannot launch: the run
 * stops with a message naming the excluded nodes, or, with
 * --on-no-nodes requeue, asks Slurm to requeue the job first.
 *
 * Everything here runs in the supervisor's thread; commands run without a
 * shell, with the supervisor's signal mask cleared and a parent-death
 * signal so that nothing outlives a killed supervisor.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/jsonw.h"
#include "common/rundir.h"
#include "ckpt/replicate.h"
#include "common/util.h"
#include "supervisor/fbw1.h"
#include "supervisor/slurmtext.h"
#include "supervisor/sup.h"
#include "supervisor/supervisor.h"
#include "supervisor/watcher.h"

#define MAX_NODES 1024
_Static_assert(FB__FBW1_NODEID_MAX == MAX_NODES - 1, "a hello names one of our nodes");
/* srun -w's list of every node, each at its longest with its comma (it
 * was 8 bytes a node: about 580 nodes of 13-character names did not fit,
 * and the launch failed) */
#define NODE_LIST_MAX (MAX_NODES * FB__FBW1_NODE_MAX)
#define MAX_RANKS 8192
#define UNIT_WATCHERS 1          /* index in s->units */
#define HEALTH_TIMEOUT_MS 120000
#define LOST_RECHECK_TIMEOUT_MS 5000
#define SNAP_TIMEOUT_MS 5000     /* the watchers' flight-recorder snapshots */
#define SWEEP_STEP_MS 15000      /* the end of run's segment sweep         */

typedef struct snode {
    char name[FB__FBW1_NODE_MAX];
    char addr[FB__FBW1_NODE_MAX];
    char host[FB__FBW1_NODE_MAX]; /* NodeHostName, then what its watcher says */
    char state[FB__SLURM_STATE_MAX]; /* Slurm's State, when last asked */
    int bad;                     /* excluded (for the rest of the run,
                                    unless lost and back: recheck_lost) */
    int lost;                    /* a node_failure's node               */
    int lost_attempt;            /* the attempt it was lost in          */
    char why[256];
} snode;

/* What the supervisor last heard from the watcher of a node of this
 * attempt (indexed by the node's position in cur). */
typedef struct node_watch {
    int heard;                   /* a line came from it                   */
    int bye;                     /* it said every rank of it ended         */
    int snapped;                 /* it answered the hang's `snap`          */
    uint64_t rx_ns;              /* when its last line came                */
} node_watch;

typedef struct rank_beat {
    int have;
    long long step, age_ms;
    int phase;
    uint64_t rx_ns;
} rank_beat;

struct fb__sup_slurm {
    char job_id[32];
    char self[PATH_MAX];         /* this firebreak binary                 */
    snode nodes[MAX_NODES];
    int nnodes, need, ppn;
    int peer_copies;             /* --peer-copies (0: no peer tier)       */
    const char *domains;         /* --peer-domains slurm: NODE=SWITCH,...
                                    from Slurm's topology; NULL           */
    int cur[MAX_NODES];          /* this attempt's nodes (indices)        */
    int ncur;
    int watch_fd;                /* watchers' stdout; -1                   */
    int req_fd;                  /* watchers' stdin (srun --input=all); -1 */
    char buf[8 * FB__FBW1_LINE_MAX];
    size_t len;
    int dropping;                /* inside an over-long line              */
    int watch_stop_sent;
    int suspect;                 /* node of the last failure; -1          */
    char suspect_why[256];
    rank_beat beats[MAX_RANKS];
    node_watch watch[MAX_NODES];
    int lost;                    /* node (index) of a node_failure; -1    */
    int also_lost[MAX_NODES];    /* nodes silent with it (node_lost)      */
    int nalso_lost;
    int lost_launch;             /* lost: srun could not launch there     */
    int lost_refused;            /*   ... refused the step (Slurm's word) */
    off_t srun_log_checked;      /* srun.log's size at the last look for a
                                    failed launch (launch_lost_now); -1  */
    char srun_log[PATH_MAX];     /* the ranks' srun's stderr               */
    off_t srun_log_from;         /* its size when this attempt began: a run
                                    resumed in the same run directory
                                    appends to the last run's log of the
                                    same attempt number                   */
    /* A remote rank's end that would be the attempt's failure is held
     * up to HOLD_NS, as its watcher reported it, for srun's word: srun
     * reports each task's wait status (slurmstepd's, first-hand) in the
     * order the tasks ended, where two watchers' lines race.  A rank
     * SIGKILLed leaves no record ("vanished") and its peers' collectives
     * fail at once: one of them may record its abort and be heard first.
     * Without srun's word (or with --mpirun) the recorded ends go first
     * and a vanished rank yields to them (policy.c), as on one host:
     * when srun kills the other tasks after a rank's crash, their
     * watchers may speak first. */
    int held;                    /* ranks held                            */
    uint64_t held_ns[MAX_RANKS]; /* when each end was heard; 0 not held   */
    int held_ws[MAX_RANKS];      /* its wait status, when recorded        */
    unsigned char held_known[MAX_RANKS]; /* recorded (exit or signal)     */
    unsigned char held_kill[MAX_RANKS];  /* recorded SIGKILL: only an injected
                                            kill records one (watcher.c) */
    /* A vanished rank may be the first sign of its node's death: its
     * watcher saw the rank go, then was killed with the node.  Its end
     * (and with it every held end) waits for the node's next `alive`,
     * which a watcher never sends sooner than 0.5 s after such an end
     * (watcher.c), or for --node-timeout of silence: then the node is
     * lost (fb__sup_judge_vanished, policy.c; docs/slurm.md). */
    unsigned char held_alive[MAX_RANKS]; /* its node said alive since      */
    int step_end_deferred;       /* the ranks' step ended meanwhile        */
};

#define HOLD_NS 1000000000ull

static struct fb__sup_slurm g_slurm; /* one supervisor per process */

/* ---- running commands ---- */

/* With --mpirun the ranks' step is that mpirun, inside the allocation
 * (Open MPI starts its daemons on the nodes with srun): the same nodes,
 * P ranks on each, rank t on the t / P-th node, as srun would place
 * them; the variables of the launch are passed with -x, and with them
 * the PMPI recorder (LD_PRELOAD of libfirebreak-mpi.so). */
static int mpirun_argv(fb__sup *s, char **envp, const char *list, const char *outdir,
                       const char **argv, int max, char *hosts, size_t hsize,
                       char *ldp, size_t lsize, char *mpi_ppr, size_t psize)
{
    struct fb__sup_slurm *g = s->slurm;
    const fb__sup_options *o = s->o;
    static char np[16];
    int n = 0;
    size_t len = 0;
    hosts[0] = '\0';
    for (int k = 0; k < g->ncur; k++) {
        int w = snprintf(hosts + len, hsize - len, "%s%s:%d", k ? "," : "",
                         g->nodes[g->cur[k]].name, g->ppn);
        if (w < 0 || (size_t)w >= hsize - len)
            return -ENAMETOOLONG;
        len += (size_t)w;
    }
    (void)list;
    snprintf(np, sizeof np, "%d", s->world);
    snprintf(mpi_ppr, psize, "ppr:%d:node", g->ppn);
    argv[n++] = o->mpirun;
    argv[n++] = "--oversubscribe";
    argv[n++] = "--bind-to";
    argv[n++] = "none";
    argv[n++] = "-np";
    argv[n++] = np;
    argv[n++] = "--map-by";
    argv[n++] = mpi_ppr;
    argv[n++] = "--host";
    argv[n++] = hosts;
    argv[n++] = "--output-filename";
    argv[n++] = outdir;
    for (char **e = envp; *e && n < max - 40; e++) {
        static const char *const pre[] = {"FIREBREAK_", "TORCHELASTIC_", "TORCH_",
                                          "MASTER_ADDR=", "MASTER_PORT=", NULL};
        for (const char *const *p = pre; *p; p++) {
            if (strncmp(*e, *p, strlen(*p)))
                continue;
            argv[n++] = "-x";
            argv[n++] = *e; /* NAME=VALUE */
            break;
        }
    }
    const char *preload = o->preload_fr ? fb__sup_fr_preload_path() : NULL;
    if (preload) {
        const char *old = getenv("LD_PRELOAD");
        snprintf(ldp, lsize, "LD_PRELOAD=%s%s%s", preload, old ? ":" : "", old ? old : "");
        argv[n++] = "-x";
        argv[n++] = ldp;
    }
    for (char *const *a = o->mpirun_args; a && *a && n < max - 30; a++)
        argv[n++] = *a;
    for (char *const *a = o->argv; *a && n < max - 1; a++)
        argv[n++] = *a;
    argv[n] = NULL;
    return 0;
}

static void child_setup(int out_fd, int err_fd)
{
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL); /* the supervisor ignores it */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    fb__proc_nice_restore(); /* a health check or srun: the user's nice */
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0)
        dup2(devnull, 0);
    if (out_fd >= 0)
        dup2(out_fd, 1);
    if (err_fd >= 0)
        dup2(err_fd, 2);
}

int fb__sup_spawn_capture(char *const argv[], int err_fd, pid_t *pid_out, int *out_fd)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC))
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int e = -errno;
        close(p[0]);
        close(p[1]);
        return e;
    }
    if (pid == 0) {
        child_setup(p[1], err_fd);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(p[1]);
    *pid_out = pid;
    *out_fd = p[0];
    return 0;
}

int fb__sup_run_capture(char *const argv[], char *out, size_t size, int err_fd,
                        int timeout_ms)
{
    int p[2];
    pid_t pid;
    int rc = fb__sup_spawn_capture(argv, err_fd, &pid, &p[0]);
    if (rc)
        return rc;
    size_t len = 0;
    uint64_t deadline = fb__now_ns() + (uint64_t)timeout_ms * 1000000ull;
    int timed_out = 0;
    for (;;) {
        uint64_t now = fb__now_ns();
        if (now >= deadline) {
            timed_out = 1;
            kill(pid, SIGKILL);
            break;
        }
        struct pollfd pf = {.fd = p[0], .events = POLLIN};
        int r = poll(&pf, 1, (int)((deadline - now) / 1000000ull) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            continue;
        char tmp[4096];
        ssize_t n = read(p[0], tmp, sizeof tmp);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        size_t take = (size_t)n;
        if (size && len + take > size - 1)
            take = size - 1 - len;
        if (take)
            memcpy(out + len, tmp, take);
        len += take;
    }
    close(p[0]);
    if (size)
        out[len] = '\0';
    int ws;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
        ;
    if (timed_out)
        return -ETIMEDOUT;
    return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
}

/* ---- nodes ---- */

static int node_list(const struct fb__sup_slurm *g, const int *idx, int n,
                     char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        int w = snprintf(buf + len, size - len, "%s%s", i ? "," : "",
                         g->nodes[idx[i]].name);
        if (w < 0 || (size_t)w >= size - len)
            return -ENAMETOOLONG;
        len += (size_t)w;
    }
    return 0;
}

static int node_index(const struct fb__sup_slurm *g, const char *name)
{
    for (int i = 0; i < g->nnodes; i++)
        if (!strcmp(g->nodes[i].name, name))
            return i;
    return -1;
}

/* NodeAddr of every node, for MASTER_ADDR, NodeHostName, the host under
 * the name until its watcher says, and State (`scontrol -o show node`).
 * 0, or -1 when scontrol failed (nothing changed). */
static int load_nodes(struct fb__sup_slurm *g)
{
    size_t cap = (size_t)g->nnodes * 4096 + 65536, len = 0, pos = 0;
    char *out = malloc(cap), line[FB__SLURM_LINE_MAX];
    char *argv[] = {"scontrol", "-o", "show", "node", NULL};
    if (!out || fb__sup_run_capture(argv, out, cap, -1, 10000) != 0) {
        free(out);
        return -1;
    }
    len = strlen(out);
    while (fb__slurm_next_line(out, len, &pos, line, sizeof line)) {
        fb__slurm_node_info n;
        int i = fb__slurm_node_parse(line, &n) ? -1 : node_index(g, n.name);
        if (i < 0)
            continue;
        if (n.addr[0])
            memcpy(g->nodes[i].addr, n.addr, sizeof n.addr);
        if (n.host[0])
            memcpy(g->nodes[i].host, n.host, sizeof n.host);
        memcpy(g->nodes[i].state, n.state, sizeof n.state);
    }
    free(out);
    return 0;
}

/* Which of the allocation's nodes Slurm still counts in the job (`squeue
 * -h -j J -o %N`, expanded by `scontrol show hostnames`): in[i] = 1.  0,
 * or -1 when it could not say (in unchanged). */
static int nodes_in_job(struct fb__sup_slurm *g, unsigned char *in)
{
    /* Room for MAX_NODES names that hostlist cannot fold (64 KiB); a list
     * that fills it may be cut, and the nodes past the cut would read as
     * taken out of the job: then Slurm's answer is not used at all. */
    enum { LIST_MAX = 1 << 17, OUT_MAX = 1 << 18 };
    char *list = malloc(LIST_MAX), *out = malloc(OUT_MAX), line[FB__SLURM_LINE_MAX];
    char *q[] = {"squeue", "-h", "-j", g->job_id, "-o", "%N", NULL};
    if (!list || !out || fb__sup_run_capture(q, list, LIST_MAX, -1, 10000) != 0 ||
        strlen(list) >= LIST_MAX - 1) {
        free(list);
        free(out);
        return -1;
    }
    list[strcspn(list, "\n")] = '\0';
    char *h[] = {"scontrol", "show", "hostnames", list, NULL};
    int rc = list[0] ? fb__sup_run_capture(h, out, OUT_MAX, -1, 10000) : -1;
    free(list);
    if (rc != 0 || strlen(out) >= OUT_MAX - 1) {
        free(out);
        return -1;
    }
    memset(in, 0, (size_t)g->nnodes);
    size_t len = strlen(out), pos = 0;
    while (fb__slurm_next_line(out, len, &pos, line, sizeof line)) {
        int i = node_index(g, line);
        if (i >= 0)
            in[i] = 1;
    }
    free(out);
    return 0;
}

/* The nodes of this attempt that Slurm says are down, or has taken out of
 * the job (it does so with a node that failed, under --no-kill): how many,
 * at most max in idx, each with Slurm's word for it in g->nodes[].state;
 * -1 when Slurm could not be asked. */
static int nodes_gone(fb__sup *s, int *idx, int max)
{
    struct fb__sup_slurm *g = s->slurm;
    unsigned char in[MAX_NODES];
    int have_states = load_nodes(g) == 0, have_job = nodes_in_job(g, in) == 0;
    if (!have_states && !have_job)
        return -1;
    int n = 0;
    for (int k = 0; k < g->ncur && n < max; k++) {
        snode *d = &g->nodes[g->cur[k]];
        if (have_job && !in[g->cur[k]]) {
            char word[sizeof d->state];
            snprintf(word, sizeof word, "out of job %.20s", g->job_id);
            memcpy(d->state, word, sizeof word);
            idx[n++] = g->cur[k];
        } else if (have_states && fb__slurm_state_down(d->state)) {
            idx[n++] = g->cur[k];
        }
    }
    return n;
}

static void drain_node(fb__sup *s, int i, const char *why)
{
    struct fb__sup_slurm *g = s->slurm;
    char nn[128], reason[320];
    snprintf(nn, sizeof nn, "NodeName=%s", g->nodes[i].name);
    snprintf(reason, sizeof reason, "Reason=%s%s",
             strncmp(why, "firebreak:", 10) ? "firebreak: " : "", why);
    char *argv[] = {"scontrol", "update", nn, "State=DRAIN", reason, NULL};
    char out[512];
    int rc = fb__sup_run_capture(argv, out, sizeof out, -1, 15000);
    /* in the journal for `report --fleet` (docs/report.md): code 0 drained */
    fb__journal_event ev = {.attempt_id = s->attempt_id, .time = fb__wall_s(),
                            .rank = -1, .kind = "drain", .step = -1, .code = rc,
                            .value_ms = -1, .detail = reason + 7,
                            .node = g->nodes[i].name};
    fb__journal_add_event(s->j, &ev);
    if (rc)
        fb__sup_log(s, "could not drain %s: scontrol exited %d", g->nodes[i].name, rc);
    else
        fb__sup_log(s, "drained %s (%s)", g->nodes[i].name, reason + 7);
}

static void exclude_node(fb__sup *s, int i, const char *why)
{
    struct fb__sup_slurm *g = s->slurm;
    if (g->nodes[i].bad)
        return;
    g->nodes[i].bad = 1;
    snprintf(g->nodes[i].why, sizeof g->nodes[i].why, "%s", why);
    fb__sup_log(s, "leaving out %s: %s", g->nodes[i].name, why);
    if (s->o->drain)
        drain_node(s, i, why);
}

/* --peer-domains slurm: each node's failure domain is the leaf switch
 * Slurm's topology puts it under (topology/tree: the Level=0 switches of
 * `scontrol show topology`, their Nodes= expanded by `scontrol show
 * hostnames`), as NODE=SWITCH,... for the allocation's nodes into
 * g->domains; a node under no switch has no domain.  0, or -EINVAL said. */
static int topology_domains(struct fb__sup_slurm *g)
{
    static char topo[1 << 18], names[1 << 18], spec[FB__PEER_PLAN_MAX + 1];
    static char line[FB__SLURM_TOPO_LINE_MAX];
    char *argv[] = {"scontrol", "show", "topology", NULL};
    int rc = fb__sup_run_capture(argv, topo, sizeof topo, -1, 10000);
    if (rc) {
        fprintf(stderr, "firebreak run: --peer-domains slurm: 'scontrol show topology' "
                "failed (%d)\n", rc);
        return -EINVAL;
    }
    size_t len = 0, pos = 0, tlen = strlen(topo);
    int leaves = 0;
    spec[0] = '\0';
    fb__slurm_switch w;
    while (fb__slurm_next_line(topo, tlen, &pos, line, sizeof line)) {
        if (fb__slurm_switch_parse(line, &w)) {
            char shown[96];
            if (!strncmp(line, "SwitchName=", 11)) { /* a switch not read: no guess */
                fprintf(stderr, "firebreak run: --peer-domains slurm: cannot read "
                        "this switch of 'scontrol show topology': %s\n",
                        fb__safe_text(shown, sizeof shown, line));
                return -EINVAL;
            }
            continue;
        }
        if (w.level != 0 || !w.nodes[0])
            continue;
        leaves++;
        char *h[] = {"scontrol", "show", "hostnames", w.nodes, NULL};
        if ((rc = fb__sup_run_capture(h, names, sizeof names, -1, 10000))) {
            fprintf(stderr, "firebreak run: --peer-domains slurm: 'scontrol show "
                    "hostnames %s' failed (%d)\n", w.nodes, rc);
            return -EINVAL;
        }
        for (char *n = strtok(names, "\n"); n; n = strtok(NULL, "\n")) {
            if (node_index(g, n) < 0)
                continue; /* not in this allocation */
            int k = snprintf(spec + len, sizeof spec - len, "%s%s=%s", len ? "," : "",
                             n, w.name);
            if (k < 0 || (size_t)k >= sizeof spec - len) { /* not at MAX_NODES */
                fprintf(stderr, "firebreak run: --peer-domains slurm: the nodes' "
                        "switches take more than %d bytes\n", FB__PEER_PLAN_MAX);
                return -E2BIG;
            }
            len += (size_t)k;
        }
    }
    if (!leaves) {
        fprintf(stderr, "firebreak run: --peer-domains slurm: Slurm has no switch "
                "topology (TopologyPlugin=topology/tree and a topology.conf); name "
                "the domains instead: --peer-domains NODE=DOMAIN,...\n");
        return -EINVAL;
    }
    g->domains = spec;
    return 0;
}

int fb__sup_slurm_init(fb__sup *s)
{
    struct fb__sup_slurm *g = &g_slurm;
    const fb__sup_options *o = s->o;
    memset(g, 0, sizeof *g);
    g->watch_fd = -1;
    g->req_fd = -1;
    g->suspect = -1;
    g->lost = -1;
    s->slurm = g;
    const char *job = fb__getenv("SLURM_JOB_ID");
    const char *list = fb__getenv("SLURM_JOB_NODELIST");
    if (!list)
        list = fb__getenv("SLURM_NODELIST");
    if (!job || !list) {
        fprintf(stderr, "firebreak run: --launcher slurm runs inside a Slurm "
                "allocation (salloc or an sbatch script): SLURM_JOB_ID and "
                "SLURM_JOB_NODELIST are not set\n");
        return -EINVAL;
    }
    snprintf(g->job_id, sizeof g->job_id, "%s", job);
    char resolved[PATH_MAX];
    if (fb__find_program("srun", resolved, sizeof resolved) ||
        fb__find_program("scontrol", resolved, sizeof resolved)) {
        fprintf(stderr, "firebreak run: --launcher slurm: srun or scontrol not "
                "found on PATH (install slurm-client)\n");
        return -ENOENT;
    }
    ssize_t n = readlink("/proc/self/exe", g->self, sizeof g->self - 1);
    if (n <= 0) {
        fprintf(stderr, "firebreak run: cannot find my own binary: %s\n", strerror(errno));
        return -errno;
    }
    g->self[n] = '\0';
    /* The peer copies' key (replicate.h): in this process's environment for
     * the watchers srun starts (their step's, and `firebreak watch` on
     * nodes); the ranks' environment leaves it out (launch.c). */
    char key[2 * FB__REPL_KEY_BYTES + 1];
    if (fb__repl_key_new_hex(key) || setenv("FIREBREAK_PEER_KEY", key, 1)) {
        fprintf(stderr, "firebreak run: cannot make the peer copies' key: %s\n",
                strerror(errno));
        return -EIO;
    }

    static char out[1 << 18];
    char *argv[] = {"scontrol", "show", "hostnames", (char *)list, NULL};
    int rc = fb__sup_run_capture(argv, out, sizeof out, -1, 10000);
    if (rc) {
        fprintf(stderr, "firebreak run: 'scontrol show hostnames %s' failed (%d): "
                "is slurmctld reachable?\n", list, rc);
        return -EIO;
    }
    for (char *line = strtok(out, "\n"); line && g->nnodes < MAX_NODES;
         line = strtok(NULL, "\n")) {
        if (!fb__fbw1_node_name_ok(line)) {
            fprintf(stderr, "firebreak run: unexpected node name '%.64s' from "
                    "scontrol show hostnames\n", line);
            return -EINVAL;
        }
        snprintf(g->nodes[g->nnodes].name, FB__FBW1_NODE_MAX, "%s", line);
        g->nnodes++;
    }
    (void)load_nodes(g);
    g->ppn = o->nproc_per_node;
    g->need = o->nnodes > 0 ? o->nnodes : g->nnodes - o->spare_nodes;
    if (g->need < 1 || g->need + o->spare_nodes > g->nnodes) {
        fprintf(stderr, "firebreak run: the allocation (job %s) has %d node%s, "
                "fewer than %d for the job (--nnodes) + %d spare%s (--spare-nodes)\n",
                g->job_id, g->nnodes, g->nnodes == 1 ? "" : "s",
                g->need < 1 ? 1 : g->need, o->spare_nodes,
                o->spare_nodes == 1 ? "" : "s");
        return -EINVAL;
    }
    if ((long long)g->need * g->ppn > MAX_RANKS) {
        fprintf(stderr, "firebreak run: %d nodes x %d ranks is more than %d ranks\n",
                g->need, g->ppn, MAX_RANKS);
        return -EINVAL;
    }
    s->world = g->need * g->ppn;
    /* The peer tier's copies per node: each on another node, so fewer
     * than the job's nodes (the default 1 only when there are two). */
    const char *k = o->peer_copies ? o->peer_copies : fb__getenv("FIREBREAK_CKPT_PEER_COPIES");
    const char *kname = o->peer_copies ? "--peer-copies" : "FIREBREAK_CKPT_PEER_COPIES";
    long long kv = 1;
    if (k && fb__parse_int(k, 0, FB__PEER_COPIES_MAX, &kv)) {
        fprintf(stderr, "firebreak run: %s: expected a whole number in [0, %d], got "
                "'%s'\n", kname, FB__PEER_COPIES_MAX, k);
        return -EINVAL;
    }
    if (k && kv > 0 && kv >= g->need) {
        fprintf(stderr, "firebreak run: %s %lld: each copy goes to another node, so "
                "fewer than the job's %d node%s (--nnodes)\n", kname, kv, g->need,
                g->need == 1 ? "" : "s");
        return -EINVAL;
    }
    g->peer_copies = (int)kv;
    const char *dom = o->peer_domains ? o->peer_domains
                                      : fb__getenv("FIREBREAK_CKPT_PEER_DOMAINS");
    if (dom && !strcmp(dom, "slurm"))
        return topology_domains(g);
    return 0;
}

int fb__sup_slurm_peer_copies(const fb__sup *s)
{
    return s->slurm ? s->slurm->peer_copies : 0;
}

/* Health-check the candidate nodes in one step; leave out those that fail
 * or do not answer. */
static void health_check(fb__sup *s, const int *cand, int ncand, int timeout_ms,
                         const char *log_tag, int *passed)
{
    struct fb__sup_slurm *g = s->slurm;
    static char list[NODE_LIST_MAX];
    char nn[16], logp[PATH_MAX];
    static char out[MAX_NODES * (FB__FBW1_LINE_MAX + 1)];
    if (node_list(g, cand, ncand, list, sizeof list))
        return;
    snprintf(nn, sizeof nn, "%d", ncand);
    char *argv[] = {"srun", "--overlap", "--kill-on-bad-exit=0", "-N", nn,
                    "--ntasks-per-node=1", "-w", list, "--export=ALL",
                    g->self, "watch", "--health", NULL};
    snprintf(logp, sizeof logp, "%s/health-attempt-%d%s.log", s->logs_dir, s->attempt,
             log_tag);
    int lfd = fb__open_append_regular(logp, 0644);
    if (lfd >= 0)
        (void)!ftruncate(lfd, 0);
    uint64_t t0 = fb__now_ns();
    int rc = fb__sup_run_capture(argv, out, sizeof out, lfd, timeout_ms);
    if (lfd >= 0)
        close(lfd);
    int answered[MAX_NODES] = {0};
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        fb__fbw1_msg m;
        if (fb__fbw1_parse(line, strlen(line), 1, &m) ||
            m.kind != FB_FBW1_HEALTH)
            continue;
        int i = node_index(g, m.node);
        if (i < 0)
            continue;
        answered[i] = 1;
        if (passed)
            passed[i] = m.verdict == FB_FBW1_OK || m.verdict == FB_FBW1_WARN;
        if (m.verdict == FB_FBW1_FAIL) {
            char why[256];
            if (g->suspect == i && g->suspect_why[0])
                snprintf(why, sizeof why, "%.150s (after %.90s)", m.reason, g->suspect_why);
            else
                snprintf(why, sizeof why, "%s", m.reason);
            exclude_node(s, i, why);
        }
    }
    for (int k = 0; k < ncand; k++)
        if (!answered[cand[k]])
            exclude_node(s, cand[k], rc == -ETIMEDOUT
                         ? "firebreak: health check timed out"
                         : "firebreak: health check gave no answer");
    fb__sup_log(s, "health check of %d node%s took %.0f ms", ncand,
                ncand == 1 ? "" : "s", (double)(fb__now_ns() - t0) / 1e6);
}

/* Without --drain (which hands a node to the operator), a node lost
 * earlier in the run is checked again before a launch, but not the one
 * right after the loss: each launch with --health-check, and without it
 * a launch that would otherwise find too few healthy nodes.  In a step of
 * its own with a shorter limit (a node still gone must not hold up the
 * others' check); taken back only when it answers and passes. */
static void recheck_lost(fb__sup *s)
{
    struct fb__sup_slurm *g = s->slurm;
    int lost[MAX_NODES], n = 0;
    static int passed[MAX_NODES];
    for (int i = 0; i < g->nnodes; i++)
        if (g->nodes[i].lost && g->nodes[i].lost_attempt < s->attempt - 1)
            lost[n++] = i;
    if (!n)
        return;
    memset(passed, 0, sizeof passed);
    health_check(s, lost, n, LOST_RECHECK_TIMEOUT_MS, "-lost", passed);
    for (int k = 0; k < n; k++) {
        snode *nd = &g->nodes[lost[k]];
        if (!passed[lost[k]]) {
            fb__sup_log(s, "%s, lost earlier, is still left out: no passing "
                        "health check", nd->name);
            continue;
        }
        nd->lost = nd->bad = 0;
        nd->why[0] = '\0';
        fb__sup_log(s, "%s, lost earlier, is back: it passed the health check", nd->name);
    }
}

static void no_nodes(fb__sup *s, int healthy)
{
    struct fb__sup_slurm *g = s->slurm;
    size_t len = 0;
    char left[160] = "";
    for (int i = 0; i < g->nnodes && len < sizeof left; i++) {
        if (!g->nodes[i].bad)
            continue;
        int w = snprintf(left + len, sizeof left - len, "%s%s", len ? ", " : "",
                         g->nodes[i].name);
        if (w > 0)
            len += (size_t)w;
    }
    int requeue = s->o->on_no_nodes == FB_ON_NO_NODES_REQUEUE;
    int qrc = -1;
    if (requeue) {
        char *argv[] = {"scontrol", "requeue", g->job_id, NULL};
        char out[256];
        qrc = fb__sup_run_capture(argv, out, sizeof out, -1, 15000);
    }
    snprintf(s->launch_detail, sizeof s->launch_detail,
             "too few healthy nodes: the job needs %d, %d remain; %s; left out: %s",
             g->need, healthy,
             !requeue ? "stopping (--on-no-nodes stop)"
             : qrc == 0 ? "asked Slurm to requeue the job (--on-no-nodes requeue)"
                        : "could not requeue the job (scontrol requeue failed)",
             len ? left : "none");
    fb__sup_log(s, "%s", s->launch_detail);
}

static int spawn_step(fb__sup *s, fb__sup_unit *u, char *const *argv, char **envp,
                      int in_fd, int out_fd, int err_fd, int rank)
{
    memset(u, 0, sizeof *u);
    u->rank = rank;
    fb__spawn sp = {.argv = argv, .envp = envp, .stdout_fd = out_fd,
                    .stderr_fd = err_fd, .stdin_fd = in_fd};
    int rc = fb__shim_spawn(&sp, &u->shim, &u->msg_fd);
    if (!rc)
        s->nunits++;
    return rc;
}

/* Append item to buf; -1 when it does not fit. */
static int append(char *buf, size_t size, size_t *len, const char *item)
{
    size_t n = strlen(item);
    if (n >= size - *len)
        return -1;
    memcpy(buf + *len, item, n + 1);
    *len += n;
    return 0;
}

/* Where each node of this attempt sends its copies (nodemem.c's
 * placement, by failure domain): per node, in the attempt's order, its
 * peers' addresses joined by '+' ("-": none), comma-separated.
 * -EINVAL: FIREBREAK_CKPT_PEER_DOMAINS is malformed (said). */
static int peer_addrs(fb__sup *s, char *buf, size_t size)
{
    const struct fb__sup_slurm *g = s->slurm;
    static char dom[MAX_NODES][FB__FBW1_NODE_MAX];
    static const char *domp[MAX_NODES];
    static int peer[MAX_NODES * FB__PEER_COPIES_MAX];
    const char *spec = g->domains         ? g->domains
                       : s->o->peer_domains ? s->o->peer_domains
                                            : fb__getenv("FIREBREAK_CKPT_PEER_DOMAINS");
    for (int k = 0; k < g->ncur; k++) {
        int rc = fb__peer_domain_of(spec, g->nodes[g->cur[k]].name, dom[k], sizeof dom[k]);
        if (rc) {
            fb__sup_warn(s, "%s: %s (NODE=DOMAIN,...); no peer copies",
                         s->o->peer_domains ? "--peer-domains"
                                            : "FIREBREAK_CKPT_PEER_DOMAINS",
                         fb_strerror(rc));
            return rc;
        }
        domp[k] = dom[k];
    }
    if (g->domains && s->attempt == 0) { /* what was read, once */
        char shown[320];
        fb__sup_log(s, "failure domains from Slurm's topology (leaf switches): %s",
                    fb__safe_text(shown, sizeof shown, g->domains[0] ? g->domains
                                  : "none of the job's nodes is under one"));
    }
    int kc = g->peer_copies;
    int short_of = fb__peer_place(domp, g->ncur, kc, peer);
    size_t len = 0;
    buf[0] = '\0';
    int fewest = kc;
    for (int k = 0; k < g->ncur; k++) {
        int got = 0;
        if (k && append(buf, size, &len, ","))
            return -ENAMETOOLONG;
        for (int c = 0; c < kc && peer[k * kc + c] >= 0; c++, got++) {
            const snode *n = &g->nodes[g->cur[peer[k * kc + c]]];
            if ((got && append(buf, size, &len, "+")) ||
                append(buf, size, &len, n->addr[0] ? n->addr : n->name))
                return -ENAMETOOLONG;
        }
        if (!got && append(buf, size, &len, "-"))
            return -ENAMETOOLONG;
        fewest = got < fewest ? got : fewest;
    }
    if (short_of)
        fb__sup_log(s, "attempt %d: %d of %d nodes have fewer than %d peer%s outside "
                    "their failure domain (--peer-copies): as many as there are, "
                    "down to %d", s->attempt, short_of, g->ncur, kc,
                    kc == 1 ? "" : "s", fewest);
    return 0;
}

int fb__sup_launch_slurm(fb__sup *s)
{
    struct fb__sup_slurm *g = s->slurm;
    const fb__sup_options *o = s->o;
    s->launch_detail[0] = '\0';
    if (g->watch_fd >= 0) {
        close(g->watch_fd);
        g->watch_fd = -1;
    }
    if (g->req_fd >= 0) {
        close(g->req_fd);
        g->req_fd = -1;
    }
    g->len = 0;
    g->dropping = 0;
    g->watch_stop_sent = 0;
    g->lost = -1;
    g->nalso_lost = 0;
    g->lost_launch = g->lost_refused = 0;
    g->srun_log_checked = -1;
    g->held = 0;
    memset(g->held_ns, 0, sizeof g->held_ns);
    memset(g->held_alive, 0, sizeof g->held_alive);
    g->step_end_deferred = 0;
    memset(g->beats, 0, sizeof g->beats);
    memset(g->watch, 0, sizeof g->watch);

    int cand[MAX_NODES], ncand = 0;
    for (int i = 0; i < g->nnodes; i++)
        if (!g->nodes[i].bad)
            cand[ncand++] = i;
    /* Lost nodes are checked again at each launch with --health-check;
     * without it only when the run would otherwise end for too few nodes
     * (a node taken for lost on one failed launch may be back). */
    if (!o->drain && (o->health_check || ncand < g->need)) {
        recheck_lost(s);
        ncand = 0;
        for (int i = 0; i < g->nnodes; i++)
            if (!g->nodes[i].bad)
                cand[ncand++] = i;
    }
    if (o->health_check && ncand >= g->need)
        health_check(s, cand, ncand, HEALTH_TIMEOUT_MS, "", NULL);
    g->ncur = 0;
    int healthy = 0;
    for (int i = 0; i < g->nnodes; i++) {
        if (g->nodes[i].bad)
            continue;
        healthy++;
        if (g->ncur < g->need)
            g->cur[g->ncur++] = i;
    }
    if (g->ncur < g->need) {
        no_nodes(s, healthy);
        return -EHOSTUNREACH;
    }
    g->suspect = -1;
    g->suspect_why[0] = '\0';

    static char list[NODE_LIST_MAX];
    char nn[16], np[16], ppn[16], att[16], world[16];
    char outpat[PATH_MAX], master[FB__FBW1_NODE_MAX + 16], logp[PATH_MAX];
    int rc = node_list(g, g->cur, g->ncur, list, sizeof list);
    if (rc)
        return rc;
    snprintf(nn, sizeof nn, "%d", g->need);
    snprintf(np, sizeof np, "%d", s->world);
    snprintf(ppn, sizeof ppn, "%d", g->ppn);
    snprintf(att, sizeof att, "%d", s->attempt);
    snprintf(world, sizeof world, "%d", s->world);
    char dir[PATH_MAX];
    if (fb__rundir_path(dir, sizeof dir, s->run_dir, FB__RUNDIR_SLURM_LOGS, s->attempt) ||
        fb__mkdir_p(dir, 0755) ||
        fb__fmt(outpat, sizeof outpat, "--output=%s/rank-%%t.log", dir))
        return -ENAMETOOLONG;
    for (int r = 0; r < s->world; r++)
        snprintf(s->ranks[r].log_path, sizeof s->ranks[r].log_path,
                 "%s/rank-%d.log", dir, r);
    const snode *first = &g->nodes[g->cur[0]];
    snprintf(master, sizeof master, "MASTER_ADDR=%s",
             first->addr[0] ? first->addr : first->name);

    char **env = fb__sup_env_common(s);
    if (!env)
        return -ENOMEM;
    int nenv = 0;
    while (env[nenv])
        nenv++;
    char **envp = calloc((size_t)nenv + 8, sizeof *envp); /* and the watchers' two */
    if (!envp) {
        fb__sup_env_free(env);
        return -ENOMEM;
    }
    int m = 0;
    for (int i = 0; i < nenv; i++)
        if (strncmp(env[i], "MASTER_ADDR=", 12))
            envp[m++] = env[i];
    envp[m++] = master;
    /* mpirun: as root Open MPI asks for both; its daemons' srun step
     * shares the CPUs with the watchers' (--overlap). */
    static char root1[] = "OMPI_ALLOW_RUN_AS_ROOT=1", root2[] = "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1";
    static char overlap[] = "OMPI_MCA_plm_slurm_args=--overlap";
    if (o->mpirun && geteuid() == 0) {
        envp[m++] = root1;
        envp[m++] = root2;
    }
    if (o->mpirun && !getenv("OMPI_MCA_plm_slurm_args"))
        envp[m++] = overlap;
    envp[m] = NULL;

    /* The ranks. */
    const char *argv[300];
    int n = 0;
    argv[n++] = "srun";
    argv[n++] = "--overlap";
    argv[n++] = "--kill-on-bad-exit=1";
    argv[n++] = "-N";
    argv[n++] = nn;
    argv[n++] = "-n";
    argv[n++] = np;
    argv[n++] = "--ntasks-per-node";
    argv[n++] = ppn;
    argv[n++] = "-m";
    argv[n++] = "block";
    argv[n++] = "-w";
    argv[n++] = list;
    argv[n++] = "--export=ALL";
    argv[n++] = outpat;
    /* torchrun's contract, per task (srun sets only SLURM_*): what a
     * PyTorch script reads to join its process group. */
    argv[n++] = "/bin/sh";
    argv[n++] = "-c";
    argv[n++] = "RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS "
                "GROUP_RANK=$SLURM_NODEID LOCAL_WORLD_SIZE=$SLURM_NTASKS_PER_NODE; "
                "export RANK LOCAL_RANK WORLD_SIZE GROUP_RANK LOCAL_WORLD_SIZE; exec \"$@\"";
    argv[n++] = "firebreak-rank";
    for (char *const *a = o->argv; *a && n < 298; a++)
        argv[n++] = *a;
    argv[n] = NULL;
    static char hosts[MAX_NODES * 72], ldp[PATH_MAX * 2 + 16];
    char mpidir[PATH_MAX], ppr[32];
    if (o->mpirun) {
        rc = fb__fmt(mpidir, sizeof mpidir, "%s/mpirun", dir);
        if (!rc)
            rc = mpirun_argv(s, envp, list, mpidir, argv, 300, hosts, sizeof hosts, ldp,
                             sizeof ldp, ppr, sizeof ppr);
        if (rc) {
            free(envp);
            fb__sup_env_free(env);
            return rc;
        }
        for (int r = 0; r < s->world; r++)
            snprintf(s->ranks[r].log_path, sizeof s->ranks[r].log_path,
                     "%s/1/rank.%d/stderr", mpidir, r);
    }
    snprintf(g->srun_log, sizeof g->srun_log, "%s/srun.log", dir);
    int lfd = fb__open_append_regular(g->srun_log, 0644);
    g->srun_log_from = lfd >= 0 ? lseek(lfd, 0, SEEK_END) : 0;
    if (g->srun_log_from < 0)
        g->srun_log_from = 0;
    snprintf(logp, sizeof logp, "%s/watch.log", dir);
    int wfd = fb__open_append_regular(logp, 0644);
    int pfd[2] = {-1, -1}, qfd[2] = {-1, -1};
    if (lfd < 0 || wfd < 0 || pipe2(pfd, O_CLOEXEC) || pipe2(qfd, O_CLOEXEC)) {
        rc = lfd < 0 ? lfd : wfd < 0 ? wfd : -errno;
        goto out;
    }
    rc = spawn_step(s, &s->units[0], (char *const *)argv, envp, 0, lfd, lfd, -1);
    if (rc)
        goto out;

    /* One watcher per node; its stdout comes back through the pipe, and
     * what the supervisor writes to its stdin (a hang's `snap`) goes to
     * every watcher (--input=all). */
    char *wargv[] = {"srun", "--overlap", "--kill-on-bad-exit=0", "-N", nn,
                     "--ntasks-per-node=1", "-m", "block", "-w", list,
                     "--input=all", "--export=ALL", g->self, "watch", "--job",
                     s->job_id, "--attempt", att, "--ranks-per-node", ppn,
                     "--world", world, NULL, NULL, NULL, NULL, NULL};
    /* The peer tier: each watcher receives on the port, and sends its
     * node's complete steps to its entry of this list (nodemem.c). */
    static char pport[16], addrs[MAX_NODES * FB__PEER_COPIES_MAX * FB__FBW1_NODE_MAX];
    int port = fb__sup_nodemem_peer_port(s);
    if (port > 0 && !peer_addrs(s, addrs, sizeof addrs)) {
        int w = 0;
        while (wargv[w])
            w++;
        snprintf(pport, sizeof pport, "%d", port);
        wargv[w++] = "--peer-port";
        wargv[w++] = pport;
        wargv[w++] = "--peers";
        wargv[w++] = addrs;
    }
    /* One node's end must not end the others' watchers.  srun (22.05 to
     * today, step_launch_notify_io_failure) aborts the whole step on an
     * I/O error with one node's slurmstepd -- a node killed while a
     * request line sent to it was unread (ECONNRESET) -- unless
     * SLURM_PTY_PORT is set, as it is under --pty.  Set for this step
     * only: the watchers read no terminal, and slurmstepd reads the
     * variable only for --pty.  The ranks' step keeps srun's abort. */
    static char pty[] = "SLURM_PTY_PORT=0";
    static char key[sizeof "FIREBREAK_PEER_KEY=" + 2 * FB__REPL_KEY_BYTES];
    const char *kv = getenv("FIREBREAK_PEER_KEY");
    if (kv) { /* the peer copies' key: the watchers' only */
        snprintf(key, sizeof key, "FIREBREAK_PEER_KEY=%s", kv);
        envp[m++] = key;
    }
    if (!getenv("SLURM_PTY_PORT"))
        envp[m++] = pty;
    envp[m] = NULL;
    rc = spawn_step(s, &s->units[UNIT_WATCHERS], wargv, envp, qfd[0], pfd[1], wfd,
                    FB__SUP_UNIT_WATCHERS);
    if (rc)
        goto out;
    fcntl(pfd[0], F_SETFL, O_NONBLOCK);
    fcntl(qfd[1], F_SETFL, O_NONBLOCK);
    g->watch_fd = pfd[0];
    pfd[0] = -1;
    g->req_fd = qfd[1];
    qfd[1] = -1;
    fb__sup_log(s, "attempt %d on %s (%d spare%s)", s->attempt, list,
                healthy - g->need, healthy - g->need == 1 ? "" : "s");
out:
    if (pfd[0] >= 0)
        close(pfd[0]);
    if (pfd[1] >= 0)
        close(pfd[1]);
    for (int i = 0; i < 2; i++)
        if (qfd[i] >= 0)
            close(qfd[i]);
    if (lfd >= 0)
        close(lfd);
    if (wfd >= 0)
        close(wfd);
    free(envp);
    fb__sup_env_free(env);
    return rc;
}

/* The node-memory tier's steps (nodemem.c): one srun step of `firebreak
 * watch ARGS...` on each node of `nodes`, or every node not left out. */
int fb__sup_slurm_on_nodes(fb__sup *s, const char *nodes, const char *const *args,
                           const char *log_path, int timeout_ms)
{
    struct fb__sup_slurm *g = s->slurm;
    int idx[MAX_NODES], n = 0;
    static char list[NODE_LIST_MAX];
    char nn[16];
    if (nodes) {
        if (fb__fmt(list, sizeof list, "%s", nodes))
            return -ENAMETOOLONG;
        n = *nodes ? 1 : 0;
        for (const char *p = nodes; *p; p++)
            n += *p == ',';
    } else {
        for (int i = 0; i < g->nnodes; i++)
            if (!g->nodes[i].bad)
                idx[n++] = i;
        if (n && node_list(g, idx, n, list, sizeof list))
            return -ENAMETOOLONG;
    }
    if (!n)
        return 0;
    snprintf(nn, sizeof nn, "%d", n);
    const char *argv[40] = {"srun", "--overlap", "--kill-on-bad-exit=0", "-N", nn,
                            "--ntasks-per-node=1", "-w", list, "--export=ALL",
                            g->self, "watch"};
    int k = 11;
    for (int i = 0; args[i] && k < 39; i++)
        argv[k++] = args[i];
    argv[k] = NULL;
    int lfd = fb__open_append_regular(log_path, 0644);
    if (lfd >= 0)
        (void)!ftruncate(lfd, 0);
    char out[256];
    int rc = fb__sup_run_capture((char *const *)argv, out, sizeof out, lfd, timeout_ms);
    if (lfd >= 0)
        close(lfd);
    return rc;
}

void fb__sup_slurm_sweep(fb__sup *s)
{
    if (!s->slurm || !s->stopped_any)
        return;
    char log_path[PATH_MAX];
    if (fb__fmt(log_path, sizeof log_path, "%s/slurm-sweep.log", s->logs_dir))
        return;
    const char *args[] = {"--sweep", "--job", s->job_id, NULL};
    int rc = fb__sup_slurm_on_nodes(s, NULL, args, log_path, SWEEP_STEP_MS);
    if (rc)
        fb__sup_log(s, "end of run: the sweep of the nodes' segments failed (%s; %s); "
                    "the Epilog removes what is left", rc > 0 ? "exit status"
                    : fb_strerror(rc), log_path);
}

/* One request line to every watcher: 0, or -errno (-EPIPE: none to
 * hear it, or a short write). */
/* One line to the watchers' stdin.  Their srun may have ended while its
 * shim's report is not read yet (every watcher says `bye` and exits once
 * its ranks are gone): the write then fails with EPIPE, and the SIGPIPE
 * it raises, blocked here, is taken back, for its default action would
 * end the supervisor right after it recorded the failure (salloc turns
 * that into exit 1).  Test hook FIREBREAK_TEST_SLURM_REQ_DELAY_MS: a
 * wait before the write, where the watchers can end. */
static ssize_t req_write(int fd, const char *line, size_t n)
{
#ifdef FB_TEST_HOOKS
    const char *delay = getenv("FIREBREAK_TEST_SLURM_REQ_DELAY_MS");
    if (delay && atoi(delay) > 0) {
        struct timespec ts = {atoi(delay) / 1000, (long)(atoi(delay) % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
    }
#endif
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    ssize_t w;
    while ((w = write(fd, line, n)) < 0 && errno == EINTR)
        ;
    int e = errno;
    if (w < 0 && e == EPIPE) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return w;
}

static int request(fb__sup *s, const fb__fbw1_msg *m)
{
    struct fb__sup_slurm *g = s->slurm;
    if (!g || g->req_fd < 0 || s->nunits <= UNIT_WATCHERS ||
        s->units[UNIT_WATCHERS].ended)
        return -EPIPE;
    char line[64];
    int n = fb__fbw1_format(m, line, sizeof line);
    if (n <= 0)
        return -EINVAL;
    ssize_t w = req_write(g->req_fd, line, (size_t)n);
    return w == n ? 0 : w < 0 ? -errno : -EPIPE; /* a short write: next time */
}

void fb__sup_slurm_keep(fb__sup *s)
{
    fb__fbw1_msg m;
    memset(&m, 0, sizeof m);
    m.kind = FB_FBW1_KEEP;
    (void)request(s, &m);
}

int fb__sup_slurm_drop(fb__sup *s, int64_t step, const int64_t *keep, int nkeep)
{
    fb__fbw1_msg m;
    memset(&m, 0, sizeof m);
    m.kind = FB_FBW1_DROP;
    m.step = step;
    for (int i = 0; i < nkeep && m.nkeep < FB__FBW1_DROP_KEEP_MAX; i++)
        if (keep[i] >= 0 && keep[i] < step)
            m.keep[m.nkeep++] = keep[i];
    return request(s, &m);
}

int fb__sup_slurm_send(fb__sup *s, int64_t step)
{
    fb__fbw1_msg m;
    memset(&m, 0, sizeof m);
    m.kind = FB_FBW1_SEND;
    m.step = step;
    return request(s, &m);
}

int fb__sup_slurm_node_up(const fb__sup *s, const char *name)
{
    const struct fb__sup_slurm *g = s->slurm;
    int i = g ? node_index(g, name) : -1;
    return i >= 0 && !g->nodes[i].bad && !g->nodes[i].lost;
}

const char *fb__sup_slurm_node_addr(const fb__sup *s, const char *name)
{
    const struct fb__sup_slurm *g = s->slurm;
    int i = g ? node_index(g, name) : -1;
    return i < 0 ? name : g->nodes[i].addr[0] ? g->nodes[i].addr : g->nodes[i].name;
}

/* ---- watching ---- */

int fb__sup_slurm_fd(const fb__sup *s)
{
    return s->slurm ? s->slurm->watch_fd : -1;
}

static const snode *snode_of_rank(const fb__sup *s, int rank)
{
    const struct fb__sup_slurm *g = s->slurm;
    int k = g->ppn > 0 && rank >= 0 ? rank / g->ppn : -1;
    return k >= 0 && k < g->ncur ? &g->nodes[g->cur[k]] : NULL;
}

static const char *node_of_rank(const fb__sup *s, int rank)
{
    const snode *n = snode_of_rank(s, rank);
    return n ? n->name : "?";
}

const char *fb__sup_slurm_node_of_rank(const fb__sup *s, int rank)
{
    const snode *n = s->slurm ? snode_of_rank(s, rank) : NULL;
    return n ? n->name : NULL;
}

int fb__sup_slurm_rank_done(const fb__sup *s, int rank)
{
    const struct fb__sup_slurm *g = s->slurm;
    return g && rank >= 0 && rank < s->world && g->beats[rank].have &&
           g->beats[rank].phase == FB_PHASE_DONE;
}

int fb__sup_slurm_nnodes(const fb__sup *s)
{
    return s->slurm ? s->slurm->need : 1;
}

void fb__sup_rank_where(const fb__sup *s, int rank, const char **node,
                        const char **host)
{
    *node = *host = NULL;
    if (s->slurm) {
        const snode *n = snode_of_rank(s, rank);
        if (n) {
            *node = n->name;
            *host = n->host[0] ? n->host : NULL;
        }
        return;
    }
    /* mpirun inside an allocation may place ranks on other hosts. */
    if (s->o->launcher == FB__LAUNCH_MPIRUN && fb__getenv("SLURM_JOB_NODELIST"))
        return;
    *node = *host = s->hostname;
}

void fb__sup_failure_where(const fb__sup *s, const fb__sup_failure *f,
                           const char **node, const char **host)
{
    const struct fb__sup_slurm *g = s->slurm;
    if (g && f->kind == FB__SUP_FAIL_NODE_FAILURE && g->lost >= 0) {
        *node = g->nodes[g->lost].name;
        *host = g->nodes[g->lost].host[0] ? g->nodes[g->lost].host : NULL;
        return;
    }
    fb__sup_rank_where(s, f->rank, node, host);
}

/* Journal where every rank of this attempt runs, and its node list. */
static void place_node_ranks(fb__sup *s, int only_node)
{
    const struct fb__sup_slurm *g = s->slurm;
    for (int r = 0; r < s->world; r++) {
        const char *node, *host;
        if (g && only_node >= 0 && snode_of_rank(s, r) != &g->nodes[only_node])
            continue;
        fb__sup_rank_where(s, r, &node, &host);
        if (node)
            fb__journal_place(s->j, s->attempt_id, r, node, host);
    }
}

void fb__sup_place_ranks(fb__sup *s)
{
    place_node_ranks(s, -1);
    fb__jsonw w;
    fb__jsonw_init(&w);
    fb__jsonw_arr_begin(&w);
    const struct fb__sup_slurm *g = s->slurm;
    if (g) {
        for (int k = 0; k < g->ncur; k++)
            fb__jsonw_str(&w, g->nodes[g->cur[k]].name);
    } else {
        const char *node, *host;
        fb__sup_rank_where(s, 0, &node, &host);
        if (node)
            fb__jsonw_str(&w, node);
    }
    fb__jsonw_arr_end(&w);
    if (strcmp(fb__jsonw_text(&w), "[]"))
        fb__journal_attempt_text(s->j, s->attempt_id, "nodes", fb__jsonw_text(&w));
    fb__jsonw_free(&w);
}

/* The position in cur of the node a message comes from; -1 if unknown. */
static int msg_node(const fb__sup *s, const fb__fbw1_msg *m)
{
    const struct fb__sup_slurm *g = s->slurm;
    switch (m->kind) {
    case FB_FBW1_HELLO:
        return m->nodeid < g->ncur ? m->nodeid : -1;
    case FB_FBW1_BYE:
    case FB_FBW1_ALIVE:
    case FB_FBW1_SNAPPED:
        for (int k = 0; k < g->ncur; k++)
            if (!strcmp(g->nodes[g->cur[k]].name, m->node))
                return k;
        return -1;
    case FB_FBW1_ATTACH:
    case FB_FBW1_BEAT:
    case FB_FBW1_END:
    case FB_FBW1_REPORT:
        return g->ppn > 0 && m->rank / g->ppn < g->ncur ? m->rank / g->ppn : -1;
    default:
        return -1;
    }
}

static void on_msg(fb__sup *s, const fb__fbw1_msg *m)
{
    struct fb__sup_slurm *g = s->slurm;
    uint64_t now = fb__now_ns();
    int k = msg_node(s, m);
    if (k >= 0) {
        g->watch[k].heard = 1;
        g->watch[k].rx_ns = now;
        if (m->kind == FB_FBW1_BYE)
            g->watch[k].bye = 1;
        if (m->kind == FB_FBW1_SNAPPED && m->attempt == s->attempt)
            g->watch[k].snapped = 1;
        if (m->kind == FB_FBW1_ALIVE)
            for (int r = k * g->ppn; r < (k + 1) * g->ppn && r < s->world; r++)
                g->held_alive[r] = 1; /* read only while r is held */
    }
    switch (m->kind) {
    case FB_FBW1_HELLO: {
        if (m->nodeid >= g->ncur)
            break;
        snode *n = &g->nodes[g->cur[m->nodeid]];
        if (strcmp(m->node, n->name)) {
            fb__sup_log(s, "watcher %d reports node %s, expected %s", m->nodeid,
                        m->node, n->name);
            break;
        }
        /* The machine's own name is the host: journal it if Slurm's
         * NodeHostName said otherwise (or nothing). */
        if (m->host[0] && strcmp(m->host, n->host)) {
            snprintf(n->host, sizeof n->host, "%s", m->host);
            place_node_ranks(s, g->cur[m->nodeid]);
        }
        break;
    }
    case FB_FBW1_BEAT: {
        rank_beat *b = &g->beats[m->rank];
        b->have = 1;
        b->step = m->step;
        b->phase = m->phase;
        b->age_ms = m->age_ms;
        b->rx_ns = now;
        if (m->step > s->max_step)
            s->max_step = m->step;
        /* Progress of a rank whose segment is not on this host: readiness
         * and step samples come from its watcher. */
        fb__sup_rank *rk = &s->ranks[m->rank];
        if (!rk->seg && m->step >= 0) {
            uint64_t age_ns = (uint64_t)m->age_ms * 1000000ull;
            if (!rk->remote_ready_ns)
                rk->remote_ready_ns = now > age_ns ? now - age_ns : now;
            if ((uint64_t)m->step != rk->last_sample_step || !rk->last_sample_ns) {
                fb__journal_sample(s->j, s->attempt_id, m->rank, fb__wall_s(), m->step, -1);
                rk->last_sample_step = (uint64_t)m->step;
                rk->last_sample_ns = now;
            }
        }
        break;
    }
    case FB_FBW1_REPORT: {
        /* The same report may also be read from the segment when the rank
         * shares this host: delivery is by index, so it counts once. */
        fb__seg_report rep;
        memset(&rep, 0, sizeof rep);
        rep.kind = (uint32_t)m->rep_kind;
        rep.code = m->rep_code;
        rep.step = (uint64_t)m->rep_step;
        rep.bytes = (uint64_t)m->rep_bytes;
        rep.value1 = (uint64_t)m->rep_v1;
        rep.value2 = (uint64_t)m->rep_v2;
        rep.wall_ns = (uint64_t)m->rep_wall_ns;
        snprintf(rep.text, sizeof rep.text, "%s", m->rep_text);
        fb__sup_deliver_report(s, m->rank, (uint64_t)m->rep_idx, &rep);
        break;
    }
    case FB_FBW1_PEER:
        fb__sup_nodemem_on_peer(s, m->node, m->step, m->rank, m->count);
        break;
    case FB_FBW1_END: {
        /* The watcher only knows what the rank recorded; a wait status is
         * made from it so a remote end reads like a local one. */
        int known = 1, ws = 0;
        if (m->how == FB_FBW1_END_EXIT)
            ws = W_EXITCODE(m->code & 0xff, 0);
        else if (m->how == FB_FBW1_END_SIGNAL)
            ws = W_EXITCODE(0, m->code & 0x7f);
        else if (m->how == FB_FBW1_END_FINALIZED)
            ws = 0;
        else
            known = 0;
        if (s->ranks[m->rank].ended || g->held_ns[m->rank])
            break;
        int fatal = !known || m->how == FB_FBW1_END_SIGNAL ||
                    (m->how == FB_FBW1_END_EXIT && (m->code & 0xff));
        if (!fatal || s->fail.set || (known && s->o->mpirun)) {
            fb__sup_rank_ended(s, m->rank, known, ws, 0, now);
            break;
        }
        g->held_ns[m->rank] = now; /* fb__sup_slurm_tick decides */
        g->held_ws[m->rank] = ws;
        g->held_known[m->rank] = (unsigned char)known;
        g->held_kill[m->rank] = m->how == FB_FBW1_END_SIGNAL && (m->code & 0x7f) == SIGKILL;
        g->held_alive[m->rank] = 0;
        g->held++;
        break;
    }
    default:
        break;
    }
}

static void on_line(void *ctx, const char *line, size_t len)
{
    fb__sup *s = ctx;
    fb__fbw1_msg m;
    if (fb__fbw1_parse(line, len, s->world, &m) == 0)
        on_msg(s, &m);
}

void fb__sup_slurm_read(fb__sup *s)
{
    struct fb__sup_slurm *g = s->slurm;
    if (!g || g->watch_fd < 0)
        return;
    for (;;) {
        ssize_t n = read(g->watch_fd, g->buf + g->len, sizeof g->buf - g->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return; /* EAGAIN */
        if (n == 0) {
            close(g->watch_fd);
            g->watch_fd = -1;
            return;
        }
        g->len = fb__fbw1_lines(g->buf, g->len + (size_t)n, &g->dropping, on_line, s);
    }
}

/* A hang, before anything is stopped: every node's watcher writes its
 * ranks' segments (their flight-recorder rings) into the run directory,
 * where analyze_hang (supervisor.c) reads them beside any written here.
 * Waits until every watcher that can answer has said `snapped`, at most
 * SNAP_TIMEOUT_MS: a watcher never heard, one whose ranks all ended, or
 * that of a lost node is not waited for, and a node that does not answer
 * in time leaves its ranks missing from the analysis. */
void fb__sup_slurm_snapshot(fb__sup *s)
{
    struct fb__sup_slurm *g = s->slurm;
    if (!g || g->req_fd < 0 || s->nunits <= UNIT_WATCHERS ||
        s->units[UNIT_WATCHERS].ended)
        return;
    fb__fbw1_msg m;
    memset(&m, 0, sizeof m);
    m.kind = FB_FBW1_SNAP;
    m.attempt = s->attempt;
    char line[64];
    int n = fb__fbw1_format(&m, line, sizeof line);
    for (int k = 0; k < g->ncur; k++)
        g->watch[k].snapped = 0;
    ssize_t w = req_write(g->req_fd, line, (size_t)(n > 0 ? n : 0));
    if (n <= 0 || w != n) {
        fb__sup_log(s, "could not ask the node watchers for flight-recorder "
                    "snapshots: %s", w < 0 ? strerror(errno) : "short write");
        return;
    }
    uint64_t t0 = fb__now_ns(), deadline = t0 + SNAP_TIMEOUT_MS * 1000000ull;
    int want, got;
    for (;;) {
        fb__sup_slurm_read(s);
        want = got = 0;
        for (int k = 0; k < g->ncur; k++) {
            if (!g->watch[k].heard || g->watch[k].bye || g->cur[k] == g->lost)
                continue;
            want++;
            got += g->watch[k].snapped;
        }
        uint64_t now = fb__now_ns();
        if (got == want || now >= deadline || g->watch_fd < 0)
            break;
        struct pollfd pf = {.fd = g->watch_fd, .events = POLLIN};
        int ms = (int)((deadline - now) / 1000000ull) + 1;
        poll(&pf, 1, ms < 50 ? ms : 50);
    }
    fb__sup_log(s, "flight recorder: snapshots from %d of %d node watcher%s in %.0f ms",
                got, want, want == 1 ? "" : "s", (double)(fb__now_ns() - t0) / 1e6);
}

/* Nodes lost together (a rack's power, a switch): when one node's silence
 * reaches --node-timeout, every other node of the attempt whose watcher
 * has been silent too, with ranks on it,
 * is taken as lost with it: silent for half the limit, and at least
 * ALSO_LOST_MIN_S (a live watcher is silent about a second at most), so
 * that the next attempt is not placed on a node that is gone too (it
 * would fail there, and that node's memory would be counted on).  A node
 * taken for lost wrongly costs a spare, and comes back as any lost node
 * does (recheck_lost).  Named in the failure's detail. */
#define ALSO_LOST_MIN_S 1.5

/* Whether a rank of the node at position k has a held end without a
 * record that its node has not outlived yet: the node may be dying. */
static int unproven_on(const fb__sup *s, int k)
{
    const struct fb__sup_slurm *g = s->slurm;
    for (int r = k * g->ppn; g->held && r < (k + 1) * g->ppn && r < s->world; r++)
        if (g->held_ns[r] && !g->held_known[r] && !g->held_alive[r])
            return 1;
    return 0;
}

static void also_lost(fb__sup *s, int k_lost, uint64_t now)
{
    struct fb__sup_slurm *g = s->slurm;
    fb__sup_failure *f = &s->fail;
    double limit = s->o->node_timeout_s;
    double min_s = limit / 2 > ALSO_LOST_MIN_S ? limit / 2 : ALSO_LOST_MIN_S;
    g->nalso_lost = 0;
    for (int k = 0; k < g->ncur; k++) {
        const node_watch *w = &g->watch[k];
        if (k == k_lost || !w->heard || (w->bye && !unproven_on(s, k)) ||
            g->cur[k] == g->cur[k_lost])
            continue;
        int running = 0, first = k * g->ppn;
        for (int r = first; r < first + g->ppn && r < s->world; r++)
            running |= !s->ranks[r].ended;
        double silent_s = (double)(now - w->rx_ns) / 1e9;
        if (!running || silent_s <= min_s)
            continue;
        g->also_lost[g->nalso_lost++] = g->cur[k];
        size_t len = strlen(f->detail);
        snprintf(f->detail + len, sizeof f->detail - len, "; node %s lost with it "
                 "(silent %.1f s)", g->nodes[g->cur[k]].name, silent_s);
    }
}

/* The node at position k of this attempt is lost: the failure, its
 * detail (`why`, after "node NAME lost: "), and the nodes lost with it. */
static void lose_node(fb__sup *s, int k, uint64_t now, const char *why)
{
    struct fb__sup_slurm *g = s->slurm;
    const node_watch *w = &g->watch[k];
    int first = k * g->ppn;
    long long step = -1;
    for (int r = first; r < first + g->ppn && r < s->world; r++)
        if (g->beats[r].have && g->beats[r].step > step)
            step = g->beats[r].step;
    fb__sup_failure *f = &s->fail;
    memset(f, 0, sizeof *f);
    f->set = 1;
    f->kind = FB__SUP_FAIL_NODE_FAILURE;
    f->rank = -1;
    f->step = step;
    snprintf(f->phase, sizeof f->phase, "%s", g->beats[first].have
             ? fb__sup_phase_name((uint32_t)g->beats[first].phase) : "init");
    f->detected_ns = now;
    f->occurred_ns = w->rx_ns;
    g->lost = g->cur[k];
    g->lost_launch = g->lost_refused = 0;
    char last[32];
    snprintf(f->detail, sizeof f->detail, "node %s lost: %s; %s",
             g->nodes[g->cur[k]].name, why, fb__sup_step_words(last, sizeof last, step, 1));
    also_lost(s, k, now);
}

/* A node of this attempt is lost when its watcher, once heard, has said
 * nothing (not even its `alive`, sent every second) for --node-timeout
 * while some rank of it runs: killed with its slurmd, cut off, or frozen.
 * A rank whose end without a record is held counts as running, and the
 * `bye` that followed it as unsaid, until the node's next `alive` (the
 * watcher may have reported the rank, then died with the node).
 * A hang is told apart by its watcher, which still speaks.  Sets the
 * failure and returns 1.  *nowp is the time judged from: later when the
 * watchers' waiting lines were read first. */
static int node_lost(fb__sup *s, uint64_t *nowp)
{
    uint64_t now = *nowp;
    struct fb__sup_slurm *g = s->slurm;
    double limit = s->o->node_timeout_s;
    int reread = 0;
    if (limit <= 0 || s->units[UNIT_WATCHERS].ended)
        return 0;
    for (int k = 0; k < g->ncur; k++) {
        const node_watch *w = &g->watch[k];
        if (!w->heard || (w->bye && !unproven_on(s, k)))
            continue;
        int running = 0, first = k * g->ppn;
        for (int r = first; r < first + g->ppn && r < s->world; r++)
            running |= !s->ranks[r].ended;
        double silent_s = (double)(now - w->rx_ns) / 1e9;
        if (!running || silent_s <= limit)
            continue;
        if (!reread) {
            /* Lines waiting in the pipe are the watchers' word, though
             * not read yet (this loop was held up meanwhile): read them
             * first, and judge again from now. */
            reread = 1;
            fb__sup_slurm_read(s);
            if (s->fail.set)
                return 1; /* what they said set a failure */
            *nowp = now = fb__now_ns(); /* later than what was read */
            k = -1;
            continue;
        }
        char why[160];
        if (g->ppn == 1)
            snprintf(why, sizeof why, "its watcher said nothing for %.1f s (limit "
                     "%.1f s) with rank %d on it", silent_s, limit, first);
        else
            snprintf(why, sizeof why, "its watcher said nothing for %.1f s (limit "
                     "%.1f s) with ranks %d-%d on it", silent_s, limit, first,
                     first + g->ppn - 1);
        lose_node(s, k, now, why);
        return 1;
    }
    return 0;
}


/* The held ends without a record whose node has not outlived them yet
 * (fb__sup_judge_vanished): 1 while one of them must still wait; a node
 * whose watcher went silent after one is lost (the failure is set). */
static int vanished_wait(fb__sup *s, uint64_t now)
{
    struct fb__sup_slurm *g = s->slurm;
    int wait = 0;
    for (int r = 0; r < s->world && !s->fail.set; r++) {
        if (!g->held_ns[r] || g->held_known[r])
            continue;
        int k = g->ppn > 0 ? r / g->ppn : -1;
        if (k < 0 || k >= g->ncur)
            continue;
        const node_watch *w = &g->watch[k];
        fb__sup_vanished_facts f = {.alive_after = g->held_alive[r],
                                    .watchers_gone = s->units[UNIT_WATCHERS].ended,
                                    .last_heard_ns = w->rx_ns, .now_ns = now,
                                    .node_timeout_s = s->o->node_timeout_s};
        switch (fb__sup_judge_vanished(&f)) {
        case FB__SUP_VANISHED_WAIT:
            wait = 1;
            break;
        case FB__SUP_VANISHED_NODE_LOST: {
            char why[200];
            double silent_s = now > w->rx_ns ? (double)(now - w->rx_ns) / 1e9 : 0;
            if (f.watchers_gone)
                snprintf(why, sizeof why, "rank %d vanished and its watcher said "
                         "nothing after it (silent %.1f s, the watchers' step ended)",
                         r, silent_s);
            else
                snprintf(why, sizeof why, "rank %d vanished and its watcher said "
                         "nothing after it for %.1f s (limit %.1f s)", r, silent_s,
                         f.node_timeout_s);
            lose_node(s, k, now, why);
            return 0;
        }
        default:
            break;
        }
    }
    return wait;
}

/* How much of srun's log is read for its first reports: they come first,
 * and the log grows by a line per task that ends (about 50 bytes: 20,000
 * tasks fill a MiB).  Past it the head is read, not nothing. */
#define SRUN_LOG_READ_MAX (1u << 20)

/* srun's report of the first task that ended, "srun: error: NODE: task
 * T: WHAT" (or "tasks LIST: WHAT": its first task), but for those srun
 * terminated itself: 0, with *task and what; -1 when it has reported
 * none. */
static int srun_first_end(const struct fb__sup_slurm *g, int *task, char *what,
                          size_t size)
{
    char *text = NULL, line[FB__SLURM_LINE_MAX];
    size_t len = 0, pos = 0;
    int cut;
    if (fb__read_file_head_at(g->srun_log, g->srun_log_from, SRUN_LOG_READ_MAX, &text, &len,
                              &cut))
        return -1;
    int found = -1;
    while (found < 0 && fb__slurm_next_line(text, len, &pos, line, sizeof line)) {
        fb__srun_line l;
        fb__srun_line_parse(line, &l);
        if (l.kind == FB__SRUN_TASK_END && !strstr(l.what, "Terminated")) {
            /* several tasks of one node at once: the first named, and
             * the others said */
            *task = l.task;
            if (l.several)
                snprintf(what, size, "%s (with tasks %s on %s)", l.what, l.tasks, l.node);
            else
                snprintf(what, size, "%s", l.what);
            found = 0;
        }
    }
    free(text);
    return found;
}

/* What srun's log says of a launch that failed (srun_launch_failed). */
typedef struct launch_fail {
    int node;                /* index of the first node; -1 none          */
    int also[MAX_NODES];     /* the others                                */
    int nalso;
    int refused;             /* srun was refused the step: Slurm's word   */
    char why[400];
} launch_fail;

/* The node of this attempt (its index) on which srun could not launch
 * the tasks, "srun: error: Task launch for StepId=J.S failed on node
 * NODE: WHY", with WHY, the other nodes srun could not launch on in
 * lf->also (a rack lost at once is one failure, not one attempt per
 * node) -- but when srun failed on every node of the attempt, the first
 * only: that is the job's launch failing (a credential, a spool), not
 * every node lost, and draining them all would empty the allocation;
 * -1 when none.  When srun was refused the step outright ("Unable to
 * create step for job J: WHY", which names no node: Slurm has marked a
 * node of the attempt down, and taken it out of the job) and `ask` is
 * set, the first node of this attempt that Slurm says is down or out of
 * the job, the others in lf->also, with srun's WHY. */
static int srun_launch_failed(fb__sup *s, int ask, launch_fail *lf)
{
    struct fb__sup_slurm *g = s->slurm;
    char *text = NULL, line[FB__SLURM_LINE_MAX], refused[FB__SLURM_WHAT_MAX] = "";
    size_t len = 0, pos = 0;
    lf->node = -1;
    lf->nalso = 0;
    lf->refused = 0;
    lf->why[0] = '\0';
    int cut;
    if (fb__read_file_head_at(g->srun_log, g->srun_log_from, SRUN_LOG_READ_MAX, &text, &len,
                              &cut))
        return -1;
    while (fb__slurm_next_line(text, len, &pos, line, sizeof line)) {
        fb__srun_line l;
        fb__srun_line_parse(line, &l);
        if (l.kind == FB__SRUN_STEP_REFUSED && !refused[0])
            snprintf(refused, sizeof refused, "%s", l.what[0] ? l.what : "no reason given");
        if (l.kind != FB__SRUN_LAUNCH_FAILED)
            continue;
        int i = node_index(g, l.node), ours = 0, seen = i >= 0 && i == lf->node;
        for (int k = 0; i >= 0 && k < g->ncur; k++)
            ours |= g->cur[k] == i;
        for (int k = 0; k < lf->nalso; k++)
            seen |= lf->also[k] == i;
        if (!ours || seen)
            continue;
        if (lf->node < 0) {
            lf->node = i;
            snprintf(lf->why, sizeof lf->why, "%s", l.what[0] ? l.what : "no reason given");
        } else if (lf->nalso < MAX_NODES) {
            lf->also[lf->nalso++] = i;
        }
    }
    free(text);
    if (lf->node >= 0 && g->ncur > 1 && 1 + lf->nalso >= g->ncur)
        lf->nalso = 0;
    if (!ask || lf->node >= 0 || !refused[0])
        return lf->node;
    int down[MAX_NODES], n = nodes_gone(s, down, MAX_NODES);
    if (n > 0) {
        lf->node = down[0];
        for (int k = 1; k < n; k++)
            lf->also[lf->nalso++] = down[k];
        lf->refused = 1;
        snprintf(lf->why, sizeof lf->why, "srun was refused the step: %s; Slurm says %s",
                 refused, g->nodes[lf->node].state);
    }
    return lf->node;
}

/* The failure is lf's: srun could not launch on its nodes. */
static void set_launch_lost(fb__sup *s, const launch_fail *lf)
{
    struct fb__sup_slurm *g = s->slurm;
    fb__sup_failure *f = &s->fail;
    f->kind = FB__SUP_FAIL_NODE_FAILURE;
    f->rank = -1;
    f->has_exit_code = 0;
    f->signal = 0;
    f->occurred_ns = f->detected_ns;
    g->lost = lf->node;
    g->nalso_lost = lf->nalso;
    memcpy(g->also_lost, lf->also, (size_t)lf->nalso * sizeof lf->also[0]);
    g->lost_launch = 1;
    g->lost_refused = lf->refused;
    snprintf(f->detail, sizeof f->detail, "node %s lost: srun could not launch "
             "its tasks (%s)", g->nodes[lf->node].name, lf->why);
}

/* The failure, now, when srun could not launch on a node of this
 * attempt (srun's log says so; Slurm is not asked): that node's loss.
 * The log is read again only when it has grown. */
static int launch_lost_now(fb__sup *s, uint64_t now)
{
    struct fb__sup_slurm *g = s->slurm;
    struct stat st;
    if (s->o->mpirun || stat(g->srun_log, &st) || st.st_size == g->srun_log_checked)
        return 0;
    g->srun_log_checked = st.st_size;
    launch_fail lf;
    if (srun_launch_failed(s, 0, &lf) < 0)
        return 0;
    fb__sup_failure *f = &s->fail;
    memset(f, 0, sizeof *f);
    f->set = 1;
    f->step = -1;
    snprintf(f->phase, sizeof f->phase, "init");
    f->detected_ns = now;
    set_launch_lost(s, &lf);
    return 1;
}

/* The signal that srun's WHAT names ("Killed", "Aborted", ...), or 0. */
static int srun_signal(const char *what)
{
    static const struct { const char *what; int sig; } sigs[] = {
        {"Killed", SIGKILL}, {"Segmentation fault", SIGSEGV},
        {"Aborted", SIGABRT}, {"Bus error", SIGBUS}, {"Terminated", SIGTERM}};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (!strncmp(what, sigs[i].what, strlen(sigs[i].what)))
            return sigs[i].sig;
    return 0;
}

/* Rank r's held end, now; `sig`: the signal srun saw, for a rank whose
 * watcher had no record. */
static void release_held(fb__sup *s, int r, int sig)
{
    struct fb__sup_slurm *g = s->slurm;
    uint64_t when = g->held_ns[r];
    int known = g->held_known[r], ws = g->held_ws[r];
    g->held_ns[r] = 0;
    g->held--;
    if (!known && sig) {
        known = 1;
        ws = W_EXITCODE(0, sig & 0x7f);
    }
    if (!s->ranks[r].ended)
        fb__sup_rank_ended(s, r, known, ws, 0, when);
}

/* The held ends, once srun has named one of them (that rank ended first
 * and is the failure), HOLD_NS after the first was heard, another
 * failure came, or the ranks' step is over; then the rest: the recorded
 * ends, then the vanished ranks, each in the order heard. */
static void end_held(fb__sup *s, uint64_t now)
{
    struct fb__sup_slurm *g = s->slurm;
    /* srun could not launch on a node of this attempt: it aborts the
     * step and kills the tasks it did start (the watchers' step too), so
     * those ends, vanished or not, are not their nodes' or ranks' doing. */
    if (!s->fail.set && !launch_lost_now(s, now) && vanished_wait(s, now))
        return;
    uint64_t first = UINT64_MAX;
    for (int r = 0; r < s->world; r++)
        if (g->held_ns[r] && g->held_ns[r] < first)
            first = g->held_ns[r];
    int task = -1;
    char what[200] = "";
    if (s->o->mpirun || srun_first_end(g, &task, what, sizeof what) ||
        task < 0 || task >= s->world || !g->held_ns[task])
        task = -1;
    if (task < 0 && !s->fail.set && !s->units[0].ended && now - first <= HOLD_NS)
        return;
    int named = task;
    task = fb__sup_held_first(named, g->held_ns, g->held_kill, s->world);
    if (task >= 0 && named >= 0 && task != named)
        fb__sup_log(s, "srun named task %d first (%s), but rank %d ended by the kill "
                    "injected in it: rank %d is the failure", named, what, task, task);
    if (task >= 0)
        release_held(s, task, task == named ? srun_signal(what) : 0);
    for (int known = 1; known >= 0; known--) {
        for (;;) {
            int v = -1;
            for (int r = 0; r < s->world; r++)
                if (g->held_ns[r] && g->held_known[r] == known &&
                    (v < 0 || g->held_ns[r] < g->held_ns[v]))
                    v = r;
            if (v < 0)
                break;
            release_held(s, v, 0);
        }
    }
    g->held = 0;
}

/* Whether a held end without a record waits for its node's `alive`. */
static int any_unproven(const fb__sup *s)
{
    const struct fb__sup_slurm *g = s->slurm;
    if (!g || !g->held || s->nunits <= UNIT_WATCHERS || s->o->node_timeout_s <= 0)
        return 0;
    for (int k = 0; k < g->ncur; k++)
        if (unproven_on(s, k))
            return 1;
    return 0;
}

void fb__sup_slurm_tick(fb__sup *s, uint64_t now)
{
    struct fb__sup_slurm *g = s->slurm;
    if (!g || s->nunits <= UNIT_WATCHERS)
        return;
    /* The ranks' step is over: the watchers have nothing left to watch --
     * but the `alive` owed after a vanished rank (srun leaves before its
     * stopped tasks' last lines). */
    if (s->units[0].ended && !s->units[UNIT_WATCHERS].ended && !g->watch_stop_sent &&
        !any_unproven(s)) {
        fb__sup_slurm_read(s);
        g->watch_stop_sent = 1;
        fb__sup_slurm_keep(s); /* node memory stays: the run goes on */
        fb__shim_stop(s->units[UNIT_WATCHERS].shim, 0);
    }
    /* The held ends: srun has spoken, their wait is over, another
     * failure came, or the ranks' step is over. */
    if (g->held && s->units[UNIT_WATCHERS].ended)
        fb__sup_slurm_read(s); /* their last lines, the `alive` owed */
    if (g->held)
        end_held(s, now);
    if (g->step_end_deferred && !g->held) {
        g->step_end_deferred = 0;
        fb__sup_step_failure(s, &s->units[0]);
    }
    if (s->fail.set)
        return;
#ifdef FB_TEST_HOOKS
    /* test hook: this loop held up once, mid-run, while the watchers go on
     * speaking (nodeloss.sh) */
    static int held_up;
    const char *hold = getenv("FIREBREAK_TEST_SLURM_LOOP_HOLD_MS");
    if (hold && atoi(hold) > 0 && !held_up && g->beats[0].have && g->beats[0].step >= 10) {
        held_up = 1;
        usleep((useconds_t)atoi(hold) * 1000);
        now = fb__now_ns();
    }
#endif
    if (node_lost(s, &now))
        return;
    fb__sup_nodemem_tick(s, now); /* old steps out of node memory */
    /* Hangs of ranks whose segment is not on this host: the watchers'
     * heartbeat ages. */
    for (int r = 0; r < s->world; r++) {
        rank_beat *b = &g->beats[r];
        if (!b->have || s->ranks[r].seg || s->ranks[r].ended)
            continue;
        double limit = b->phase == FB_PHASE_TRAIN ? s->o->hang_timeout_s
                     : b->phase == FB_PHASE_CHECKPOINT ? s->o->ckpt_timeout_s
                     : b->phase == FB_PHASE_DONE ? s->o->exit_timeout_s
                     : s->o->startup_timeout_s;
        double age_s = (double)b->age_ms / 1e3 +
                       (now > b->rx_ns ? (double)(now - b->rx_ns) / 1e9 : 0);
        if (b->phase == FB_PHASE_DONE) { /* from when no rank works (watch.c) */
            double over_s = s->work_over_ns && now > s->work_over_ns
                                ? (double)(now - s->work_over_ns) / 1e9 : 0;
            if (over_s < age_s)
                age_s = over_s;
        }
        if (limit <= 0 || age_s <= limit)
            continue;
        fb__sup_failure *f = &s->fail;
        memset(f, 0, sizeof *f);
        f->set = 1;
        f->kind = FB__SUP_FAIL_HANG;
        f->rank = r;
        f->step = b->step;
        snprintf(f->phase, sizeof f->phase, "%s", fb__sup_phase_name((uint32_t)b->phase));
        f->detected_ns = now;
        f->occurred_ns = now - (uint64_t)(age_s * 1e9);
        char last[32];
        snprintf(f->detail, sizeof f->detail, "no progress from rank %d on %s for "
                 "%.1f s in phase %s (limit %.1f s), %s%s (node watcher)",
                 r, node_of_rank(s, r), age_s, f->phase, limit,
                 fb__sup_step_words(last, sizeof last, b->step, 1),
                 b->phase == FB_PHASE_DONE ? ", after it had finished: a hang in "
                                             "its teardown (--exit-timeout)"
                                           : "");
        /* The first rank found silent, not the first that stopped: the
         * flight recorder decides (analyze_hang) -- unless this rank
         * reported the hang injection it fired (its watcher forwards the
         * report), direct evidence as on one host (policy.c rule 2). */
        if (s->ranks[r].injected_kind == FB__INJECT_HANG) {
            snprintf(f->injected, sizeof f->injected, "%s", s->ranks[r].injected);
            return;
        }
        for (int q = 0; q < s->world; q++)
            if (q != r && !s->ranks[q].ended &&
                s->ranks[q].injected_kind == FB__INJECT_HANG) {
                f->rank = q;
                f->step = g->beats[q].have ? g->beats[q].step : -1;
                snprintf(f->injected, sizeof f->injected, "%s", s->ranks[q].injected);
                snprintf(f->detail, sizeof f->detail, "rank %d on %s recorded the hang "
                         "it injected; rank %d was the first found silent (node watcher)",
                         q, node_of_rank(s, q), r);
                return;
            }
        f->by_silence = 1;
        return;
    }
}

int fb__sup_slurm_defer_step_end(fb__sup *s)
{
    if (!any_unproven(s))
        return 0;
    s->slurm->step_end_deferred = 1;
    return 1;
}

void fb__sup_slurm_on_failure(fb__sup *s)
{
    struct fb__sup_slurm *g = s->slurm;
    fb__sup_failure *f = &s->fail;
    if (!g || f->launch_error)
        return;
    /* srun could not start the tasks on a node of this attempt (the
     * node was killed since the last failure, Slurm not knowing yet):
     * that node is lost, not the job's fault; the next attempt takes a
     * spare instead of failing there again.  Also when a rank's end came
     * first: srun kills the tasks it did start, and a rank on this host
     * ends through its pidfd, unheld (end_held covers the others).
     * Slurm is asked which nodes are gone only when no rank is blamed. */
    if (f->kind != FB__SUP_FAIL_NODE_FAILURE && !s->o->mpirun) {
        launch_fail lf;
        if (srun_launch_failed(s, f->rank < 0, &lf) >= 0)
            set_launch_lost(s, &lf);
    }
    if (f->kind == FB__SUP_FAIL_NODE_FAILURE && g->lost >= 0) {
        /* A lost node is left out; it is taken back only by a passing
         * health check at a later launch (recheck_lost), never without. */
        char why[256];
        if (g->lost_launch)
            snprintf(why, sizeof why, "firebreak: node lost (srun could not "
                     "launch tasks there)");
        else
            snprintf(why, sizeof why, "firebreak: node lost (its watcher silent "
                     "for %.0f s)", (double)(f->detected_ns - f->occurred_ns) / 1e9);
        g->suspect = g->lost;
        char at[32]; /* a launch that failed: before any step */
        snprintf(g->suspect_why, sizeof g->suspect_why, "node_failure %s",
                 fb__sup_step_words(at, sizeof at, f->step, 0));
        int refused = g->lost_refused;
        for (int a = -1; a < g->nalso_lost; a++) {
            int i = a < 0 ? g->lost : g->also_lost[a];
            if (refused) /* each in Slurm's word for it */
                snprintf(why, sizeof why, "firebreak: node lost (Slurm says %s)",
                         g->nodes[i].state);
            exclude_node(s, i, why);
            g->nodes[i].lost = 1;
            g->nodes[i].lost_attempt = s->attempt;
            fb__sup_nodemem_on_node_lost(s, g->nodes[i].name); /* its memory */
        }
        return;
    }
    if (f->rank < 0 && !s->o->mpirun) { /* srun's tasks are the ranks */
        int task;
        char what[200];
        if (srun_first_end(g, &task, what, sizeof what) == 0 && task >= 0 &&
            task < s->world) {
            f->rank = task;
            snprintf(f->detail, sizeof f->detail, "rank %d: %s (srun)", task, what);
            /* A rank without a segment (a plain PyTorch script) ends
             * unseen by its watcher: srun's words are all there is. */
            int sig = srun_signal(what);
            if (sig) {
                f->kind = FB__SUP_FAIL_CRASH;
                f->signal = sig;
                f->has_exit_code = 0;
            }
        }
    }
    if (f->rank < 0 || f->rank >= s->world)
        return;
    /* A hang's culprit named by the flight recorder on another host: its
     * step is the last its watcher reported. */
    if (f->kind == FB__SUP_FAIL_HANG && !s->ranks[f->rank].seg && f->step < 0 &&
        g->beats[f->rank].have)
        f->step = g->beats[f->rank].step;
    const char *node = node_of_rank(s, f->rank);
    size_t l = strlen(f->detail);
    snprintf(f->detail + l, sizeof f->detail - l, " on %s", node);
    g->suspect = node_index(g, node);
    char at[32];
    snprintf(g->suspect_why, sizeof g->suspect_why, "%s of rank %d %s",
             fb__sup_fail_kind_name(f->kind), f->rank,
             fb__sup_step_words(at, sizeof at, f->step, 0));
}
