#!/usr/bin/env python3
"""agree.py JSON TXT HTML: a report's three outputs say the same thing.

The JSON is the last line of its file and one object; its time parts add
up to the wall time for the run and each attempt; the text breakdown and
the HTML table carry the same seconds; the HTML states the same effective
training time and every incident's evidence; the page is self-contained.
Exits 1 with the first disagreement."""
import json
import re
import sys

PARTS = ["useful", "checkpoint", "lost", "detect", "restart", "restore"]
LABELS = {"useful": "useful training", "checkpoint": "checkpoint stall",
          "lost": "lost work (recomputed)", "detect": "detection",
          "restart": "restart and start-up", "restore": "restore"}


def fail(msg):
    sys.exit("agree: FAIL: " + msg)


def main():
    lines = open(sys.argv[1]).read().splitlines()
    j = json.loads(lines[-1])
    txt = open(sys.argv[2]).read()
    html = open(sys.argv[3]).read()
    if j.get("version") != "1.0":
        fail("version %r" % j.get("version"))
    total = sum(j["time_s"][p] for p in PARTS)
    if abs(total - j["wall_s"]) > 1e-5:
        fail("parts %r sum to %f, wall %f" % (j["time_s"], total, j["wall_s"]))
    if j["wall_s"] > 0 and abs(j["ettr"] - j["time_s"]["useful"] / j["wall_s"]) > 1e-9:
        fail("ettr")
    for run in j["runs"]:
        for a in run["attempts"]:
            s = sum(a["time_s"][p] for p in PARTS)
            if abs(s - a["wall_s"]) > 1e-5:
                fail("attempt %d parts sum to %f, wall %f" % (a["number"], s, a["wall_s"]))
    # The text and the page print seconds to 3 places, the JSON to 6: half
    # a unit of the third place apart at most, and exactly that (plus the
    # float's error) for a time of x.xxx500 s that printf rounds down
    # (15.9985 -> 15.998: a CI run failed on it).
    tol = 5e-4 + 1e-9
    for p in PARTS:
        m = re.search(r"^  %s +([0-9.]+) " % re.escape(LABELS[p]), txt, re.M)
        if not m or abs(float(m.group(1)) - j["time_s"][p]) > tol:
            fail("text %s" % p)
        m = re.search(r'data-key="%s">([0-9.]+)<' % p, html)
        if not m or abs(float(m.group(1)) - j["time_s"][p]) > tol:
            fail("html %s" % p)
    if "effective training time %.2f%%" % (100 * j["ettr"]) not in txt:
        fail("text ETTR")
    if "%.2f%%" % (100 * j["ettr"]) not in html:
        fail("html ETTR")
    for i in j["incidents"][:500]:
        ev = i["evidence"].replace("&", "&amp;").replace("<", "&lt;").replace(
            ">", "&gt;").replace('"', "&quot;").replace("'", "&#39;")
        if ev not in html:
            fail("html lacks the evidence of incident %d" % i["id"])
        if i["evidence"] not in txt:
            fail("text lacks the evidence of incident %d" % i["id"])
    for r in j["runs"]:
        for e in r.get("agent_events", [])[:500]:
            d = e["detail"]
            shown = "".join("?" if ord(c) < 0x20 or c == "\x7f" else c for c in d)
            hd = d.replace("&", "&amp;").replace("<", "&lt;").replace(
                ">", "&gt;").replace('"', "&quot;").replace("'", "&#39;")
            hd = "".join("&#xFFFD;" if (ord(c) < 0x20 and c not in "\t\n") or
                         c == "\x7f" else c for c in hd)
            if hd not in html:
                fail("html lacks agent event %s at %s" % (e["kind"], e["at_s"]))
            if shown not in txt:
                fail("text lacks agent event %s at %s" % (e["kind"], e["at_s"]))
        env = r.get("environment")
        if env:
            for key, name in (("r_temp_throughput", "temperature"),
                              ("r_power_throughput", "power")):
                v = env[key]
                want = "n/a" if v is None else "r = %.3f" % v
                if "%s %s" % (name, want) not in txt:
                    fail("text %s correlation is not %s" % (name, want))
                hw = "n/a" if v is None else "r = %.3f</b>" % v
                if "%s <b>%s" % (name, hw) not in html:
                    fail("html %s correlation is not %s" % (name, want))
    page = html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    for bad in ("<script", "src=", "url(", "@import", "<link", "http://", "https://"):
        if bad in page:
            fail("html is not self-contained: " + bad)
    for chart in ("timeline of attempts", "time breakdown", "step time per rank"):
        if 'aria-label="%s' % chart not in html:
            fail("html lacks chart " + chart)


main()
