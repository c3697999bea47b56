#!/usr/bin/env bash
# jobs.sh FIREBREAK SRCDIR -- `firebreak run --launcher slurm` on the local
# cluster of four separate hosts: a job completes; a rank killed on node3 is restarted
# and the job ends with the fault-free hash; SIGUSR1 makes the ranks save a
# final checkpoint and stop cleanly; scancel leaves no process anywhere; a
# rank SIGKILLed is the failure though a peer's recorded abort follows it
# at once (srun's order of the tasks' ends decides).
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
[ "$(json_field r2.json '["incidents"][0]["rank"]')" = 2 ] || fail "run 2 incident rank: $(tail -n 1 r2.json | cut -c1-600); $(grep -h "srun: error" "$T/r2/logs/slurm-attempt-0/srun.log" | head -5)"
json_field r2.json '["incidents"][0]["detail"]' | grep -q "on node3" || fail "run 2: node3 not named"
for r in 0 1 2 3; do
    [ "$(cat "$T/r2/final_hash.rank-$r")" = "$(cat "$T/r1/final_hash.rank-$r")" ] || fail "run 2 rank $r hash"
done
[ "$(sqlite3 "$T/r2/journal.sqlite" 'select count(*) from attempt')" = 2 ] || fail "run 2 attempts"
ok "rank killed on node3: restarted, fault-free hash"

# 2b. The same with the supervisor acting as if no rank shared its host
#     (FIREBREAK_SLURM_REMOTE_ONLY, a test hook): the ranks' end, progress
#     and reports (checkpoints committed) reach the journal only through the
#     node watchers, as on a real multi-host allocation.
#     Each attempt steps long enough (0.8 s and more) for every watcher to
#     attach its ranks and report them stepping, which is what sets the
#     attempt's ready_at (once in 15 runs, 12 steps of 20 ms were not).
FIREBREAK_SLURM_REMOTE_ONLY=1 salloc -Q -N4 "$FB" run --launcher slurm --run-dir "$T/r2b" \
    --json --max-restarts 2 --inject 'kill:rank=2,step=20' \
    -- "$TOY" --steps $STEPS --sleep-ms 40 --ckpt-every 5 \
    >r2b.json 2>r2b.err || fail "run 2b exited $? ($(tail -3 r2b.err))"
[ "$(json_field r2b.json '["completed"]')" = True ] || fail "run 2b not completed"
[ "$(json_field r2b.json '["incidents"][0]["rank"]')" = 2 ] || fail "run 2b incident rank"
for r in 0 1 2 3; do
    [ "$(cat "$T/r2b/final_hash.rank-$r")" = "$(cat "$T/r1/final_hash.rank-$r")" ] || fail "run 2b rank $r hash"
done
j="$T/r2b/journal.sqlite"
n=$(sqlite3 "$j" "select count(*) from checkpoint where status='complete' and ranks=4")
[ "$n" -ge 4 ] || fail "run 2b: complete checkpoints in the journal: $n"
[ "$(sqlite3 "$j" "select count(distinct rank) from event where kind='ckpt_committed'")" = 4 ] \
    || fail "run 2b: ckpt_committed events not from every rank"
[ "$(sqlite3 "$j" "select count(*) from attempt where ready_at is not null")" = 2 ] \
    || fail "run 2b: attempts without ready_at"
dup=$(sqlite3 "$j" "select count(*) from (select attempt_id, rank, step, count(*) c from step_sample group by 1,2,3 having c > 1)")
[ "$dup" = 0 ] || fail "run 2b: $dup step samples recorded twice"
python3 -c "import json,sys; e=json.loads(open('r2b.json').read().splitlines()[-1])['ettr']; sys.exit(0 if e and 0 < e < 1 else 1)" \
    || fail "run 2b: no effective training time: $(tail -1 r2b.json)"
[ "$(sqlite3 "$j" "select count(*) from attempt where restored_step is not null")" -ge 1 ] \
    || fail "run 2b: the restore was not recorded"
# Each report counts once, also where both paths could deliver it (run 2).
dup=$(sqlite3 "$T/r2/journal.sqlite" "select count(*) from (select attempt_id, rank, kind, step, count(*) c from event group by 1,2,3,4 having c > 1)")
[ "$dup" = 0 ] || fail "run 2: $dup reports recorded twice"
ok "remote-only: ends, progress and checkpoint reports arrive through the node watchers"

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
for n in node1 node2 node3 node4; do
    grep -q "^fb\.$(cat "$T/r4/job")\." <<<"$(on $n ls /dev/shm)" && fail "run 4: segments left on $n"
done
ok "scancel: no process left on any node"

# 5. Rank 1 SIGKILLed on node2, and rank 0 aborting 0.3 s later, recording
#    its SIGABRT (as a DDP peer does when its collective fails after a
#    kill): rank 1's watcher has no record to send, rank 0's has, and it
#    comes while rank 1's end is held for srun's word; srun reports task
#    1 first, and rank 1 is the failure.  The ranks ignore SIGTERM (what
#    srun sends the step's other tasks) so that rank 0 ends on its own.
salloc -Q -N2 -w node1,node2 "$FB" run --launcher slurm --run-dir "$T/r5" --json \
    --max-restarts 0 -- bash -c 'trap "" TERM; exec "$@"' sh \
    "$TOY" --steps 100000 --sleep-ms 10 --ckpt-every 0 >r5.json 2>r5.err &
apid=$!
wait_started "$T/r5" 0 1
rank_pid() { # R: the toy process of rank R (the only job running)
    local p
    for p in $(pgrep -f -- "^$TOY "); do
        if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SLURM_PROCID=$1"; then
            echo "$p"
        fi
    done
}
p0=$(rank_pid 0)
p1=$(rank_pid 1)
[ -n "$p0" ] && [ -n "$p1" ] || fail "run 5: ranks' processes '$p0' '$p1'"
# The peer copies' key (docs/slurm.md): in the watchers' environment, not
# the ranks'.
tr '\0' '\n' <"/proc/$p0/environ" | grep -q '^FIREBREAK_PEER_KEY=' \
    && fail "run 5: rank 0's environment holds the peer copies' key"
wk=0
for p in $(pgrep -f -- "$FB watch --job"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qE '^FIREBREAK_PEER_KEY=[0-9a-f]{64}$' && wk=$((wk + 1))
done
[ "$wk" -ge 2 ] || fail "run 5: $wk watchers with the peer copies' key"
kill -KILL "$p1"
sleep 0.3
kill -ABRT "$p0"
wait $apid && fail "run 5 exited 0 after a kill with --max-restarts 0"
inc=$(sqlite3 "$T/r5/journal.sqlite" "select kind || ' ' || rank || ' ' || node || ' ' || ifnull(signal, '-') from incident")
[ "$inc" = "crash 1 node2 9" ] || fail "run 5: incident '$inc', not 'crash 1 node2 9'"
grep -q "node1: task 0: Aborted" "$T/r5/logs/slurm-attempt-0/srun.log" \
    || fail "run 5: rank 0 did not abort: $(cat "$T/r5/logs/slurm-attempt-0/srun.log")"
ok "rank 1 killed, rank 0's recorded abort right after: rank 1 is the failure ($(sqlite3 "$T/r5/journal.sqlite" "select detail from incident"))"
