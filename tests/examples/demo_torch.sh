# `firebreak demo --torch --json`: the PyTorch example (examples/gpt) on 2
# ranks under the supervisor with a crash, a hang, an error exit and a
# corrupted checkpoint, every one recovered, final weights equal to the
# fault-free reference run; nothing left behind (processes of either run,
# /dev/shm segments).  Also: a python without torch is refused, naming it.
# The demo finds the script and the package in the build tree itself.
# Args: FIREBREAK_BINARY SCRATCH_DIR
FB=$1
. "$(dirname "$0")/lib.sh" "$2"
unset PYTHONPATH
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "SKIP: /usr/bin/python3 lacks torch"; exit 77; }

# Processes of a run under $T: the ranks carry FIREBREAK_RUN_DIR=$T/...
leftovers() {
    local p
    for p in /proc/[0-9]*; do
        { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -q "^FIREBREAK_RUN_DIR=$T/" &&
            echo "${p#/proc/}"
    done
}

"$FB" demo --torch --json --quiet --run-root "$T/demo" >"$T/out.json" 2>"$T/err.txt"
rc=$?
[ "$rc" = 0 ] || fail "demo --torch exited $rc: $(tail -n 20 "$T/err.txt"; tail -n 1 "$T/out.json")"
/usr/bin/python3 - "$T/out.json" <<'PY' || fail "demo JSON: $(tail -n 1 "$T/out.json")"
import json, re, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert d["trainer"] == "torch" and d["torch_version"], d
assert d["completed"] is True and d["steps"] == 120, d
assert re.fullmatch(r"[0-9a-f]{64}", d["final_hash"]), d["final_hash"]
assert d["match"] is True and d["final_hash"] == d["reference_hash"], d
# kind, rank, step, and the detection latency's bounds in ms (a crash or
# an exit is seen at once, the hang after the 3 s limit)
want = [("crash", 1, 30, 0, 1000), ("hang", 0, 55, 2900, 4000),
        ("error_exit", 1, 75, 0, 1000), ("crash", 0, 99, 0, 1000)]
assert len(d["incidents"]) == len(want) and d["restarts"] == 4, d
for i, (kind, rank, step, lo, hi) in zip(d["incidents"], want):
    assert (i["kind"], i["rank"], i["step"]) == (kind, rank, step), (i, kind, rank, step)
    assert lo <= i["detect_ms"] <= hi and i["lost_s"] >= 0, i
assert 0 < d["ettr"] < 1, d["ettr"]
PY
run=$(/usr/bin/python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["run_dir"])' "$T/out.json")
q() { sqlite3 "$run/journal.sqlite" "$1"; }
[ "$(q "select count(*) from incident where kind='restore_fallback'")" -ge 1 ] ||
    fail "the corrupted checkpoint was not set aside"
# Each restart restored the checkpoint before its fault: 20, 40, 60, and 60
# again (80 was corrupted).
starts=$(grep -h '^gpt:' "$run"/logs/rank-0*.log 2>/dev/null | sed -n 's/.* at step \([0-9]*\) .*/\1/p' | tr '\n' ' ')
[ "$starts" = "0 20 40 60 60 " ] || fail "attempts started at steps '$starts', expected '0 20 40 60 60 '"
# The hooks count steps from the step firebreak.Checkpointer restored,
# without the warning meant for a restore they cannot see.
! q "select detail from event where kind = 'note'" | grep -q "is not known" ||
    fail "a restart warned that its restored step is not known: $(q "select detail from event where kind = 'note'")"
[ "$(q "select count(distinct attempt_id) from event where kind = 'note' and detail like 'firebreak.Checkpointer restored %: the step count continues from step %'")" = 4 ] ||
    fail "not every restart noted its restored step: $(q "select attempt_id, detail from event where kind = 'note'")"
[ -s "$run/report.html" ] || fail "no report.html in $run"

left=$(leftovers)
[ -z "$left" ] || { ps -o pid,args -p "$(echo $left | tr ' ' ',')" >&2; kill -9 $left; fail "processes left behind"; }
for d in "$T"/demo/*/; do
    job=$(cat "$d/job")
    ! ls /dev/shm | grep -q "^fb\.$job\." || fail "segments of job $job left in /dev/shm"
done

# A python that cannot import torch: a venv of Debian's python without its
# site packages.
/usr/bin/python3 -m venv --without-pip "$T/venv" || fail "cannot make a venv"
"$FB" demo --torch --python "$T/venv/bin/python" --run-root "$T/none" >"$T/out2" 2>"$T/err2"
rc=$?
[ "$rc" = 2 ] || fail "demo --torch with a python without torch exited $rc, expected 2"
grep -q "$T/venv/bin/python cannot import torch" "$T/err2" || fail "no clear error: $(cat "$T/err2")"
[ ! -e "$T/none" ] || fail "a run directory was made for a python without torch"
echo "ok: demo --torch: 4 faults recovered, weights bit-identical to the reference, nothing left behind"
