#!/usr/bin/env bash
# examples/ddp_firebreak.py with the DDP object in its Checkpointer's state
# (so the model and AdamW state are replicated: written once, about half
# by each of 2 ranks), under `firebreak run`, killed twice by injected
# faults, ends with the parameter hash of the same job run without
# faults, each restart from a checkpoint; each shard is about half of what
# a copy per rank would be.
# Args: FIREBREAK_BINARY SOURCE_DIR PYTHON
source "$(dirname "$0")/../supervisor/lib.sh"
SRC=$2
PY=$3
"$PY" -c 'import torch, firebreak' 2>/dev/null || { echo "SKIP: $PY lacks torch or firebreak"; exit 77; }
sed 's/Checkpointer({"model": model,/Checkpointer({"model": ddp,/' \
    "$SRC/examples/ddp_firebreak.py" >"$T/ddp_$TAG.py"
grep -q 'Checkpointer({"model": ddp,' "$T/ddp_$TAG.py" || fail "the example's Checkpointer line changed"
final_hash() { grep -h '^final_hash=' "$1"/logs/rank-0.log | tail -1; }
shard_sizes() { stat -c %s "$1"/checkpoints/step-0000000060/rank-0000[01].safetensors | tr '\n' ' '; }

mkdir clean faulty percopy
(cd clean && "$FB" run --nproc-per-node 2 --json -- "$PY" "$T/ddp_$TAG.py" --steps 60 \
    >out.json 2>err.txt) || fail "fault-free run exited $?: $(tail -5 clean/err.txt)"
want=$(final_hash clean/runs/*/)
[ -n "$want" ] || fail "fault-free run printed no final_hash"

# The example as it is (the module inside DDP: a copy per rank), for sizes.
(cd percopy && "$FB" run --nproc-per-node 2 --json -- "$PY" "$SRC/examples/ddp_firebreak.py" \
    --steps 60 >out.json 2>err.txt) || fail "per-copy run exited $?: $(tail -5 percopy/err.txt)"
read -r a b <<<"$(shard_sizes clean/runs/*/)"
read -r c d <<<"$(shard_sizes percopy/runs/*/)"
echo "shards written once: $a $b; a copy per rank: $c $d"
# each about half a copy (plus the per-rank meta), together about one copy
[ $((a * 10)) -lt $((c * 7)) ] && [ $((b * 10)) -lt $((d * 7)) ] \
    || fail "replicated shards $a $b not about half of $c $d"
[ $(((a + b) * 10)) -lt $((c * 12)) ] || fail "together $((a + b)) > one copy $c"

cd faulty
"$FB" run --nproc-per-node 2 --max-restarts 3 --json \
    --inject 'kill:rank=1,step=23' --inject 'kill:rank=0,step=37,attempt=1' \
    -- "$PY" "$T/ddp_$TAG.py" --steps 60 >out.json 2>err.txt \
    || fail "run with faults exited $?: $(tail -5 err.txt)"
[ "$(json_field out.json '["restarts"]')" = 2 ] || fail "restarts: $(tail -1 out.json)"
# Each restart resumed from a checkpoint: the newest durable one, 20 and
# 30 unless the save before a kill was still being written (10, 20).
starts=$(grep -h '^start at step' runs/*/logs/rank-0.log | awk '{print $4}' | tr '\n' ' ')
[[ "$starts" =~ ^0\ (10|20)\ (20|30)\ $ ]] \
    || fail "attempts started at steps '$starts', expected '0 20 30 ' (or an older checkpoint)"
got=$(final_hash runs/*/)
[ "$got" = "$want" ] || fail "killed twice and restored: $got; fault-free: $want"
ok "replicated DDP state written once ($a + $b bytes, a copy per rank $c), killed twice, restored: $got"
