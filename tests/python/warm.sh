#!/usr/bin/env bash
# The warm pool (docs/supervisor.md, "Warm pool") with an unmodified DDP
# script (tests/python/ddp_plain.py):
#  - crash of rank 1 -> attempt 1's ranks are the interpreters started
#    ahead (the supervisor's pids are the ones the warm interpreters
#    logged, each saying which rank it became);
#  - --no-warm-pool: the same fault restarted with fresh interpreters, no
#    warm one; both runs end with the same model and optimizer state, bit
#    for bit (the reference is a restart, not a run without a fault:
#    ddp_plain.py reseeds its data generator when it resumes, so a resumed
#    run sees other batches than an uninterrupted one);
#  - SIGKILL of the supervisor while the pool waits: no interpreter left.
# No process and no /dev/shm segment is left behind.
# Args: FIREBREAK_BINARY SOURCE_DIR PYTHON
source "$(dirname "$0")/../supervisor/lib.sh"
SRC=$2
PY=$3
unset PYTHONPATH
"$PY" -c 'import torch.distributed' 2>/dev/null || { echo "SKIP: $PY lacks torch"; exit 77; }
mkdir "$T/$TAG"
cp "$SRC/tests/python/ddp_plain.py" "$T/$TAG/ddp_plain.py"
# relative (each case runs in $T/CASE): __main__.__file__ is absolute all
# the same, as in a fresh interpreter (a warm one had it relative)
S=../$TAG/ddp_plain.py
# steps slow enough that the pool is ready before the fault on a busy machine
ARGS=(--steps 16 --ckpt-every 4 --sleep-ms 400)

run() {
    local case=$1
    shift
    mkdir "$T/$case"
    rd=$T/$case/run
    set +e
    (cd "$T/$case" && "$FB" run --nproc-per-node 2 --max-restarts 1 --run-dir "$rd" \
        "$@" -- "$PY" "$S" --ckpt "$T/$case/ckpt.pt" "${ARGS[@]}" $FAULT >out.txt 2>err.txt)
    rc=$?
    set -e
    ! ls /dev/shm | grep -q "^fb\.$(cat "$rd/job")\." || fail "$case: segments left in /dev/shm"
    for f in "$rd"/logs/warm-*.log; do
        [ -e "$f" ] || continue
        for p in $(sed -n 's/.*interpreter: pid \([0-9]*\),.*/\1/p' "$f"); do
            if kill -0 "$p" 2>/dev/null && grep -q fbwarm "/proc/$p/cmdline" 2>/dev/null; then
                fail "$case: warm interpreter $p left behind"
            fi
        done
    done
}

FAULT="--fault crash --fault-step 10"
run warm
[ $rc = 0 ] || fail "warm: exit $rc: $(tail -5 "$T/warm/err.txt")"
# one line for the launch (not one a rank), and each interpreter says
# which rank it became: the rank's own pid (its segment's)
! grep -q "rank [0-9]*: warm interpreter pid" "$T/warm/err.txt" \
    && [ "$(grep -c "attempt 1: 2 of 2 ranks in warm interpreters started [0-9.-]* s before" "$T/warm/err.txt")" = 1 ] \
    || fail "warm: the launch's line: $(grep -i 'warm' "$T/warm/err.txt")"
for r in 0 1; do
    pid=$(sed -n "s/.*pid \([0-9]*\) became rank $r of attempt 1.*/\1/p" "$rd"/logs/warm-*.log)
    [ -n "$pid" ] || fail "warm: rank $r not from the pool: $(cat "$rd"/logs/warm-*.log)"
    grep -q "pid=$pid " "$rd/logs/rank-$r.log" \
        || fail "warm: rank $r's script did not run in pid $pid: $(grep 'pid=' "$rd/logs/rank-$r.log")"
    # __file__ as a fresh interpreter has it (attempt 0's)
    files=$(sed -n 's/.* file=\([^ ]*\) .*/\1/p' "$rd/logs/rank-$r.log" | sort -u)
    [ "$files" = "$T/warm/../$TAG/ddp_plain.py" ] \
        || fail "warm: rank $r's __file__ in the two attempts: $files"
    # and sys.argv[0] as given (runpy.run_path made it absolute)
    argv0=$(sed -n 's/.* argv0=\([^ ]*\) .*/\1/p' "$rd/logs/rank-$r.log" | sort -u)
    [ "$argv0" = "../$TAG/ddp_plain.py" ] \
        || fail "warm: rank $r's sys.argv[0] in the two attempts: $argv0"
