/*
 * launch.c -- starting an attempt's processes.
 *
 * local:  one shim + rank per rank, with torchrun's environment contract
 *         (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK,
 *         MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, ...) plus
 *         FIREBREAK_*, TORCHELASTIC_ERROR_FILE per rank; output to
 *         logs/rank-<R>.log.
 * mpirun: one shim + mpirun; the FIREBREAK_* variables are exported with
 *         -x, libfirebreak-mpi.so is preloaded unless told not to, and
 *         each rank's output goes to logs/mpirun/1/rank.<R>/{stdout,stderr}.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/rundir.h"
#include "common/util.h"
#include "supervisor/ranklog.h"
#include "supervisor/sup.h"

extern char **environ;

typedef struct envb {
    char **v;
    int n, cap;
} envb;

static int env_set(envb *e, const char *name, const char *value)
{
    size_t nl = strlen(name);
    char *kv = malloc(nl + strlen(value) + 2);
    if (!kv)
        return -ENOMEM;
    sprintf(kv, "%s=%s", name, value);
    for (int i = 0; i < e->n; i++) {
        if (!strncmp(e->v[i], name, nl) && e->v[i][nl] == '=') {
            free(e->v[i]);
            e->v[i] = kv;
            return 0;
        }
    }
    if (e->n + 2 > e->cap) {
        int cap = e->cap ? e->cap * 2 : 128;
        char **nv = realloc(e->v, (size_t)cap * sizeof *nv);
        if (!nv) {
            free(kv);
            return -ENOMEM;
        }
        e->v = nv;
        e->cap = cap;
    }
    e->v[e->n++] = kv;
    e->v[e->n] = NULL;
    return 0;
}

static int env_set_default(envb *e, const char *name, const char *value)
{
    return getenv(name) ? 0 : env_set(e, name, value);
}

static void env_free(envb *e)
{
    for (int i = 0; i < e->n; i++)
        free(e->v[i]);
    free(e->v);
}

static int env_init(envb *e)
{
    memset(e, 0, sizeof *e);
    for (char **p = environ; *p; p++) {
        char *eq = strchr(*p, '=');
        if (!eq)
            continue;
        char name[256];
        size_t nl = (size_t)(eq - *p);
        if (nl >= sizeof name)
            continue;
        memcpy(name, *p, nl);
        name[nl] = '\0';
        /* The peer copies' key is the watchers' (slurm.c gives it to their
         * step), never the ranks': mpirun would put it on its command
         * line (-x), and a program may log its environment. */
        if (!strcmp(name, "FIREBREAK_PEER_KEY"))
            continue;
        if (env_set(e, name, eq + 1))
            return -ENOMEM;
    }
    return 0;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 29500;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = 29500;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* The MASTER_PORT of an attempt about to be prepared (its standby shims,
 * or its launch when none stood by): --master-port's for every attempt,
 * as torchrun keeps its own, else a free one, new for each. */
static int attempt_port(const fb__sup *s)
{
    return s->o->master_port > 0 ? s->o->master_port : free_port();
}

/* A program named python, python3, python3.11, ...: the one whose torch
 * can be asked for its version. */
static int is_python(const char *prog)
{
    const char *b = strrchr(prog, '/');
    b = b ? b + 1 : prog;
    if (strncmp(b, "python", 6))
        return 0;
    for (b += 6; *b; b++)
        if ((*b < '0' || *b > '9') && *b != '.')
            return 0;
    return 1;
}

#define TORCH_PROBE_TIMEOUT_MS 30000

/* Read torch/version.py where the interpreter would import torch from
 * (30 ms), not `import torch` (1.5-5 s at every job start); only a torch
 * without that file is imported. */
static const char TORCH_PROBE[] =
    "import sys, os, re, importlib.util as u\n"
    "s = u.find_spec('torch')\n"
    "if s is None or not s.origin: sys.exit(1)\n"
    "try:\n"
    "    t = open(os.path.join(os.path.dirname(s.origin), 'version.py')).read()\n"
    "    v = re.search(r'^__version__\\s*=\\s*[\\x27\"]([^\\x27\"]+)', t, re.M).group(1)\n"
    "except (OSError, AttributeError):\n"
    "    import torch; v = torch.__version__\n"
    "sys.stdout.write(str(v))\n";

/* torch's version, once per run, from the program's own interpreter
 * (TORCH_PROBE; a program that is not Python, or a Python without torch,
 * leaves it unknown: ""). */
static const char *probe_torch(fb__sup *s)
{
    if (s->torch_probed)
        return s->torch_version;
    s->torch_probed = 1;
    const char *prog = s->o->argv ? s->o->argv[0] : NULL;
    if (!prog || !is_python(prog))
        return s->torch_version;
    char *argv[] = {(char *)prog, "-c", (char *)TORCH_PROBE, NULL};
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    char out[64];
    int rc = fb__sup_run_capture(argv, out, sizeof out, devnull, TORCH_PROBE_TIMEOUT_MS);
    if (devnull >= 0)
        close(devnull);
    if (rc == 0 && out[0] && !strchr(out, '\n'))
        snprintf(s->torch_version, sizeof s->torch_version, "%s", out);
    char safe[64];
    fb__sup_log(s, "torch version of %s: %s", prog,
                rc == 0 ? fb__safe_text(safe, sizeof safe, out)
                : rc == -ETIMEDOUT ? "unknown (it did not answer within 30 s)"
                                   : "unknown (no torch)");
    return s->torch_version;
}

