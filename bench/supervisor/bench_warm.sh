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
# and the ratio to torchrun's; fails above 0.5x torchrun's.  Each run's
# time is printed as it ends, with its phases (start to fault, fault to
# exit: where the bench's time goes); a run that fails or does not end within
# WAIT_S of its fault has the tails of its output and logs printed (the
# run directory is removed on exit).
# Args: FIREBREAK_BINARY PYTHON TORCHRUN [REPEATS]
set -euo pipefail
FB=$1
PY=$2
TR=$3
N=${4:-3}
HERE=$(cd "$(dirname "$0")" && pwd)
[ -x "$PY" ] && "$PY" -c 'import torch.distributed' 2>/dev/null || { echo "SKIP: $PY lacks torch"; exit 77; }
[ -x "$TR" ] || { echo "SKIP: no $TR"; exit 77; }
WAIT_S=${WAIT_S:-120}
T=$(mktemp -d /tmp/fb-bench-warm.XXXXXX)

# The tails of a run's output, logs and time stamps, on stderr.
show() {
    local d=$1 f
    touch "$T/shown"
    echo "--- $(basename "$d"): its output and logs (last lines) ---" >&2
    for f in "$d/out" "$d"/run/logs/*.log "$d/fault.at" "$d/stamps"; do
        [ -f "$f" ] || continue
        echo "== ${f#"$T"/}" >&2
        tail -n 25 "$f" >&2
    done
}
# The run in progress (one() runs in a subshell: files, not variables).
cleanup() {
    local rc=$? p
    p=$(cat "$T/pid" 2>/dev/null || true)
    [ -n "$p" ] && kill -9 "$p" 2>/dev/null
    if [ "$rc" != 0 ] && [ "$rc" != 77 ] && [ -s "$T/current" ] &&
        [ ! -e "$T/shown" ]; then
        echo "bench_warm: failed (exit $rc) during or after $(basename "$(cat "$T/current")")" >&2
        show "$(cat "$T/current")"
    fi
    rm -rf "$T"
}
trap cleanup EXIT
unset PYTHONPATH
export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1

# one MODE I: prints the latency in seconds
one() {
    local mode=$1 d=$T/$1-$2 pid
    mkdir -p "$d"
    echo "$d" >"$T/current"
    local args=("$d/ckpt.pt" "$d/fault" "$d/stamps")
    case $mode in
    warm) "$FB" run --quiet --nproc-per-node 2 --max-restarts 1 --run-dir "$d/run" \
              -- "$PY" "$HERE/ddp_fault.py" "${args[@]}" >"$d/out" 2>&1 & ;;
    cold) "$FB" run --quiet --no-warm-pool --nproc-per-node 2 --max-restarts 1 \
              --run-dir "$d/run" -- "$PY" "$HERE/ddp_fault.py" "${args[@]}" >"$d/out" 2>&1 & ;;
    # torchrun leaves its log directory (torchelastic_*) under TMPDIR
    torchrun) TMPDIR=$d "$TR" --nproc-per-node 2 --max-restarts 1 \
              "$HERE/ddp_fault.py" "${args[@]}" >"$d/out" 2>&1 & ;;
    esac
    pid=$!
    echo "$pid" >"$T/pid"
    local t_start=$EPOCHREALTIME
    for _ in $(seq 3000); do
        kill -0 "$pid" 2>/dev/null || break
        if [ -e "$d/ckpt.pt" ]; then
            [ "$mode" != warm ] && break
            [ "$(cat "$d"/run/logs/warm-*.log 2>/dev/null | grep -c 'imported in')" = 2 ] && break
        fi
        sleep 0.1
    done
    # A moment past the checkpoint (the warm interpreters say "imported
    # in" just before they report ready; 1 s until 2026-12-02: 7 s of
    # the bench's nine runs spent idle).
    sleep 0.2
    touch "$d/fault"
    local t_fault=$EPOCHREALTIME
    local waited=0
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt $((WAIT_S * 10)) ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "$mode run $2: not ended ${WAIT_S} s after its fault" >&2
        show "$d"
        kill -TERM "$pid" 2>/dev/null
        sleep 2
        kill -9 "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        rm -f "$T/pid"
        return 1
    fi
    local rc=0
    wait "$pid" || rc=$?
    rm -f "$T/pid"
    if [ "$rc" != 0 ]; then
        echo "$mode run $2: exit $rc" >&2
        show "$d"
        return 1
    fi
    local s
    if ! s=$("$PY" - "$d/fault.at" "$d/stamps" 2>&1 <<'PY'
import sys
at = float(open(sys.argv[1]).read())
ends = [float(l.split()[1]) for l in open(sys.argv[2])]
assert len(ends) == 2, "%d first steps after the restart stamped, want 2" % len(ends)
print("%.3f" % (max(ends) - at))
PY
    ); then
        echo "$mode run $2: no time: $(tail -n 1 <<<"$s")" >&2
        show "$d"
        return 1
    fi
    echo "$mode run $2: $s s (phases: start to fault $(awk -v a="$t_start" -v b="$t_fault" -v c="$EPOCHREALTIME" 'BEGIN { printf "%.1f s, fault to exit %.1f", b - a, c - b }') s)" >&2
    echo "$s"
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
