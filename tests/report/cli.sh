#!/bin/bash
# report_cli: `firebreak report` over generated journals: the breakdown adds
# up, the categories match the causes, and text, JSON and HTML agree.
set -eu
FB=$1 GEN=$2
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail() { echo "report_cli: FAIL: $*" >&2; exit 1; }

grep -q "usage: firebreak report" <<<"$("$FB" report --help)" || fail "--help"
set +e
"$FB" report >/dev/null 2>&1; [ $? = 2 ] || fail "no RUN_DIR should exit 2"
"$FB" report --bogus "$D" >/dev/null 2>&1; [ $? = 2 ] || fail "bad option should exit 2"
set -e

"$GEN" agent "$D/a"
"$FB" report "$D/a" --html "$D/a.html" >"$D/a.txt"
"$FB" report "$D/a" --json >"$D/a.json"
[ -s "$D/a.html" ] || fail "no HTML written"
grep -q "effective training time 26.89%" "$D/a.txt" || fail "text ETTR"
grep -q "12 reports of the ranks lost (rank 1 first)" "$D/a.txt" || fail "text: reports lost"
grep -q '<b id="reports-lost">12</b>' "$D/a.html" || fail "HTML: reports lost"
grep -q "HTML report: $D/a.html" "$D/a.txt" || fail "text names the HTML file"

# The three outputs agree and add up (agree.py); the numbers and the
# categories are the ones the scenario was built with.
python3 "$(dirname "$0")/agree.py" "$D/a.json" "$D/a.txt" "$D/a.html" || fail "outputs disagree"
python3 - "$D/a.json" "$D/a.html" <<'PY'
import json, re, sys
j = json.loads(open(sys.argv[1]).read().splitlines()[-1])
html = open(sys.argv[2]).read()
def fail(m):
    sys.exit("report_cli: FAIL: " + m)
if abs(j["wall_s"] - 61) > 1e-9: fail("wall %f" % j["wall_s"])
if abs(j["ettr"] - 16.4 / 61) > 1e-9: fail("ettr %f" % j["ettr"])
want = [("Unknown", "Unknown", "injected"),
        ("Dependency", "Software bug", "signal"),
        ("Unknown", "Collective watchdog timeout", "flight_recorder"),
        ("GPU", "GPU HBM3 memory", "xid"),
        ("Unknown", "Unknown", "none"),
        ("Host", "SSD", "injected")]
got = [(i["category"], i["component"], i["decided_by"]) for i in j["incidents"]]
if got != want: fail("categories %r" % got)
for k in ("kind", "category", "component", "rank", "step", "detect_ms", "lost_s", "evidence"):
    if k not in j["incidents"][0]: fail("incident lacks " + k)
if j["by_category"] != {"Unknown": 2, "Dependency": 1, "GPU": 1}:
    fail("by_category %r" % j["by_category"])
if j["interruptions"] != 4: fail("interruptions %r" % j["interruptions"])
if j["incidents"][0]["lost_s"] != 3 or j["incidents"][2]["detect_ms"] != 10000:
    fail("incident numbers")
m = re.search(r"temperature <b>r = (-?[0-9.]+)</b>.*power <b>r = (-?[0-9.]+)</b>", html)
if not m: fail("html states no correlation")
if not (float(m.group(1)) < -0.5 and float(m.group(2)) > 0.5): fail("correlation %s" % m.group(0))
for chart in ("GPU temperature", "GPU power", "throughput"):
    if 'aria-label="%s' % chart not in html: fail("html lacks chart " + chart)
# the agent's events: JSON, counts, markers on the timeline, the table
run = j["runs"][0]
if run["reports_lost"] != 12: fail("reports_lost %r" % run.get("reports_lost"))
ev = run["agent_events"]
if [(e["kind"], e["subject"], e["at_s"]) for e in ev] != [
        ("power_swing", "node", 45.2), ("thermal_slowdown", "gpu0", 46),
        ("thermal_slowdown_end", "gpu0", 50.5)]: fail("agent events %r" % ev)