/* One flight-recorder setting under the spellings `names` asks for, unless
 * the user set it under either spelling (their choice, 0 included, stands). */
static int torch_fr_default(envb *e, int names, const char *old_name,
                            const char *new_name, const char *value)
{
    if (getenv(old_name) || getenv(new_name))
        return 0;
    int rc = 0;
    if (names & FB__SUP_TORCH_FR_OLD)
        rc |= env_set(e, old_name, value);
    if (names & FB__SUP_TORCH_FR_NEW)
        rc |= env_set(e, new_name, value);
    return rc;
}

/* The Python hooks (docs/pytorch.md, "Unmodified scripts"): the
 * package's _boot directory (a sitecustomize.py that chains to any other)
 * and the package itself first on PYTHONPATH, so that they load in a rank
 * whose environment lacks firebreak.  They stay idle until the rank
 * imports torch.  Without a copy of the package: a line in the log, no
 * hooks. */
static int python_hooks_env(fb__sup *s, envb *e)
{
    static int said;
    if (s->o->no_python_hooks)
        return 0;
    char dir[PATH_MAX], val[3 * PATH_MAX];
    if (fb__sup_python_dir(dir, sizeof dir)) {
        if (!said++)
            fb__sup_log(s, "no copy of the firebreak Python package next to this "
                        "firebreak (set FIREBREAK_PYTHON_DIR): Python ranks run "
                        "without hooks");
        return 0;
    }
    const char *old = getenv("PYTHONPATH");
    if (fb__fmt(val, sizeof val, "%s/firebreak/_boot:%s%s%s", dir, dir,
                old && old[0] ? ":" : "", old && old[0] ? old : ""))
        return 0;
    return env_set(e, "PYTHONPATH", val) | env_set(e, "FIREBREAK_PYTHON_HOOKS", "1");
}

/* Variables every rank gets, whatever the launcher. */
static int common_env(fb__sup *s, envb *e)
{
    char buf[PATH_MAX];
    int rc = 0;
    rc |= env_set(e, "FIREBREAK_JOB_ID", s->job_id);
    rc |= env_set(e, "FIREBREAK_RUN_DIR", s->run_dir);
    rc |= env_set(e, "FIREBREAK_CKPT_DIR", s->ckpt_dir);
    snprintf(buf, sizeof buf, "%d", s->attempt);
    rc |= env_set(e, "FIREBREAK_ATTEMPT", buf);
    rc |= env_set(e, "TORCHELASTIC_RESTART_COUNT", buf);
    snprintf(buf, sizeof buf, "%d", s->o->max_restarts);
    rc |= env_set(e, "TORCHELASTIC_MAX_RESTARTS", buf);
    rc |= env_set(e, "TORCHELASTIC_RUN_ID", s->job_id);
    /* As torchrun: several ranks on a node each get one OpenMP thread
     * unless the user chose (else every rank starts a thread per core). */
    if (s->o->nproc_per_node > 1)
        rc |= env_set_default(e, "OMP_NUM_THREADS", "1");
    snprintf(buf, sizeof buf, "%d", s->world);
    rc |= env_set(e, "FIREBREAK_WORLD_SIZE", buf);
    snprintf(buf, sizeof buf, "%d", (int)getpid());
    rc |= env_set(e, "FIREBREAK_SUPERVISOR_PID", buf);
    if (s->o->inject)
        rc |= env_set(e, "FIREBREAK_INJECT", s->o->inject);
    if (s->mem_dir[0]) { /* node-memory checkpoints (tiers.c) */
        rc |= env_set(e, "FIREBREAK_CKPT_MEM_DIR", s->mem_dir);
        snprintf(buf, sizeof buf, "%d", s->o->persist_every < 0 ? 1 : s->o->persist_every);
        rc |= env_set(e, "FIREBREAK_CKPT_PERSIST_EVERY", buf);
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)s->o->memory_ckpt_max);
        rc |= env_set(e, "FIREBREAK_CKPT_MEM_MAX", buf);
        if (s->slurm) { /* one directory per node (nodemem.c) */
            rc |= env_set(e, "FIREBREAK_CKPT_MEM_PER_NODE", "1");
            snprintf(buf, sizeof buf, "%lld", (long long)fb__sup_nodemem_restore_step(s));
            rc |= env_set(e, "FIREBREAK_CKPT_RESTORE_STEP", buf);
        }
    }
    if (s->o->fr_capacity > 0) {
        snprintf(buf, sizeof buf, "%d", s->o->fr_capacity);
        rc |= env_set(e, "FIREBREAK_FR_CAPACITY", buf);
    }
    /* PyTorch's own flight recorder: dump into the run on a timeout. */
    char torch_dir[PATH_MAX];
    fb__rundir_path(torch_dir, sizeof torch_dir, s->run_dir, FB__RUNDIR_FR_TORCH, s->attempt);
    fb__mkdir_p(torch_dir, 0755);
    snprintf(buf, sizeof buf, "%s/nccl_trace_rank_", torch_dir);
    const char *tv = probe_torch(s);
    int names = fb__sup_torch_fr_names(tv[0] ? tv : NULL);
    rc |= torch_fr_default(e, names, "TORCH_NCCL_TRACE_BUFFER_SIZE",
                           "TORCH_FR_BUFFER_SIZE", "2000");
    rc |= torch_fr_default(e, names, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE",
                           "TORCH_FR_DUMP_TEMP_FILE", buf);
    rc |= env_set_default(e, "TORCH_NCCL_DUMP_ON_TIMEOUT", "1");
    rc |= python_hooks_env(s, e);
    rc |= env_set(e, "MASTER_ADDR", s->o->master_addr ? s->o->master_addr : "127.0.0.1");
    snprintf(buf, sizeof buf, "%d", s->master_port);
    rc |= env_set(e, "MASTER_PORT", buf);
    return rc ? -ENOMEM : 0;
}

