#!/bin/bash
# firebreak fr analyze on inputs that are short of evidence or hostile:
#   incomplete  dumps of some ranks only: verdict incomplete (exit 2) when
#               nothing is decided, the decided verdict when one is
#   escape      escape sequences in group names, dtypes, frames, versions
#               and file names never reach the terminal raw
#   fifo        a FIFO in place of a dump or a segment is an error naming
#               it, not a hang
# Every run is under `timeout`, so a hang fails the test instead of
# stopping it.
set -u
MODE=$1 FB=$2 GEN=$3 TORCHGEN=$4 DATA=$5
T=$(mktemp -d); trap 'rm -rf "$T"; rm -f /dev/shm/fb.frtest.$$.*' EXIT
fail=0
run() { timeout 30 "$FB" fr analyze "$@"; }

# json_check NAME OUT RC PYTHON-CONDITION (d: the result, rc)
json_check() {
  python3 - "$1" "$2" "$3" "$4" <<'PY' || fail=1
import json, sys
name, path, rc, cond = sys.argv[1:]
rc = int(rc)
try:
    d = json.loads(open(path).read().splitlines()[-1])
except Exception as e:
    print(f"FAIL {name}: rc {rc}: no JSON result ({e})")
    sys.exit(1)
ok = eval("(" + cond + ")")
print(("ok  " if ok else "FAIL") + f" {name}: rc {rc} {d['verdict']} "
      f"{d['culprits']}: {d['summary']}")
sys.exit(0 if ok else 1)
PY
}

