#!/usr/bin/env bash
# Per-phase limits, back-off, SIGUSR1 and the live status line:
#  - start-up work longer than --hang-timeout but within --startup-timeout
#    is not a hang; past --startup-timeout it is, in phase init;
#  - a rank still running --exit-timeout after fb_finalize (and after the
#    last rank still working ended) is hung in its teardown (phase done, a
#    software bug); a slower teardown within the limit, one waiting for a
#    rank with more work, or any with --exit-timeout 0, is not;
#  - attempts that fail again at the same step back off (0.5 s, then 1 s);
#  - SIGUSR1 to the supervisor reaches the ranks (the toy trainer then saves
#    a checkpoint and stops: the run completes);
#  - on a terminal, a live status line with steps/s and ETTR.
source "$(dirname "$0")/lib.sh"

# Start-up of 2 s: fine with --startup-timeout 10s although --hang-timeout is 1s.
"$FB" run --nproc-per-node 2 --hang-timeout 1 --startup-timeout 10 --json \
    -- "$RANK" --init-sleep-ms 2000 --steps 5 --sleep-ms 5 "$TAG" >out.json 2>err.txt \
    || fail "slow start-up within its limit was treated as a failure: $(tail -3 err.txt)"
[ "$(json_field out.json '["restarts"]')" = 0 ] || fail "restarted a slow start-up"
rm -rf runs
# Start-up of 30 s against --startup-timeout 1.5s: a hang in phase init.
set +e
"$FB" run --nproc-per-node 1 --max-restarts 0 --hang-timeout 60 --startup-timeout 1.5 \
    -- "$RANK" --init-sleep-ms 30000 --steps 5 "$TAG" >/dev/null 2>err.txt
rc=$?
set -e
[ $rc = 1 ] || fail "start-up past its limit: exit $rc"
[ "$(q "select kind||':'||phase from incident")" = "hang:init" ] || fail "incident: $(q 'select kind,phase,detail from incident')"
# Blamed on silence alone (empty rings): said as such, not as who stopped first.
q "select detail from incident" | grep -q "it was silent the longest; the flight recorder could not tell which rank stopped first" \
    || fail "hang blamed on silence worded as more: $(q 'select detail from incident')"
q "select detail from incident" | grep -q "(limit 1.5 s), no step taken; " \
    || fail "a hang before any step: $(q 'select detail from incident')"
rm -rf runs

# A teardown that never ends: rank 0 sleeps 60 s after fb_finalize; the
# run ends at --exit-timeout, not when the sleep does.
set +e
"$FB" run --nproc-per-node 2 --max-restarts 0 --exit-timeout 1.5 \
    -- "$RANK" --steps 5 --sleep-ms 5 --teardown 0:60000 "$TAG" >/dev/null 2>err.txt
rc=$?
set -e
[ $rc = 1 ] || fail "a hung teardown: exit $rc ($(tail -3 err.txt))"
[ "$(q "select kind||':'||phase||':'||rank||':'||component from incident")" = "hang:done:0:Software bug" ] \
    || fail "hung teardown's incident: $(q 'select kind,phase,rank,component,detail from incident')"
q "select detail from incident" | grep -q "(limit 1.5 s), last step 5, after it had finished: a hang in its teardown" \
    || fail "hung teardown's wording: $(q 'select detail from incident')"
rm -rf runs
# Rank 0's teardown (4 s) waits out rank 1's 3 s more work, as MPI_Finalize
# would: the limit (2 s) runs from when rank 1 ended, not from rank 0's
# finalize.
"$FB" run --nproc-per-node 2 --exit-timeout 2 --json -- "$RANK" --steps 5 --sleep-ms 50 \
    --extra-steps 1:60 --teardown 0:4000 "$TAG" >out.json 2>err.txt \
    || fail "a teardown waiting for a rank still working was a hang: $(tail -3 err.txt)"
[ "$(json_field out.json '["restarts"]')" = 0 ] || fail "restarted a teardown waiting for a rank"
rm -rf runs
# A last save still being written at exit (the handle left open: the
# library's exit handler waits for it, 3 s): checkpoint work under
# --ckpt-timeout, not a hang in the teardown under --exit-timeout 1s.
FIREBREAK_CKPT_WRITE_DELAY_MS=3000 "$FB" run --nproc-per-node 1 --exit-timeout 1 --json \
    -- "$RANK" --steps 4 --sleep-ms 5 --ckpt-every-from-0 4 --leave-open "$TAG" \
    >out.json 2>err.txt || fail "a save waited for at exit was a hang: $(tail -3 err.txt)"
[ "$(json_field out.json '["restarts"]')" = 0 ] || fail "restarted a save waited for at exit"
ls "$(run_dir)"/checkpoints/step-0000000004/rank-00000.safetensors >/dev/null 2>&1 \
    || fail "the last save, waited for at exit, is not there: $(ls -R "$(run_dir)" 2>&1 | head)"
rm -rf runs
# A slow teardown within the limit, and one with the limit off.
"$FB" run --nproc-per-node 2 --exit-timeout 10 --json \
    -- "$RANK" --steps 5 --sleep-ms 5 --teardown 1:1500 "$TAG" >out.json 2>err.txt \
    || fail "a teardown within --exit-timeout failed: $(tail -3 err.txt)"
[ "$(json_field out.json '["restarts"]')" = 0 ] || fail "restarted a slow teardown"
rm -rf runs
"$FB" run --nproc-per-node 1 --exit-timeout 0 --hang-timeout 1 \
    -- "$RANK" --steps 5 --sleep-ms 5 --teardown 0:2500 "$TAG" >/dev/null 2>err.txt \
    || fail "--exit-timeout 0 still limited the teardown: $(tail -3 err.txt)"