static int open_log(fb__sup *s, int rank, char *path, size_t size)
{
    if (fb__fmt(path, size, "%s/rank-%d.log", s->logs_dir, rank))
        return -ENAMETOOLONG;
    int fd = fb__open_append_regular(path, 0644);
    if (fd < 0)
        return fd;
    char mark[96];
    int n = snprintf(mark, sizeof mark, FB__RANK_LOG_MARK "%d, rank %d ===\n",
                     s->attempt, rank);
    (void)!write(fd, mark, (size_t)n);
    return fd;
}

/* ---- standby shims (docs/supervisor.md, "At scale") ----
 *
 * While an attempt runs, the next attempt's shims are forked ahead, a few
 * per pass of the watch loop, each with that attempt's environment,
 * output and error file, and wait on a pipe (proc.c, standby_wait).  At
 * the relaunch the launch writes one byte per shim instead of forking:
 * the forks (a copy of the supervisor's page tables each) leave the path
 * from the failure to the new ranks.  A standby shim dies with the
 * supervisor (parent-death SIGKILL) and is killed when the run ends or the
 * next attempt is not the one it was made for. */

/* How often and how long the standby forks: policy.c
 * (fb__sup_standby_phase and beside it). */

typedef struct standby_slot {
    pid_t shim;   /* 0: none (not forked, failed, gone, adopted) */
    int msg_fd;
    int log_fd;   /* the rank's log: the attempt's mark goes in at the launch */
    pid_t ahead;  /* its rank, exec'd and stopped (FB_SHIM_AHEAD), or 0 */
    int adopted;
} standby_slot;

struct fb__sup_standby {
    int attempt;       /* the attempt the shims are for */
    int world;
    int port;          /* its MASTER_PORT */
    int next;          /* ranks [0, next) were tried */
    int launched;      /* the launch took this many */
    uint64_t next_ns;  /* no pass before this */
    uint64_t fork_ns;  /* the supervisor's time in standby_fork, all passes */
    uint64_t fork_cpu_ns; /* of it, its CPU time */
    int go[2];
    envb env;          /* the attempt's common environment */
    standby_slot slot[];
};

/* A rank of the attempt that ended with exit code 0: the job is ending,
 * most likely without another attempt. */
static int clean_end_seen(const fb__sup *s)
{
    for (int i = 0; i < s->nunits; i++)
        if (s->units[i].ended && WIFEXITED(s->units[i].wstatus) &&
            WEXITSTATUS(s->units[i].wstatus) == 0)
            return 1;
    return 0;
}

/* Standby shims are made for the local launcher when another attempt may
 * come, until a rank ends well (clean_end_seen: then they go at once, so
 * that their exits overlap the other ranks' last steps); not where the warm pool starts the ranks (warm.c), not with
 * FIREBREAK_STANDBY_SHIMS=0, and without their execs ahead with
 * FIREBREAK_STANDBY_SHIMS=fork (to compare). */
static int standby_wanted(const fb__sup *s)
{
    const char *v = getenv("FIREBREAK_STANDBY_SHIMS");
    return s->o->launcher == FB__LAUNCH_LOCAL && s->o->argv && !clean_end_seen(s) &&
           s->attempt < s->o->max_restarts && !s->fail.set && !s->stop_signal &&
           s->nunits == s->world && !s->standby_failed &&
           !(v && !strcmp(v, "0")) && !fb__sup_warm_enabled(s);
}

/* Kill the standby shims not taken; `ran`: their attempt was launched
 * (its directories stay). */
