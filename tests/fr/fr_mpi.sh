#!/bin/bash
# Real MPI runs under libfirebreak-mpi.so: a clean run records every
# operation and analyzes "ok"; a run where rank 2 hangs at step 5 is
# analyzed from the live segments while the others wait, and names rank 2.
set -u
FB=$1 PRELOAD=$2 PROG=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
JOB=frmpi$$
T=$(mktemp -d)
MPIPID=
cleanup() {
  if [ -n "$MPIPID" ]; then
    kill -TERM "$MPIPID" 2>/dev/null
    for i in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$MPIPID" 2>/dev/null || break; sleep 0.3; done
    kill -KILL "$MPIPID" 2>/dev/null; wait "$MPIPID" 2>/dev/null
  fi
  rm -f /dev/shm/fb.$JOB.* /dev/shm/fb.${JOB}ok.*
  rm -rf "$T"
}
trap cleanup EXIT
fail=0
run() { # JOBID INJECT ARGS...  (call in a subshell: it execs mpirun)
  local job=$1 inject=$2; shift 2
  exec mpirun --oversubscribe --bind-to none -np 4 --mca btl_vader_backing_directory "$T" \
    -x ASAN_OPTIONS=detect_leaks=0 -x FIREBREAK_JOB_ID=$job \
    -x FIREBREAK_INJECT="$inject" -x LD_PRELOAD="$PRELOAD" "$PROG" "$@"
}

# 1. a clean run: every rank recorded its operations, nothing is wrong
(run ${JOB}ok "" 20) >"$T/ok.log" 2>&1 || { echo "FAIL clean run"; cat "$T/ok.log"; fail=1; }
"$FB" fr analyze /dev/shm/fb.${JOB}ok.0.{0,1,2,3} --json --late-threshold 10s >"$T/ok.json"
python3 - "$T/ok.json" <<'PY' || fail=1
import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
# per step: 3 collectives + 2 p2p, plus the split: 20*5 + 1 per rank
ok = d["verdict"] == "ok" and d["ranks"] == 4 and d["events"] >= 4 * 100
print(("ok  " if ok else "FAIL") + " clean run:", d["verdict"], d["events"], "events", d["summary"])
sys.exit(0 if ok else 1)
PY

# 2. rank 2 hangs at step 5
(run $JOB "hang:rank=2,step=5" 1000) >"$T/hang.log" 2>&1 &
MPIPID=$!   # mpirun itself: the subshell exec'd it
verdict=
for i in $(seq 1 60); do
  sleep 0.5
  ls /dev/shm/fb.$JOB.0.3 >/dev/null 2>&1 || continue
  "$FB" fr analyze /dev/shm/fb.$JOB.0.{0,1,2,3} --json --min-wait 1s >"$T/hang.json" 2>/dev/null
  verdict=$(tail -n 1 "$T/hang.json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["verdict"])' 2>/dev/null)
  [ "$verdict" = hang ] && break
done
python3 - "$T/hang.json" <<'PY' || fail=1
import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
f = [x for x in d["findings"] if x["kind"] == "missing_ranks" and x["ranks"] == [2]]
ok = d["verdict"] == "hang" and d["culprits"] == [2] and f and f[0]["op"] == "all_reduce"
print(("ok  " if ok else "FAIL") + " injected hang:", d["verdict"], d["culprits"], d["summary"])
sys.exit(0 if ok else 1)
PY
# the same evidence snapshotted to files (what the supervisor keeps)
mkdir -p "$T/snap"
"$FB" fr analyze /dev/shm/fb.$JOB.0.{0,1,2,3} >"$T/hang.txt"
grep -q "rank 2 never entered all_reduce" "$T/hang.txt" || { echo "FAIL text"; cat "$T/hang.txt"; fail=1; }
exit $fail