done
grep -q "rank 1 attempt 1 start at step 8" "$rd/logs/rank-1.log" \
    || fail "warm: the script did not resume at step 8: $(grep start "$rd/logs/rank-1.log")"
# The relaunch's account has the wait for the pool's imports as a part of
# its own (it was counted as forks), and the parts still add up.
line=$(grep "attempt 1: relaunched" "$T/warm/err.txt") || fail "warm: no relaunch breakdown"
# no standby shims: the pool's interpreters took their place
case $line in *"shims standing by"*) fail "warm: shims standing by in: $line";; esac
python3 - "$line" <<'PY' || fail "warm: relaunch breakdown: $line"
import re, sys
line = sys.argv[1]
total = float(re.search(r"relaunched ([0-9.]+) ms after the detection", line).group(1))
parts = [float(re.search(name + r" ([0-9.]+)", line).group(1)) for name in
         ("earlier diagnosis", "evidence", "stop", "sweep", "record", "between attempts",
          "checkpoint check", "forks", "warm interpreters' imports", "execs")]
assert abs(sum(parts) - total) <= 0.1 * len(parts), (sum(parts), total)
PY
ok "warm: attempt 1's ranks were the pool's interpreters"

run cold --no-warm-pool
[ $rc = 0 ] || fail "cold: exit $rc: $(tail -5 "$T/cold/err.txt")"
! grep -q "warm interpreter" "$T/cold/err.txt" || fail "cold: the pool was used with --no-warm-pool"
! ls "$rd"/logs/warm-*.log >/dev/null 2>&1 || fail "cold: a warm interpreter was started"
grep -q "rank 1 attempt 1 start at step 8" "$rd/logs/rank-1.log" || fail "cold: no restart"
"$PY" - "$T/warm/ckpt.pt" "$T/cold/ckpt.pt" <<'PY' || fail "warm and cold restarts end with different states"
import sys, torch
a, b = (torch.load(p) for p in sys.argv[1:3])
assert a["step"] == b["step"] == 16, (a["step"], b["step"])
def same(x, y):
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return len(x) == len(y) and all(same(i, j) for i, j in zip(x, y))
    if isinstance(x, torch.Tensor):
        return torch.equal(x, y)
    return x == y
assert same(a["model"], b["model"]) and same(a["opt"], b["opt"])
PY
ok "--no-warm-pool: fresh interpreters; the same final state, bit for bit"

# ---- SIGKILL of the supervisor while the pool waits
mkdir "$T/kill"
rd=$T/kill/run
(cd "$T/kill" && exec "$FB" run --nproc-per-node 2 --max-restarts 1 --run-dir "$rd" \
    -- "$PY" "$S" --ckpt "$T/kill/ckpt.pt" --steps 1000 --sleep-ms 200 >out.txt 2>err.txt) &
sup=$!
pids=""
for _ in $(seq 1200); do
    pids=$(cat "$rd"/logs/warm-*.log 2>/dev/null | sed -n 's/.*interpreter: pid \([0-9]*\),.*/\1/p' | tr '\n' ' ' || true)
    if [ "$(echo $pids | wc -w)" = 2 ]; then break; fi
    sleep 0.1
done
if [ "$(echo $pids | wc -w)" != 2 ]; then kill -9 $sup 2>/dev/null || true; fail "kill: the pool never became ready: $(tail -5 "$T/kill/err.txt")"; fi
for p in $pids; do
    grep -q fbwarm "/proc/$p/cmdline" || fail "kill: $p is not a waiting warm interpreter"
done
kill -9 $sup
wait $sup 2>/dev/null || true
left=$pids
for _ in $(seq 100); do
    left=""
    for p in $pids; do
        if kill -0 "$p" 2>/dev/null; then left="$left $p"; fi
    done
    if [ -z "$left" ]; then break; fi
    sleep 0.1
done
[ -z "$left" ] || fail "kill: warm interpreters$left outlived the supervisor's SIGKILL"
for _ in $(seq 100); do
    if [ -z "$(leftovers)" ]; then break; fi
    sleep 0.1
done
job=$(cat "$rd/job")
rm -f /dev/shm/fb.$job.*  # the segments a SIGKILLed supervisor leaves for a later run's stale sweep
ok "kill: no warm interpreter after the supervisor's SIGKILL"
