#!/usr/bin/env bash
# `firebreak sim --from-run` on the journal of a real `firebreak run` (toy
# trainer, one injected crash, checkpoints every 5 steps): the measured costs
# are taken from it and projected to 16,384 GPUs.
set -euo pipefail
FB=$1
BIN=$(dirname "$FB")
T=$(mktemp -d /tmp/fb-sim-real.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
"$FB" run --quiet --run-dir "$T/run" --nproc-per-node 2 --inject 'kill:rank=1,step=22' \
    -- "$BIN/fb-toy-train" --steps 40 --sleep-ms 5 --ckpt-every 5 || fail "the run failed"
"$FB" sim --from-run "$T/run" --gpus 16384 --days 5 --trials 50 --seed 1 --json \
    >"$T/out.json" 2>"$T/err.txt" || fail "sim --from-run: $(cat "$T/err.txt")"
python3 - "$T/out.json" <<'PY' || fail "sim output: $(tail -1 "$T/out.json")"
import json, math, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
e = d["ettr"]
assert 0 < e["p5"] <= e["mean"] <= e["p95"] <= 1, e
assert d["interruptions"]["mean"] > 0, d["interruptions"]
for k in ("useful", "checkpoint", "lost", "detect", "restart"):
    assert math.isfinite(d["time_s"][k]) and d["time_s"][k] >= 0, (k, d["time_s"])
assert d["time_s"]["detect"] > 0 and d["time_s"]["restart"] > 0, d["time_s"]
PY
echo "ok: sim --from-run projects a real run's measured costs to 16,384 GPUs"
