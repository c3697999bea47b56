/*
 * toy_train.c -- fb-toy-train: the smallest trainer that behaves like a
 * real one towards the supervisor, without MPI.
 *
 * Started by `firebreak run --launcher local` (torchrun's environment:
 * RANK, WORLD_SIZE, ...), each rank advances a small state vector -- 16
 * uint64 words mixed with the rank and the step, 16 floats derived from
 * them, and optionally a larger byte payload -- once per step, reports the
 * step with fb_step(), checkpoints every N steps and restores the newest
 * checkpoint at start.  The state after step N is a pure function of
 * (seed, rank, N), so a run that crashed and restarted any number of times
 * ends with the same per-rank hash as one that never failed: supervisor
 * tests compare $FIREBREAK_RUN_DIR/final_hash.rank-R across runs.
 *
 * --spawn-child forks a process that calls setsid() and sleeps forever,
 * the way a careless data-loader worker escapes its parent's process
 * group; its pid goes to <run dir>/child.rank-R.  The supervisor must still
 * leave nothing behind.
 */
#include <firebreak/firebreak.h>

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ex_util.h"

#define WORDS 16

typedef struct {
    uint64_t words[WORDS];
    float floats[WORDS];
    uint64_t step[1];
    uint8_t *payload;
    size_t payload_bytes;
} toy_state;

static int rank;

/* Slurm's warning before the time limit (sbatch --signal=USR1@N), forwarded
 * by the supervisor: save a final checkpoint and stop cleanly. */
static volatile sig_atomic_t usr1_received;

static void on_usr1(int sig)
{
    (void)sig;
    usr1_received = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
"usage: fb-toy-train [options]   (run under `firebreak run`, or by hand)\n"
"A toy trainer: deterministic per-rank state, one fb_step per step,\n"
"checkpoints every N steps, restore at start.\n"
"  --steps N        steps to run (default 100)\n"
"  --ckpt-every N   checkpoint every N steps, 0 never (default 10)\n"
"  --sleep-ms N     sleep per step (default 10)\n"
"  --seed N         seed of the state (default 1)\n"
"  --state-kb N     extra checkpointed payload per rank, KiB (default 0)\n"
"  --run-dir DIR    where final_hash.rank-R and child.rank-R go\n"
"                   (default $FIREBREAK_RUN_DIR; none: only print)\n"
"  --ckpt-dir DIR   checkpoint directory (default: the supervisor's, else\n"
"                   <run dir>/checkpoints; none: no checkpoints)\n"
"  --spawn-child    fork a child that calls setsid() and sleeps forever\n"
"Prints final_hash=<16 hex digits> for this rank.\n"
"SIGUSR1: save a checkpoint at the current step and exit 0.\n"
"Exit: 0 done, 1 failure, 2 usage error.\n");
}

static void mix_step(toy_state *s, uint64_t step, uint64_t rank_salt)
{
    for (int i = 0; i < WORDS; i++) {
        uint64_t x = s->words[i] ^ s->words[(i + 1) % WORDS] ^
                     (step * 0x9e3779b97f4a7c15ull) ^ rank_salt;
        s->words[i] = ex_splitmix64(&x);
        s->floats[i] = s->floats[i] * 0.5f + (float)(s->words[i] >> 40) * 1e-7f;
    }
    if (s->payload_bytes) {
        /* Touch a few bytes per step so the payload changes with time. */
        for (int k = 0; k < 4; k++) {
            uint64_t w = s->words[k];
            s->payload[w % s->payload_bytes] ^= (uint8_t)(w >> 56);
        }
    }
    s->step[0] = step;
}

static uint64_t state_hash(const toy_state *s)
{
    uint64_t h = ex_fnv1a64(EX_FNV_OFFSET, s->words, sizeof s->words);
    h = ex_fnv1a64(h, s->floats, sizeof s->floats);
    return ex_fnv1a64(h, s->payload, s->payload_bytes);
}