static void standby_free(fb__sup *s, int ran)
{
    struct fb__sup_standby *b = s->standby;
    if (!b)
        return;
    s->standby = NULL;
    /* All killed first, then waited for: their exits overlap. */
    for (int r = 0; r < b->next; r++)
        if (b->slot[r].shim > 0) /* its rank has its parent-death SIGKILL */
            kill(b->slot[r].shim, SIGKILL);
    for (int r = 0; r < b->next; r++) {
        standby_slot *sl = &b->slot[r];
        if (sl->shim > 0)
            while (waitpid(sl->shim, NULL, 0) < 0 && errno == EINTR)
                ;
        if (sl->msg_fd >= 0)
            close(sl->msg_fd);
        if (sl->log_fd >= 0)
            close(sl->log_fd);
    }
    if (b->go[0] >= 0) {
        close(b->go[0]);
        close(b->go[1]);
    }
    /* common_env made the attempt's directory for torch's dumps: not
     * left behind empty for an attempt that never ran */
    char dir[PATH_MAX];
    if (!ran && !fb__rundir_path(dir, sizeof dir, s->run_dir, FB__RUNDIR_FR_TORCH, b->attempt))
        rmdir(dir);
    env_free(&b->env);
    free(b);
}

void fb__sup_standby_close(fb__sup *s)
{
    standby_free(s, 0);
}

int fb__sup_standby_keep(const fb__sup *s, pid_t *keep, int max)
{
    int n = 0;
    const struct fb__sup_standby *b = s->standby;
    for (int r = 0; b && r < b->next && n < max; r++)
        if (b->slot[r].shim > 0)
            keep[n++] = b->slot[r].shim;
    return n;
}

int fb__sup_standby_count(const fb__sup *s)
{
    const struct fb__sup_standby *b = s->standby;
    if (!b || b->attempt != s->attempt || b->world != s->world ||
        s->o->launcher != FB__LAUNCH_LOCAL)
        return 0;
    int n = 0;
    for (int r = 0; r < b->next; r++)
        n += b->slot[r].shim > 0;
    return n;
}

int fb__sup_standby_reaped(fb__sup *s, pid_t pid)
{
    struct fb__sup_standby *b = s->standby;
    for (int r = 0; b && r < b->next; r++) {
        standby_slot *sl = &b->slot[r];
        if (sl->shim == pid) { /* killed by someone: the launch forks one */
            sl->shim = 0;
            if (sl->msg_fd >= 0)
                close(sl->msg_fd);
            if (sl->log_fd >= 0)
                close(sl->log_fd);
            sl->msg_fd = sl->log_fd = -1;
            return 1;
        }
    }
    return 0;
}

static int rank_env(fb__sup *s, envb *e, int r, char *errfile, size_t size);

static struct fb__sup_standby *standby_new(fb__sup *s)
{
    struct fb__sup_standby *b =
        calloc(1, sizeof *b + (size_t)s->world * sizeof(standby_slot));
    if (!b)
        return NULL;
    b->attempt = s->attempt + 1;
    b->world = s->world;
    for (int r = 0; r < s->world; r++)
        b->slot[r].msg_fd = b->slot[r].log_fd = -1;
    if (pipe2(b->go, O_CLOEXEC)) {
        free(b);
        return NULL;
    }
    /* The next attempt's environment: its number and port. */
    int attempt = s->attempt, port = s->master_port;
    s->attempt = b->attempt;
    s->master_port = b->port = attempt_port(s);
    int rc = env_init(&b->env);
    if (!rc)
        rc = common_env(s, &b->env);
    s->attempt = attempt;
    s->master_port = port;
    s->standby = b; /* closed below on failure, with what it made */
    if (rc)
        fb__sup_standby_close(s);
    return rc ? NULL : b;
}

/* Fork rank r's standby shim; 0, or -errno (the launch forks it then). */
static int standby_fork(fb__sup *s, struct fb__sup_standby *b, int r)
{
    /* A rank whose output is teed to the console gets a fresh shim at
     * the launch: the tee's pipe belongs to the attempt. */
    if (fb__sup_rank_in_spec(s->o->console_ranks, r) == 1)
        return 0;
#ifdef FB_TEST_HOOKS
    const char *fail = getenv("FIREBREAK_TEST_STANDBY_FAIL");
    if (fail && atoi(fail) == r) /* test hook: as if this fork failed */
        return -EAGAIN;
#endif
    char errfile[PATH_MAX], log[PATH_MAX];
    int attempt = s->attempt;
    s->attempt = b->attempt; /* the error file's name holds the attempt */
    int rc = rank_env(s, &b->env, r, errfile, sizeof errfile);
    s->attempt = attempt;
    if (rc)
        return rc;
    /* The attempt's own error file (its name holds the attempt): none
     * yet, whatever an earlier run left. */
    unlink(errfile);
    if (fb__fmt(log, sizeof log, "%s/rank-%d.log", s->logs_dir, r))
        return -ENAMETOOLONG;
    int fd = fb__open_append_regular(log, 0644);
    if (fd < 0)
        return fd;
    const char *v = getenv("FIREBREAK_STANDBY_SHIMS");
    /* A set-user-ID or set-group-ID program exec'd while traced would run
     * without its privileges: it is exec'd at its turn. */
    struct stat st;
    int privileged = strchr(s->o->argv[0], '/') && stat(s->o->argv[0], &st) == 0 &&
                     (st.st_mode & (S_ISUID | S_ISGID));
    fb__spawn sp = {.argv = s->o->argv, .path = s->elf_path[0] ? s->elf_path : NULL,
                    .envp = b->env.v, .stdout_fd = fd,
                    .stderr_fd = fd, .go_rfd = b->go[0], .go_wfd = b->go[1],
                    .standby = 1,
                    .exec_ahead = !(v && !strcmp(v, "fork")) && !privileged};
    rc = fb__shim_spawn(&sp, &b->slot[r].shim, &b->slot[r].msg_fd);
    if (rc)
        close(fd);
    else
        b->slot[r].log_fd = fd;
    return rc;
}

