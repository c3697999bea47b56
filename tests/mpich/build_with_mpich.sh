#!/usr/bin/env bash
# The MPI interposer (libfirebreak-mpi.so) and the MPI trainer keep building
# against MPICH, not only Open MPI: configure a scratch build with MPICH's
# compiler wrapper, build both, and check what they link.
set -euo pipefail
SRC=$1
MPICC=$(command -v mpicc.mpich || true)
if [ -z "$MPICC" ]; then
    echo "SKIP: MPICH is not installed (scripts/deps.sh installs libmpich-dev)"
    exit 0
fi
T=$(mktemp -d /tmp/fb-mpich.XXXXXX)
trap 'rm -rf "$T"' EXIT
cmake -S "$SRC" -B "$T" -DCMAKE_BUILD_TYPE=Release -DMPI_C_COMPILER="$MPICC" >"$T/configure.log" 2>&1 \
    || { tail -20 "$T/configure.log"; echo "FAIL: configure with MPICH"; exit 1; }
grep -q "Found MPI_C: .*mpich" "$T/configure.log" || { echo "FAIL: CMake did not pick MPICH"; exit 1; }
cmake --build "$T" -j2 --target firebreak_mpi fb-train-mlp >"$T/build.log" 2>&1 \
    || { grep -E "error|warning" "$T/build.log" | head -20; echo "FAIL: build against MPICH"; exit 1; }
# Whole outputs first: with pipefail, `cmd | grep -q` fails when grep stops
# reading early.
libs=$(ldd "$T/libfirebreak-mpi.so")
syms=$(nm -D --defined-only "$T/libfirebreak-mpi.so")
grep -q libmpich <<<"$libs" || { echo "FAIL: interposer not linked to MPICH"; exit 1; }
grep -Eq " MPI_Allreduce(@|$)" <<<"$syms" \
    || { echo "FAIL: interposer does not define MPI_Allreduce"; exit 1; }
echo "ok: libfirebreak-mpi.so and fb-train-mlp build and link against MPICH"
