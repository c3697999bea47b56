#!/usr/bin/env bash
# tiers.sh FIREBREAK SRCDIR -- node-memory checkpoints under --launcher
# slurm on the cluster of separate hosts (docs/slurm.md, "Checkpoint
# tiers"): each node's /dev/shm holds its own ranks' shards, the supervisor
# decides from the ranks' reports which step every rank can restore.
#   1. rank 1 killed on node2 (four nodes, one rank each): every rank
#      restores from its own node's memory, the storage copy of that step
#      is never read;
#   2. node2 lost (three nodes and a spare, --persist-every 2): node1's
#      rank restores from its memory, the ranks now on node3 and node4 from
#      storage, at the newest step storage holds for them;
# each ending with the fault-free hashes, the newest step copied to storage
# at the end, and nothing of the job in the /dev/shm of any node reached.
source "$(dirname "$0")/lib.sh"
CKPT=(--sleep-ms 20 --ckpt-every 5)

source "$SRC/tests/supervisor/tiers_lib.sh"   # jq1, want_sources, never_read, atime_works
newest_in_storage() { # RUNDIR WORLD: the newest step with every shard in storage
    local d
    for d in $(ls -d "$1"/checkpoints/step-* 2>/dev/null | sort -r); do
        [ "$(ls "$d" | grep -c '^rank-.*\.safetensors$')" = "$2" ] && { basename "$d"; return; }
    done
}

# 1. Rank 1 killed on node2 at step 39: restore from node memory.
atime_works || { echo "skip: atime is not updated on $T (noatime?)"; exit 77; }
salloc -Q -N4 "$FB" run --launcher slurm --run-dir "$T/mem" --json --max-restarts 2 \
    --persist-every 1 --inject 'kill:rank=1,step=39,attempt=0' \
    -- "$TOY" --steps 40 "${CKPT[@]}" >mem.json 2>mem.err \
    || fail "run 1 exited $? ($(tail -5 mem.err))"
[ "$(json_field mem.json '["restarts"]')" = 1 ] || fail "run 1 restarts"
json_field mem.json '["incidents"][0]["detail"]' | grep -q "on node2" || fail "run 1: node2 not named"
# Step 35, or 30 when rank 1 was killed before it reported 35 committed
# (the save runs in the background): the newest step the supervisor knows
# every rank has.
step=$(jq1 "$T/mem" "select restored_step from attempt where number = 1")
case "$step" in 30|35) ;; *) fail "run 1: restored step $step" ;; esac
want_sources "$T/mem" 0:memory,1:memory,2:memory,3:memory "run 1"
grep -q "will restore checkpoint $step: 4 of 4 ranks from their node's memory" mem.err \
    || fail "run 1: the supervisor's choice: $(grep 'will restore' mem.err)"
# Its storage copies (with --persist-every 1 each rank copies every save;
# rank 1's copy of 35 may not have been written when it was killed).
shards=($(ls "$T"/mem/checkpoints/step-00000000$step/rank-*.safetensors 2>/dev/null))
[ ${#shards[@]} -ge 3 ] || fail "run 1: storage lacks step $step: ${shards[*]}"
never_read "${shards[@]}" || fail "run 1: the storage copy of step $step was read"
same_hashes "$T/mem" 4 40
nothing_in_shm "$T/mem" node1 node2 node3 node4
ok "rank killed on node2: every rank restored from its node's memory, storage not read, same hashes"

# 2. node2 lost: its rank's memory is gone, and the ranks placed on other
#    nodes than before find theirs in storage.
STEPS=150
r=$T/loss
FIREBREAK_CKPT_PEER=0 salloc -Q -N4 --no-kill "$FB" run --launcher slurm --nnodes 3 --spare-nodes 1 \
    --node-timeout 3s --run-dir "$r" --json --max-restarts 2 --persist-every 2 \
    -- "$TOY" --steps $STEPS --sleep-ms 40 --ckpt-every 5 >loss.json 2>loss.err &
apid=$!
wait_ckpt "$r" 25
"$SRC/scripts/slurm-cluster.sh" fail "$CL" node2 kill
wait $apid || fail "run 2 exited $? ($(tail -5 loss.err))"
[ "$(json_field loss.json '["completed"]')" = True ] || fail "run 2 not completed"
[ "$(jq1 "$r" "select kind||':'||node from incident")" = "node_failure:node2" ] \
    || fail "run 2 incidents: $(jq1 "$r" "select kind, node, rank, step, detail from incident")"
# The step the ranks restored is the supervisor's choice, or a newer one
# complete in storage when rank 1 copied it there but was lost before its
# report came through: every rank then takes that one from storage.
chosen=$(jq1 "$r" "select restored_step from attempt where number = 1")
step=$(jq1 "$r" "select max(e.step) from event e join attempt a on a.id = e.attempt_id
                 where a.number = 1 and e.kind = 'restore_done'")
want=0:memory,1:storage,2:storage
[ "$step" -gt "$chosen" ] && want=0:storage,1:storage,2:storage
want_sources "$r" "$want" "run 2 (restored step $step, chosen $chosen)"
[ $((step % 10)) = 0 ] && [ "$step" -ge 20 ] || fail "run 2: restored step $step, not a persisted one"
same_hashes "$r" 3 $STEPS
# --persist-every 2 sends every other save to storage; the last, step 150,
# reached storage at the end of the run (or as the 30th save).
[ "$(newest_in_storage "$r" 3)" = step-0000000150 ] || fail "run 2: newest in storage $(newest_in_storage "$r" 3)"
"$FB" ckpt verify "$r/checkpoints" >/dev/null || fail "run 2: storage does not verify"
nothing_in_shm "$r" node1 node3 node4
ok "node2 lost: node1's rank from memory, the others from storage, same hashes"