void fb__sup_standby_tick(fb__sup *s)
{
    if (s->standby && s->standby->attempt == s->attempt + 1 && !s->fail.set &&
        clean_end_seen(s))
        fb__sup_standby_close(s);
    if (!standby_wanted(s))
        return;
    struct fb__sup_standby *b = s->standby;
    if (b && (b->attempt != s->attempt + 1 || b->world != s->world)) {
        fb__sup_standby_close(s);
        b = NULL;
    }
    if (!b && !(b = standby_new(s))) {
        s->standby_failed = 1;
        fb__sup_log(s, "cannot prepare the next attempt's shims: it forks them");
        return;
    }
    uint64_t t0 = fb__now_ns();
    if (b->next >= b->world || t0 < b->next_ns)
        return;
    int phase = fb__sup_standby_phase(s->attempt_ready_ns, t0);
    uint64_t budget = fb__sup_standby_budget_ns(phase);
    /* the supervisor's CPU and the shim server's, which forks for it */
    uint64_t c0 = fb__thread_cpu_ns() + fb__shim_server_cpu_ns();
#ifdef FB_TEST_HOOKS
    const char *stall = getenv("FIREBREAK_TEST_STANDBY_STALL_MS");
    if (stall) { /* test hook: as if preempted before the first fork */
        long ms = atol(stall);
        struct timespec ts = {ms / 1000, ms % 1000 * 1000000L};
        nanosleep(&ts, NULL);
    }
#endif
    /* At least one fork a pass: on a loaded host the thread can lose its
     * CPU between t0 and the first fork for longer than the budget, and a
     * pass that forked nothing would still wait (issue 14: 0 of 256
     * standing by after 8.6 s of training). */
    do {
        int r = b->next++;
        int rc = standby_fork(s, b, r);
        if (rc && !s->standby_said++)
            fb__sup_log(s, "rank %d: no standby shim (%s): the relaunch forks it",
                        r, fb_strerror(rc));
    } while (b->next < b->world && fb__now_ns() - t0 < budget);
    uint64_t t1 = fb__now_ns(),
             cpu = fb__thread_cpu_ns() + fb__shim_server_cpu_ns() - c0;
    b->fork_ns += t1 - t0;
    b->fork_cpu_ns += cpu;
    b->next_ns = t1 + fb__sup_standby_wait_ns(phase, t1 - t0, cpu);
}

int fb__sup_standby_due_ms(const fb__sup *s)
{
    const struct fb__sup_standby *b = s->standby;
    if (!b || b->next >= b->world || b->attempt != s->attempt + 1 ||
        !standby_wanted(s))
        return -1;
    uint64_t now = fb__now_ns();
    /* Steady training: the watch pass's own wake-ups serve (a wake-up of
     * its own would add a pass over every rank: at 1,024 ranks, 2.7% of a
     * core against 1.4%). */
    if (fb__sup_standby_phase(s->attempt_ready_ns, now) == FB__SUP_STANDBY_TRAINING)
        return -1;
    return b->next_ns <= now ? 0 : (int)((b->next_ns - now) / 1000000ull) + 1;
}

/* The port of the attempt about to launch: its standby shims' when they
 * are for it; else any standby goes. */
static int standby_port(fb__sup *s)
{
    struct fb__sup_standby *b = s->standby;
    if (b && (b->attempt != s->attempt || b->world != s->world ||
              s->o->launcher != FB__LAUNCH_LOCAL))
        fb__sup_standby_close(s);
    return s->standby ? s->standby->port : 0;
}

/* Rank r's standby shim becomes its unit: 1, or 0 (none: fork one). */
static int standby_adopt(fb__sup *s, struct fb__sup_standby *b, int r)
{
    if (!b || r >= b->next || b->slot[r].shim <= 0)
        return 0;
    standby_slot *sl = &b->slot[r];
    fb__shim_msg m;
    while (fb__shim_read(sl->msg_fd, &m) > 0)
        if (m.type == FB_SHIM_AHEAD)
            sl->ahead = m.pid;
    fb__sup_unit *u = &s->units[s->nunits++];
    memset(u, 0, sizeof *u);
    u->rank = r;
    u->shim = sl->shim;
    u->msg_fd = sl->msg_fd;
    /* Known to run the program once standby_go's SIGCONT is sent; without
     * it, its shim execs and says STARTED. */
    u->child = sl->ahead;
    s->ranks[r].pid = sl->ahead;
    sl->shim = 0;
    sl->msg_fd = -1;
    sl->adopted = 1;
    if (fb__fmt(s->ranks[r].log_path, sizeof s->ranks[r].log_path, "%s/rank-%d.log",
                s->logs_dir, r))
        s->ranks[r].log_path[0] = '\0';
    return 1;
}

