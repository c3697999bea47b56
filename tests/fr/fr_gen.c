/*
 * fr_gen.c -- write flight-recorder scenarios as firebreak ring files
 * (rank-<R>.fbseg, the bytes of a live segment), through the real
 * recorder.  Times are shifted into the past afterwards so the evidence
 * looks as old as a hang the supervisor would snapshot.
 *
 *   fr_gen SCENARIO OUTDIR [RANKS [ENTRIES]]
 *
 * Scenarios: empty, ok, hang, type, size, dtype, p2p, p2p_stuck, subgroup,
 * straggler, wrapped, allgather, many (RANKS x ENTRIES all_reduces, for the
 * bench).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/util.h"
#include "fr/recorder.h"
#include "fr/ring.h"
#include "lib/segment.h"

#define WORLD_ID 0x1111111111111111ull
#define SUB_ID 0x2222222222222222ull

static const char *outdir, *scenario;
static char job[64];

typedef struct rk {
    fb__seg *seg;
    int rank;
} rk;

static fb__seg *open_rank(int rank, int world, uint32_t cap)
{
    fb__seg_create_args a = {.job_id = job, .attempt = 0, .rank = rank,
                             .world_size = world, .fr_capacity = cap};
    fb__seg *seg = NULL;
    int rc = fb__seg_create(&seg, &a);
    if (rc) {
        fprintf(stderr, "fr_gen: segment for rank %d: %s\n", rank, strerror(-rc));
        exit(2);
    }
    fb__fr_bind(seg);
    fb__fr_comm_register(WORLD_ID, 0, world, rank, 0, 1, "world");
    return seg;
}

/* Logical entry time of each event (us after the scenario's start), by
 * event index: every rank's clock is the same one, so only what the
 * scenario says makes a rank late. */
static uint64_t *tus;
static size_t ntus;
static uint64_t t0_wall_ns;

static void at(uint64_t handle, uint64_t t_us)
{
    if (handle && handle <= ntus)
        tus[handle - 1] = t_us + 1;
}