case $MODE in
incomplete)
  # 1 rank of 4, nothing wrong in it: was "ok", exit 0
  mkdir "$T/one"; cp "$DATA"/ok-json/nccl_trace_rank_0 "$T/one/"
  run "$T/one" --json >"$T/out"; rc=$?
  json_check "1 of 4, torch" "$T/out" $rc \
    'rc == 2 and d["verdict"] == "incomplete" and d["culprits"] == [] and
     d["summary"].startswith("incomplete: missing ranks 1-3 ") and
     d["missing_count"] == 3 and d["missing_ranks"] == "1-3"'
  run "$T/one" >"$T/text"; rc=$?
  [ $rc -eq 2 ] && grep -q "^verdict: incomplete$" "$T/text" &&
    grep -q "^missing ranks: 1-3$" "$T/text" ||
    { echo "FAIL 1 of 4 text: rc $rc"; cat "$T/text"; fail=1; }
  # every rank there: ok, exit 0, nothing missing
  run "$DATA/ok-json" --json >"$T/out"; rc=$?
  json_check "4 of 4" "$T/out" $rc \
    'rc == 0 and d["verdict"] == "ok" and d["missing_count"] == 0 and
     d["missing_ranks"] == ""'
  # firebreak rings, one rank's file gone
  "$GEN" ok "$T/rings" >/dev/null || exit 1
  rm "$T/rings/rank-3.fbseg"
  run "$T/rings" --json >"$T/out"; rc=$?
  json_check "3 of 4, rings" "$T/out" $rc \
    'rc == 2 and d["verdict"] == "incomplete" and d["missing_ranks"] == "3" and
     d["summary"].startswith("incomplete: missing rank 3 ")'
  # evidence that decides keeps its verdict: the missing rank is the one
  # the others wait for (hang), a mismatch among the ranks read
  mkdir "$T/hang"; cp "$DATA"/hang-json/nccl_trace_rank_{0,1,3} "$T/hang/"
  run "$T/hang" --json >"$T/out"; rc=$?
  json_check "hang, culprit's dump missing" "$T/out" $rc \
    'rc == 1 and d["verdict"] == "hang" and d["culprits"] == [2] and
     d["missing_ranks"] == "2"'
  mkdir "$T/type"; cp "$DATA"/type-json/nccl_trace_rank_{0,1,2} "$T/type/"
  run "$T/type" --json >"$T/out"; rc=$?
  json_check "mismatch, one dump missing" "$T/out" $rc \
    'rc == 1 and d["verdict"] == "mismatch" and d["culprits"] == [1] and
     d["missing_ranks"] == "3"'
  # A run directory (or its fr/) stands for its newest attempt's snapshots
  # and PyTorch's dumps of that attempt, said on stderr: here attempt 3's
  # (a hang, rank 2) and not attempt 1's (a dtype mismatch).
  mkdir -p "$T/run2/fr/attempt-1" "$T/run2/fr/attempt-3" "$T/run2/fr/torch/attempt-3"
  cp "$DATA"/type-json/nccl_trace_rank_* "$T/run2/fr/attempt-1/"
  cp "$DATA"/hang-json/nccl_trace_rank_* "$T/run2/fr/torch/attempt-3/"
  for p in "$T/run2" "$T/run2/fr"; do
    run "$p" --json >"$T/out" 2>"$T/err"; rc=$?
    json_check "run directory $p" "$T/out" $rc \
      'rc == 1 and d["verdict"] == "hang" and d["culprits"] == [2]'
    grep -q "$p: attempt 3's flight recorders, the newest of 2 ($T/run2/fr/attempt-3 and PyTorch's in $T/run2/fr/torch/attempt-3)" "$T/err" \
      || { echo "FAIL run directory $p: not said: $(cat "$T/err")"; fail=1; }
  done
  # a run directory whose newest attempt holds nothing readable: exit 2,
  # naming that attempt's directory
  mkdir -p "$T/run/fr/attempt-2" "$T/run/fr/attempt-10"; echo x >"$T/run/final_hash"
  run "$T/run" >/dev/null 2>"$T/err"; rc=$?
  grep -q "$T/run/fr/attempt-10: directory holds no dump files" "$T/err" \
    && [ $rc = 2 ] || { echo "FAIL empty run directory: rc $rc: $(cat "$T/err")"; fail=1; }
  # a run's fr/ with no attempt in it: the error says so, and where they
  # would be
  mkdir -p "$T/run3/fr/torch"
  run "$T/run3" >/dev/null 2>"$T/err"; rc=$?
  grep -q "$T/run3: directory holds no dump files (a run directory, and no attempt's snapshots in $T/run3/fr: the supervisor writes them into attempt-<N> when attempt N fails)" "$T/err" \
    && [ $rc = 2 ] || { echo "FAIL run directory without attempts: rc $rc: $(cat "$T/err")"; fail=1; }
  # a directory of runs, a directory inside a run: where the runs are (as
  # report and ckpt say it); none for a directory in a run's fr/ (the
  # supervisor's inputs)
  mkdir -p "$T/root/job/logs" "$T/root/job/fr/attempt-1/x"; : >"$T/root/job/journal.sqlite"
  run "$T/root" >/dev/null 2>"$T/err"; rc=$?
  grep -q "$T/root: directory holds no dump files (but it holds 1 run directory (the newest $T/root/job): give one for its newest attempt's flight recorders)" "$T/err" \
    && [ $rc = 2 ] || { echo "FAIL directory of runs: rc $rc: $(cat "$T/err")"; fail=1; }
  run "$T/root/job/logs" >/dev/null 2>"$T/err"; rc=$?
  grep -q "$T/root/job/logs: directory holds no dump files (it is inside the run directory $(realpath "$T/root/job"): give that one" "$T/err" \
    && [ $rc = 2 ] || { echo "FAIL inside a run: rc $rc: $(cat "$T/err")"; fail=1; }
  run "$T/root/job/fr/attempt-1/x" >/dev/null 2>"$T/err"; rc=$?
  grep -q "x: directory holds no dump files$" "$T/err" \
    && [ $rc = 2 ] || { echo "FAIL inside a run's fr/: rc $rc: $(cat "$T/err")"; fail=1; }
  ;;
