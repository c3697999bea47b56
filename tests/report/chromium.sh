#!/bin/bash
# report_chromium: the HTML report opens in headless Chromium (no network,
# no sandbox, no GPU): every chart renders as SVG of non-zero size, in a
# wide and in a narrow window, with no console errors, no blocked or
# outside resources, and a screenshot is taken.
#
# A probe script goes into a copy of the page (the report itself has no
# script); it writes what it measured into the DOM, which --dump-dom gives
# back.  Chromium runs in its own process group, killed on exit.
set -u
FB=$1 GEN=$2
D=$(mktemp -d)
PG=
cleanup() { [ -n "$PG" ] && kill -- -"$PG" 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
fail() { echo "report_chromium: FAIL: $*" >&2; exit 1; }
CHROMIUM=$(command -v chromium || command -v chromium-browser) || {
    echo "report_chromium: chromium not installed"; exit 1; }

"$GEN" agent "$D/run" || fail "generator"
"$FB" report "$D/run" --html "$D/report.html" >/dev/null || fail "report --html"

python3 - "$D/report.html" "$D/probe.html" <<'PY'
import sys
page = open(sys.argv[1]).read()
probe = """<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<script>
var fbErrors = [];
var origError = console.error;
console.error = function () { fbErrors.push(Array.prototype.join.call(arguments, ' ')); origError.apply(console, arguments); };
window.addEventListener('error', function (e) { fbErrors.push('error: ' + (e.message || e.target && e.target.outerHTML)); }, true);
document.addEventListener('securitypolicyviolation', function (e) { fbErrors.push('csp: ' + e.blockedURI); });
window.addEventListener('load', function () {
  var out = {charts: [], errors: fbErrors, resources: performance.getEntriesByType('resource').length};
  document.querySelectorAll('svg.chart').forEach(function (s) {
    var r = s.getBoundingClientRect(), marks = 0;
    s.querySelectorAll('rect,polyline,path,line,circle').forEach(function (m) {
      var b = m.getBoundingClientRect(); if (b.width > 0 || b.height > 0) marks++; });
    out.charts.push({label: s.getAttribute('aria-label'), w: r.width, h: r.height,
                     marks: marks, texts: s.querySelectorAll('text').length});
  });
  var pre = document.createElement('pre'); pre.id = 'fb-probe';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
</script>"""
page = page.replace("<head>", "<head>" + probe, 1)
open(sys.argv[2], "w").write(page)
PY

run_chromium() { # WIDTH OUT
    setsid "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run \
        --disable-extensions --disable-background-networking --disable-sync \
        --proxy-server=127.0.0.1:9 --host-resolver-rules="MAP * ~NOTFOUND" \
        --user-data-dir="$D/profile" --window-size="$1,1600" \
        --virtual-time-budget=3000 "$3" "file://$D/probe.html" >"$2" 2>"$D/chromium.err" &
    PG=$!
    local i
    for i in $(seq 600); do kill -0 "$PG" 2>/dev/null || break; sleep 0.1; done
    kill -- -"$PG" 2>/dev/null; wait "$PG" 2>/dev/null; PG=
}

for width in 1200 420; do
    run_chromium "$width" "$D/dom-$width.html" --dump-dom
    python3 - "$D/dom-$width.html" "$width" <<'PY' || fail "width $width: $(tail -n 3 "$D/chromium.err")"
import html, json, re, sys
dom = open(sys.argv[1]).read()
m = re.search(r'<pre id="fb-probe">(.*?)</pre>', dom, re.S)
if not m: sys.exit("no probe output in the DOM")
p = json.loads(html.unescape(m.group(1)))
if p["errors"]: sys.exit("console errors: %r" % p["errors"])
if p["resources"]: sys.exit("%d outside resources loaded" % p["resources"])
want = {"timeline of attempts and incidents", "time breakdown", "step time per rank over time",
        "throughput", "GPU temperature", "GPU power"}
got = {c["label"] for c in p["charts"]}
if not want <= got: sys.exit("charts missing: %r" % (want - got))
for c in p["charts"]:
    if not (c["w"] > 100 and c["h"] > 50): sys.exit("chart %r has size %gx%g" % (c["label"], c["w"], c["h"]))
    if c["marks"] < 2 or c["texts"] < 3: sys.exit("chart %r is empty: %r" % (c["label"], c))
print("width %s: %d charts rendered" % (sys.argv[2], len(p["charts"])))
PY
done

run_chromium 900 "$D/shot.log" --screenshot="$D/shot.png"
[ -s "$D/shot.png" ] || fail "no screenshot: $(tail -n 3 "$D/chromium.err")"
[ "$(head -c 8 "$D/shot.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] || fail "screenshot is not a PNG"
[ "$(stat -c %s "$D/shot.png")" -gt 20000 ] || fail "screenshot is blank"
echo "report_chromium: ok"
