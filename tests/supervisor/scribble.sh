#!/usr/bin/env bash
# A rank that writes random bytes over its own segment every millisecond
# (all of it, or only what follows the identity), or truncates its segment
# file (to one page, or to 0: loads from the lost pages raise SIGBUS in
# every reader that is not guarded), never crashes the supervisor: the
# rank is failed as "segment_corrupt", the incident, the journal and the
# log name the rank and its segment, and the run ends with an exit status,
# not a signal.
source "$(dirname "$0")/lib.sh"
SCR=$BIN/fb-test-scribbler
for mode in all live truncate truncate0; do
    rm -rf runs
    rc=0
    timeout -s KILL 90 "$FB" run --nproc-per-node 2 --max-restarts 1 --json \
        -- "$SCR" --scribble-rank 1 --mode $mode --seconds 10 "$TAG" \
        >out.json 2>err.txt || rc=$?
    [ "$rc" -lt 128 ] || fail "$mode: firebreak run died of signal $((rc - 128)) ($(tail -3 err.txt))"
    [ "$rc" = 1 ] || fail "$mode: run exited $rc, wanted 1 ($(tail -3 err.txt))"
    job=$(cat "$(run_dir)/job")
    [ "$(json_field out.json '["incidents"][0]["kind"]')" = segment_corrupt ] \
        || fail "$mode: kind: $(tail -1 out.json)"
    [ "$(json_field out.json '["incidents"][0]["rank"]')" = 1 ] || fail "$mode: rank"
    grep -q "segment of rank 1 (/dev/shm/fb\.$job\.0\.1) is corrupt" err.txt \
        || fail "$mode: log does not name the segment: $(grep -i corrupt err.txt | head -3)"
    case $mode in truncate*)
        grep -q "segment of rank 1 (/dev/shm/fb\.$job\.0\.1) is corrupt: the file was truncated" err.txt \
            || fail "$mode: log does not say truncated: $(grep -i corrupt err.txt | head -3)"
    esac
    [ "$(q "select kind||':'||rank from incident order by id limit 1")" = "segment_corrupt:1" ] \
        || fail "$mode: incident row: $(q 'select kind, rank, detail from incident')"
    q "select detail from incident" | grep -q "/dev/shm/fb\.$job\.0\.1" \
        || fail "$mode: incident detail: $(q 'select detail from incident')"
    "$FB" report "$(run_dir)" >report.txt 2>&1 || fail "$mode: report: $(tail -3 report.txt)"
    grep -q "segment_corrupt rank 1 .*(ended its attempt)" report.txt \
        || fail "$mode: report: $(grep -A2 '#1' report.txt)"
    grep -q "root cause: Dependency / Software bug, decided by kind" report.txt \
        || fail "$mode: report root cause: $(grep 'root cause' report.txt | head -2)"
    assert_no_segments
    ok "$mode: scribbled segment named as corrupt, supervisor exited $rc"
done

# A rank that keeps to the protocol but writes nonsense: random reports
# (kinds, numbers, unterminated text with control bytes) and random ring
# slots, for 10 s.  The segment stays consistent, so the supervisor reads
# all of it: it must survive, finish the run, and journal only safe text.
rm -rf runs
rc=0
timeout -s KILL 90 "$FB" run --nproc-per-node 2 --max-restarts 0 --json \
    -- "$SCR" --scribble-rank 1 --mode reports --seconds 10 "$TAG" \
    >out.json 2>err.txt || rc=$?
[ "$rc" -lt 128 ] || fail "reports: firebreak run died of signal $((rc - 128)) ($(tail -3 err.txt))"
[ "$rc" = 0 ] || fail "reports: run exited $rc ($(tail -3 err.txt))"
n=$(q "select count(*) from event where rank = 1")
[ "$n" -ge 1000 ] || fail "reports: only $n events from rank 1 journalled"
python3 - "$(run_dir)/journal.sqlite" <<'PY' || fail "reports: control bytes reached the journal"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
db.text_factory = bytes
bad = [r for (r,) in db.execute("select detail from event where detail is not null "
                                "union all select detail from incident")
       if any(c < 0x20 and c != 9 or c == 0x7f for c in r)]
sys.exit(1 if bad else 0)
PY
ok "reports: 10 s of nonsense reports read ($n events), run completed"

# One write, then silence: a heartbeat from the future (taken as it was,
# the rank was never silent) or a phase that is none of the library's (it
# had no limit). Either way the rank is hung, and declared so within the
# limit, named; the other rank kept stepping.
for mode in future-beat bad-phase; do
    rm -rf runs
    rc=0
    timeout -s KILL 60 "$FB" run --nproc-per-node 2 --max-restarts 0 --json \
        --hang-timeout 2s --startup-timeout 2s --ckpt-timeout 2s \
        -- "$SCR" --scribble-rank 1 --mode $mode --seconds 30 "$TAG" \
        >out.json 2>err.txt || rc=$?
    [ "$rc" = 1 ] || fail "$mode: run exited $rc, wanted 1 ($(tail -3 err.txt))"
    [ "$(json_field out.json '["incidents"][0]["kind"]')" = hang ] \
        && [ "$(json_field out.json '["incidents"][0]["rank"]')" = 1 ] \
        || fail "$mode: $(tail -1 out.json)"
    ok "$mode: the silent rank declared hung"
done

# A helper forked from the rank ends cleanly (fb_finalize, exit): its end
# was written into the rank's segment (phase done, an exit record), and
# the rank, hung afterwards, was never declared hung.
rm -rf runs
rc=0
timeout -s KILL 60 "$FB" run --nproc-per-node 1 --max-restarts 0 --json --hang-timeout 2s \
    -- "$RANK" --fork-exit-then-hang "$TAG" >out.json 2>err.txt || rc=$?
[ "$rc" = 1 ] && [ "$(json_field out.json '["incidents"][0]["kind"]')" = hang ] ||
    fail "fork-exit: exit $rc: $(tail -1 out.json) $(tail -3 err.txt)"
ok "a forked child's clean end is not the rank's: the hung rank declared hung"
