#!/usr/bin/env bash
# Crash to relaunch: the supervisor's own share (failure detected -> every
# new rank process started: stop the others, record, verify the checkpoint,
# relaunch), median over 10 restarts, printed beside the time the program
# itself needs to start (launch -> first step).  Target: median < 50 ms.
set -euo pipefail
FB=$1
BIN=$(dirname "$FB")
T=$(mktemp -d /tmp/fb-bench-restart.XXXXXX)
trap 'rm -rf "$T"' EXIT
inj=""
for a in $(seq 0 9); do inj="$inj--inject kill:rank=$((a % 4)),step=$((5 + a)),attempt=$a "; done
# shellcheck disable=SC2086
"$FB" run --quiet --run-dir "$T/run" --nproc-per-node 4 --max-restarts 12 --crash-loop 0 \
    $inj -- "$BIN/fb-toy-train" --steps 30 --sleep-ms 2 --ckpt-every 5 >/dev/null
PYTHONPATH=$(dirname "$0")/.. python3 - "$T/run/journal.sqlite" <<'PY'
import sqlite3, statistics, sys
from result import target
db = sqlite3.connect(sys.argv[1])
att = {n: (s, l, r) for n, s, l, r in db.execute(
    "select number, started_at, launched_at, ready_at from attempt")}
share, detect, start = [], [], []
for (n, det, dms) in db.execute(
        "select a.number, i.detected_at, i.detect_ms from incident i join attempt a"
        " on i.attempt_id = a.id where i.kind in ('crash','hang','error_exit')"):
    nxt = att.get(n + 1)
    if nxt and nxt[1]:
        share.append((nxt[1] - det) * 1e3)
        detect.append(dms)
for n, (s, l, r) in att.items():
    if l and r:
        start.append((r - l) * 1e3)
m = statistics.median
print(f"restart, supervisor's share (detected -> new ranks launched): median "
      f"{m(share):.1f} ms over {len(share)} restarts (min {min(share):.1f}, max "
      f"{max(share):.1f}); target < 50 ms: {'met' if m(share) < 50 else 'NOT met'}")
print(f"detection of the crash (death -> supervisor knows): median {m(detect):.2f} ms")
print(f"the program's own start-up (launch -> first step, incl. restore): median "
      f"{m(start):.1f} ms; supervisor share / program start-up = "
      f"{m(share) / m(start):.2f}")
sys.exit(0 if target("bench_restart", "crash -> relaunch, supervisor's share, 4 ranks",
                     f"median {m(share):.1f} ms", f"program start-up {m(start):.1f} ms",
                     "< 50 ms", m(share) < 50) else 1)
PY
