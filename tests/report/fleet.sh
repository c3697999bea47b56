#!/bin/bash
# report_fleet: `firebreak report --fleet` over four generated runs of one
# fleet (fb-report-gen fleet0..3) and a directory that is not a run: the
# nodes ranked, gpu-07 flagged repeat + hardware + health with its
# incidents and its two drains (journal events "drain"), gpu-03 repeat
# and rate, not hardware (crashes of unknown cause; its failed drain not
# counted); gpu-04's
# software bugs and gpu-05's injected kills, each in two runs, are no
# evidence against those nodes (as for the report's suspects): counted
# neither as interruptions nor flagged; a node that only hosted runs not
# flagged; text and JSON agree; a missing DIR is exit 2; an unreadable
# run is skipped and said.
set -u
FB=$1 GEN=$2
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
fail() { echo "report_fleet: FAIL: $*" >&2; exit 1; }
mkdir -p "$D/fleet"
for i in 0 1 2 3; do "$GEN" fleet$i "$D/fleet/run-$i" || fail "gen $i"; done
mkdir "$D/fleet/notes"                       # not a run: ignored
mkdir "$D/fleet/broken"; echo garbage >"$D/fleet/broken/journal.sqlite"
"$FB" report --fleet "$D/fleet" >"$D/f.txt" 2>"$D/f.err" || fail "text: $(cat "$D/f.err")"
"$FB" report --fleet "$D/fleet" --json >"$D/f.json" 2>/dev/null || fail "json"
grep -q "skipped .*broken" "$D/f.err" || fail "the broken run not said: $(cat "$D/f.err")"
python3 - "$D/f.json" "$D/f.txt" <<'PY' || fail "fleet"
import json, re, sys
j = json.loads(open(sys.argv[1]).read().splitlines()[-1])
txt = open(sys.argv[2]).read()
assert j["kind"] == "firebreak.fleet" and j["nruns"] == 4 and j["skipped"] == 1, j
nodes = {n["node"]: n for n in j["nodes"]}
assert [n["node"] for n in j["nodes"]] == ["gpu-07", "gpu-03", "gpu-02", "gpu-04", "gpu-05"], \
    [n["node"] for n in j["nodes"]]
g7 = nodes["gpu-07"]
# (rate too: an interruption in each of its runs, 3x the fleet's 4 in 12
# node-runs)
assert g7["flags"] == ["repeat", "hardware", "health", "rate", "drain"], g7
assert (g7["runs_failed"], g7["hardware"], g7["health_fails"], g7["drains"]) == (2, 2, 2, 2), g7
inc = [e for e in g7["evidence"] if not e["drain"]]
dr = [e for e in g7["evidence"] if e["drain"]]
assert [e["run"] for e in inc] == ["f0", "f1"], g7["evidence"]
assert [e["run"] for e in dr] == ["f0", "f1"], g7["evidence"]
assert all(e["incident"] is None and "health check failed: kernel.xid79" in e["evidence"]
           for e in dr), dr
assert all(e["failed_checks"] == "kernel.xid79.0000:3b:00" for e in inc)
assert nodes["gpu-03"]["drains"] == 0, nodes["gpu-03"]
assert "Xid (PCI:0000:3b:00): 79" in g7["evidence"][0]["evidence"]
assert nodes["gpu-03"]["flags"] == ["repeat", "rate"], nodes["gpu-03"]
for k in ("gpu-04", "gpu-05"):
    assert nodes[k]["flags"] == [] and nodes[k]["interruptions"] == 0, nodes[k]
    assert nodes[k]["runs"] == 2 and nodes[k]["evidence"] == [], nodes[k]
assert j["interruptions"] == 4, j["interruptions"]
assert nodes["gpu-02"]["runs"] == 4 and nodes["gpu-02"]["interruptions"] == 0
# the text says the same
for n in j["nodes"]:
    flags = ",".join(n["flags"]) or "-"
    m = re.search(r"^  %s +(\d+) +(\d+) +(\d+) +(\d+) +(\d+) +[0-9.]+  (\S+)$" % re.escape(n["node"]),
                  txt, re.M)
    assert m, n["node"]
    assert (int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)),
            int(m.group(5)), m.group(6)) == (n["runs"], n["interruptions"], n["hardware"],
                            n["health_fails"], n["drains"], flags), (n, m.groups())
    if n["flags"]:
        assert "\n%s (%s): evidence\n" % (n["node"], flags) in txt
        for e in n["evidence"]:
            assert e["evidence"] in txt, e