/* Place every event at t0 + its logical time - back_ns. */
static void finish_rank(fb__seg *seg, int rank, uint64_t back_ns)
{
    fb__seg_header *h = fb__seg_hdr(seg);
    char *area = (char *)fb__seg_base(seg) + h->fr_offset;
    uint32_t cs = fb__fr_comm_slots(h->fr_capacity);
    uint32_t rs = fb__fr_ring_slots(h->fr_capacity);
    fb__fr_event *ring = (fb__fr_event *)(area + (size_t)cs * FB__SEG_FR_ENTRY_SIZE);
    for (uint32_t i = 0; i < rs; i++) {
        fb__fr_event *e = &ring[i];
        if (!e->seq)
            continue;
        uint64_t idx = e->seq - 1;
        uint64_t t_us = idx < ntus && tus[idx] ? tus[idx] - 1 : idx * 100;
        uint64_t wall = t0_wall_ns + t_us * 1000ull - back_ns;
        e->begin_wall_ns = wall;
        e->begin_mono_ns = wall - (h->created_wall_ns - h->created_mono_ns);
        if (e->end_mono_ns)
            e->end_mono_ns = e->begin_mono_ns + 50000;
        e->seq = e->seq; /* unchanged: the copy stays consistent */
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/rank-%d.fbseg", outdir, rank);
    int rc = fb__seg_dump(seg, path);
    if (rc) {
        fprintf(stderr, "fr_gen: %s: %s\n", path, strerror(-rc));
        exit(2);
    }
    char name[FB__SEG_NAME_MAX];
    fb__seg_name(name, sizeof name, job, 0, rank);
    shm_unlink(name);
    fb__fr_bind(NULL);
    fb__seg_close(seg);
}

static uint64_t ar(fb__fr_comm *c, uint64_t count, int dtype, int done, int t_us)
{
    uint64_t hd = fb__fr_record(c, FB_OP_ALLREDUCE, dtype, 4, count, count, -1,
                                0, 0, FB__FR_STARTED);
    if (t_us)
        at(hd, (uint64_t)t_us);
    if (done)
        fb__fr_event_state(hd, FB__FR_COMPLETED);
    return hd;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: fr_gen SCENARIO OUTDIR [RANKS [ENTRIES]]\n");
        return 2;
    }
    scenario = argv[1];
    outdir = argv[2];
    int world = argc > 3 ? atoi(argv[3]) : 4;
    int entries = argc > 4 ? atoi(argv[4]) : 2000;
    snprintf(job, sizeof job, "frgen%d", (int)getpid());
    fb__mkdir_p(outdir, 0755);
    ntus = (size_t)entries + 4096;
    tus = calloc(ntus, sizeof *tus);
    t0_wall_ns = fb__wall_ns();
    const uint64_t back = 60ull * 1000000000ull; /* a minute ago */
    const char *s = scenario;

    /* "many" (16,384 rings for the bench) is written by one process per
     * CPU, each taking every nproc-th rank: the rings do not depend on
     * each other, and each process has its own segment names (its pid). */
    int nproc = 1, part = 0;
    if (!strcmp(s, "many") && world >= 64) {
        long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        nproc = ncpu < 1 ? 1 : ncpu > 8 ? 8 : (int)ncpu;
    }
    pid_t kids[8];
    int nkids = 0;
    for (int k = 1; k < nproc; k++) {
        pid_t pid = fork();
        if (pid < 0)
            break;
        if (pid == 0) {
            part = k;
            nkids = 0;
            snprintf(job, sizeof job, "frgen%d", (int)getpid());
            break;
        }
        kids[nkids++] = pid;
    }
    /* a fork that failed leaves its ranks to this process (r % nproc >
     * nkids) */

    for (int r = 0; r < world; r++) {
        if (nproc > 1 && r % nproc != part && !(part == 0 && r % nproc > nkids))
            continue;
        uint32_t cap = !strcmp(s, "wrapped") ? 64 : !strcmp(s, "many") ? 2048 : 0;
        fb__seg *seg = open_rank(r, world, cap);
        fb__fr_comm *w = fb__fr_comm_find(WORLD_ID);
        memset(tus, 0, ntus * sizeof *tus);
        if (!strcmp(s, "empty")) {
            /* attached, recorded nothing (a rank whose collectives firebreak
             * does not see: PyTorch's NCCL without the profiler plugin) */
        } else if (!strcmp(s, "ok")) {
            for (int i = 0; i < 10; i++)
                ar(w, 1024, FB_DTYPE_F32, 1, 0);
        } else if (!strcmp(s, "hang")) {
            for (int i = 0; i < 5; i++)
                ar(w, 1024, FB_DTYPE_F32, 1, 0);
            if (r != 2)
                ar(w, 1024, FB_DTYPE_F32, 0, 0);
        } else if (!strcmp(s, "type")) {
            for (int i = 0; i < 5; i++)
                ar(w, 1024, FB_DTYPE_F32, 1, 0);
            if (r == 2)
                fb__fr_record(w, FB_OP_BROADCAST, FB_DTYPE_F32, 4, 1024, 1024, 0,
                              0, 0, FB__FR_STARTED);
            else
                ar(w, 1024, FB_DTYPE_F32, 0, 0);
        } else if (!strcmp(s, "size")) {
            for (int i = 0; i < 5; i++)
                ar(w, 1024, FB_DTYPE_F32, 1, 0);
            ar(w, r == 1 ? 512 : 1024, FB_DTYPE_F32, 0, 0);
        } else if (!strcmp(s, "dtype")) {
            for (int i = 0; i < 5; i++)
                ar(w, 1024, FB_DTYPE_F32, 1, 0);
            ar(w, 1024, r == 3 ? FB_DTYPE_F16 : FB_DTYPE_F32, 1, 0);
        } else if (!strcmp(s, "allgather")) {
            uint64_t in = 256, out = r == 0 ? 512 : 256 * (uint64_t)world;
            uint64_t h = fb__fr_record(w, FB_OP_ALLGATHER, FB_DTYPE_F32, 4, in, out,
                                       -1, 0, 0, FB__FR_STARTED);
            fb__fr_event_state(h, FB__FR_COMPLETED);
        } else if (!strcmp(s, "p2p")) {
            /* 0 -> 1 twice; rank 1 posts only the first recv */
            for (int i = 0; i < 3; i++)
                ar(w, 8, FB_DTYPE_F32, 1, 0);
            if (r == 0) {
                uint64_t h = fb__fr_record(w, FB_OP_SEND, FB_DTYPE_F32, 4, 8, 8, 1, 7,
                                           FB__FR_F_P2P, FB__FR_STARTED);
                fb__fr_event_state(h, FB__FR_COMPLETED);
                fb__fr_record(w, FB_OP_SEND, FB_DTYPE_F32, 4, 8, 8, 1, 7,
                              FB__FR_F_P2P, FB__FR_STARTED);
            } else if (r == 1) {
                uint64_t h = fb__fr_record(w, FB_OP_RECV, FB_DTYPE_F32, 4, 8, 8, 0, 7,
                                           FB__FR_F_P2P, FB__FR_STARTED);
                fb__fr_event_state(h, FB__FR_COMPLETED);
            }
        } else if (!strcmp(s, "p2p_stuck")) {
            /* 0 -> 1 twice; both sides of the second entered, neither
             * completed: a matched pair stuck, no rank to blame */
            for (int i = 0; i < 3; i++)
                ar(w, 8, FB_DTYPE_F32, 1, 0);
            if (r <= 1) {
                fb_op op = r == 0 ? FB_OP_SEND : FB_OP_RECV;
                uint64_t h = fb__fr_record(w, op, FB_DTYPE_F32, 4, 8, 8, 1 - r, 7,
                                           FB__FR_F_P2P, FB__FR_STARTED);
                fb__fr_event_state(h, FB__FR_COMPLETED);
                fb__fr_record(w, op, FB_DTYPE_F32, 4, 8, 8, 1 - r, 7,
                              FB__FR_F_P2P, FB__FR_STARTED);
            }
        } else if (!strcmp(s, "subgroup")) {
            /* world: 0..3; sub: {2, 3}.  Rank 2 hangs before sub #3. */
            fb__fr_comm *sub = NULL;
            if (r >= 2)
                sub = fb__fr_comm_register(SUB_ID, WORLD_ID, 2, r - 2, 2, 1, "tp");
            for (int i = 0; i < 7; i++)
                ar(w, 64, FB_DTYPE_F32, 1, 0);
            if (sub) {
                ar(sub, 32, FB_DTYPE_BF16, 1, 0);
                ar(sub, 32, FB_DTYPE_BF16, 1, 0);
                if (r == 3)
                    ar(sub, 32, FB_DTYPE_BF16, 0, 0);
            } else {
                ar(w, 64, FB_DTYPE_F32, 0, 0);
            }
        } else if (!strcmp(s, "straggler")) {
            for (int i = 0; i < 20; i++) {
                int t = 1 + i * 100000 + (r == 3 ? 5000 : r * 3); /* rank 3: +5 ms */
                ar(w, 1024, FB_DTYPE_F32, 1, t);
            }
        } else if (!strcmp(s, "wrapped")) {
            for (int i = 0; i < 200; i++)
                ar(w, 16, FB_DTYPE_F32, 1, 0);
            if (r != 1)
                ar(w, 16, FB_DTYPE_F32, 0, 0);
        } else if (!strcmp(s, "many")) {
            /* every rank completes all but the last; rank world/3 never
             * enters the last one */
            for (int i = 0; i < entries - (r == world / 3); i++)
                ar(w, 1024, FB_DTYPE_F32, i < entries - 1, 0);
        } else {
            fprintf(stderr, "fr_gen: unknown scenario '%s'\n", s);
            return 2;
        }
        finish_rank(seg, r, back);
    }
    if (part != 0)
        _exit(0);
    int failed = 0;
    for (int k = 0; k < nkids; k++) {
        int st;
        while (waitpid(kids[k], &st, 0) < 0 && errno == EINTR)
            ;
        failed |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    }
    if (failed) {
        fprintf(stderr, "fr_gen: a writer process failed\n");
        return 2;
    }
    return 0;
}
