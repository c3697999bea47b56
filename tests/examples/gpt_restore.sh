# examples/gpt/train.py without the supervisor:
#  1. 3 ranks by hand with torchrun's environment (Debian's
#     /usr/bin/python3): a fault-free run whose eval loss falls; a run whose
#     rank 1 is killed at step 47 (FIREBREAK_INJECT fires in firebreak.step
#     even unsupervised), then started again: it restores step 40 (20 where
#     rank 1 died before its asynchronous save of step 40 was committed: the
#     newest complete checkpoint) and ends with the same final_hash as the
#     fault-free run.  3 ranks, not 2: with
#     2 a float sum of gradients is the same in any order, with 3 it is not
#     (the example sums in fixed point).
#  2. under torchrun itself (PyPI torch 2.x in the venv scripts/deps.sh
#     makes, when it is there and matches the extension's python): the same
#     kill, torchrun tearing the group down, and a rerun restoring step 40 (20),
#     bit-identical to torchrun's fault-free run.
# Args: SCRIPT PY_PACKAGE_DIR SCRATCH_DIR
script=$1 pkgdir=$2
. "$(dirname "$0")/lib.sh" "$3"
py=/usr/bin/python3
venv=/opt/firebreak/torch-2.15.0
export PYTHONPATH=$pkgdir
"$py" -c 'import torch, firebreak' 2>/dev/null || { echo "SKIP: $py lacks torch or firebreak"; exit 77; }
args=(--steps 60 --ckpt-every 20 --eval-every 30 --log-every 20)

