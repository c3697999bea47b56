#!/usr/bin/env bash
# One supervisor per run directory and per checkpoint directory: a second
# `firebreak run` on a directory in use exits 2 naming the holder (pid,
# host) and touches nothing; a SIGKILLed supervisor's lock goes with it
# (flock), so the next run on the same directory works.
source "$(dirname "$0")/lib.sh"
expect_busy() {   # expect_busy WHAT ARGS...: exit 2, the holder named
    local what=$1; shift
    set +e
    "$FB" run "$@" -- "$RANK" --steps 3 "$TAG" >out.txt 2>err.txt
    local rc=$?
    set -e
    [ $rc = 2 ] || fail "second run ($*) exited $rc, want 2: $(cat err.txt)"
    grep -q "the $what .* is in use by another firebreak run (pid $A on host $(hostname)" err.txt ||
        fail "message does not name the holder: $(cat err.txt)"
}
group=$(getent group users >/dev/null && echo users || id -gn)
"$FB" run --quiet --run-dir R --shared-group "$group" -- "$RANK" --steps 100000 --sleep-ms 10 "$TAG" 2>a.err &
A=$!
for _ in $(seq 100); do
    [ -s R/journal.sqlite ] && grep -q "^$A " R/supervisor.lock 2>/dev/null && break
    sleep 0.1
done
grep -q "^$A $(hostname) " R/supervisor.lock || fail "lock file: $(cat R/supervisor.lock 2>&1)"
job=$(cat R/job)
expect_busy "run directory" --run-dir R
[ "$(cat R/job)" = "$job" ] || fail "the second run overwrote job"
[ "$(sqlite3 R/journal.sqlite 'select count(*) from run')" = 1 ] || fail "the second run wrote the journal"
[ "$(stat -c %a R)" = 2750 ] || fail "the second run changed the first's mode: $(stat -c %a R)"
# Sharing the first run's checkpoints from another run directory: refused too.
expect_busy "checkpoint directory" --run-dir R2 --ckpt-dir R/checkpoints
[ ! -e R2/job ] && [ ! -e R2/journal.sqlite ] || fail "the refused run wrote to R2"
# The holder dies without cleaning up: the kernel drops its lock.
kill -9 $A
rc=0; wait $A 2>/dev/null || rc=$?
[ $rc = 137 ] || fail "the holder exited $rc before it was SIGKILLed: $(tail -3 a.err)"
for _ in $(seq 50); do [ -z "$(leftovers)" ] && break; sleep 0.1; done
"$FB" run --quiet --run-dir R -- "$RANK" --steps 3 "$TAG" 2>b.err ||
    fail "a run after the holder was SIGKILLed: $(cat b.err)"
[ "$(sqlite3 R/journal.sqlite "select status from run order by id desc limit 1")" = completed ] ||
    fail "journal of the new run"
grep -q "^[0-9]* $(hostname) " R/supervisor.lock || fail "lock file after the new run"
# The reused directory's journal holds both runs; the report (and the
# run's own summary, which is the report's accounting) is the newest one's
# alone: it used to take the first run's row with every run's attempts.
"$FB" report R >rep.txt || fail "report of the reused directory: $(cat rep.txt)"
head -1 rep.txt | grep -q "completed, 1 rank on 1 node" || fail "report's run: $(head -3 rep.txt)"
grep -q "the newest of 2 runs in this directory" rep.txt || fail "report does not say it: $(head -3 rep.txt)"
"$FB" report R --json | tail -n 1 | python3 -c '
import json, sys
r = json.load(sys.stdin)["runs"][0]
assert r["runs_in_journal"] == 2 and r["status"] == "completed", r
assert [a["number"] for a in r["attempts"]] == [0], r["attempts"]
assert r["incidents"] == 0 and r["restarts"] == 0, r
' || fail "report --json of the reused directory"
# The fleet view counts each of its runs.
[ "$("$FB" report --fleet R --json | tail -n 1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["nruns"])')" = 2 ] \
    || fail "fleet of the reused directory: $("$FB" report --fleet R 2>&1 | head -3)"
ok "one supervisor per run directory and checkpoint directory; a killed holder's lock is released; the reused directory reports its newest run"
