#!/bin/bash
# bench_report: time `firebreak report` (text, --json, --html) on a journal
# with 10,000 incidents and 1,000,000 step samples, against the baseline a
# user would reach for: the sqlite3 shell scanning the same tables once
# (per-rank step-time aggregate and the incident count), in the same run.
# Best of 3 each.  Fails if the report takes 2 s or more.
set -eu
FB=$1 GEN=$2
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
"$GEN" bench "$D/run"
best() { # best wall seconds of 3 runs of "$@"
    local b=999 i s e t
    for i in 1 2 3; do
        s=$(date +%s.%N); "$@" >/dev/null; e=$(date +%s.%N)
        t=$(echo "$e - $s" | bc -l); (( $(echo "$t < $b" | bc -l) )) && b=$t
    done
    printf '%.3f' "$b"
}
base=$(best sqlite3 "$D/run/journal.sqlite" \
    "SELECT rank, count(*), avg(step_time_ms), max(step_time_ms) FROM step_sample GROUP BY rank; SELECT kind, count(*) FROM incident GROUP BY kind;")
text=$(best "$FB" report "$D/run")
json=$(best "$FB" report "$D/run" --json)
html=$(best "$FB" report "$D/run" --json --html "$D/r.html")
echo "journal: 10,000 incidents, 1,000,000 step samples, $(du -h "$D/run/journal.sqlite" | cut -f1)"
echo "baseline sqlite3 scan:       ${base} s"
echo "firebreak report (text):     ${text} s  ratio $(echo "$text / $base" | bc -l | xargs printf '%.2f')x"
echo "firebreak report --json:     ${json} s  ratio $(echo "$json / $base" | bc -l | xargs printf '%.2f')x"
echo "firebreak report --json --html: ${html} s  ratio $(echo "$html / $base" | bc -l | xargs printf '%.2f')x"
# shellcheck source=bench/result.sh
. "$(dirname "$0")/../result.sh"
ok=1
for v in "text $text" "--json $json" "--json --html $html"; do
    t=${v##* }
    bench_target bench_report "firebreak report ${v% *}, 10,000 incidents + 1M samples" \
        "$t s" "sqlite3 scan $base s" "< 2 s" "$(echo "$t < 2" | bc -l)" || ok=0
done
[ $ok = 1 ] || { echo "bench_report: FAIL: not under 2 s"; exit 1; }
echo "bench_report: ok (target < 2 s)"
