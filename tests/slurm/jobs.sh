#!/usr/bin/env bash
# jobs.sh FIREBREAK SRCDIR -- `firebreak run --launcher slurm` on the local
# four-node cluster: a job completes; a rank killed on node3 is restarted
# and the job ends with the fault-free hash; SIGUSR1 makes the ranks save a
# final checkpoint and stop cleanly; scancel leaves no process anywhere.
source "$(dirname "$0")/lib.sh"
STEPS=40

# 1. A four-node job completes, one rank per node, each on its own node.
salloc -Q -N4 "$FB" run --launcher slurm --run-dir "$T/r1" --json -- \
    "$TOY" --steps $STEPS --sleep-ms 5 >r1.json 2>r1.err || fail "run 1 exited $? ($(tail -3 r1.err))"
[ "$(json_field r1.json '["completed"]')" = True ] || fail "run 1 not completed"
grep -q "attempt 0 on node1,node2,node3,node4" r1.err || fail "run 1 nodes: $(cat r1.err)"
for r in 0 1 2 3; do
    [ "$(cat "$T/r1/final_hash.rank-$r")" = "$(ref_hash $r $STEPS)" ] || fail "run 1 rank $r hash"
done
ok "4-node job completed with the reference hashes"

# 2. Rank 2 (on node3) killed at step 12: restart, fault-free hash.
salloc -Q -N4 "$FB" run --launcher slurm --run-dir "$T/r2" --json --max-restarts 2 \
    --inject 'kill:rank=2,step=12' -- "$TOY" --steps $STEPS --sleep-ms 5 \
    >r2.json 2>r2.err || fail "run 2 exited $? ($(tail -3 r2.err))"
[ "$(json_field r2.json '["completed"]')" = True ] || fail "run 2 not completed"
[ "$(json_field r2.json '["restarts"]')" = 1 ] || fail "run 2 restarts"
[ "$(json_field r2.json '["incidents"][0]["rank"]')" = 2 ] || fail "run 2 incident rank"
json_field r2.json '["incidents"][0]["detail"]' | grep -q "on node3" || fail "run 2: node3 not named"
for r in 0 1 2 3; do
    [ "$(cat "$T/r2/final_hash.rank-$r")" = "$(cat "$T/r1/final_hash.rank-$r")" ] || fail "run 2 rank $r hash"
done
[ "$(sqlite3 "$T/r2/journal.sqlite" 'select count(*) from attempt')" = 2 ] || fail "run 2 attempts"
ok "rank killed on node3: restarted, fault-free hash"

# 3. SIGUSR1 to the supervisor (what sbatch --signal=USR1@N delivers):
#    every rank saves a checkpoint and exits 0.
salloc -Q -N4 "$FB" run --launcher slurm --run-dir "$T/r3" --json -- \
    "$TOY" --steps 100000 --sleep-ms 10 --ckpt-every 0 >r3.json 2>r3.err &
apid=$!
for r in 0 1 2 3; do
    wait_file "$T/r3/logs/slurm-attempt-0/rank-$r.log" 20 || fail "run 3 rank $r did not start"
done
for _ in $(seq 1 100); do
    grep -q "starting at" "$T"/r3/logs/slurm-attempt-0/rank-3.log && break; sleep 0.1
done
sleep 0.5
sup=$(pgrep -o -f -- "^$FB run --launcher slurm --run-dir $T/r3") || fail "no supervisor"
kill -USR1 "$sup"
wait $apid || fail "run 3 exited $? ($(tail -3 r3.err))"
[ "$(json_field r3.json '["completed"]')" = True ] || fail "run 3 did not end cleanly"
grep -q "forwarding SIGUSR1" r3.err || fail "run 3: SIGUSR1 not forwarded"
for r in 0 1 2 3; do
    grep -q "SIGUSR1: saved checkpoint" "$T/r3/logs/slurm-attempt-0/rank-$r.log" \
        || fail "run 3 rank $r: no final checkpoint"
    [ ! -e "$T/r3/final_hash.rank-$r" ] || fail "run 3 rank $r ran to the end"
done
[ -n "$(ls "$T/r3/checkpoints")" ] || fail "run 3: checkpoint directory empty"
ok "SIGUSR1: final checkpoint on every rank, clean exit"

# 4. scancel mid-run: nothing of the job is left on any node.
salloc -Q -N4 "$FB" run --launcher slurm --run-dir "$T/r4" -- \
    "$TOY" --steps 100000 --sleep-ms 10 >r4.out 2>r4.err &
apid=$!
for r in 0 1 2 3; do
    wait_file "$T/r4/logs/slurm-attempt-0/rank-$r.log" 20 || fail "run 4 rank $r did not start"
done
sleep 0.5
[ -n "$(pgrep -f -- "^$TOY ")" ] || fail "run 4: no rank running before scancel"
scancel "$(squeue -h -o %i | head -1)"
for _ in $(seq 1 150); do kill -0 $apid 2>/dev/null || break; sleep 0.1; done
kill -0 $apid 2>/dev/null && fail "run 4: salloc still running 15 s after scancel"
wait $apid || true
wait_no_jobs
for _ in $(seq 1 50); do [ -z "$(leftovers)" ] && break; sleep 0.1; done
[ -z "$(leftovers)" ] || fail "run 4: processes left after scancel: $(leftovers)"
ls /dev/shm | grep -q "^fb\.$(cat "$T/r4/job")\." && fail "run 4: segments left"
ok "scancel: no process left on any node"