static int spawn_child(const char *run_dir)
{
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "fb-toy-train: rank %d: fork: %s\n", rank, strerror(errno));
        return -1;
    }
    if (pid == 0) {
        /* Default signal actions: libfirebreak's handlers, inherited from
         * the rank, must not record this process's death as the rank's. */
        for (int sig = 1; sig < 32; sig++)
            signal(sig, SIG_DFL);
        setsid();
        for (;;)
            pause();
    }
    if (run_dir) {
        char path[4096], line[32];
        snprintf(path, sizeof path, "%s/child.rank-%d", run_dir, rank);
        int n = snprintf(line, sizeof line, "%ld\n", (long)pid);
        int rc = ex_write_atomic(path, line, (size_t)n);
        if (rc) {
            fprintf(stderr, "fb-toy-train: cannot write %s: %s\n", path, strerror(-rc));
            return -1;
        }
    }
    printf("rank %d spawned child %ld (setsid)\n", rank, (long)pid);
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    long long steps = 100, ckpt_every = 10, sleep_ms = 10, seed = 1, state_kb = 0;
    const char *run_dir_opt = NULL, *ckpt_dir_opt = NULL;
    int spawn = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--spawn-child")) {
            spawn = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "fb-toy-train: unknown option or missing value: %s\n", a);
            return 2;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (!strcmp(a, "--steps"))
            rc = ex_parse_ll(a, v, 1, 1000000000, &steps);
        else if (!strcmp(a, "--ckpt-every"))
            rc = ex_parse_ll(a, v, 0, 1000000000, &ckpt_every);
        else if (!strcmp(a, "--sleep-ms"))
            rc = ex_parse_ll(a, v, 0, 3600000, &sleep_ms);
        else if (!strcmp(a, "--seed"))
            rc = ex_parse_ll(a, v, 0, INT64_MAX, &seed);
        else if (!strcmp(a, "--state-kb"))
            rc = ex_parse_ll(a, v, 0, 4 << 20, &state_kb);
        else if (!strcmp(a, "--run-dir"))
            run_dir_opt = v;
        else if (!strcmp(a, "--ckpt-dir"))
            ckpt_dir_opt = v;
        else {
            fprintf(stderr, "fb-toy-train: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (rc)
            return 2;
    }

    int rc = fb_init();
    if (rc)
        fprintf(stderr, "fb-toy-train: fb_init: %s (going on unrecorded)\n",
                fb_strerror(rc));
    rank = fb_rank();
    const char *run_dir = run_dir_opt ? run_dir_opt : fb_run_dir();
    if (!run_dir)
        run_dir = getenv("FIREBREAK_RUN_DIR");
    if (run_dir && !*run_dir)
        run_dir = NULL;
    if (run_dir && mkdir(run_dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "fb-toy-train: cannot create run directory %s: %s\n",
                run_dir, strerror(errno));
        return 1;
    }
    if (spawn && spawn_child(run_dir))
        return 1;

    toy_state s = {0};
    uint64_t seed_word = (uint64_t)seed;
    for (int i = 0; i < WORDS; i++)
        s.words[i] = ex_splitmix64(&seed_word);
    s.payload_bytes = (size_t)state_kb * 1024;
    s.payload = calloc(s.payload_bytes ? s.payload_bytes : 1, 1);
    if (!s.payload) {
        fprintf(stderr, "fb-toy-train: out of memory for --state-kb %lld\n", state_kb);
        return 1;
    }
    uint64_t rank_salt = ex_fnv1a64(EX_FNV_OFFSET, &rank, sizeof rank);

    /* Checkpoints: the supervisor's directory, else --ckpt-dir, else
     * <run dir>/checkpoints when the run directory came from elsewhere. */
    char ckpt_dir[4096];
    const char *dir = ckpt_dir_opt;
    if (!dir && !fb_attached() && run_dir) {
        snprintf(ckpt_dir, sizeof ckpt_dir, "%s/checkpoints", run_dir);
        dir = ckpt_dir;
    }
    fb_ckpt *ck = NULL;
    uint64_t start = 0;
    if (fb_attached() || dir) {
        fb_ckpt_options co;
        fb_ckpt_options_init(&co);
        co.dir = dir;
        rc = fb_ckpt_open(&ck, &co);
        const int64_t words[1] = {WORDS}, one[1] = {1},
                      bytes[1] = {(int64_t)s.payload_bytes};
        if (!rc)
            rc = fb_ckpt_register(ck, "state.words", FB_DTYPE_U64, 1, words, s.words);
        if (!rc)
            rc = fb_ckpt_register(ck, "state.floats", FB_DTYPE_F32, 1, words, s.floats);
        if (!rc)
            rc = fb_ckpt_register(ck, "state.step", FB_DTYPE_U64, 1, one, s.step);
        if (!rc && s.payload_bytes)
            rc = fb_ckpt_register(ck, "state.payload", FB_DTYPE_U8, 1, bytes, s.payload);
        if (rc) {
            fprintf(stderr, "fb-toy-train: rank %d: checkpoint setup in %s: %s\n",
                    rank, dir ? dir : "the run directory", fb_strerror(rc));
            return 1;
        }
        rc = fb_ckpt_restore(ck, &start);
        if (rc == FB_ENOCKPT) {
            start = 0;
        } else if (rc) {
            fprintf(stderr, "fb-toy-train: rank %d: restore failed: %s\n",
                    rank, fb_strerror(rc));
            return 1;
        } else if (s.step[0] != start) {
            fprintf(stderr, "fb-toy-train: rank %d: checkpoint %llu holds "
                    "state.step %llu\n", rank, (unsigned long long)start,
                    (unsigned long long)s.step[0]);
            return 1;
        }
    }
    printf("rank %d/%d %s step %llu\n", rank, fb_world_size(),
           start ? "resuming after" : "starting at", (unsigned long long)start);
    fflush(stdout);

    signal(SIGUSR1, on_usr1);
    for (uint64_t step = start + 1; step <= (uint64_t)steps; step++) {
        mix_step(&s, step, rank_salt);
        ex_sleep_ms(sleep_ms);
        fb_step(step);
        if (ck && ckpt_every && step % (uint64_t)ckpt_every == 0) {
            rc = fb_ckpt_save(ck, step);
            if (rc && rc != FB_EBUSY) {
                fprintf(stderr, "fb-toy-train: rank %d: save of step %llu: %s\n",
                        rank, (unsigned long long)step, fb_strerror(rc));
                return 1;
            }
        }
        if (usr1_received) {
            if (ck && !(ckpt_every && step % (uint64_t)ckpt_every == 0))
                rc = fb_ckpt_save(ck, step);
            if (ck && (rc = fb_ckpt_wait(ck)) != 0) {
                fprintf(stderr, "fb-toy-train: rank %d: final checkpoint at step "
                        "%llu: %s\n", rank, (unsigned long long)step, fb_strerror(rc));
                return 1;
            }
            printf("rank %d: SIGUSR1: saved checkpoint %llu, stopping\n", rank,
                   (unsigned long long)step);
            fflush(stdout);
            if (ck)
                fb_ckpt_close(ck);
            fb_finalize();
            free(s.payload);
            return 0;
        }
    }
    int status = 0;
    if (ck && (rc = fb_ckpt_wait(ck)) != 0) {
        fprintf(stderr, "fb-toy-train: rank %d: checkpoint save failed: %s\n",
                rank, fb_strerror(rc));
        status = 1;
    }
    uint64_t hash = state_hash(&s);
    printf("final_hash=%016llx\n", (unsigned long long)hash);
    fflush(stdout);
    if (run_dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/final_hash.rank-%d", run_dir, rank);
        if (ex_write_hash(path, hash))
            status = 1;
    }
    if (ck)
        fb_ckpt_close(ck);
    fb_finalize();
    free(s.payload);
    return status;
}
