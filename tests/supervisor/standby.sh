#!/usr/bin/env bash
# Standby shims (docs/supervisor.md, "At scale"): while an attempt runs,
# the next attempt's shims are forked ahead and wait; the relaunch takes
# them instead of forking.  A crash relaunches through them (each rank's
# log gets the new attempt's mark once, after the old output, and the
# ranks attach under the new attempt's number); a standby shim that
# could not be forked, or was killed, is forked at the relaunch; a run
# that completes, or a supervisor SIGKILLed, leaves none behind.
source "$(dirname "$0")/lib.sh"

# The supervisor's shims without a child: the standby ones.
standby_shims() {
    local p
    for p in $(pgrep -P "$1" -x fb-shim || true); do
        [ -z "$(pgrep -P "$p" || true)" ] && echo "$p"
    done
    return 0
}

# wait_standby SUP N: until N standby shims are there (10 s at most).
wait_standby() {
    for _ in $(seq 200); do
        [ "$(standby_shims "$1" | grep -c .)" = "$2" ] && return 0
        sleep 0.05
    done
    fail "$2 standby shims never seen (now: $(standby_shims "$1" | grep -c .))"
}

# The ranks (children of the supervisor's shims), by rank-ordered shims.
rank_pids() {
    local p
    for p in $(pgrep -P "$1" -x fb-shim | sort -n || true); do
        pgrep -P "$p" || true
    done
}

# wait_ranks SUP N: until N ranks run.
wait_ranks() {
    for _ in $(seq 200); do
        [ "$(rank_pids "$1" | grep -c .)" -ge "$2" ] && return 0
        sleep 0.05
    done
    fail "ranks did not start"
}

# 1. A rank killed: attempt 1 starts from the 4 standby shims.
"$FB" run --nproc-per-node 4 --max-restarts 1 --crash-loop 0 -- \
    "$RANK" --steps 150 --sleep-ms 10 "$TAG" >/dev/null 2>err.txt &
sup=$!
wait_ranks $sup 4
wait_standby $sup 4
kill -KILL "$(rank_pids $sup | sed -n 2p)"
wait $sup || fail "run exited $? ($(tail -3 err.txt))"
grep -q "attempt 1: 4 of 4 ranks' shims were standing by" err.txt ||
    fail "attempt 1 did not start from standby shims: $(grep -i 'attempt 1' err.txt)"
[ "$(q "select count(*) from attempt")" = 2 ] || fail "want 2 attempts: $(tail -3 err.txt)"
[ "$(q "select outcome from attempt where number = 1")" = completed ] ||
    fail "attempt 1: $(q "select outcome from attempt where number = 1")"
for r in 0 1 2 3; do
    log="$(run_dir)/logs/rank-$r.log"
    [ "$(grep -c '^=== firebreak: attempt 1, rank '$r' ===$' "$log")" = 1 ] ||
        fail "rank $r's log: attempt 1's mark not once: $(grep -n '===' "$log")"
    # the mark comes after every line of attempt 0
    last0=$(grep -n 'attempt 0' "$log" | tail -1 | cut -d: -f1)
    mark1=$(grep -n 'attempt 1, rank' "$log" | cut -d: -f1)
    [ "$mark1" -gt "$last0" ] || fail "rank $r's log: attempt 1's mark at line $mark1, before $last0"
done
[ -z "$(leftovers)" ] || fail "left after the run: $(leftovers)"
[ ! -d "$(run_dir)/fr/torch/attempt-2" ] || fail "an empty attempt-2 directory left"
assert_no_segments
rm -rf runs

# 2. A standby shim that could not be forked (test hook: rank 2's), and
#    one killed while it waited (rank 0's): the relaunch forks those two.
FIREBREAK_TEST_STANDBY_FAIL=2 "$FB" run --nproc-per-node 4 --max-restarts 1 \
    --crash-loop 0 -- "$RANK" --steps 150 --sleep-ms 10 "$TAG" >/dev/null 2>err.txt &
sup=$!
wait_ranks $sup 4
wait_standby $sup 3
victim=$(standby_shims $sup | sort -n | head -1)
kill -KILL "$victim"
wait_standby $sup 2
kill -KILL "$(rank_pids $sup | sed -n 4p)"
wait $sup || fail "run exited $? ($(tail -3 err.txt))"
grep -q "rank 2: no standby shim" err.txt || fail "the failed standby fork not logged"
grep -q "attempt 1: 2 of 4 ranks' shims were standing by" err.txt ||
    fail "want 2 of 4 standing by: $(grep -i 'standing\|standby' err.txt)"
[ "$(q "select outcome from attempt where number = 1")" = completed ] ||
    fail "attempt 1 did not complete: $(tail -3 err.txt)"
[ -z "$(leftovers)" ] || fail "left after the run: $(leftovers)"
assert_no_segments
rm -rf runs

# 3. The supervisor SIGKILLed while standby shims wait: none stays.
"$FB" run --nproc-per-node 3 --hang-timeout 30 -- \
    "$RANK" --steps 100000 --sleep-ms 10 "$TAG" >/dev/null 2>err.txt &
sup=$!
wait_ranks $sup 3
wait_standby $sup 3
kill -KILL $sup
rc=0; wait $sup 2>/dev/null || rc=$?
[ $rc = 137 ] || fail "the supervisor exited $rc before it was SIGKILLed"
for _ in $(seq 50); do [ -z "$(leftovers)" ] && break; sleep 0.1; done
[ -z "$(leftovers)" ] || fail "left after SIGKILL of the supervisor: $(leftovers)"
job=$(cat "$(run_dir)/job")
rm -rf runs /dev/shm/fb."$job".*

# 4. FIREBREAK_STANDBY_SHIMS=0 (to compare): none.
FIREBREAK_STANDBY_SHIMS=0 "$FB" run --nproc-per-node 2 --max-restarts 1 -- \
    "$RANK" --steps 100 --sleep-ms 10 "$TAG" >/dev/null 2>err.txt &
sup=$!
wait_ranks $sup 2
sleep 0.3
[ -z "$(standby_shims $sup)" ] || fail "standby shims with FIREBREAK_STANDBY_SHIMS=0"
wait $sup || fail "run exited $?"
ok "relaunch from standby shims; failed or killed ones forked at the relaunch; none left"
