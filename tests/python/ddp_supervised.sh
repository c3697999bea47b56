#!/usr/bin/env bash
# A DDP job (2 ranks, gloo) using firebreak.Checkpointer under `firebreak
# run`, killed twice by injected faults (rank 1 at step 23, then rank 0 at
# step 37 of the restarted attempt), ends with the same parameter hash as
# the same job run without faults; each restart resumed from the newest
# complete checkpoint (step 10 or 20, then 20 or 30: saves are asynchronous).
# Args: FIREBREAK_BINARY SOURCE_DIR PYTHON
source "$(dirname "$0")/../supervisor/lib.sh"
SRC=$2
PY=$3
"$PY" -c 'import torch, firebreak' 2>/dev/null || { echo "SKIP: $PY lacks torch or firebreak"; exit 77; }
cp "$SRC/examples/ddp_firebreak.py" "$T/ddp_$TAG.py"
final_hash() { grep -h '^final_hash=' "$1"/logs/rank-0.log | tail -1; }

mkdir clean faulty
(cd clean && "$FB" run --nproc-per-node 2 --json -- "$PY" "$T/ddp_$TAG.py" --steps 60 \
    >out.json 2>err.txt) || fail "fault-free run exited $?: $(tail -5 clean/err.txt)"
want=$(final_hash clean/runs/*/)
[ -n "$want" ] || fail "fault-free run printed no final_hash"

cd faulty
"$FB" run --nproc-per-node 2 --max-restarts 3 --json \
    --inject 'kill:rank=1,step=23' --inject 'kill:rank=0,step=37,attempt=1' \
    -- "$PY" "$T/ddp_$TAG.py" --steps 60 >out.json 2>err.txt \
    || fail "run with faults exited $?: $(tail -5 err.txt)"
[ "$(json_field out.json '["completed"]')" = True ] || fail "not completed: $(tail -1 out.json)"
[ "$(json_field out.json '["restarts"]')" = 2 ] || fail "restarts: $(tail -1 out.json)"
# Saves are asynchronous: the one of step 20 may still be in flight when
# rank 1 dies at step 23, but it was called after the one of step 10 was
# durable (a save waits for the previous one); so the first restart starts
# at 10 or 20, the second at 20 or 30 (depending on the load of the machine).
starts=$(grep -h '^start at step' runs/*/logs/rank-0.log | awk '{print $4}' | tr '\n' ' ')
case $starts in
    "0 10 20 "|"0 10 30 "|"0 20 20 "|"0 20 30 ") ;;
    *) fail "attempts started at steps '$starts', expected 0, then 10 or 20, then 20 or 30" ;;
esac
got=$(final_hash runs/*/)
[ "$got" = "$want" ] || fail "killed twice and restored: $got; fault-free: $want"
ok "DDP job killed twice and restored from firebreak checkpoints: $got, as without faults"
