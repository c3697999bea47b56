/*
 * mpi_allreduce.c -- time an 8-byte MPI_Allreduce loop (the interposer's
 * overhead benchmark runs it with and without libfirebreak-mpi.so).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int iters = argc > 1 ? atoi(argv[1]) : 200000;
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    double x = 1, y = 0;
    for (int i = 0; i < 1000; i++)
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++)
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double t1 = MPI_Wtime();
    if (rank == 0)
        printf("%.1f\n", (t1 - t0) / iters * 1e9);
    MPI_Finalize();
    return 0;
}
