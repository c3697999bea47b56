#!/bin/bash
# report_real_run: a real `firebreak run` of the toy trainer with three
# injected faults (a SIGKILL, a SIGSEGV, a hang), then `firebreak report`:
# the breakdown adds up, text / JSON / HTML agree, and each interruption's
# category is the one its injected cause maps to (docs/report.md).
set -u
FB=$1 TOY=$2
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail() { echo "report_real_run: FAIL: $*" >&2; exit 1; }
# On a failed check: the report's text and the journal rows it was made of.
dump() {
    cat "$D/r.txt" >&2
    local q
    for q in "select number, started_at, ready_at, ended_at, restored_step,
                     start_step, end_step, outcome from attempt" \
             "select attempt_id, step, committed_at, ranks, stall_ms, persist_ms,
                     status from checkpoint" \
             "select attempt_id, kind, occurred_at, detected_at, rank, step, lost_s
                from incident" \
             "select attempt_id, rank, time, step from step_sample"; do
        sqlite3 -header "$D/run/journal.sqlite" "$q" >&2 || true
    done
}

timeout 120 "$FB" run --nproc-per-node 2 --run-dir "$D/run" --hang-timeout 2s \
    --max-restarts 5 \
    --inject 'kill:rank=1,step=30' \
    --inject 'segv:rank=0,step=50,attempt=1' \
    --inject 'hang:rank=1,step=70,attempt=2' \
    -- "$TOY" --steps 90 --sleep-ms 10 >"$D/run.log" 2>&1 \
    || fail "firebreak run: $(tail -n 5 "$D/run.log")"

"$FB" report "$D/run" --html "$D/r.html" >"$D/r.txt" || fail "report"
"$FB" report "$D/run" --json >"$D/r.json" || fail "report --json"
python3 "$(dirname "$0")/agree.py" "$D/r.json" "$D/r.txt" "$D/r.html" || fail "outputs disagree"
python3 - "$D/r.json" <<'PY' || { dump; fail "categories"; }
import json, sys
j = json.loads(open(sys.argv[1]).read().splitlines()[-1])
run = j["runs"][0]
assert run["status"] == "completed", run["status"]
assert j["restarts"] == 3, j["restarts"]
ends = [i for i in j["incidents"] if i["ended_attempt"]]
got = [(i["injected"].split(":")[0], i["category"], i["component"], i["rank"]) for i in ends]
want = [("kill", "Unknown", "Unknown", 1),
        ("segv", "Dependency", "Software bug", 0),
        ("hang", "Unknown", "Collective watchdog timeout", 1)]
assert got == want, got
assert j["by_category"] == {"Dependency": 1, "Unknown": 2}, j["by_category"]
# all three were injected: said beside the category, counted in Table 5
assert [i["injected_cause"] for i in ends] == [True, True, True], ends
assert sum(r["injected"] for r in j["table"]) == 3, j["table"]
hang = ends[2]
assert hang["detect_ms"] >= 2000, hang["detect_ms"]   # includes the 2 s timeout
assert j["time_s"]["detect"] >= 2.0, j["time_s"]
for i in ends:                 # work after the restored checkpoint was lost
    assert i["lost_s"] is not None and i["lost_s"] > 0, i
assert j["ettr"] > 0 and j["ettr"] < 1, j["ettr"]
PY
echo "report_real_run: ok"
