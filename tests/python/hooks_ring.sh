#!/usr/bin/env bash
# The Python hooks' recording path, checked in each of 2 ranks' own rings
# (hooks_ring.py, an unmodified script under `firebreak run`).
# Args: FIREBREAK_BINARY SOURCE_DIR PYTHON
source "$(dirname "$0")/../supervisor/lib.sh"
SRC=$2
PY=$3
unset PYTHONPATH
"$PY" -c 'import torch.distributed' 2>/dev/null || { echo "SKIP: $PY lacks torch"; exit 77; }
cp "$SRC/tests/python/hooks_ring.py" "$T/hooks_ring_$TAG.py"
"$FB" run --nproc-per-node 2 --max-restarts 0 -- "$PY" "$T/hooks_ring_$TAG.py" "$SRC/tests/python" \
    >out.txt 2>err.txt || fail "hooks_ring.py failed: $(tail -n 30 "$(run_dir)"/logs/rank-*.log)"
for r in 0 1; do
    grep -q "hooks_ring: rank $r checked; 0 failures" "$(run_dir)/logs/rank-$r.log" \
        || fail "rank $r: $(tail -n 20 "$(run_dir)/logs/rank-$r.log")"
done
assert_no_segments
ok "recorded calls: ops, groups, counts, dtypes, peers, sites; async ends; re-entrancy"
