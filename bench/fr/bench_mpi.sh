#!/bin/bash
# Interposer overhead on an 8-byte MPI_Allreduce between 2 local ranks:
# the same program with and without libfirebreak-mpi.so, alternating, in
# one run; the median of each is compared.
set -u
PRELOAD=$1 PROG=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
JOB=frbm$$
T=$(mktemp -d); trap 'rm -rf "$T"; rm -f /dev/shm/fb.$JOB.*' EXIT
one() {
  mpirun --oversubscribe --bind-to none -np 2 --mca btl_vader_backing_directory "$T" \
    -x FIREBREAK_JOB_ID=$JOB "$@" "$PROG" 100000 2>/dev/null | tail -n 1
}
plain=() pre=()
for i in 1 2 3 4 5; do
  plain+=("$(one)")
  pre+=("$(one -x LD_PRELOAD="$PRELOAD")")
done
PYTHONPATH=$(dirname "$0")/.. python3 - "${plain[*]}" "${pre[*]}" <<'PY'
import statistics, sys
from result import target
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"MPI_Allreduce 8 B, 2 ranks, without interposer: {ma:8.1f} ns (baseline; runs {a})")
print(f"MPI_Allreduce 8 B, 2 ranks, with interposer:    {mb:8.1f} ns (runs {b})")
print(f"interposer adds {mb - ma:+.1f} ns per call (target <= 100), ratio {mb / ma:.3f}")
sys.exit(0 if target("fr_bench_mpi", "MPI interposer, 8-byte MPI_Allreduce, 2 ranks",
                     f"{mb - ma:+.1f} ns/call", f"without it {ma:.1f} ns",
                     "<= 100 ns", mb - ma <= 100) else 1)
PY
