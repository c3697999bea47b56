#!/usr/bin/env bash
# The SDC check from Python (firebreak.sdc_register / sdc_check) under
# `firebreak run`, 3 local ranks: a fault-free run compares pieces and has
# no incident; a bit flipped in rank 2's layer.bias at step 30 is an `sdc`
# incident naming rank 2 and layer.bias, found when the rotation (16 KiB a
# step over 64.25 KiB) next hashes the bias, within 5 steps, and saying it
# last agreed before step 30.
# Args: FIREBREAK_BINARY SOURCE_DIR PYTHON
source "$(dirname "$0")/../supervisor/lib.sh"
SRC=$2
PY=$3
"$PY" -c 'import torch, firebreak' 2>/dev/null || { echo "SKIP: $PY lacks torch or firebreak"; exit 77; }
cp "$SRC/tests/python/sdc_rank.py" "$T/sdc_$TAG.py"

"$FB" run --nproc-per-node 3 --run-dir "$T/clean" -- "$PY" "$T/sdc_$TAG.py" 60 \
    >clean.out 2>clean.err || fail "fault-free run exited $?: $(tail -5 clean.err)"
[ "$(sqlite3 "$T/clean/journal.sqlite" 'select count(*) from incident')" = 0 ] ||
    fail "fault-free run has incidents: $(sqlite3 "$T/clean/journal.sqlite" 'select kind, detail from incident')"
grep -q 'sdc check: [0-9]* pieces compared across 3 ranks in attempt 0, all agreed' clean.err ||
    fail "no comparison in the fault-free run: $(grep sdc clean.err)"

"$FB" run --nproc-per-node 3 --max-restarts 0 --run-dir "$T/flip" \
    --inject 'flip:rank=2,step=30,tensor=layer.bias' -- "$PY" "$T/sdc_$TAG.py" 60 \
    >flip.out 2>flip.err && fail "the run with a flipped bit completed without a restart"
row=$(sqlite3 "$T/flip/journal.sqlite" "select kind||'|'||rank from incident")
step=$(sqlite3 "$T/flip/journal.sqlite" "select step from incident")
detail=$(sqlite3 "$T/flip/journal.sqlite" "select detail from incident")
[ "$row" = "sdc|2" ] && [ "$step" -ge 30 ] && [ "$step" -le 35 ] ||
    fail "incident: $row at step $step: $detail"
grep -q "tensor layer.bias disagree" <<<"$detail" || fail "detail: $detail"
agreed=$(sed -n 's/.*last agreed at step \([0-9]*\);.*/\1/p' <<<"$detail")
[ -n "$agreed" ] && [ "$agreed" -lt 30 ] && [ "$agreed" -ge 25 ] || fail "last agreement '$agreed': $detail"
ok "python: fault-free run agrees; flip on rank 2 (layer.bias, step 30) is an sdc incident"
