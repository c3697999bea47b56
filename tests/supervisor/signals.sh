#!/usr/bin/env bash
# SIGTERM to the supervisor stops every rank (even one that ignores SIGTERM,
# after the grace period) and leaves a consistent journal; SIGKILL of the
# supervisor itself leaves no orphan either, including grandchildren that
# called setsid().
source "$(dirname "$0")/lib.sh"
# stopped PID WHAT: the supervisor PID, signalled, must exit 143 and leave
# no process behind
stopped() {
    local rc=0
    wait "$1" || rc=$?
    [ $rc = 143 ] || fail "exit $rc after $2, want 143"
    [ -z "$(leftovers)" ] || fail "processes left after $2: $(leftovers)"
}
"$FB" run --nproc-per-node 3 --grace 1 --hang-timeout 30 -- \
    "$RANK" --steps 100000 --sleep-ms 10 --spawn-child --ignore-term "$TAG" 2>err.txt &
sup=$!
for i in $(seq 100); do
    [ "$(ls "$T"/runs/*/child.* 2>/dev/null | wc -l)" = 3 ] && break
    sleep 0.1
done
[ "$(ls "$T"/runs/*/child.* | wc -l)" = 3 ] || fail "ranks did not start"
kill -TERM $sup
stopped $sup SIGTERM
[ "$(q "select status from run")" = interrupted ] || fail "run status"
[ "$(q "select outcome from attempt")" = stopped ] || fail "attempt outcome"
[ "$(q "select count(*) from run where ended_at is not null")" = 1 ] || fail "ended_at"
assert_no_segments
rm -rf runs

# A second SIGTERM (or Ctrl-C) skips the rest of the grace period: ranks
# that ignore SIGTERM under --grace 60 are killed at once.
"$FB" run --nproc-per-node 2 --grace 60 --hang-timeout 30 -- \
    "$RANK" --steps 100000 --sleep-ms 10 --ignore-term "$TAG" 2>err.txt &
sup=$!
for _ in $(seq 100); do
    [ "$(q "select count(*) from attempt" 2>/dev/null)" = 1 ] && [ -n "$(leftovers)" ] && break
    sleep 0.1
done
sleep 0.5
kill -TERM $sup
sleep 0.5
t0=$(date +%s)
kill -TERM $sup
stopped $sup "two SIGTERMs"
[ $(($(date +%s) - t0)) -lt 20 ] || fail "the second SIGTERM waited out --grace 60"
grep -q "received Terminated again: killing the ranks now, without the rest of --grace" err.txt \
    || fail "the second SIGTERM not said: $(tail -3 err.txt)"
rm -rf runs

# SIGTERM while waiting to restart (the back-off after attempts without
# progress): the restart decided is not counted (it said one more restart
# than the journal's attempts), and the signal is said.
"$FB" run --nproc-per-node 1 --max-restarts 8 --crash-loop 0 --json -- \
    "$RANK" --steps 5 --exit-code 3 "$TAG" >out.json 2>err.txt &
sup=$!
for _ in $(seq 200); do
    grep -q "restarting in" err.txt && break
    sleep 0.05
done
grep -q "restarting in" err.txt || fail "no back-off: $(tail -3 err.txt)"
kill -TERM $sup
stopped $sup "SIGTERM in the back-off"
grep -q "received Terminated between attempts: not restarting" err.txt ||
    fail "the signal in the back-off not said: $(tail -3 err.txt)"
n=$(q "select count(*) from attempt")
[ "$(json_field out.json '["attempts"]')" = "$n" ] || fail "attempts: $(tail -n 1 out.json), journal $n"
[ "$(json_field out.json '["restarts"]')" = $((n - 1)) ] ||
    fail "restarts: $(tail -n 1 out.json), journal $n attempts"
grep -q "after $n attempts, $((n - 1)) restart" err.txt || fail "summary: $(grep attempts err.txt)"
rm -rf runs

# SIGKILL the supervisor: the shims notice (parent-death signal) and kill
# their whole trees, setsid() grandchildren included.
"$FB" run --nproc-per-node 2 --hang-timeout 30 -- \
    "$RANK" --steps 100000 --sleep-ms 10 --spawn-child "$TAG" 2>err.txt &
sup=$!
for i in $(seq 100); do
    [ "$(ls "$T"/runs/*/child.* 2>/dev/null | wc -l)" = 2 ] && break
    sleep 0.1
done
[ "$(ls "$T"/runs/*/child.* | wc -l)" = 2 ] || fail "ranks did not start (2)"
kill -KILL $sup
rc=0; wait $sup 2>/dev/null || rc=$?
[ $rc = 137 ] || fail "the supervisor exited $rc before it was SIGKILLed: $(tail -3 err.txt)"
for i in $(seq 50); do
    [ -z "$(leftovers)" ] && break
    sleep 0.1
done
[ -z "$(leftovers)" ] || fail "orphans after SIGKILL of the supervisor: $(leftovers)"

# The killed supervisor could not remove its segments: they stay as
# evidence, and the next run on this machine removes them as stale
# (supervisor gone), however soon it starts.
job=$(cat "$(run_dir)/job")
ls /dev/shm/fb."$job".* >/dev/null 2>&1 || fail "no segments left by the killed run"
rm -rf runs
"$FB" run --quiet --nproc-per-node 1 -- "$RANK" --steps 2 --sleep-ms 1 "$TAG" 2>/dev/null \
    || fail "run after the killed one"
if ls /dev/shm/fb."$job".* >/dev/null 2>&1; then
    fail "stale segments of the killed run were not cleaned"
fi

# The same under mpirun: Open MPI's shared-memory directory of the killed
# run (fb.<job>.ompi) goes at the next run's start too.
rm -rf runs
"$FB" run --launcher mpirun --nproc-per-node 2 --hang-timeout 30 -- \
    "$RANK" --steps 100000 --sleep-ms 10 "$TAG" 2>err.txt &
sup=$!
for i in $(seq 100); do
    [ "$(ls /dev/shm/fb."$(cat runs/*/job 2>/dev/null)".* 2>/dev/null | wc -l)" -ge 3 ] && break
    sleep 0.1
done
job=$(cat "$(run_dir)/job")
[ -d /dev/shm/fb."$job".ompi ] || { kill $sup; fail "no Open MPI directory for job $job"; }
kill -KILL $sup
wait $sup 2>/dev/null || true
for i in $(seq 50); do [ -z "$(leftovers)" ] && break; sleep 0.1; done
ls -d /dev/shm/fb."$job".* >/dev/null 2>&1 || fail "nothing left by the killed mpirun run"
rm -rf runs
"$FB" run --quiet --nproc-per-node 1 -- "$RANK" --steps 2 --sleep-ms 1 "$TAG" 2>/dev/null \
    || fail "run after the killed mpirun run"
if ls -d /dev/shm/fb."$job".* >/dev/null 2>&1; then
    fail "left by the killed mpirun run: $(ls -d /dev/shm/fb."$job".*)"
fi
ok "SIGTERM and SIGKILL of the supervisor leave nothing behind; stale segments cleaned"
