#!/usr/bin/env bash
# The live straggler check (docs/supervisor.md "Stragglers") on the MPI
# trainer, 4 ranks under mpirun: rank 2 slowed 4x (--inject slow) is named
# in an incident of kind straggler, in lateness.prom and in the report's
# lateness section, and the job completes; --on-straggler off names no
# one; three fault-free runs name no one.
#   straggler.sh FIREBREAK FB-TRAIN-MLP
if [ "${FB_EXAMPLES_STATIC:-OFF}" = ON ]; then
    echo "skipped: the trainer links the static library under clang's sanitizers;"
    echo "the preloaded interposer records into a ring the program never opened"
    exit 77
fi
source "$(dirname "$0")/lib.sh"
MLP=$2
# through a link whose name holds $TAG, so lib.sh's check for processes
# left behind sees the ranks and mpirun
ln -s "$MLP" "$T/fb-train-mlp-$TAG"
steps=120
# Open MPI leaks by design: under the sanitizers the ranks (only) run
# without LeakSanitizer; the supervisor keeps it
train() { "$FB" run --launcher mpirun --nproc-per-node 4 --max-restarts 0 \
    --mpirun-arg -x --mpirun-arg ASAN_OPTIONS=detect_leaks=0 "$@" \
    -- "$T/fb-train-mlp-$TAG" --steps $steps --hidden 32 --batch 16 --sleep-ms 10 \
    --log-every 1000; }

rc=0
"$FB" run --on-straggler restart -- true >out.txt 2>err.txt || rc=$?
[ $rc = 2 ] && grep -q -- "--on-straggler: 'restart' is not warn or off" err.txt ||
    fail "--on-straggler restart: exit $rc, $(cat err.txt)"
[ ! -e runs ] || fail "a bad --on-straggler created runs/"

train --inject 'slow:rank=2,step=5,factor=4' >out.txt 2>err.txt ||
    fail "slow run exited $? ($(tail -5 err.txt))"
assert_straggler 4
"$FB" report "$(run_dir)" >report.txt || fail "report exited $?"
grep -Eq '^ +[0-9.]+ +straggler +2 ' report.txt || fail "report: $(tail -8 report.txt)"
"$FB" report --json "$(run_dir)" >report.json || fail "report --json exited $?"
python3 - report.json <<'PY' || fail "report --json: lateness"
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
run = d["runs"][0] if "runs" in d else d
rows = [l for l in run["lateness"] if l["kind"] == "lateness" and l["rank"] == 2]
assert rows and all(l["late_ms"] > 20 and l["last"] * 2 > l["collectives"] for l in rows), run["lateness"]
assert any(l["kind"] == "straggler" and l["rank"] == 2 for l in run["lateness"])
PY
"$FB" report --html page.html "$(run_dir)" >/dev/null || fail "report --html exited $?"
grep -q '<table id="lateness">' page.html || fail "HTML: no lateness table"
grep -q '<title>rank 2</title></polyline>' page.html || fail "HTML: no lateness line for rank 2"
grep -q '<title>straggler rank 2</title></line>' page.html || fail "HTML: no naming marker"
assert_no_segments
rm -rf runs

train --inject 'slow:rank=2,step=5,factor=4' --on-straggler off >out.txt 2>err.txt ||
    fail "--on-straggler off: exited $? ($(tail -5 err.txt))"
[ "$(q "select count(*) from incident")" = 0 ] || fail "--on-straggler off: $(q 'select kind,rank from incident')"
[ ! -e "$(run_dir)/lateness.prom" ] || fail "--on-straggler off wrote lateness.prom"
rm -rf runs

# longer: 400 collectives each, judged from the 32nd on
steps=400
for i in 1 2 3; do
    train >out.txt 2>err.txt || fail "fault-free run $i exited $? ($(tail -5 err.txt))"
    [ "$(q "select count(*) from incident")" = 0 ] ||
        fail "fault-free run $i: $(q 'select kind,rank,detail from incident')"
    [ "$(q "select count(*) from event where kind like 'straggler%'")" = 0 ] ||
        fail "fault-free run $i: $(q "select kind,rank,detail from event where kind like 'straggler%'")"
    # the check ran: every rank has a window
    [ "$(grep -c '^firebreak_rank_lateness_seconds{' "$(run_dir)/lateness.prom")" = 4 ] ||
        fail "fault-free run $i: lateness.prom: $(cat "$(run_dir)/lateness.prom")"
    worst=$(q "select max(value_ms) from event where kind = 'lateness'")
    echo "fault-free run $i: worst mean lateness ${worst} ms"
    assert_no_segments
    rm -rf runs
done
ok "straggler: rank 2 slowed 4x named (incident, lateness.prom, report); off names no one; 3 fault-free runs name no one"
