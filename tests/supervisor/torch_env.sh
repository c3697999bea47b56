#!/usr/bin/env bash
# PyTorch's flight-recorder variables under the spelling the rank's torch
# reads: TORCH_FR_* from torch 2.7 on, TORCH_NCCL_* before, both when the
# version is unknown (the program is not a Python interpreter, or has no
# torch); a setting the user made under either spelling stands.
source "$(dirname "$0")/lib.sh"

# names PROGRAM... : the rank's TORCH_FR_BUFFER_SIZE and
# TORCH_NCCL_TRACE_BUFFER_SIZE, as "new=<v> old=<v>" ("-" when unset).
names() {
    rm -rf runs
    "$FB" run --nproc-per-node 1 --max-restarts 0 -- "$@" >/dev/null 2>err.txt ||
        fail "run $*: $(tail -3 err.txt)"
    grep -o 'new=[^ ]* old=[^ ]*' "$(run_dir)/logs/rank-0.log" | head -1
}
SHOW='echo new=${TORCH_FR_BUFFER_SIZE:--} old=${TORCH_NCCL_TRACE_BUFFER_SIZE:--}'

# A fake interpreter named like Python: answers the probe with its version.
fake() { # NAME VERSION
    printf '#!/bin/bash\n# %s\nif [ "$1" = -c ]; then case "$2" in *torch.__version__*) printf %%s "%s"; exit 0;; esac; fi\n%s\n' \
        "$TAG" "$2" "$SHOW" >"$T/$1"
    chmod +x "$T/$1"
}
fake python3.99 2.8.0+cu126
[ "$(names "$T/python3.99" -c x)" = "new=2000 old=-" ] || fail "torch 2.8: $(names "$T/python3.99" -c x)"
grep -q "torch version of .*python3.99: 2.8.0+cu126" err.txt || fail "probe not logged: $(cat err.txt)"
fake python 2.6.0
[ "$(names "$T/python" -c x)" = "new=- old=2000" ] || fail "torch 2.6: $(names "$T/python" -c x)"
# Not Python: unknown, both spellings.
[ "$(names bash -c "$SHOW # $TAG")" = "new=2000 old=2000" ] || fail "not python: $(names bash -c "$SHOW")"
# The user's own setting, under the other spelling, stands alone.
[ "$(TORCH_NCCL_TRACE_BUFFER_SIZE=0 names "$T/python3.99" -c x)" = "new=- old=0" ] ||
    fail "user's TORCH_NCCL_TRACE_BUFFER_SIZE=0 overridden"
# Debian's torch 1.13, asked for real.
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    [ "$(names /usr/bin/python3 -c "import os; print('new=%s old=%s' % (os.environ.get('TORCH_FR_BUFFER_SIZE', '-'), os.environ.get('TORCH_NCCL_TRACE_BUFFER_SIZE', '-')))  # $TAG")" = "new=- old=2000" ] ||
        fail "torch 1.13: $(cat "$(run_dir)/logs/rank-0.log")"
fi
# torchrun's contract beyond the ranks: ROLE_WORLD_SIZE and ROLE_NAME, and
# OMP_NUM_THREADS=1 with several ranks on the node unless the user set it
# (said once in the log); one rank keeps the machine's default.
omp() { # NPROC [ENV...]: rank 0's "omp=<v> role=<size>/<name>"
    local n=$1
    shift
    rm -rf runs
    env "$@" "$FB" run --nproc-per-node "$n" --max-restarts 0 -- bash -c \
        "echo omp=\${OMP_NUM_THREADS:--} role=\$ROLE_WORLD_SIZE/\$ROLE_NAME # $TAG" >/dev/null 2>err.txt ||
        fail "run omp $n: $(tail -3 err.txt)"
    grep -o 'omp=.*' "$(run_dir)/logs/rank-0.log" | head -1
}
[ "$(omp 2 -u OMP_NUM_THREADS)" = "omp=1 role=2/default" ] || fail "2 ranks: $(omp 2 -u OMP_NUM_THREADS)"
grep -q "OMP_NUM_THREADS=1 for every rank, as torchrun" err.txt || fail "OMP_NUM_THREADS not said: $(head -3 err.txt)"
[ "$(omp 2 OMP_NUM_THREADS=3)" = "omp=3 role=2/default" ] || fail "the user's OMP_NUM_THREADS: $(omp 2 OMP_NUM_THREADS=3)"
grep -q "OMP_NUM_THREADS=1 for every" err.txt && fail "OMP_NUM_THREADS said though the user set it"
[ "$(omp 1 -u OMP_NUM_THREADS)" = "omp=- role=1/default" ] || fail "1 rank: $(omp 1 -u OMP_NUM_THREADS)"
ok "TORCH_FR_* / TORCH_NCCL_* chosen by the rank's torch version; torchrun's ROLE_* and OMP_NUM_THREADS"