/* Every shim of the launch is there: the adopted ones go.  The mark of
 * the attempt into each rank's log first, then SIGCONT to every rank
 * exec'd ahead (the supervisor's own, not one wake-up of each shim: those
 * follow, with one byte each, and start the ranks not exec'd ahead); what
 * is left of the standby is given up. */
static void standby_go(fb__sup *s, int adopted)
{
    struct fb__sup_standby *b = s->standby;
    if (!b)
        return;
    for (int r = 0; r < b->next; r++) {
        standby_slot *sl = &b->slot[r];
        if (!sl->adopted || sl->log_fd < 0)
            continue;
        char mark[96];
        int n = snprintf(mark, sizeof mark, FB__RANK_LOG_MARK "%d, rank %d ===\n",
                         b->attempt, r);
        (void)!write(sl->log_fd, mark, (size_t)n);
    }
    for (int r = 0; r < b->next; r++)
        if (b->slot[r].adopted && b->slot[r].ahead > 0)
            kill(b->slot[r].ahead, SIGCONT);
    char bytes[256];
    memset(bytes, 'g', sizeof bytes);
    for (int left = adopted; left > 0;) {
        ssize_t w = write(b->go[1], bytes, left < 256 ? (size_t)left : 256);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        left -= (int)w;
    }
    b->launched = adopted;
}

/* Once the launch is recorded: the ranks exec'd ahead back to SCHED_OTHER
 * (proc.c, standby_wait; every thread, in case one was started before
 * this), and the standby is over. */
void fb__sup_standby_after_launch(fb__sup *s)
{
    struct fb__sup_standby *b = s->standby;
    if (!b)
        return;
    if (b->attempt != s->attempt) /* not this launch's: the next one's */
        return;
    struct sched_param normal = {0};
    for (int r = 0; r < b->next; r++) {
        pid_t pid = b->slot[r].ahead;
        if (!b->slot[r].adopted || pid <= 0)
            continue;
        char dir[64];
        snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            pid_t tid = (pid_t)atoi(e->d_name);
            if (tid > 0 && sched_getscheduler(tid) == SCHED_BATCH)
                sched_setscheduler(tid, SCHED_OTHER, &normal);
        }
        if (d)
            closedir(d);
        else if (sched_getscheduler(pid) == SCHED_BATCH)
            sched_setscheduler(pid, SCHED_OTHER, &normal);
    }
    int adopted = b->launched, tried = b->next;
    double ms = (double)b->fork_ns / 1e6, cpu_ms = (double)b->fork_cpu_ns / 1e6;
    standby_free(s, 1);
    fb__sup_log(s, "attempt %d: %d of %d ranks' shims were standing by (%d forked "
                "ahead in %.1f ms, %.1f ms of it CPU: %.2f ms each)", s->attempt, adopted,
                s->world, tried, ms, cpu_ms, tried ? cpu_ms / tried : 0.0);
}

/* Rank r's own variables (torchrun's contract) into e; errfile gets its
 * TORCHELASTIC_ERROR_FILE, which the caller removes before the rank
 * starts (errorfile.c reads it on a failure; always ours, as under
 * torchrun, and fresh). */
static int rank_env(fb__sup *s, envb *e, int r, char *errfile, size_t size)
{
    char buf[32];
    int rc = 0;
    snprintf(buf, sizeof buf, "%d", r);
    rc |= env_set(e, "RANK", buf);
    rc |= env_set(e, "LOCAL_RANK", buf);
    rc |= env_set(e, "FIREBREAK_RANK", buf);
    rc |= env_set(e, "ROLE_RANK", buf);
    snprintf(buf, sizeof buf, "%d", s->world);
    rc |= env_set(e, "WORLD_SIZE", buf);
    rc |= env_set(e, "LOCAL_WORLD_SIZE", buf);
    rc |= env_set(e, "ROLE_WORLD_SIZE", buf);
    rc |= env_set(e, "ROLE_NAME", "default");
    rc |= env_set(e, "GROUP_RANK", "0");
    rc |= env_set(e, "GROUP_WORLD_SIZE", "1");
    if (!rc && !(rc = fb__sup_error_file_path(s, r, errfile, size)))
        rc = env_set(e, "TORCHELASTIC_ERROR_FILE", errfile);
    return rc;
}

/* Test hook: a pause after each shim of the launch, so that a test sees
 * whether ranks start before the last shim is forked (relaunch.sh). */
static int launch_pace_ms(void)
{
#ifdef FB_TEST_HOOKS
    const char *v = getenv("FIREBREAK_TEST_LAUNCH_PACE_MS");
    long long n;
    if (v && fb__parse_int(v, 0, 10000, &n) == 0)
        return (int)n;
#endif
    return 0;
}