if run["agent_event_counts"] != {"power_swing": 1, "thermal_slowdown": 1,
                                 "thermal_slowdown_end": 1}:
    fail("agent event counts %r" % run["agent_event_counts"])
if html.count('class="agent-event"') != 3: fail("html: agent event markers")
if 'id="agent-events"' not in html or "&lt;31%&gt;" not in html: fail("html: event table")
if "\x1b" in html: fail("html: raw escape from an event")
env = run["environment"]
if not (env["r_temp_throughput"] < -0.5 and env["r_power_throughput"] > 0.5):
    fail("environment %r" % env)
PY
python3 "$(dirname "$0")/env_corr.py" "$D/a.json" "$D/a" >/dev/null || fail "correlation recomputed differs"
grep -q "^agent events (3)" "$D/a.txt" || fail "text: agent events"
grep -q "45.200  power_swing" "$D/a.txt" || fail "text: the swing"

# A newer minor schema version with extra columns and tables is read.
"$GEN" newminor "$D/n"
"$FB" report "$D/n" --json | tail -n 1 | grep -q '"ettr":0.2688' || fail "newer minor version"

# A run still going is reported up to its last record, and says so.
"$GEN" running "$D/r"
grep -q "has not ended" <<<"$("$FB" report "$D/r")" || fail "unfinished run not flagged"

# Several runs: aggregate and suspects across runs.
"$GEN" basic "$D/b"
"$FB" report "$D/a" "$D/b" >"$D/ab.txt"
grep -q "^2 runs" "$D/ab.txt" || fail "aggregate text"
"$FB" report "$D/a" "$D/b" --json --html "$D/ab.html" | tail -n 1 | python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
assert j["nruns"] == 2 and abs(j["wall_s"] - 122) < 1e-9, j["wall_s"]
assert len(j["incidents"]) == 12
s = {x["what"]: (x["failures"], x["runs"]) for x in j["suspects"]}
# each run: rank 0 twice (SIGSEGV, ECC); rank 1 and host-a once (the hang:
# their other failure is an injected kill); host-b once (the ECC exit: the
# SIGSEGV is a software bug, none against the node)
assert s == {"rank 0": (4, 2), "rank 1": (2, 2), "node host-a": (2, 2),
             "node host-b": (2, 2)}, s
' || fail "aggregate JSON"
grep -q 'id="suspects"' "$D/ab.html" || fail "aggregate HTML suspects"
# The same run given twice (a slash, its journal file) is reported once:
# twice, its failures would make suspects of "repeated" failures.
"$FB" report "$D/a" "$D/a/" "$D/a/journal.sqlite" --json 2>"$D/twice.err" | tail -n 1 \
    | python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
assert j["nruns"] == 1 and len(j["runs"]) == 1, j["nruns"]' || fail "one run given twice: $(cat "$D/twice.err")"
[ "$(grep -c "is a run given already: reported once" "$D/twice.err")" = 2 ] \
    || fail "one run given twice: not said: $(cat "$D/twice.err")"

# An incident's detail is shown whole in the text report: it was cut at
# 300 characters, and its end is where a hang's detail says where the
# rank was.
cp -r "$D/a" "$D/long"
sqlite3 "$D/long/journal.sqlite" "update incident set detail = replace(hex(zeroblob(300)), '00', 'ab') || ' the end' where id = (select min(id) from incident)" \
    || fail "long detail: sqlite3"
"$FB" report "$D/long" >"$D/long.txt" 2>&1 || fail "long detail: exit $?"
grep -q "^      \(ab\)\{300\} the end$" "$D/long.txt" || fail "long detail not shown whole: $(grep -o 'abab.*' "$D/long.txt" | tail -c 80)"

