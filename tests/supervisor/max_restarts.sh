#!/usr/bin/env bash
# Failures in every attempt exhaust --max-restarts: exit 1 and a message
# that says why.  --max-restarts 0 gives up at the first failure.  A failure
# repeating at the same step is a crash loop and stops early.
source "$(dirname "$0")/lib.sh"
# run_fails WHAT ARGS...: firebreak run ARGS must exit 1; stderr in err.txt
run_fails() {
    local what=$1 rc
    shift
    set +e
    "$FB" run "$@" 2>err.txt
    rc=$?
    set -e
    [ $rc = 1 ] || fail "$what: exit $rc"
}
# Different steps per attempt (not a crash loop): exhausts 2 restarts.
set +e
"$FB" run --nproc-per-node 2 --max-restarts 2 --json \
    --inject 'kill:rank=0,step=3,attempt=0' --inject 'kill:rank=0,step=4,attempt=1' \
    --inject 'kill:rank=0,step=5,attempt=2' -- "$RANK" --steps 10 --sleep-ms 5 "$TAG" \
    >out.json 2>err.txt
rc=$?
set -e
[ $rc = 1 ] || fail "exit code $rc, want 1"
grep -q "gave up after 2 restarts" err.txt || fail "no clear message: $(cat err.txt)"
# an injected kill is Unknown: said once, not "Unknown / Unknown", the
# fault named and "injected" said once
[ "$(grep -c "root cause: Unknown (by the injected fault kill:rank=0,step=[345])$" err.txt)" = 3 ] \
    || fail "root cause line: $(grep 'root cause' err.txt)"
[ "$(json_field out.json '["completed"]')" = False ] || fail "completed?"
[ "$(q "select status from run")" = failed ] || fail "run status"
[ "$(q "select count(*) from attempt")" = 3 ] || fail "3 attempts"
rm -rf runs
# --max-restarts 0
run_fails "max-restarts 0" --nproc-per-node 2 --max-restarts 0 \
    --inject 'kill:rank=1,step=3' -- "$RANK" --steps 10 --sleep-ms 5 "$TAG"
grep -q "gave up after 0 restarts" err.txt || fail "message: $(cat err.txt)"
[ "$(q "select count(*) from attempt")" = 1 ] || fail "one attempt"
rm -rf runs
# Crash loop: same failure at the same step in every attempt.
run_fails "crash loop" --nproc-per-node 2 --max-restarts 5 \
    --inject 'kill:rank=1,step=3,attempt=any' -- "$RANK" --steps 10 --sleep-ms 5 "$TAG"
grep -q "crash loop" err.txt || fail "no crash-loop diagnosis: $(cat err.txt)"
[ "$(q "select count(*) from attempt")" = 2 ] || fail "crash loop should stop after 2 attempts"
rm -rf runs
# A crash loop before any step (a program that cannot start, e.g. a syntax
# error) says so, not "at step -1".
run_fails "crash loop before any step" --nproc-per-node 1 --max-restarts 5 \
    -- "$RANK" --steps 0 --exit-code 3 "$TAG"
grep -q "crash loop: the job failed the same way (error_exit) before its first step in 2 attempts" err.txt \
    || fail "crash loop before any step: $(cat err.txt)"
q "select detail from incident limit 1" | grep -q "^rank 0 exited with code 3 before its first step in phase " \
    || fail "incident before any step: $(q 'select detail from incident')"
grep -q "step -1" err.txt && fail "step -1 shown: $(grep 'step -1' err.txt)"
grep -q "stopping instead of using the remaining restarts" err.txt \
    || fail "crash loop with restarts left: $(cat err.txt)"
rm -rf runs
# A crash loop on the last restart: no "remaining restarts" to speak of.
run_fails "crash loop on the last restart" --nproc-per-node 1 --max-restarts 1 \
    -- "$RANK" --steps 0 --exit-code 3 "$TAG"
grep -q "in 2 attempts in a row, with no restart left (--max-restarts 1)" err.txt \
    || fail "crash loop on the last restart: $(cat err.txt)"
grep -q "remaining restarts" err.txt && fail "remaining restarts, with none left: $(cat err.txt)"
ok "restarts exhausted, max-restarts 0 and crash loop (at a step, before any) all stop with a reason"
