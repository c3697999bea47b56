#!/usr/bin/env bash
# peerlag.sh FIREBREAK SRCDIR -- the peer tier when replication is slower
# than the checkpoint interval (docs/slurm.md, "Checkpoint tiers"): three
# nodes and a spare, a checkpoint every 0.2 s, each peer copy started 2 s
# late (test hook FIREBREAK_TEST_PEER_SEND_DELAY_MS), storage written only
# at the end.  The supervisor names the step every node replicates (`fbw1
# send`) and keeps, while newer steps are taken, the newest one whose
# copies are on other nodes (`fbw1 drop STEP KEEP...`): sampled ten times
# over three seconds, node3 always holds a copy of rank 1 (node2's); node2
# is then lost and rank 1 restores from node3's copy (journal source
# `peer`), not from storage and not from the start; final hashes those of
# the fault-free run; node memory holds a handful of steps, not every one;
# nothing of the job left in any node's /dev/shm.
# Without the named steps and the kept one, each copy is dropped as soon
# as a newer step is complete in every node's own memory, and node3 holds
# none most of the time.
source "$(dirname "$0")/lib.sh"
source "$SRC/tests/supervisor/tiers_lib.sh"   # jq1, want_sources
[ "${FB_TEST_HOOKS:-}" = ON ] || { echo "SKIP: needs a build with FB_TEST_HOOKS"; exit 77; }
STEPS=600
r=$T/lag
FIREBREAK_TEST_PEER_SEND_DELAY_MS=2000 salloc -Q -N4 --no-kill "$FB" run --launcher slurm \
    --node-timeout 3s --run-dir "$r" --json --nnodes 3 --spare-nodes 1 --max-restarts 2 \
    --persist-every 100000 -- "$TOY" --steps $STEPS --sleep-ms 40 --ckpt-every 5 \
    >lag.json 2>lag.err &
apid=$!
wait_ckpt "$r" 20
job=$(cat "$r/job")
d=/dev/shm/fb.$job.mem
# The first copy arrives 2 s after its step or so; from then on one is
# always there.
for _ in $(seq 1 150); do
    on node3 sh -c "ls $d/peer/step-*/ 2>/dev/null" | grep -q 'rank-00001' && break
    sleep 0.1
done
for i in $(seq 1 10); do
    on node3 sh -c "ls $d/peer/step-*/ 2>/dev/null" | grep -q 'rank-00001' \
        || fail "sample $i: node3 holds no copy of rank 1 ($(on node3 sh -c "ls $d/peer" | tr '\n' ' '))"
    n=$(on node1 ls "$d" | grep -c '^step-' || true)
    [ "$n" -le 8 ] || fail "sample $i: node1's memory holds $n steps: $(on node1 ls "$d" | tr '\n' ' ')"
    sleep 0.3
done
"$SRC/scripts/slurm-cluster.sh" fail "$CL" node2 kill
wait $apid || fail "run exited $? ($(tail -5 lag.err))"
[ "$(json_field lag.json '["completed"]')" = True ] || fail "run not completed"
restored_from_peers "$r" lag.err 0:memory,1:peer,2:peer 1 "copies 2 s late" 5
nothing_in_shm "$r" node1 node3 node4
ok "peer copies slower than the checkpoints: a step with its copies kept, node2 lost, rank 1 from node3's copy, same hashes"