static int launch_local(fb__sup *s)
{
    envb e;
    int rc = env_init(&e);
    if (!rc)
        rc = common_env(s, &e);
    /* At a relaunch the shims start their ranks once every shim is
     * forked: they wait for the end of this pipe (proc.h), and the last
     * rank runs sooner than if the execs competed with the forks.  At the
     * first launch each starts at once, as under a plain launcher: no old
     * ranks end beside the forks there, and the ranks' start-up overlaps
     * the loop (the job's wall time, docs/supervisor.md, "Launch"). */
    int go[2] = {-1, -1};
    if (s->attempt > 0 && pipe2(go, O_CLOEXEC))
        go[0] = go[1] = -1;
    int pace_ms = launch_pace_ms();
    /* Shims forked ahead for this attempt (below): the rank's unit, no
     * fork now; they start with the others. */
    struct fb__sup_standby *sb = s->standby;
    int adopted = 0;
    for (int r = 0; r < s->world && !rc; r++) {
        if (standby_adopt(s, sb, r)) {
            adopted++;
            continue;
        }
        char errfile[PATH_MAX];
        rc = rank_env(s, &e, r, errfile, sizeof errfile);
        if (rc)
            break;
        unlink(errfile);
        int fd = open_log(s, r, s->ranks[r].log_path, sizeof s->ranks[r].log_path);
        if (fd < 0) {
            rc = fd;
            break;
        }
        fb__sup_unit *u = &s->units[s->nunits];
        memset(u, 0, sizeof *u);
        u->rank = r;
        int out_fd = fd;
        if (fb__sup_rank_in_spec(s->o->console_ranks, r) == 1) {
            rc = fb__sup_tee_open(r, fd, &u->tee, &out_fd);
            if (rc) {
                close(fd);
                break;
            }
        }
        fb__spawn sp = {.argv = s->o->argv,
                        .path = s->elf_path[0] ? s->elf_path : NULL,
                        .envp = e.v, .cwd = NULL,
                        .stdout_fd = out_fd, .stderr_fd = out_fd,
                        .go_rfd = go[0], .go_wfd = go[1]};
        /* an interpreter of the warm pool (warm.c), else a fresh one */
        if (fb__sup_warm_take(s, r, e.v, out_fd, u))
            rc = fb__shim_spawn(&sp, &u->shim, &u->msg_fd);
        close(fd);
        if (out_fd != fd)
            close(out_fd);
        if (rc) {
            fb__sup_tee_close(s, u->tee);
            u->tee = NULL;
            break;
        }
        s->nunits++;
        if (pace_ms)
            nanosleep(&(struct timespec){pace_ms / 1000, pace_ms % 1000 * 1000000L}, NULL);
    }
    if (go[0] >= 0) { /* every shim is forked: go */
        close(go[1]);
        close(go[0]);
    }
    standby_go(s, adopted);
    fb__sup_warm_after_launch(s);
    env_free(&e);
    return rc;
}

