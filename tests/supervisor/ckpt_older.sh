#!/usr/bin/env bash
# A program that restores its checkpoint and then counts its steps from 1
# again (fb-test-rank --ckpt-every-from-0): its checkpoints after the
# restart are older than the one it restored, so a second restart would
# restore that one again, not its newer state, and retention deletes them.
# The supervisor says so, once an attempt, naming both steps; a run whose
# steps only go forward hears nothing of it.
source "$(dirname "$0")/lib.sh"
mkdir -p runs
"$FB" run --run-dir runs/r --nproc-per-node 2 --max-restarts 1 \
    --inject kill:rank=1,step=18,attempt=0 \
    -- "$RANK" --steps 20 --sleep-ms 5 --ckpt-every-from-0 5 "$TAG" >out.txt 2>err.txt \
    || fail "run exited $? ($(tail -3 err.txt))"
# 15, or 10 when the kill came before rank 1's asynchronous save of 15
# was committed (a loaded machine)
R=$(sed -n 's/.*restored step \([0-9]*\).*/\1/p' runs/r/logs/rank-0.log | head -n 1)
case $R in 10|15) ;; *) fail "attempt 1 did not restore step 15 or 10: $(cat runs/r/logs/rank-0.log)" ;; esac
n=$(grep -c "is older than checkpoint" err.txt || true)
[ "$n" = 1 ] || fail "the older checkpoint said $n times, want once: $(grep older err.txt)"
# (step 5 or 10: rank 0's retention may delete step 5's directory, older
# than the kept 10 and 15, while rank 1 still writes its shard there, and
# rank 1's save of 5 then fails)
grep -Eq "firebreak run: checkpoint (5|10) is older than checkpoint $R, which this attempt restored: a restart restores $R, not this state" err.txt \
    || fail "older checkpoint: $(grep older err.txt)"
grep -q "does the program count its steps from 0 after a restore?" err.txt || fail "no hint: $(grep older err.txt)"
ok "a step count that went back after the restore is said once"

# steps that go on from the restored one: nothing said
rm -rf runs
"$FB" run --run-dir runs/r --nproc-per-node 2 --max-restarts 1 \
    --inject kill:rank=1,step=40,attempt=0 \
    -- "$BIN/fb-toy-train" --steps 60 --sleep-ms 2 --ckpt-every 5 >out.txt 2>err.txt \
    || fail "toy run exited $? ($(tail -3 err.txt))"
grep -q "restarting from the newest complete checkpoint" err.txt || fail "toy: no restart: $(tail -3 err.txt)"
grep -q "is older than checkpoint" err.txt && fail "toy: older checkpoint said: $(grep older err.txt)"
ok "a run whose steps go forward hears nothing"
