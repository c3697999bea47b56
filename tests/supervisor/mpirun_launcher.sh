#!/usr/bin/env bash
# --launcher mpirun: a rank SIGKILLed under mpirun is noticed through its
# pidfd, mpirun is stopped, the job restarts and completes.
source "$(dirname "$0")/lib.sh"
# mpirun's session directory goes under TMPDIR unless firebreak names one
# (in the job's fb.<job>.ompi, removed after each attempt): here, a TMPDIR
# of the test's own, which must stay empty whatever the stop did to mpirun
# (a SIGKILL past --grace left ompi.<host>.<uid>/pid.<pid> behind).
export TMPDIR=$T/tmp
mkdir "$TMPDIR"
"$FB" run --launcher mpirun --nproc-per-node 3 --max-restarts 1 --json \
    --inject 'kill:rank=2,step=6' -- "$RANK" --steps 20 --sleep-ms 10 "$TAG" \
    >out.json 2>err.txt || fail "run exited $? ($(tail -5 err.txt))"
[ "$(json_field out.json '["completed"]')" = True ] || fail "not completed"
[ "$(json_field out.json '["incidents"][0]["rank"]')" = 2 ] || fail "rank"
[ "$(json_field out.json '["incidents"][0]["kind"]')" = crash ] || fail "kind"
[ "$(q "select count(*) from attempt")" = 2 ] || fail "attempts"
# the relaunch's account: no standby shims under mpirun (one process)
grep -q "attempt 1: relaunched .* forks [0-9.]*, execs" err.txt \
    || fail "relaunch line: $(grep 'relaunched' err.txt)"
assert_no_segments
rm -rf runs
# A rank that finalizes cleanly and then dies (SIGABRT in an exit handler) is
# still named, with its signal, from its own end record.
set +e
"$FB" run --launcher mpirun --nproc-per-node 3 --max-restarts 0 \
    -- "$RANK" --steps 5 --sleep-ms 5 --abort-after-finalize 1 "$TAG" >out.txt 2>err.txt
rc=$?
set -e
[ $rc = 1 ] || fail "abort after finalize: exit $rc"
[ "$(q "select kind||':'||rank||':'||signal||':'||phase from incident")" = "crash:1:6:done" ] \
    || fail "abort after finalize: $(q 'select kind,rank,signal,phase,detail from incident')"
q "select detail from incident" | grep -q "in phase done, after it had finished: a crash in its teardown" \
    || fail "abort after finalize not said as such: $(q 'select detail from incident')"
# A rank that vanishes without a record while another has recorded a fatal
# end (rank 1 exited 3 and is still dying) is not the cause: rank 2 is
# SIGKILLed here the way a launcher's teardown would, and rank 1 is named.
# Twice: the second time no watch pass has attached any rank yet (test
# hook), as when ranks come and go between two passes: rank 1's record is
# still found (its segment is attached when rank 2's end is judged).
early_exit() {
    rm -rf runs
    set +e
    env "$@" "$FB" run --launcher mpirun --nproc-per-node 3 --max-restarts 0 \
        -- "$RANK" --steps 500 --sleep-ms 10 --early-exit 1:3:4000 "$TAG" >out.txt 2>err.txt &
    fbpid=$!
    set -e
    for _ in $(seq 100); do ls runs/*/lingering.1 >/dev/null 2>&1 && break; sleep 0.1; done
    ls runs/*/lingering.1 >/dev/null 2>&1 || { kill $fbpid; fail "rank 1 never lingered ($*)"; }
    kill -KILL "$(cat runs/*/pid.2)"
    set +e
    wait $fbpid
    rc=$?
    set -e
    [ $rc = 1 ] || fail "early exit ($*): exit $rc ($(tail -3 err.txt))"
    [ "$(q "select kind||':'||rank||':'||exit_code from incident")" = "error_exit:1:3" ] \
        || fail "early exit ($*): $(q 'select kind,rank,exit_code,detail from incident')
$(tail -25 err.txt)"
    assert_no_segments
}
early_exit FIREBREAK_TEST_NONE=1
early_exit FIREBREAK_TEST_ATTACH_AFTER_MS=30000
# A hard stop after --grace (a SIGSTOPped rank keeps mpirun from ending on
# SIGTERM): the shim's kill of the tree must still report mpirun's end, so
# the supervisor never waits 5 s more to SIGKILL the shim.
rm -rf runs
set +e
"$FB" run --launcher mpirun --nproc-per-node 2 --grace 1s --hang-timeout 1s \
    --max-restarts 0 --inject 'hang:rank=1,after=0.5s' \
    -- "$RANK" --steps 5000 --sleep-ms 10 "$TAG" >out.txt 2>err.txt