PY
# one run directory works too; a missing one is an error
"$FB" report --fleet "$D/fleet/run-0" --json | tail -n 1 | grep -q '"nruns":1' || fail "a run dir"
# a run met twice (by itself, with a slash, and inside the fleet's DIR) is
# read once: counted twice, gpu-05's one-run failures would look repeated
"$FB" report --fleet "$D/fleet/run-0" "$D/fleet/run-0/" "$D/fleet" --json >"$D/r.json" \
    2>"$D/r.err" || fail "repeated: exit $?"
python3 - "$D/r.json" "$D/f.json" <<'PY' || fail "repeated: $(cat "$D/r.err")"
import json, sys
r, f = (json.loads(open(p).read().splitlines()[-1]) for p in sys.argv[1:])
assert r["nruns"] == 4 and r["repeated"] == 2, (r["nruns"], r["repeated"])
assert r["nodes"] == f["nodes"], "the nodes differ from the fleet read once"
PY
[ "$(grep -c "run-0/* is a run read already" "$D/r.err")" = 2 ] || fail "repeated not said: $(cat "$D/r.err")"
rc=0; "$FB" report --fleet "$D/nothing" >/dev/null 2>"$D/e" || rc=$?
[ $rc = 2 ] && grep -q "nothing" "$D/e" || fail "missing DIR: exit $rc $(cat "$D/e")"
# DIRs with no readable run (journals of garbage, empty, cut short; or no
# run at all): the empty report is written, but the exit says nothing
# was read (it said 0)
mkdir -p "$D/bad/a" "$D/bad/b" "$D/bad/c" "$D/empty"
echo garbage >"$D/bad/a/journal.sqlite"
: >"$D/bad/b/journal.sqlite"
head -c 3000 "$D/fleet/run-0/journal.sqlite" >"$D/bad/c/journal.sqlite"
for dd in bad empty; do
    rc=0; "$FB" report --fleet "$D/$dd" --json >"$D/o" 2>"$D/e" || rc=$?
    [ $rc = 2 ] || fail "--fleet of $dd: exit $rc, wanted 2: $(cat "$D/e")"
    grep -q "no run could be read" "$D/e" || fail "--fleet of $dd: $(cat "$D/e")"
    tail -n 1 "$D/o" | grep -q '"nruns":0' || fail "--fleet of $dd: $(cat "$D/o")"
done
# --html: the page says what the JSON says (table and evidence), escaped
"$FB" report --fleet "$D/fleet" --html "$D/f.html" >"$D/h.txt" 2>/dev/null || fail "--html exit $?"
grep -q "HTML report: $D/f.html" "$D/h.txt" || fail "--html: the text does not name the page"
python3 - "$D/f.json" "$D/f.html" <<'PY' || fail "fleet html"
import html, json, sys
from html.parser import HTMLParser
j = json.loads(open(sys.argv[1]).read().splitlines()[-1])
page = open(sys.argv[2]).read()
class P(HTMLParser):
    def __init__(s):
        super().__init__(); s.tables = []; s.cell = None
    def handle_starttag(s, tag, attrs):
        if tag == "table": s.tables.append((dict(attrs), []))
        elif tag == "tr": s.tables[-1][1].append([])
        elif tag in ("td", "th"): s.cell = ""
    def handle_endtag(s, tag):
        if tag in ("td", "th"): s.tables[-1][1][-1].append(s.cell); s.cell = None
    def handle_data(s, d):
        if s.cell is not None: s.cell += d
p = P(); p.feed(page)
fleet = [t for a, t in p.tables if a.get("id") == "fleet"]
assert len(fleet) == 1, [a for a, _ in p.tables]
rows = fleet[0][1:]
assert [r[0] for r in rows] == [n["node"] for n in j["nodes"]], rows
for r, n in zip(rows, j["nodes"]):
    assert [int(x) for x in r[1:6]] == [n["runs"], n["interruptions"], n["hardware"],
                                        n["health_fails"], n["drains"]], (r, n)
    assert r[7] == (", ".join(n["flags"]) or "-"), (r, n)
ev = [t for a, t in p.tables if a.get("class") == "evidence"]
flagged = [n for n in j["nodes"] if n["flags"]]
assert len(ev) == len(flagged), (len(ev), len(flagged))
for t, n in zip(ev, flagged):
    assert [r[-1] for r in t[1:]] == [e["evidence"] for e in n["evidence"]], (t, n)
    assert [r[3] for r in t[1:]] == [e["kind"] for e in n["evidence"]]
assert "<script" not in page
PY
echo "report_fleet: ok"
