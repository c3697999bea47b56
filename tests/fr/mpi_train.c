/*
 * mpi_train.c -- a small MPI "trainer" for the interposer tests: per step a
 * world all_reduce, an all_reduce in a split half-communicator, a
 * non-blocking all_reduce and a ring exchange with Isend/Irecv, then
 * fb_step().  FIREBREAK_INJECT="hang:rank=2,step=5" makes rank 2 stop.
 *
 *   mpi_train [STEPS]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "firebreak/firebreak.h"

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 10;
    MPI_Init(&argc, &argv);
    fb_init(); /* harmless when the interposer already did it */
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank / 2, rank, &half);
    double x = rank, y = 0, z = 0;
    float sbuf[4] = {0}, rbuf[4];
    for (int step = 1; step <= steps; step++) {
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(&x, &z, 1, MPI_DOUBLE, MPI_MAX, half);
        MPI_Request r[2];
        MPI_Iallreduce(&x, &z, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r[0]);
        MPI_Wait(&r[0], MPI_STATUS_IGNORE);
        MPI_Irecv(rbuf, 4, MPI_FLOAT, (rank + size - 1) % size, 7, MPI_COMM_WORLD, &r[0]);
        MPI_Isend(sbuf, 4, MPI_FLOAT, (rank + 1) % size, 7, MPI_COMM_WORLD, &r[1]);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        fb_step((uint64_t)step);
    }
    MPI_Comm_free(&half);
    if (rank == 0)
        printf("mpi_train: %d steps done (%g)\n", steps, y);
    MPI_Finalize();
    return 0;
}