free_port() {
    "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# run_ranks TAG [env...]: 3 ranks in $T/TAG (its own ./checkpoints)
run_ranks() {
    local tag=$1 r
    shift
    mkdir -p "$T/$tag"
    export MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) WORLD_SIZE=3
    for r in 0 1 2; do
        (cd "$T/$tag" && env "$@" RANK=$r LOCAL_RANK=$r timeout -k 5 120 \
             "$py" "$script" "${args[@]}" >"rank-$r.log" 2>&1) &
        pids+=($!)
    done
}
full_hash() { sed -n 's/^final_hash=\([0-9a-f]\{64\}\) .*/\1/p' "$1" | tail -n 1; }
# newest_complete DIR RANKS: the newest step in DIR with every rank's shard
# committed (0: none).  The save of step 40 is asynchronous: rank 1, killed
# at step 47, may die before its shard is written (seen once in CI, under
# load), and then step 20 is the newest checkpoint there is, which the
# restart must take.
newest_complete() {
    local d best=0
    for d in "$1"/step-*; do
        [ -d "$d" ] || continue
        [ "$(ls "$d" | grep -c '^rank-[0-9]*\.safetensors$')" = "$2" ] && best=$((10#${d##*step-}))
    done
    echo "$best"
}
# newest_20_40 DIR RANKS: newest_complete, which must be 40 or 20 (said
# when 20), taken before the restart (which saves again)
newest_20_40() {
    local n
    n=$(newest_complete "$1" "$2")
    [ "$n" = 40 ] || [ "$n" = 20 ] || fail "newest complete checkpoint in $1: step $n, expected 40 or 20"
    [ "$n" = 40 ] || echo "note: step 40 was not committed when rank 1 died (its save was still writing): step 20 is the newest" >&2
    echo "$n"
}

run_ranks clean
wait_all
[ "$codes" = "0 0 0" ] || fail "fault-free run exit codes $codes: $(tail -n 5 "$T/clean/rank-0.log")"
want=$(full_hash "$T/clean/rank-0.log")
[ -n "$want" ] || fail "fault-free run printed no final_hash: $(tail -n 3 "$T/clean/rank-0.log")"
evals=$(sed -n 's/^step [0-9]* eval loss \([0-9.]*\)$/\1/p' "$T/clean/rank-0.log" | tr '\n' ' ')
"$py" -c 'import sys; a = [float(x) for x in sys.argv[1].split()]; sys.exit(not (len(a) == 2 and a[1] < a[0]))' "$evals" \
    || fail "eval loss did not fall: '$evals'"

# Rank 1 dies at step 47; the others wait in the next all_reduce until
# they are stopped (by the test here, by torchrun or firebreak run in real
# use).
run_ranks killed FIREBREAK_INJECT=kill:rank=1,step=47
wait "${pids[1]}"
c1=$?
kill -TERM "${pids[0]}" "${pids[2]}"
wait_all
[ "$c1" = 137 ] || fail "rank 1 exited $c1, expected 137 (SIGKILL): $(tail -n 3 "$T/killed/rank-1.log")"
grep -q "injecting fault kill:rank=1,step=47" "$T/killed/rank-1.log" || fail "the fault did not fire"
from=$(newest_20_40 "$T/killed/checkpoints" 3) || exit 1
run_ranks killed
wait_all
[ "$codes" = "0 0 0" ] || fail "restored run exit codes $codes: $(tail -n 5 "$T/killed/rank-0.log")"
grep -q "restored at step $from" "$T/killed/rank-0.log" ||
    fail "did not restore step $from, the newest complete: $(grep '^gpt:' "$T/killed/rank-0.log")"
got=$(full_hash "$T/killed/rank-0.log")
[ "$got" = "$want" ] || fail "killed at step 47 and restored: $got; fault-free: $want"
echo "ok: /usr/bin/python3, 3 ranks, killed at step 47 and restored from step $from: $got, as without faults"

# torchrun (torch 2.x) when the venv is ready and its python is the
# extension's (PYTHONPATH=$pkgdir holds a CPython extension for one version).
if [ ! -e "$venv/.firebreak-ready" ] ||
   ! "$venv/bin/python" -c 'import torch, firebreak' 2>/dev/null; then
    echo "note: no torch 2.x venv usable with $pkgdir; torchrun part not run"
    exit 0
fi
# torchrun makes a log directory under TMPDIR (torchelastic_*) and never
# removes it: each run's goes into its own directory here, removed with it.
touch "$T/.before-torchrun"
trun() { # TAG [env...]
    local tag=$1
    shift
    mkdir -p "$T/$tag"
    (cd "$T/$tag" && env "$@" TMPDIR="$T/$tag" timeout -k 5 180 "$venv/bin/torchrun" --nproc-per-node 2 \
         --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$(free_port)" \
         "$script" "${args[@]}" >out.log 2>&1)
}
trun tclean || fail "torchrun fault-free run exited $?: $(tail -n 5 "$T/tclean/out.log")"
want2=$(sed -n 's/^\(\[default0\]:\)\{0,1\}final_hash=\([0-9a-f]\{64\}\) .*/\2/p' "$T/tclean/out.log" | tail -n 1)
want2=${want2:-$(full_hash "$T/tclean/out.log")}
[ -n "$want2" ] || fail "torchrun printed no final_hash: $(tail -n 5 "$T/tclean/out.log")"
trun tkilled FIREBREAK_INJECT=kill:rank=1,step=47 && fail "torchrun with rank 1 killed exited 0"
from2=$(newest_20_40 "$T/tkilled/checkpoints" 2) || exit 1
trun tkilled || fail "torchrun restored run exited $?: $(tail -n 5 "$T/tkilled/out.log")"
grep -q "restored at step $from2" "$T/tkilled/out.log" || fail "torchrun rerun did not restore step $from2"
got2=$(full_hash "$T/tkilled/out.log")
[ "$got2" = "$want2" ] || fail "torchrun, killed and restored: $got2; fault-free: $want2"
left=$(find "${TMPDIR:-/tmp}" /tmp -maxdepth 1 -name 'torchelastic_*' -newer "$T/.before-torchrun" 2>/dev/null)
[ -z "$left" ] || fail "torchrun left its log directories outside the test's: $left"
echo "ok: torchrun ($("$venv/bin/python" -c 'import torch; print(torch.__version__)')), killed and restored: $got2, as without faults"
