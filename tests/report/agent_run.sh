#!/bin/bash
# report_agent_run: a real `firebreak run` of the toy trainer with the agent
# beside it, its GPUs the NVML test double with readings that vary
# (tests/health/nvml_double.c: a triangle wave of temperature and power, HW
# thermal slowdown on the hot half).  The report must show the agent's
# events (thermal slowdowns, power swings) as timeline markers and a table,
# in text, JSON and HTML alike, and a correlation of temperature and power
# with throughput that is computed (not n/a) and equals the one
# recomputed from the two databases by env_corr.py.
set -u
FB=$1 TOY=$2 DOUBLE=$3
D=$(mktemp -d)
agent="" sup=""
cleanup() {
    for p in $agent $sup; do kill -TERM "$p" 2>/dev/null; done
    for p in $agent $sup; do wait "$p" 2>/dev/null; done
    rm -rf "$D"
}
trap cleanup EXIT
fail() { echo "report_agent_run: FAIL: $*" >&2; exit 1; }

# A node with no host sensors (its 8 GPUs are its power: a swing of
# 8 x 100 W in one sample at the bottom of the wave is one of >= 30%).
mkdir -p "$D/root/sys" "$D/root/proc" "$D/root/dev"
: >"$D/root/dev/kmsg"
cat >"$D/nvml.txt" <<'SCEN'
count 8
* temp 50
* power_mw 300000
* limit_mw 700000
* wave_period 8
* temp_wave 30
* power_wave_mw 400000
* reasons_wave 0x40
SCEN
export FIREBREAK_NVML_LIB=$DOUBLE FIREBREAK_NVML_SCENARIO=$D/nvml.txt

timeout 120 "$FB" run --nproc-per-node 2 --run-dir "$D/run" --quiet \
    -- "$TOY" --steps 350 --sleep-ms 40 >"$D/run.log" 2>&1 &
sup=$!
for _ in $(seq 100); do [ -s "$D/run/job" ] && break; sleep 0.05; done
[ -s "$D/run/job" ] || fail "the run wrote no job file: $(tail -n 5 "$D/run.log")"
"$FB" agent --run "$D/run" --root "$D/root" --listen none --interval 250ms \
    --quiet 2>"$D/agent.err" &
agent=$!
rc=0
wait $sup || rc=$?
sup=""
[ $rc = 0 ] || fail "firebreak run exit $rc: $(tail -n 5 "$D/run.log")"
kill -TERM "$agent"
rc=0
wait "$agent" || rc=$?
agent=""
[ $rc = 0 ] || fail "agent exit $rc: $(cat "$D/agent.err")"

"$FB" report "$D/run" --html "$D/r.html" >"$D/r.txt" || fail "report"
"$FB" report "$D/run" --json >"$D/r.json" || fail "report --json"
python3 "$(dirname "$0")/agree.py" "$D/r.json" "$D/r.txt" "$D/r.html" || fail "outputs disagree"
python3 "$(dirname "$0")/env_corr.py" "$D/r.json" "$D/run" >"$D/corr" ||
    fail "correlation recomputed differs"
python3 - "$D/r.json" "$D/r.html" <<'PY' || fail "agent in the report"
import json, sys
j = json.loads(open(sys.argv[1]).read().splitlines()[-1])
html = open(sys.argv[2]).read()
run = j["runs"][0]
env = run["environment"]
assert env["r_temp_throughput"] is not None and env["r_power_throughput"] is not None, env
assert env["temp_buckets"] >= 8, env  # step samples come about once a second
c = run["agent_event_counts"]
assert c.get("thermal_slowdown", 0) >= 2 and c.get("thermal_slowdown_end", 0) >= 1, c
assert c.get("power_swing", 0) >= 1, c
ev = run["agent_events"]
assert len(ev) == run["agent_events_total"], (len(ev), run["agent_events_total"])
assert all(0 <= e["at_s"] <= run["wall_s"] + 2 for e in ev), ev
assert html.count('class="agent-event"') == len(ev), (html.count('class="agent-event"'), len(ev))
assert 'id="agent-events"' in html
print("events %r, r(temp) %.3f, r(power) %.3f" % (c, env["r_temp_throughput"],
                                                   env["r_power_throughput"]))
PY
grep -q "^agent events ([0-9]*)" "$D/r.txt" || fail "text: agent events"
echo "report_agent_run: ok"