escape)
  python3 "$TORCHGEN" "$T/hostile" --hostile || exit 1
  printf 'junk\n' >"$T/hostile/$(printf 'x\033[2Jy')"
  run "$T/hostile" >"$T/text" 2>&1; rc=$?
  if [ $rc -ne 1 ] || LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$T/text"; then
    echo "FAIL text report: rc $rc, control bytes:"; od -c "$T/text" | grep -m5 '033\|007'
    fail=1
  else
    echo "ok   text report: rc $rc, no control bytes"
  fi
  grep -q 'tp?\[2J?\]0;owned?' "$T/text" ||
    { echo "FAIL group name not shown as text"; fail=1; }
  run "$T/hostile" --json >"$T/out" 2>"$T/err"; rc=$?
  LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$T/out" "$T/err" &&
    { echo "FAIL control bytes in --json output"; fail=1; }
  # JSON keeps the exact name, escaped by the writer
  json_check "json" "$T/out" $rc \
    'rc == 1 and d["culprits"] == [2] and
     any(f.get("group_name") == "tp\x1b[2J\x1b]0;owned\x07" for f in d["findings"]) and
     "\x1b" not in d["summary"] and all("\x1b" not in w for w in d["warnings"])'
  # an unreadable file with an escape in its name: the error names it safely
  run "$T/hostile/$(printf 'x\033[2Jy')" >"$T/text" 2>&1; rc=$?
  if [ $rc -ne 2 ] || ! grep -q 'x?\[2Jy' "$T/text" ||
     LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$T/text"; then
    echo "FAIL error message: rc $rc"; od -c "$T/text" | head -5; fail=1
  else
    echo "ok   error message names the file safely"
  fi
  ;;
fifo)
  mkdir "$T/d"; cp "$DATA"/ok-json/nccl_trace_rank_{0,1,2,3} "$T/d/"
  mkfifo "$T/fifo" "$T/d/nccl_trace_rank_4"   # after the copies
  run "$T/fifo" >"$T/text" 2>&1; rc=$?
  [ $rc -eq 2 ] && grep -q "$T/fifo: not a regular file" "$T/text" ||
    { echo "FAIL FIFO as input: rc $rc: $(cat "$T/text")"; fail=1; }
  # beside inputs that are fine, an INPUT that cannot be read still fails
  # the command naming it (it was a warning, exit by the verdict)
  mkdir "$T/good"; cp "$DATA"/ok-json/nccl_trace_rank_{0,1,2,3} "$T/good/"
  run "$T/good" "$T/fifo" >"$T/text" 2>&1; rc=$?
  [ $rc -eq 2 ] && grep -q "$T/fifo: not a regular file" "$T/text" ||
    { echo "FAIL FIFO beside a good INPUT: rc $rc: $(cat "$T/text")"; fail=1; }
  run "$T/nosuch" "$T/good" >"$T/text" 2>&1; rc=$?
  [ $rc -eq 2 ] && grep -q "$T/nosuch: No such file" "$T/text" ||
    { echo "FAIL missing INPUT beside a good one: rc $rc: $(cat "$T/text")"; fail=1; }
  # a run directory without PyTorch's dumps for the attempt reads its
  # snapshots: the subdirectories it stands for are not INPUTs named
  mkdir -p "$T/run/fr/attempt-0"; cp "$DATA"/ok-json/nccl_trace_rank_{0,1,2,3} "$T/run/fr/attempt-0/"
  run "$T/run" >"$T/text" 2>&1; rc=$?
  [ $rc -eq 0 ] || { echo "FAIL run directory without torch/: rc $rc: $(cat "$T/text")"; fail=1; }
  run "$T/d" --json >"$T/out" 2>&1; rc=$?
  json_check "FIFO in a directory" "$T/out" $rc \
    'rc == 0 and any("nccl_trace_rank_4: not a regular file" in w for w in d["warnings"])'
  # a FIFO where a live segment would be, by shm name and by path
  mkfifo /dev/shm/fb.frtest.$$.0
  run /fb.frtest.$$.0 >"$T/text" 2>&1; rc=$?
  [ $rc -eq 2 ] && grep -q "fb.frtest.$$.0.*not a regular file" "$T/text" ||
    { echo "FAIL FIFO as segment name: rc $rc: $(cat "$T/text")"; fail=1; }
  run /dev/shm/fb.frtest.$$.0 >"$T/text" 2>&1; rc=$?
  [ $rc -eq 2 ] && grep -q "fb.frtest.$$.0.*not a regular file" "$T/text" ||
    { echo "FAIL FIFO under /dev/shm: rc $rc: $(cat "$T/text")"; fail=1; }
  [ $fail -eq 0 ] && echo "ok   FIFOs are errors naming the file"
  ;;
*) echo "usage: fr_inputs.sh incomplete|escape|fifo FB FR_GEN GEN_TORCH DATA"; exit 2 ;;
esac
exit $fail