static int launch_mpirun(fb__sup *s)
{
    envb e;
    int rc = env_init(&e);
    if (!rc)
        rc = common_env(s, &e);
    /* Open MPI's files of the job go to a directory of its own: the
     * shared-memory files (btl_vader_backing_directory, else in
     * /dev/shm) and mpirun's session directory (orte_tmpdir_base, else
     * $TMPDIR/ompi.<host>.<uid>/pid.<mpirun's pid>), so that ranks or an
     * mpirun killed before they could clean up (a stop past --grace, a
     * supervisor SIGKILLed) leave nothing once the attempt is over
     * (close_attempt removes it).  A value of the user's is kept. */
    char shm_dir[PATH_MAX], session[PATH_MAX];
    int vader = !getenv("OMPI_MCA_btl_vader_backing_directory"),
        tmpdir = !getenv("OMPI_MCA_orte_tmpdir_base");
    int made = !rc && (vader || tmpdir) &&
               fb__sup_mpi_shm_dir(s, shm_dir, sizeof shm_dir) == 0 &&
               (mkdir(shm_dir, 0700) == 0 || errno == EEXIST);
    if (made && !fb__sup_mpi_shm_dir_ours(shm_dir)) {
        fb__sup_log(s, "%s is not this user's own directory (another user made "
                    "it?): Open MPI's files go where it puts them by default",
                    shm_dir);
        made = 0;
    }
    if (made) {
        /* Whose it is, for the stale cleanup of a later run (segment.h). */
        char pidfile[PATH_MAX], pid[24];
        int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
        static int lock_fd = -1; /* alive across pid namespaces too */
        if (!fb__fmt(pidfile, sizeof pidfile, "%s/" FB__SEG_MPI_DIR_PID, shm_dir))
            (void)fb__write_file_atomic_held(pidfile, pid, (size_t)n, &lock_fd);
        if (vader)
            rc |= env_set(&e, "OMPI_MCA_btl_vader_backing_directory", shm_dir);
        if (tmpdir && !fb__fmt(session, sizeof session, "%s/session", shm_dir))
            rc |= env_set(&e, "OMPI_MCA_orte_tmpdir_base", session);
    }
    if (!rc && geteuid() == 0) {
        rc |= env_set(&e, "OMPI_ALLOW_RUN_AS_ROOT", "1");
        rc |= env_set(&e, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    }
    const char *preload = s->o->preload_fr ? fb__sup_fr_preload_path() : NULL;
    if (preload && !rc) {
        const char *old = getenv("LD_PRELOAD");
        char pl[PATH_MAX * 2];
        snprintf(pl, sizeof pl, "%s%s%s", preload, old ? ":" : "", old ? old : "");
        rc |= env_set(&e, "FIREBREAK_MPI_PRELOAD", pl);
    }
    if (rc) {
        env_free(&e);
        return -ENOMEM;
    }
    char np[16], outdir[PATH_MAX], ldp[PATH_MAX * 2 + 16];
    snprintf(np, sizeof np, "%d", s->world);
    fb__rundir_path(outdir, sizeof outdir, s->run_dir, FB__RUNDIR_MPIRUN_OUT, s->attempt);
    static const char *exported[] = {"FIREBREAK_JOB_ID", "FIREBREAK_RUN_DIR",
        "FIREBREAK_CKPT_DIR", "FIREBREAK_ATTEMPT", "FIREBREAK_WORLD_SIZE",
        "FIREBREAK_SUPERVISOR_PID", "FIREBREAK_INJECT", "FIREBREAK_FR_CAPACITY",
        "FIREBREAK_CKPT_MEM_DIR", "FIREBREAK_CKPT_PERSIST_EVERY", "FIREBREAK_CKPT_MEM_MAX",
        "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
        "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", NULL};
    const char *argv[256];
    int n = 0;
    argv[n++] = s->o->mpirun ? s->o->mpirun : "mpirun";
    argv[n++] = "--oversubscribe";
    argv[n++] = "--bind-to";
    argv[n++] = "none";
    argv[n++] = "-np";
    argv[n++] = np;
    argv[n++] = "--output-filename";
    argv[n++] = outdir;
    for (const char **x = exported; *x; x++) {
        int present = 0;
        size_t l = strlen(*x);
        for (int i = 0; i < e.n; i++)
            present |= !strncmp(e.v[i], *x, l) && e.v[i][l] == '=';
        if (present) {
            argv[n++] = "-x";
            argv[n++] = *x;
        }
    }
    if (preload) {
        const char *pl = NULL;
        for (int i = 0; i < e.n; i++)
            if (!strncmp(e.v[i], "FIREBREAK_MPI_PRELOAD=", 22))
                pl = e.v[i] + 22;
        snprintf(ldp, sizeof ldp, "LD_PRELOAD=%s", pl ? pl : preload);
        argv[n++] = "-x";
        argv[n++] = ldp;
    }
    for (char *const *a = s->o->mpirun_args; a && *a && n < 200; a++)
        argv[n++] = *a;
    for (char *const *a = s->o->argv; *a && n < 254; a++)
        argv[n++] = *a;
    argv[n] = NULL;

    char logpath[PATH_MAX];
    fb__rundir_path(logpath, sizeof logpath, s->run_dir, FB__RUNDIR_MPIRUN_LOG, 0);
    int fd = fb__open_append_regular(logpath, 0644);
    if (fd < 0) {
        rc = fd;
        env_free(&e);
        return rc;
    }
    for (int r = 0; r < s->world; r++)
        snprintf(s->ranks[r].log_path, sizeof s->ranks[r].log_path,
                 "%s/1/rank.%d/stderr", outdir, r);
    fb__spawn sp = {.argv = (char *const *)argv, .envp = e.v,
                    .stdout_fd = fd, .stderr_fd = fd};
    fb__sup_unit *u = &s->units[0];
    memset(u, 0, sizeof *u);
    u->rank = -1;
    rc = fb__shim_spawn(&sp, &u->shim, &u->msg_fd);
    close(fd);
    if (!rc)
        s->nunits = 1;
    env_free(&e);
    return rc;
}

char **fb__sup_env_common(fb__sup *s)
{
    envb e;
    if (env_init(&e) || common_env(s, &e)) {
        env_free(&e);
        return NULL;
    }
    return e.v;
}

void fb__sup_env_free(char **env)
{
    for (char **p = env; p && *p; p++)
        free(*p);
    free(env);
}

int fb__sup_mpi_shm_dir(const fb__sup *s, char *buf, size_t size)
{
    return fb__fmt(buf, size, "/dev/shm/fb.%s.ompi", s->job_id);
}

int fb__sup_mpi_shm_dir_ours(const char *dir)
{
    struct stat st;
    return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
           !(st.st_mode & 022);
}

int fb__sup_launch(fb__sup *s)
{
    s->master_port = standby_port(s);
    if (!s->master_port)
        s->master_port = attempt_port(s);
    s->nunits = 0;
    switch (s->o->launcher) {
    case FB__LAUNCH_LOCAL:
        return launch_local(s);
    case FB__LAUNCH_MPIRUN:
        return launch_mpirun(s);
    case FB__LAUNCH_SLURM:
        return fb__sup_launch_slurm(s);
    default:
        return -ENOTSUP;
    }
}