# An incident of no one rank (save_failed, restore_fallback) has no rank
# in the HTML timeline's tooltip (it said "rank -1")
"$FB" report "$D/a" --html "$D/a.html" >/dev/null 2>&1 || fail "html: exit $?"
grep -q '<title>restore_fallback: ' "$D/a.html" && ! grep -q 'rank -1' "$D/a.html" ||
    fail "html tooltip of a rankless incident: $(grep -o '<title>[^<]*rank -1[^<]*' "$D/a.html" | head -2)"

# A detection latency no supervisor records (negative, 1e300, beyond
# twice the longest --hang-timeout) is unknown in every form: it was
# printed as stored, a 300-digit number in the text and the HTML.
for v in -5 -1e300 1e300 6e9; do
    rm -rf "$D/dms"; cp -r "$D/a" "$D/dms"
    sqlite3 "$D/dms/journal.sqlite" "update incident set detect_ms = $v" || fail "detect_ms $v: sqlite3"
    "$FB" report "$D/dms" --html "$D/dms.html" >"$D/dms.txt" 2>&1 || fail "detect_ms $v: exit $?"
    grep -q "detection time unknown" "$D/dms.txt" && ! grep -q "detected in" "$D/dms.txt" \
        || fail "detect_ms $v: $(grep -o 'detect[^,]*' "$D/dms.txt" | head -2)"
    grep -q '[0-9]\{40\}' "$D/dms.html" && fail "detect_ms $v: a long number in the HTML"
    "$FB" report "$D/dms" --json | tail -n 1 | python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
assert j["incidents"] and all(i["detect_ms"] is None for i in j["incidents"]), j["incidents"]' \
        || fail "detect_ms $v: JSON not null"
done
rm -rf "$D/dms" "$D/dms.html" "$D/dms.txt"

# Terminal escapes in the journal's text (detail, node, category, evidence,
# the run's reason) never reach the terminal raw: '?' in the text report
# and in error messages, \u001b in JSON (the value kept), U+FFFD in HTML.
ESC=$(printf '\033')
"$GEN" escapes "$D/esc"
"$FB" report "$D/esc" --html "$D/esc.html" >"$D/esc.txt" 2>&1 || fail "escapes: exit $?"
grep -q "$ESC" "$D/esc.txt" && fail "escapes: raw ESC in the text report: $(grep "$ESC" "$D/esc.txt" | od -c | head -3)"
grep -q 'on host?\[2J-a' "$D/esc.txt" || fail "escapes: node not shown as host?[2J-a"
grep -q 'rank 1 said ?\[2J?\]0;owned? and died' "$D/esc.txt" || fail "escapes: detail not sanitized"
grep -q 'node host?\[2J-a' "$D/esc.txt" || fail "escapes: suspect not sanitized"
grep -q "$ESC" "$D/esc.html" && fail "escapes: raw ESC in the HTML"
grep -q 'GPU&#xFFFD;\[2J' "$D/esc.html" || fail "escapes: HTML category not escaped"
"$FB" report "$D/esc" --json >"$D/esc.json" || fail "escapes --json: exit $?"
grep -q "$ESC" "$D/esc.json" && fail "escapes: raw ESC in the JSON"
python3 - "$D/esc.json" <<'PY' || fail "escapes: JSON does not keep the text"
import json, sys
j = json.loads(open(sys.argv[1]).read().splitlines()[-1])
assert j["incidents"][0]["node"] == "host\x1b[2J-a", j["incidents"][0]
assert j["incidents"][1]["category"] == "GPU\x1b[2J", j["incidents"][1]
PY
"$GEN" nostart_escapes "$D/escn"
rc=0
"$FB" report "$D/escn" >/dev/null 2>"$D/escn.err" || rc=$?
[ $rc = 2 ] || fail "never-started run with escapes: exit $rc, want 2"
grep -q "$ESC" "$D/escn.err" && fail "escapes: raw ESC in the error message"
grep -q 'launcher ?\[2J?\]0;x? gone' "$D/escn.err" || fail "escapes: reason: $(cat "$D/escn.err")"
echo "report_cli: ok"