[ "$(q "select count(*) from incident")" = 0 ] || fail "--exit-timeout 0: $(q 'select kind,detail from incident')"
rm -rf runs

# Back-off: the same failure at the same step (crash-loop detection off).
set +e
"$FB" run --nproc-per-node 1 --max-restarts 3 --crash-loop 0 \
    --inject 'kill:rank=0,step=3,attempt=any' -- "$RANK" --steps 10 --sleep-ms 5 "$TAG" 2>err.txt
set -e
grep -q "restarting in 0.5 s (no progress" err.txt || fail "no first back-off: $(cat err.txt)"
grep -q "restarting in 1.0 s (no progress" err.txt || fail "back-off did not grow: $(cat err.txt)"
# An incident's last lines are the failing attempt's own output.
[ "$(q "select count(*) from incident where last_lines like '%attempt 0,%' and attempt_id != (select min(id) from attempt)")" = 0 ] \
    || fail "last lines of a later incident show attempt 0's output"
rm -rf runs

# SIGUSR1 is forwarded: the toy trainer saves a checkpoint and exits 0.
ln -s "$BIN/fb-toy-train" "$T/toy-$TAG"
"$FB" run --nproc-per-node 2 --run-dir usr1 -- "$T/toy-$TAG" --steps 100000 --sleep-ms 5 \
    --ckpt-every 1000 2>usr1.err &
sup=$!
for _ in $(seq 100); do
    [ "$(sqlite3 usr1/journal.sqlite 'select count(*) from step_sample' 2>/dev/null || echo 0)" -gt 0 ] && break
    sleep 0.1
done
kill -USR1 $sup
wait $sup || fail "run after SIGUSR1 exited $? ($(tail -3 usr1.err))"
grep -q "SIGUSR1: saved checkpoint" usr1/logs/rank-0.log || fail "rank 0 did not get SIGUSR1"
grep -q "SIGUSR1: saved checkpoint" usr1/logs/rank-1.log || fail "rank 1 did not get SIGUSR1"

# A stopped run with a checkpoint says how to resume it, and that resumes:
# the hinted command on the same directory starts from the checkpoint.
"$FB" run --nproc-per-node 1 --run-dir stopped --json -- "$T/toy-$TAG" --steps 100000 --sleep-ms 5 \
    --ckpt-every 20 >stop.json 2>stop.err &
sup=$!
for _ in $(seq 100); do
    [ "$(sqlite3 stopped/journal.sqlite "select count(*) from checkpoint where status = 'complete'" 2>/dev/null || echo 0)" -gt 0 ] && break
    sleep 0.1
done
kill -TERM $sup
wait $sup && fail "a stopped run exited 0"
grep -q "to resume from its newest checkpoint (step [0-9]* when it stopped): firebreak run --run-dir /[^ ]*/stopped \[the same options\] -- $T/toy-$TAG ..." stop.err \
    || fail "no resume hint: $(tail -5 stop.err)"
at=$(sed -n 's/.*newest checkpoint (step \([0-9]*\) when it stopped).*/\1/p' stop.err)
# --json says the same step, for a wrapper that resumes
[ "$(tail -n 1 stop.json | jq .checkpoint_step)" = "$at" ] || fail "--json checkpoint_step: $(tail -n 1 stop.json)"
"$FB" run --quiet --nproc-per-node 1 --run-dir stopped -- "$T/toy-$TAG" --steps $((at + 5)) \
    --sleep-ms 5 --ckpt-every 20 2>resume.err || fail "the resumed run: $(tail -3 resume.err)"
# (from step $at, or a newer one the rank saved during its stop, after
# the hint was taken)
from=$(sed -n 's/.*resuming after step \([0-9]*\).*/\1/p' stopped/logs/rank-0.log | tail -n 1)
[ -n "$from" ] && [ "$from" -ge "$at" ] ||
    fail "not resumed from step $at: $(grep -v "^step" stopped/logs/rank-0.log | tail -n 8; ls stopped/logs stopped/checkpoints; tail -n 5 resume.err)"
grep -q "to resume" err.txt 2>/dev/null && fail "a resume hint with no checkpoint"

# A terminal gets the live status line (script(1) provides the terminal).
script -qfec "\"$FB\" run --nproc-per-node 2 -- \"$RANK\" --steps 40 --sleep-ms 30 \"$TAG\"" \
    /dev/null >tty.txt </dev/null || fail "run on a terminal failed"
grep -q $'\r\033\[Kattempt 0 | step [0-9]* | [0-9.]* steps/s | restarts 0 | ETTR' tty.txt \
    || fail "no live status line: $(head -c 600 tty.txt | od -c | head)"
# Not on a terminal: a status line every 10 s, not one more after every
# log line (a 1 s run with a restart prints 1), and the stamps in order.
"$FB" run --nproc-per-node 1 --max-restarts 1 --crash-loop 0 --json -- sh -c 'sleep 0.3; exit 3' \
    >plain.json 2>plain.err && fail "a failing run exited 0"
[ "$(tail -n 1 plain.json | jq .checkpoint_step)" = null ] || fail "--json checkpoint_step without one: $(tail -n 1 plain.json)"
[ "$(grep -c '\] status: ' plain.err)" = 1 ] || fail "status lines: $(grep '\] status: ' plain.err)"
sed -n 's/^\[firebreak *\([0-9.]*\)s\].*/\1/p' plain.err | sort -c -n \
    || fail "log stamps out of order: $(grep '^\[firebreak' plain.err)"
ok "start-up limit, back-off, SIGUSR1 and the live status line behave"
