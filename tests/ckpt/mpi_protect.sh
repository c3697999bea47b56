#!/usr/bin/env bash
# mpi_protect under real Open MPI, 2 ranks on this node (tests/ckpt/mpi_protect.c).
set -u
PROG=$1
# The writer's copy is held back by a test hook (FIREBREAK_CKPT_DRAIN_DELAY_MS).
[ "${FB_TEST_HOOKS:-ON}" = ON ] ||
    { echo "skipped: built without the checkpoint test hooks (FB_TEST_HOOKS)"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
timeout -k 5 120 mpirun --oversubscribe --bind-to none -np 2 \
    --mca btl_vader_backing_directory "$T" -x ASAN_OPTIONS=detect_leaks=0 \
    "$PROG" "$T/ck" >"$T/out" 2>"$T/err"
rc=$?
cat "$T/out"
if [ $rc = 77 ] || grep -q "userfaultfd refused" "$T/err"; then
    echo "skipped: userfaultfd refused here"; exit 77
fi
[ $rc = 0 ] || { echo "FAIL: mpirun exited $rc"; tail -20 "$T/err"; exit 1; }
grep -q '^ok:' "$T/out" || { echo "FAIL: no ok line"; tail -20 "$T/err"; exit 1; }
