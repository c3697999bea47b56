#!/usr/bin/env bash
# Restart latency with an unmodified PyTorch script (issue 16, "Speed"):
# fault (rank 1 SIGKILLed) -> the last rank's first training step after
# restoring the script's own checkpoint, side by side in one run, with the
# same script (ddp_fault.py) and the same Python:
#   firebreak run (warm pool), firebreak run --no-warm-pool,
#   torchrun --max-restarts 1 (TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: without
#   it torchrun 2.x's restart hangs in gloo, issue 16).
# The fault comes in steady state: after the first checkpoint, and for the
# warm pool once its interpreters said they are ready.  Prints each time
# and the ratio to torchrun's; fails above 0.5x torchrun's.
# Args: FIREBREAK_BINARY PYTHON TORCHRUN [REPEATS]
set -euo pipefail
FB=$1
PY=$2
TR=$3
N=${4:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "$PY" ] && "$PY" -c 'import torch.distributed' 2>/dev/null || { echo "SKIP: $PY lacks torch"; exit 77; }
[ -x "$TR" ] || { echo "SKIP: no $TR"; exit 77; }
T=$(mktemp -d /tmp/fb-bench-warm.XXXXXX)
pid=""
cleanup() {
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
    rm -rf "$T"
}
trap cleanup EXIT
unset PYTHONPATH
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1

# one MODE I: prints the latency in seconds
one() {
    local mode=$1 d=$T/$1-$2
    mkdir -p "$d"
    local args=("$d/ckpt.pt" "$d/fault" "$d/stamps")
    case $mode in
    warm) "$FB" run --quiet --nproc-per-node 2 --max-restarts 1 --run-dir "$d/run" \
              -- "$PY" "$HERE/ddp_fault.py" "${args[@]}" >"$d/out" 2>&1 & ;;
    cold) "$FB" run --quiet --no-warm-pool --nproc-per-node 2 --max-restarts 1 \
              --run-dir "$d/run" -- "$PY" "$HERE/ddp_fault.py" "${args[@]}" >"$d/out" 2>&1 & ;;
    torchrun) "$TR" --nproc-per-node 2 --max-restarts 1 \
              "$HERE/ddp_fault.py" "${args[@]}" >"$d/out" 2>&1 & ;;
    esac
    pid=$!
    for _ in $(seq 3000); do
        if [ -e "$d/ckpt.pt" ]; then
            [ "$mode" != warm ] && break
            [ "$(cat "$d"/run/logs/warm-*.log 2>/dev/null | grep -c 'imported in')" = 2 ] && break
        fi
        sleep 0.1
    done
    sleep 1
    touch "$d/fault"
    wait $pid || { echo "$mode: exit $?: $(tail -5 "$d/out")" >&2; pid=""; return 1; }
    pid=""
    "$PY" - "$d/fault.at" "$d/stamps" <<'PY'
import sys
at = float(open(sys.argv[1]).read())
ends = [float(l.split()[1]) for l in open(sys.argv[2])]
assert len(ends) == 2, ends
print("%.3f" % (max(ends) - at))
PY
}

declare -A all
for i in $(seq "$N"); do
    for mode in torchrun warm cold; do
        all[$mode]="${all[$mode]:-} $(one $mode "$i")"
    done
done
"$PY" - "${all[torchrun]}" "${all[warm]}" "${all[cold]}" "$HERE/.." <<'PY'
import statistics, sys
sys.path.insert(0, sys.argv[4])
from result import target
tr, warm, cold = ([float(x) for x in a.split()] for a in sys.argv[1:4])
m = {k: statistics.median(v) for k, v in (("torchrun", tr), ("warm", warm), ("cold", cold))}
for k, v in (("torchrun --max-restarts 1", tr), ("firebreak (warm pool)", warm),
             ("firebreak --no-warm-pool", cold)):
    print("%-28s fault -> first step after restore: median %.3f s  (%s)"
          % (k, statistics.median(v), " ".join("%.3f" % x for x in v)))
r = m["warm"] / m["torchrun"]
print("ratio to torchrun: warm pool %.2fx, no pool %.2fx (target: warm pool <= 0.50x)"
      % (r, m["cold"] / m["torchrun"]))
met = target("bench_warm_restart", "fault -> first step after restore (warm pool)",
             "%.3f s = %.2fx (no pool %.3f s, %.2fx)" % (m["warm"], r, m["cold"],
                                                          m["cold"] / m["torchrun"]),
             "torchrun --max-restarts 1 %.3f s" % m["torchrun"], "<= 0.50x torchrun",
             r <= 0.5)
sys.exit(0 if met else 1)
PY
