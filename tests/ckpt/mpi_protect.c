/*
 * mpi_protect.c -- write-protect snapshots under real Open MPI: right after
 * fb_ckpt_save returns, while the writer's copy is held back
 * (FIREBREAK_CKPT_DRAIN_DELAY_MS), MPI writes into the protected tensor --
 * an in-place all-reduce, then a large message received into it.  The transfers must
 * succeed, and the checkpoint must hold the tensor as it was at save.
 *
 *   mpirun -np 2 mpi_protect DIR       (exit 0: ok, 77: no userfaultfd)
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/engine.h"
#include "firebreak/firebreak.h"

#define WORDS (2u << 20) /* 8 MiB of int32 */

static int32_t before(int rank, size_t i) { return (int32_t)(i * 7 + (size_t)rank * 1000003u); }

/*
 * Wait for the save; `writer` ranks must have had writes wait for the
 * held-back copy (want_step: that save's step, 0: no such check).  Then
 * restore: the checkpoint must hold the bytes as they were at save.
 */
static int check_saved(fb_ckpt *ck, int32_t *w, int rank, uint64_t want_step,
                       const char *what)
{
    int bad = 0;
    uint64_t saved_step = want_step ? want_step : 2;
    if (fb_ckpt_wait(ck))
        bad = 1;
    if (want_step && (!ck->last_protected || ck->last_faults == 0)) {
        fprintf(stderr, "rank %d, %s: the save was %s, %llu writes waited; MPI's "
                "writes should have met protected pages\n", rank, what,
                ck->last_protected ? "protected" : "copied",
                (unsigned long long)ck->last_faults);
        bad = 1;
    }
    MPI_Barrier(MPI_COMM_WORLD); /* complete: every rank's shard committed */
    uint64_t step = 0;
    if (fb_ckpt_restore(ck, &step) || step != saved_step) {
        fprintf(stderr, "rank %d, %s: restore failed (step %llu)\n", rank, what,
                (unsigned long long)step);
        return 1;
    }
    for (size_t i = 0; i < WORDS; i++)
        if (w[i] != before(rank, i)) {
            fprintf(stderr, "rank %d, %s: checkpoint word %zu is %d, wanted %d "
                    "(the snapshot saw MPI's write)\n", rank, what, i, w[i],
                    before(rank, i));
            return 1;
        }
    return bad;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size, bad = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 2 || size != 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np 2 mpi_protect DIR\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    fb_ckpt_options o;
    fb_ckpt_options_init(&o);
    o.dir = argv[1];
    o.rank = rank;
    o.world_size = size;
    o.snapshot = FB_CKPT_SNAPSHOT_PROTECT;
    fb_ckpt *ck = NULL;
    int have = fb_ckpt_open(&ck, &o) == 0, all = 0;
    MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        if (rank == 0)
            fprintf(stderr, "mpi_protect: userfaultfd refused here; skipped\n");
        MPI_Finalize();
        return 77;
    }
    int32_t *w = malloc(WORDS * sizeof *w), *msg = malloc(WORDS / 2 * sizeof *msg);
    for (size_t i = 0; i < WORDS; i++)
        w[i] = before(rank, i);
    for (size_t i = 0; i < WORDS / 2; i++)
        msg[i] = (int32_t)(i ^ 0x5a5a5a5au);
    int64_t shape[1] = {WORDS};
    if (fb_ckpt_register(ck, "w", FB_DTYPE_I32, 1, shape, w))
        MPI_Abort(MPI_COMM_WORLD, 1);

    /* 1: both ranks sum the whole tensor in place right after save. */
    setenv("FIREBREAK_CKPT_DRAIN_DELAY_MS", "400", 1);
    if (fb_ckpt_save(ck, 1))
        MPI_Abort(MPI_COMM_WORLD, 1);
    if (MPI_Allreduce(MPI_IN_PLACE, w, (int)WORDS, MPI_INT32_T, MPI_SUM,
                      MPI_COMM_WORLD) != MPI_SUCCESS) {
        fprintf(stderr, "rank %d: in-place all-reduce failed\n", rank);
        bad = 1;
    }
    for (size_t i = 0; i < WORDS && !bad; i++)
        if (w[i] != (int32_t)((uint32_t)before(0, i) + (uint32_t)before(1, i))) {
            fprintf(stderr, "rank %d: word %zu after the all-reduce is wrong\n",
                    rank, i);
            bad = 1;
        }
    bad |= check_saved(ck, w, rank, 1, "in-place all-reduce");

    /* 2: rank 0 sends 4 MiB straight into rank 1's protected tensor (the
     * shared-memory transport writes it: one copy through the kernel where
     * CMA is allowed, else its own memcpy). */
    if (fb_ckpt_save(ck, 2))
        MPI_Abort(MPI_COMM_WORLD, 1);
    int rc = rank == 0
        ? MPI_Send(msg, (int)(WORDS / 2), MPI_INT32_T, 1, 7, MPI_COMM_WORLD)
        : MPI_Recv(w, (int)(WORDS / 2), MPI_INT32_T, 0, 7, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS || (rank == 1 && memcmp(w, msg, WORDS / 2 * sizeof *w))) {
        fprintf(stderr, "rank %d: the message into the protected tensor failed\n",
                rank);
        bad = 1;
    }
    bad |= check_saved(ck, w, rank, rank == 1 ? 2 : 0, "received message");
    unsetenv("FIREBREAK_CKPT_DRAIN_DELAY_MS");
    fb_ckpt_close(ck);
    free(w);
    free(msg);
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank == 0)
        printf("%s\n", any ? "FAIL" : "ok: MPI wrote into protected tensors; "
                                      "the checkpoint kept the saved bytes");
    return any ? 1 : 0;
}
