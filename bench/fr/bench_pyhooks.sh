#!/usr/bin/env bash
# The Python hooks' cost per collective: an 8-byte gloo all_reduce between
# 2 local ranks under `firebreak run`, with the hooks (recorded in the
# ring with its file:line) and with --no-python-hooks (the baseline, same
# run), alternated 3 times; prints the medians and the ratio.  The target
# (the hooks' cost under 2% of the all_reduce, on the paired measurement
# in one process) goes to the results file (bench/result.py); a miss
# exits 1.
# Args: FIREBREAK_BINARY SOURCE_DIR PYTHON
set -euo pipefail
FB=$1 SRC=$2 PY=$3
"$PY" -c 'import torch.distributed' 2>/dev/null || { echo "SKIP: $PY lacks torch"; exit 77; }
T=$(mktemp -d /tmp/fb-bench-pyhooks.XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$T"
one() {
    rm -rf runs
    "$FB" run --quiet --nproc-per-node 2 "$@" -- "$PY" "$SRC/bench/fr/allreduce_loop.py" 5000 \
        >/dev/null 2>&1 || { echo "run failed" >&2; exit 1; }
    grep -h '^allreduce_us=' runs/*/logs/rank-0.log | cut -d= -f2
}
with=() without=() paired=()
for _ in 1 2 3; do
    with+=("$(one)")
    paired+=("$(grep -h '^paired_us=' runs/*/logs/rank-0.log | cut -d= -f2 | tr ' ' ,)")
    without+=("$(one --no-python-hooks)")
done
PYTHONPATH="$SRC/bench" python3 - "${with[*]}" "${without[*]}" "${paired[*]}" <<'PY'
import statistics, sys
from result import target
w = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
p = [tuple(float(v) for v in x.split(",")) for x in sys.argv[3].split()]
pw, pb, cw, cb = (statistics.median(x[i] for x in p) for i in range(4))
print("paired in one process (blocks through the hooks and around them, "
      "alternated): %.1f us/call with, %.1f us without: %+.2f us, ratio %.3f "
      "(target: < 1.02)" % (pw, pb, pw - pb, pw / pb))
met = target("fr_bench_pyhooks", "Python hooks, 8-byte gloo all_reduce, 2 ranks",
             "%.1f us/call = %.3fx" % (pw, pw / pb),
             "without the hooks %.1f us/call" % pb, "< 1.02x (2%)", pw / pb < 1.02)
print("  the calling thread's CPU time: %.2f us/call with, %.2f us without: "
      "the hooks' own cost %+.2f us/call" % (cw, cb, cw - cb))
mw, mb = statistics.median(w), statistics.median(b)
print("8-byte gloo all_reduce, 2 ranks: with the Python hooks %.1f us/call (runs %s)"
      % (mw, " ".join("%.1f" % x for x in w)))
print("baseline (--no-python-hooks): %.1f us/call (runs %s)"
      % (mb, " ".join("%.1f" % x for x in b)))
print("separate runs: %+.1f us/call, ratio %.3f (noisier: other runs' load)"
      % (mw - mb, mw / mb))
sys.exit(0 if met else 1)
PY
