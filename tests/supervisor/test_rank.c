/*
 * test_rank.c -- a minimal rank for supervisor tests: attaches, steps with a
 * sleep, optionally leaves a setsid() grandchild behind (orphan tests),
 * optionally ignores SIGTERM (escalation tests).  No checkpoints: each
 * attempt starts from step 1, and prints "done" at the end.
 *
 *   fb-test-rank [--steps N] [--sleep-ms M] [--spawn-child] [--ignore-term]
 *                [--exit-code C] [--abort-after-finalize RANK]
 *                [--init-sleep-ms M] [--early-exit RANK:CODE:LINGER_MS]
 *                [--sdc SKEW_RANK] [--term-record] [--teardown RANK:MS]
 *                [--extra-steps RANK:N] [--leave-open]
 *
 * --teardown: that rank takes MS after fb_finalize before it exits, as a
 * slow (or, with a large MS, hung) teardown would (supervisor_timeouts_status:
 * --exit-timeout).  --extra-steps: that rank takes N steps more than the
 * others (a rank with more work, which the others' teardown waits out).
 * --leave-open: the checkpoint handle is not closed: its last save, still
 * being written, is the library's exit handler's to wait for.
 *
 * --early-exit: that rank exits with CODE at step 3, and its process lingers
 * LINGER_MS after firebreak has recorded the exit (it writes
 * <run_dir>/lingering.RANK then); every rank writes <run_dir>/pid.RANK.
 *
 * --sdc: every rank registers two zeroed tensors for the SDC check (8 KiB
 * and 4 KiB) and checks after each step; SKEW_RANK registers a third of
 * 100 bytes before them, so none of its pieces is one the others publish
 * (supervisor_sdc_summary: the pieces the supervisor cannot compare).
 *
 * --term-record: on SIGTERM, write <run_dir>/term.RANK, "from=PID
 * supervisor=PID" (the sender, and FIREBREAK_SUPERVISOR_PID), and exit
 * 143 (supervisor_mpirun_launcher: who stops an mpirun rank).
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <firebreak/firebreak.h>

static long linger_ms;
static char term_path[4096];
static char term_sup[32]; /* FIREBREAK_SUPERVISOR_PID, read before the handler */

/* Decimal digits of v into buf (async-signal-safe); returns the length. */
static size_t put_int(char *buf, long v)
{
    char tmp[24];
    size_t n = 0, len = 0;
    if (v < 0)
        buf[len++] = '-', v = -v;
    do
        tmp[n++] = (char)('0' + v % 10);
    while ((v /= 10) && n < sizeof tmp);
    while (n)
        buf[len++] = tmp[--n];
    return len;
}

static void on_term(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    char buf[96];
    size_t len = 0;
    memcpy(buf, "from=", 5), len = 5;
    len += put_int(buf + len, si ? (long)si->si_pid : 0);
    memcpy(buf + len, " supervisor=", 12), len += 12;
    for (const char *sup = term_sup; *sup && len < sizeof buf - 2; sup++)
        buf[len++] = *sup;
    buf[len++] = '\n';
    int fd = open(term_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, buf, len);
        (void)w;
        close(fd);
    }
    _exit(128 + sig);
}