rc=$?
set -e
[ $rc = 1 ] || fail "hard stop: exit $rc ($(tail -3 err.txt))"
[ "$(q "select kind||':'||rank from incident")" = "hang:1" ] || fail "hard stop: $(q 'select kind,rank,detail from incident')"
! grep -q "did not report its rank's end" err.txt || fail "hard stop lost mpirun's end: $(grep 'did not report' err.txt)"
assert_no_segments
# Stopping the ranks: mpirun answers SIGTERM by forwarding it only
# odls_base_sigkill_timeout later (1 s by default, 30 s here), so the
# supervisor signals the ranks mpirun started itself, through their pidfds:
# ranks 0 and 1 record a SIGTERM sent by the supervisor, well within
# --grace. Before, they got nothing until the grace ran out and the shim
# killed the tree (no record).
rm -rf runs
set +e
"$FB" run --launcher mpirun --nproc-per-node 3 --max-restarts 0 --grace 5s \
    --mpirun-arg --mca --mpirun-arg odls_base_sigkill_timeout --mpirun-arg 30 \
    --inject 'kill:rank=2,step=6' -- "$RANK" --steps 5000 --sleep-ms 10 --term-record \
    "$TAG" >out.txt 2>err.txt
rc=$?
set -e
[ $rc = 1 ] || fail "term: exit $rc ($(tail -3 err.txt))"
[ "$(q "select kind||':'||rank from incident")" = "crash:2" ] || fail "term: $(q 'select kind,rank,detail from incident')"
for r in 0 1; do
    f=$(run_dir)/term.$r
    [ -f "$f" ] || fail "term: rank $r got no SIGTERM before the hard stop ($(ls "$(run_dir)"))"
    read -r from sup <"$f"
    [ "${from#from=}" = "${sup#supervisor=}" ] || fail "term: rank $r: SIGTERM $from, not from the $sup"
done
! grep -q "did not report its rank's end" err.txt || fail "term: $(grep 'did not report' err.txt)"
assert_no_segments
rm -rf runs
# mpirun that refuses before starting any rank (its own usage error here)
# is a launch failure: not restarted, its words in the detail.  It was an
# error_exit restarted until the crash loop stopped it.
set +e
"$FB" run --launcher mpirun --mpirun-arg --no-such-mpirun-option --nproc-per-node 2 \
    --max-restarts 3 -- "$RANK" --steps 5 "$TAG" >out.txt 2>err.txt
rc=$?
set -e
[ $rc = 1 ] || fail "mpirun usage: exit $rc ($(tail -3 err.txt))"
[ "$(q "select count(*) from attempt")" = 1 ] || fail "mpirun usage: $(q "select count(*) from attempt") attempts, want 1 (not restarted)"
[ "$(q "select kind from incident")" = launch_failure ] || fail "mpirun usage: $(q 'select kind,detail from incident')"
grep -q 'mpirun exited with code [1-9][0-9]* before starting any rank (logs/mpirun.log: .*no-such-mpirun-option' err.txt \
    || fail "mpirun usage: not said: $(grep -i mpirun err.txt | tail -3)"
assert_no_segments
ok "mpirun launcher: crash of rank 2 detected and recovered; mpirun's own refusal not restarted; abort after finalize named; a rank killed in teardown not blamed; a hard stop reports mpirun's end; the ranks get SIGTERM from the supervisor at once"
