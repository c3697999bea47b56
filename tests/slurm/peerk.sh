#!/usr/bin/env bash
# peerk.sh FIREBREAK SRCDIR -- k > 1 peer copies (--peer-copies, docs/slurm.md,
# "Checkpoint tiers") on the cluster of separate hosts: three nodes and two
# spares, each node's steps copied to the memory of the next two nodes
# (node1 -> node2, node3; node2 -> node3, node1; node3 -> node1, node2),
# storage written only at the end.  node2 and its first peer node3 are
# lost at once: rank 1 (node2's) restores from its second copy, on node1,
# moved to a spare before the launch; rank 2 (node3's) from node1's copy
# too; rank 0 from its own node's memory.  Journal sources 0:memory,
# 1:peer, 2:peer, storage holds no shard of that step, final hashes those
# of the fault-free run, nothing of the job left in any node's /dev/shm;
# before the loss the first steps left every node's memory, peer copies
# included (`fbw1 drop`); values of --peer-copies that cannot be are
# refused, naming the option.
# With one copy (PEERK_COPIES=1) rank 1 has none left and this fails.
source "$(dirname "$0")/lib.sh"
source "$SRC/tests/supervisor/tiers_lib.sh"   # jq1, want_sources
K=${PEERK_COPIES:-2}
STEPS=150
# K refused where it cannot be: not a number, negative, over 8, not fewer
# than the job's nodes (the option's name in each message).
for k in x -1 9 2.5; do
    "$FB" run --peer-copies "$k" -- /bin/true >/dev/null 2>bad.err && fail "--peer-copies $k accepted"
    grep -q -- "--peer-copies: expected a whole number in \[0, 8\], got '$k'" bad.err \
        || fail "--peer-copies $k: $(cat bad.err)"
done
salloc -Q -N4 "$FB" run --launcher slurm --run-dir "$T/bad" --nnodes 3 --persist-every 1 \
    --peer-copies 3 -- "$TOY" --steps 1 >/dev/null 2>bad.err && fail "--peer-copies 3 of 3 nodes accepted"
grep -q -- "--peer-copies 3: each copy goes to another node, so fewer than the job's 3 nodes" bad.err \
    || fail "--peer-copies 3 of 3 nodes: $(cat bad.err)"
FIREBREAK_CKPT_PEER_COPIES=5 salloc -Q -N4 "$FB" run --launcher slurm --run-dir "$T/bad2" \
    --nnodes 3 --persist-every 1 -- "$TOY" --steps 1 >/dev/null 2>bad.err \
    && fail "FIREBREAK_CKPT_PEER_COPIES=5 of 3 nodes accepted"
grep -q -- "FIREBREAK_CKPT_PEER_COPIES 5: each copy goes" bad.err \
    || fail "FIREBREAK_CKPT_PEER_COPIES=5: $(cat bad.err)"
recluster k2 5 # its own cluster: no job before the one that loses nodes
r=$T/k2
salloc -Q -N5 --no-kill "$FB" run --launcher slurm --node-timeout 3s --run-dir "$r" \
    --json --nnodes 3 --spare-nodes 2 --max-restarts 3 --persist-every 100000 \
    --peer-copies "$K" -- "$TOY" --steps $STEPS --sleep-ms 40 --ckpt-every 5 \
    >k2.json 2>k2.err &
apid=$!
wait_ckpt "$r" 25
sleep 0.3 # a step or two more, replicated to both peers by then
# Both copies of a step node2 completed are there before the loss (the
# second, node1's, only with K >= 2).
job=$(cat "$r/job")
peers=node3
[ "$K" -lt 2 ] || peers="node3 node1"
for n in $peers; do
    on "$n" sh -c "ls /dev/shm/fb.$job.mem/peer/step-*/" | grep -q 'rank-00001' \
        || fail "no copy of rank 1 on $n before the loss (K=$K)"
done
# `fbw1 drop` reaches every copy: by step 25 no node's memory, own or
# peer copies (node1 and node3 each hold two other nodes'), has the first
# checkpoints.
for n in node1 node3; do
    steps=$(on "$n" sh -c "ls /dev/shm/fb.$job.mem /dev/shm/fb.$job.mem/peer" | grep '^step-' | sort -u | tr '\n' ' ')
    case " $steps" in *" step-0000000005 "*|*" step-0000000010 "*)
        fail "$n's memory still holds old steps: $steps" ;; esac
    [ -n "$steps" ] || fail "$n's memory holds no step"
done
"$SRC/scripts/slurm-cluster.sh" fail "$CL" node2 kill
"$SRC/scripts/slurm-cluster.sh" fail "$CL" node3 kill
wait $apid || fail "run exited $? ($(tail -5 k2.err))"
[ "$(json_field k2.json '["completed"]')" = True ] || fail "run not completed"
grep -q "leaving out node2" k2.err && grep -q "leaving out node3" k2.err \
    || fail "not both left out: $(grep 'leaving out' k2.err)"
restored_from_peers "$r" k2.err 0:memory,1:peer,2:peer 2 "K=$K"
nothing_in_shm "$r" node1 node4 node5
ok "--peer-copies $K: node2 and its first peer node3 lost, rank 1 from its second copy (node1's), same hashes"
