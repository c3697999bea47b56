#!/usr/bin/env bash
# peerstall.sh FIREBREAK SRCDIR -- K = 2 peer copies with one of a node's
# two peers stalled (docs/slurm.md, "Checkpoint tiers"): three nodes and a
# spare, each node's steps copied to the next two (node2 -> node3, node1),
# storage written only at the end.  node3's watcher takes connections in
# and never reads them (test hook FIREBREAK_TEST_PEER_RX_HANG=node3), so a
# copy to node3 is given up after 10 s without a byte moved.  Each peer
# has senders of its own: sampled over about five seconds, the newest step
# of rank 1 (node2's) in node1's peer copies moves on at least 3 times,
# and node3 holds no copy of it (the stall is real).  node2 is then lost:
# rank 1 restores from node1's copy, moved to node3 before the launch
# (journal source `peer`), rank 2 (node3's) from a copy moved to the
# spare, rank 0 from its own memory; final hashes those of the fault-free
# run; nothing of the job left in any node's /dev/shm.
# With the sender going through its peers in turn, node2's copies wait
# for node3's answer first and node1's copy of rank 1 does not move.
source "$(dirname "$0")/lib.sh"
source "$SRC/tests/supervisor/tiers_lib.sh"   # jq1, want_sources
[ "${FB_TEST_HOOKS:-}" = ON ] || { echo "SKIP: needs a build with FB_TEST_HOOKS"; exit 77; }
STEPS=450
r=$T/stall
FIREBREAK_TEST_PEER_RX_HANG=node3 salloc -Q -N4 --no-kill "$FB" run --launcher slurm \
    --node-timeout 3s --run-dir "$r" --json --nnodes 3 --spare-nodes 1 --max-restarts 2 \
    --persist-every 100000 --peer-copies 2 -- "$TOY" --steps $STEPS --sleep-ms 40 \
    --ckpt-every 5 >stall.json 2>stall.err &
apid=$!
wait_ckpt "$r" 20
job=$(cat "$r/job")
d=/dev/shm/fb.$job.mem
# The newest step of rank 1 in NODE's peer copies (empty: none).
newest_copy() {
    on "$1" sh -c "ls $d/peer/step-*/rank-00001.safetensors 2>/dev/null || true" \
        | sed -n 's|.*/step-0*\([0-9][0-9]*\)/rank-00001.safetensors$|\1|p' | sort -n | tail -n 1
}
last=$(newest_copy node1)
moves=0
seen=${last:-none}
for _ in $(seq 1 15); do
    sleep 0.3
    s=$(newest_copy node1)
    if [ -n "$s" ] && { [ -z "$last" ] || [ "$s" -gt "$last" ]; }; then
        moves=$((moves + 1))
        last=$s
    fi
    seen="$seen ${s:-none}"
done
[ "$moves" -ge 3 ] || fail "node1's copy of rank 1 moved on $moves times with node3 stalled: $seen"
[ -z "$(newest_copy node3)" ] || fail "node3 is not stalled: it holds a copy of rank 1"
echo "node1's newest copy of rank 1, sampled: $seen"
"$SRC/scripts/slurm-cluster.sh" fail "$CL" node2 kill
wait $apid || fail "run exited $? ($(tail -5 stall.err))"
[ "$(json_field stall.json '["completed"]')" = True ] || fail "run not completed"
restored_from_peers "$r" stall.err 0:memory,1:peer,2:peer 2 "node3 stalled"
nothing_in_shm "$r" node1 node3 node4
ok "--peer-copies 2, node3 stalled: node2's copies to node1 went on, node2 lost, rank 1 from node1's copy, same hashes"