/* Registered before fb_init, so it runs after firebreak's exit record. */
static void linger(void)
{
    char path[4096];
    const char *dir = fb_run_dir();
    snprintf(path, sizeof path, "%s/lingering.%d", dir ? dir : ".", fb_rank());
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
    struct timespec ts = {linger_ms / 1000, (linger_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    long steps = 20, sleep_ms = 20, exit_code = 0, init_sleep_ms = 0;
    int spawn = 0, ignore_term = 0, abort_rank = -1, early_rank = -1, early_code = 0;
    int sdc_skew = -2; /* -2: no SDC check */
    int term_record = 0;
    int fork_exit = 0; /* a forked child finalizes and exits; the rank hangs */
    int teardown_rank = -1, extra_rank = -1, leave_open = 0;
    long teardown_ms = 0, extra_steps = 0;
    long ckpt_every = 0; /* restore, then save every N steps, counting from 1 */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = atol(argv[++i]);
        else if (!strcmp(argv[i], "--sleep-ms") && i + 1 < argc)
            sleep_ms = atol(argv[++i]);
        else if (!strcmp(argv[i], "--init-sleep-ms") && i + 1 < argc)
            init_sleep_ms = atol(argv[++i]);
        else if (!strcmp(argv[i], "--exit-code") && i + 1 < argc)
            exit_code = atol(argv[++i]);
        else if (!strcmp(argv[i], "--sdc") && i + 1 < argc)
            sdc_skew = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--ckpt-every-from-0") && i + 1 < argc)
            ckpt_every = atol(argv[++i]);
        else if (!strcmp(argv[i], "--spawn-child"))
            spawn = 1;
        else if (!strcmp(argv[i], "--term-record"))
            term_record = 1;
        else if (!strcmp(argv[i], "--fork-exit-then-hang"))
            fork_exit = 1;
        else if (!strcmp(argv[i], "--ignore-term"))
            ignore_term = 1;
        else if (!strcmp(argv[i], "--leave-open"))
            leave_open = 1;
        else if (!strcmp(argv[i], "--abort-after-finalize") && i + 1 < argc)
            abort_rank = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--teardown") && i + 1 < argc &&
                 sscanf(argv[++i], "%d:%ld", &teardown_rank, &teardown_ms) != 2) {
            fprintf(stderr, "--teardown RANK:MS\n");
            return 2;
        } else if (!strcmp(argv[i], "--extra-steps") && i + 1 < argc &&
                   sscanf(argv[++i], "%d:%ld", &extra_rank, &extra_steps) != 2) {
            fprintf(stderr, "--extra-steps RANK:N\n");
            return 2;
        } else if (!strcmp(argv[i], "--early-exit") && i + 1 < argc &&
                 sscanf(argv[++i], "%d:%d:%ld", &early_rank, &early_code,
                        &linger_ms) != 3) {
            fprintf(stderr, "--early-exit RANK:CODE:LINGER_MS\n");
            return 2;
        }
    }
    if (early_rank >= 0)
        atexit(linger);
    if (ignore_term)
        signal(SIGTERM, SIG_IGN);
    int rc = fb_init();
    if (rc)
        fprintf(stderr, "fb_init: %s\n", fb_strerror(rc));
    if (fb_rank() == extra_rank)
        steps += extra_steps;
    if (term_record) {
        snprintf(term_path, sizeof term_path, "%s/term.%d",
                 fb_run_dir() ? fb_run_dir() : ".", fb_rank());
        const char *sup = getenv("FIREBREAK_SUPERVISOR_PID");
        snprintf(term_sup, sizeof term_sup, "%s", sup ? sup : "");
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_term;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGTERM, &sa, NULL);
    }
    printf("rank %d of %d, attempt %d, attached=%d\n", fb_rank(), fb_world_size(),
           fb_restart_count(), fb_attached());
    fflush(stdout);
    if (early_rank >= 0 && fb_run_dir()) {
        char path[4096];
        snprintf(path, sizeof path, "%s/pid.%d", fb_run_dir(), fb_rank());
        FILE *f = fopen(path, "w");
        if (f) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
        }
    }
    if (fork_exit) {
        /* The rank steps a little; a helper forked from it ends cleanly
         * (fb_finalize, exit): the rank's own segment must not say the
         * rank finished; then the rank hangs. */
        for (uint64_t s = 1; s <= 3; s++) {
            fb_step(s);
            struct timespec t = {0, 50000000L};
            nanosleep(&t, NULL);
        }
        pid_t pid = fork();
        if (pid == 0) {
            fb_finalize();
            exit(0);
        }
        waitpid(pid, NULL, 0);
        for (;;)
            pause();
    }
    if (spawn) {
        pid_t pid = fork();
        if (pid == 0) {
            setsid();
            pid_t g = fork();
            if (g == 0) {
                const char *dir = fb_run_dir();
                if (dir) {
                    char path[4096];
                    snprintf(path, sizeof path, "%s/child.%d.%d", dir, fb_rank(),
                             fb_restart_count());
                    FILE *f = fopen(path, "w");
                    if (f) {
                        fprintf(f, "%d\n", (int)getpid());
                        fclose(f);
                    }
                }
                for (;;)
                    pause();
            }
            _exit(0);
        }
    }
    static unsigned char sdc_w[8192], sdc_v[4096], sdc_x[100];
    if (sdc_skew > -2) {
        if (fb_rank() == sdc_skew)
            fb_sdc_register("x", sdc_x, sizeof sdc_x);
        fb_sdc_register("w", sdc_w, sizeof sdc_w);
        fb_sdc_register("v", sdc_v, sizeof sdc_v);
    }
    /* Long start-up work before the first step (start-up timeout tests). */
    struct timespec init = {init_sleep_ms / 1000, (init_sleep_ms % 1000) * 1000000L};
    nanosleep(&init, NULL);
    /* A program that restores its state and then counts its steps from 1
     * again, as if it had started fresh (the supervisor warns of its
     * older checkpoints). */
    fb_ckpt *ck = NULL;
    static uint64_t ck_state[4];
    if (ckpt_every > 0) {
        uint64_t got = 0;
        int r = fb_ckpt_open(&ck, NULL);
        if (!r)
            r = fb_ckpt_register(ck, "state", FB_DTYPE_U64, 1, (const int64_t[]){4},
                                 ck_state);
        if (!r && (r = fb_ckpt_restore(ck, &got)) == FB_ENOCKPT)
            r = 0;
        if (r) {
            fprintf(stderr, "checkpoint: %s\n", fb_strerror(r));
            return 1;
        }
        printf("restored step %llu\n", (unsigned long long)got);
    }
    struct timespec ts = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000L};
    for (long s = 1; s <= steps; s++) {
        nanosleep(&ts, NULL);
        fb_step((uint64_t)s);
        ck_state[0] = (uint64_t)s;
        if (ck && s % ckpt_every == 0 && fb_ckpt_save(ck, (uint64_t)s))
            return 1;
        if (sdc_skew > -2)
            fb_sdc_check((uint64_t)s);
        if (s == 3 && fb_rank() == early_rank)
            exit(early_code);
    }
    if (early_rank >= 0)
        linger_ms = 0; /* only the early rank lingers */
    if (ck && !leave_open)
        fb_ckpt_close(ck);
    printf("done rank %d\n", fb_rank());
    fb_finalize();
    if (fb_rank() == abort_rank)
        abort(); /* a crash in exit handlers, after a clean finalize */
    if (fb_rank() == teardown_rank) {
        struct timespec t = {teardown_ms / 1000, (teardown_ms % 1000) * 1000000L};
        nanosleep(&t, NULL);
    }
    return (int)exit_code;
}
