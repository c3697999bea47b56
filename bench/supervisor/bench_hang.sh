#!/usr/bin/env bash
# Hang detection with an unmodified PyTorch script (issue 16, "Speed"):
# rank 1 sleeps where rank 0 calls an all_reduce (ddp_hang.py); the time
# from the fault to the launcher's knowing, side by side in one run, per
# torch (Debian's 1.13 and the PyPI 2.x venv, each where it exists):
#   firebreak run --hang-timeout 3 (the Python hooks' step heartbeats and
#     flight recorder; torch's own collective timeout left at its default);
#   torchrun with a 30 s gloo collective timeout (rank 0's all_reduce
#     raises, rank 0 exits, torchrun stops the job), measured;
#   torchrun with torch's default (30 min for gloo): not measured, printed
#     as the configured default.
# Also which rank each names.  The torchrun runs go in the background
# while firebreak's run (their 30 s is a timer, not load), so the whole
# bench takes under a minute.  Target (in the results file): firebreak
# within its limit + 1 s of the fault; a miss exits 1.
# Args: FIREBREAK_BINARY SOURCE_DIR PYTHON [PYTHON...]
set -euo pipefail
FB=$1
SRC=$2
shift 2
LIMIT_S=3
TR_TIMEOUT_S=30
T=$(mktemp -d /tmp/fb-bench-hang.XXXXXX)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -9 -- "-$p" 2>/dev/null || kill -9 "$p" 2>/dev/null || true; done
    rm -rf "$T"
}
trap cleanup EXIT
unset PYTHONPATH
# A line per phase: its wall time (where the bench's time goes).
t_phase=$EPOCHREALTIME
phase() {
    echo "phase: $1: $(awk -v a="$t_phase" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s (load $(cut -d' ' -f1 /proc/loadavg))"
    t_phase=$EPOCHREALTIME
}
S=$SRC/bench/supervisor/ddp_hang.py
pys=()
for py in "$@"; do
    # its torch's version, from the one import that checks it
    [ -x "$py" ] && "$py" -c 'import torch, torch.distributed.run; print(torch.__version__)' \
        >"$T/ver-${#pys[@]}" 2>/dev/null && pys+=("$py")
done
[ ${#pys[@]} -gt 0 ] || { echo "SKIP: no python with torch among $*"; exit 77; }
phase "each python's torch, checked"
now() { date +%s.%N; }

# torchrun's options in 1.13's spelling (underscores; 2.x takes both).
# --redirects/--tee 2 (rank stderr also to torchrun's log files): 1.13's
# defaults ("0") fail on Python 3.11, whose Flag iteration skips Std.NONE.
# torchrun V PY: in the background, in its own process group; writes
# $T/tr-V/{fault.at,end,out}, and its log directory (torchelastic_*, which
# it never removes) there too
i=0
for py in "${pys[@]}"; do
    d=$T/tr-$i
    mkdir -p "$d"
    (cd "$d" && TMPDIR=$d setsid bash -c '"$1" -m torch.distributed.run --nproc_per_node 2 \
        --max_restarts 0 --master_port "$2" --redirects 2 --tee 2 "$3" "$4/fault.at" \
        --timeout-s "$5" \
        >"$4/out" 2>&1; date +%s.%N >"$4/end"' _ "$py" $((29600 + RANDOM % 2000 + i)) \
        "$S" "$d" "$TR_TIMEOUT_S") &
    pids+=($!)
    i=$((i + 1))
done

# firebreak, one torch after the other
i=0
for py in "${pys[@]}"; do
    d=$T/fb-$i
    mkdir -p "$d"
    set +e
    (cd "$d" && "$FB" run --quiet --nproc-per-node 2 --max-restarts 0 \
        --hang-timeout "$LIMIT_S" --run-dir "$d/run" -- "$py" "$S" "$d/fault.at" \
        >"$d/out" 2>&1)
    rc=$?
    set -e
    [ $rc = 1 ] || { echo "firebreak with $py: exit $rc, want 1 (a hang): $(tail -5 "$d/out")" >&2; exit 1; }
    sqlite3 -batch -noheader -separator ' ' "$d/run/journal.sqlite" \
        "select detected_at, ifnull(rank, -1) from incident where kind = 'hang'" >"$d/inc"
    i=$((i + 1))
done
phase "firebreak's runs, one torch after the other"
for p in "${pids[@]}"; do wait "$p" || true; done
pids=()
phase "torchrun's runs (${TR_TIMEOUT_S} s gloo timeout), to their end"

PYTHONPATH="$SRC/bench" python3 - "$T" "$LIMIT_S" "$TR_TIMEOUT_S" "${pys[@]}" <<'PY'
import os, re, sys
from result import target
T, limit, trt, pys = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
ok = True
for i, py in enumerate(pys):
    ver = open(os.path.join(T, "ver-%d" % i)).read().strip()
    fb, tr = os.path.join(T, "fb-%d" % i), os.path.join(T, "tr-%d" % i)
    inc = open(os.path.join(fb, "inc")).read().split()
    fb_s = float(inc[0]) - float(open(os.path.join(fb, "fault.at")).read())
    fb_rank = int(inc[1])
    out = open(os.path.join(tr, "out"), errors="replace").read()
    if not os.path.exists(os.path.join(tr, "fault.at")):
        sys.exit("torchrun with %s: the fault never came:\n%s" % (py, out[-2000:]))
    tr_s = float(open(os.path.join(tr, "end")).read()) - \
        float(open(os.path.join(tr, "fault.at")).read())
    m = re.search(r"Root Cause.*?rank\s*:\s*(\d+)\s*\(local_rank", out, re.S)
    tr_rank = m.group(1) if m else "?"
    print("torch %s (%s): rank 1 sleeps before an all_reduce" % (ver, py))
    print("  firebreak --hang-timeout %gs:        %6.2f s after the fault, rank %s named"
          % (limit, fb_s, fb_rank))
    print("  torchrun, gloo timeout %gs:           %6.2f s after the fault, rank %s "
          "named as the root cause" % (trt, tr_s, tr_rank))
    print("  torchrun, torch's default timeout:   1800 s (gloo's 30 min; NCCL's 10 min): "
          "configured default, not measured")
    print("  ratio firebreak / torchrun (30 s): %.3f; / default: %.4f"
          % (fb_s / tr_s, fb_s / 1800))
    met = fb_s <= limit + 1 and fb_rank == 1
    ok &= target("bench_hang", "hang found, rank 1 asleep, torch %s" % ver.split("+")[0],
                 "%.2f s after the fault, rank %d" % (fb_s, fb_rank),
                 "torchrun %.1f s (gloo timeout %gs), 1800 s default" % (tr_s, trt),
                 "<= %gs (limit + 1 s), rank 1" % (limit + 1), met)
sys.exit(0 if ok else 1)
PY
