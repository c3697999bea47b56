#!/bin/bash
# report_unit: generate journals, then check them with test_report.
set -eu
T=$1 GEN=$2 DATA=$3
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
FB_REPORT_SAMPLES=$DATA "$T" classify
"$GEN" basic "$D/basic"
"$T" basic "$D/basic"
"$GEN" newminor "$D/newminor"
"$T" basic "$D/newminor"
"$GEN" running "$D/running"
"$T" running "$D/running"
"$GEN" afterfail "$D/afterfail"
"$T" afterfail "$D/afterfail"
"$GEN" shortfirst "$D/shortfirst"
"$T" shortfirst "$D/shortfirst"
"$GEN" empty "$D/empty"
"$T" error "$D/empty" EFORMAT "holds no run"
"$GEN" nostart "$D/nostart"
"$T" error "$D/nostart" EFORMAT "never started"
"$GEN" oldschema "$D/old"
"$T" error "$D/old" EVERSION "schema version 0.9 is not supported"
"$T" error "$D/nothing" ENOENT "No such file"
mkdir "$D/nojournal"
"$T" error "$D/nojournal" ENOENT "no journal.sqlite"
echo "report_unit: ok"
