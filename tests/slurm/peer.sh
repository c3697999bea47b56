#!/usr/bin/env bash
# peer.sh FIREBREAK SRCDIR -- the peer tier of node-memory checkpoints under
# --launcher slurm on the cluster of separate hosts (docs/slurm.md,
# "Checkpoint tiers"): each node's watcher sends the steps its ranks
# completed in its memory to the next node's watcher (fbr1), which keeps
# them apart in /dev/shm/fb.<job>.mem/peer and says so (fbw1 `peer`).
#   1. node2 lost (three nodes and a spare, storage written only at the
#      end), frozen for a second first, so that the request lines srun
#      forwards to its watcher lie unread when it dies (srun then reads
#      ECONNRESET from its slurmstepd): node1's and node3's watchers go on
#      and only node2 is lost; rank 1, now on node3, restores from the copy node3 received
#      from node2; rank 2, now on node4, from the shard the supervisor had
#      node3 send to node4 before the launch; neither reads storage (it
#      holds no shard of the step); rank 0 from its own node's memory;
#   2. node2 lost and node3's peer copies with it: rank 1 restores from
#      storage (--persist-every 1), rank 2 from node3's memory as before;
#   3. failure domains (--peer-domains slurm: Slurm's topology puts node1
#      and node2 under one switch, node3 and node4 under another): node1
#      sends to node3, not node2; node1 lost, rank 0's copy is moved from
#      node3 to node2 before the launch;
#   4. node2 and its peer node3 lost at once;
#   5. --memory-ckpt-max counts the peer copies a node receives: beyond
#      it they are refused, the run goes on.
#   6. the supervisor SIGKILLed: no node keeps the run's memory.
# Before the loss, node1's memory no longer holds the first steps (`fbw1
# drop`).  Each ends with the fault-free hashes and nothing of the job left in the
# /dev/shm of any node reached.
source "$(dirname "$0")/lib.sh"
source "$SRC/tests/supervisor/tiers_lib.sh"   # jq1, want_sources
# Start a run in the background and kill NODE once step 25 is complete.
run_and_kill() { # RUNDIR NAME NODE ARGS...
    local r=$1 name=$2 node=$3
    shift 3
    salloc -Q -N"${NALLOC:-4}" --no-kill "$FB" run --launcher slurm --node-timeout 3s --run-dir "$r" \
        --json "$@" >"$name.json" 2>"$name.err" &
    apid=$!
    wait_ckpt "$r" 25
    sleep 0.3 # a step or two more, replicated by then
    [ -z "${BEFORE_KILL:-}" ] || eval "$BEFORE_KILL"
    "$SRC/scripts/slurm-cluster.sh" fail "$CL" "$node" kill
    [ -z "${AFTER_KILL:-}" ] || eval "$AFTER_KILL"
    wait $apid || fail "$name exited $? ($(tail -5 "$name.err"))"
    [ "$(json_field "$name.json" '["completed"]')" = True ] || fail "$name not completed"
}

# Node memory holds no step older than the newest every rank can restore
# (the supervisor's `fbw1 drop`): node1's first checkpoints are gone by
# step 25, own and peer copies, and a newer one is there.
old_steps_dropped() { # RUNDIR NODE
    local d steps
    d=/dev/shm/fb.$(cat "$1/job").mem
    steps=$(on "$2" sh -c "ls $d $d/peer" | grep '^step-' | sort -u | tr '\n' ' ')
    case " $steps" in *" step-0000000005 "*|*" step-0000000010 "*)
        fail "$2's memory still holds old steps: $steps" ;; esac
    [ -n "$steps" ] || fail "$2's memory holds no step"
}

# --peer-domains slurm where Slurm has no topology: refused at start
set +e
salloc -Q -N4 "$FB" run --launcher slurm --peer-domains slurm -- /bin/true >notopo.out 2>notopo.err
rc=$?
set -e
[ $rc = 2 ] && grep -q -- "--peer-domains slurm: Slurm has no switch topology (TopologyPlugin=topology/tree" notopo.err \
    || fail "--peer-domains slurm without a topology: exit $rc: $(cat notopo.err)"

# 1. node2 lost: its rank from node3's peer copy, the rank moved from node3
#    to node4 from node3's memory, sent over before the launch.
STEPS=150
r=$T/peer
BEFORE_KILL='old_steps_dropped "$r" node1; "$SRC/scripts/slurm-cluster.sh" fail "$CL" node2 stop; sleep 1'
run_and_kill "$r" peer node2 --nnodes 3 --spare-nodes 1 --max-restarts 2 \
    --persist-every 100000 -- "$TOY" --steps $STEPS --sleep-ms 40 --ckpt-every 5
[ "$(jq1 "$r" "select kind||':'||node from incident")" = "node_failure:node2" ] \
    || fail "run 1 incidents: $(jq1 "$r" "select kind, node, rank, step, detail from incident")"
detail=$(jq1 "$r" "select detail from incident")
case "$detail" in *"lost with it"*) fail "run 1: more than node2 lost: $detail" ;; esac
[ "$(grep -c 'leaving out' peer.err)" = 1 ] || fail "run 1: $(grep 'leaving out' peer.err)"
restored_from_peers "$r" peer.err 0:memory,1:peer,2:peer 1 "run 1"
nothing_in_shm "$r" node1 node3 node4
ok "node2 lost: its rank from node3's peer copy, node3's old rank moved to node4 from a peer, storage not read, same hashes"

# 2. node2 lost, and node3's peer copies with it (removed right after: what
#    losing both nodes leaves of rank 1's copies, with node3 still there):
#    rank 1 restores from storage, rank 2 still from node3's memory, moved
#    to node4.
recluster both
BEFORE_KILL=
r=$T/both
AFTER_KILL='on node3 sh -c "rm -rf /dev/shm/fb.*.mem/peer/step-*"'
run_and_kill "$r" both node2 --nnodes 3 --spare-nodes 1 --max-restarts 3 \
    --persist-every 1 -- "$TOY" --steps $STEPS --sleep-ms 40 --ckpt-every 5
# The last attempt that restored (attempt 1, or 2 when rank 1 was killed
# between its memory commit and its storage copy of the newest step).
n=$(jq1 "$r" "select max(a.number) from attempt a join event e on e.attempt_id = a.id
              where e.kind = 'restore_done'")
src=$(jq1 "$r" "select group_concat(rank||':'||coalesce(source,'NULL'), ',') from
              (select e.rank, e.source from event e join attempt a on a.id = e.attempt_id
               where a.number = $n and e.kind = 'restore_done' order by e.rank)")
# The step the ranks restored; newer than the supervisor's choice when
# rank 1 copied a newer step to storage but was lost before its report
# came through: every rank then takes that step, complete in storage.
got=$(jq1 "$r" "select max(e.step) from event e join attempt a on a.id = e.attempt_id
                where a.number = $n and e.kind = 'restore_done'")
chosen=$(grep -o "attempt $n will restore checkpoint [0-9]*" both.err | awk '{print $6}')
want=0:memory,1:storage,2:peer
[ "$got" -gt "$chosen" ] && want=0:storage,1:storage,2:storage
[ "$src" = "$want" ] || fail "run 2: attempt $n restored step $got (chosen: $chosen) from '$src'"
same_hashes "$r" 3 $STEPS
nothing_in_shm "$r" node1 node3 node4
ok "node2 and node3's peer copies lost: rank 1 from storage, rank 2 from a peer (attempt $n), same hashes"

# 3. By failure domain: node1's copies go to node3 (the other domain), so
#    with node1 lost rank 0's shard is moved from node3 to node2, where
#    without domains node2 would hold it already.
#    The domains are Slurm's own: two leaf switches (racks) of a tree
#    topology, read with --peer-domains slurm; the same as
#    node1=a,node2=a,node3=b,node4=b (a cluster without a topology
#    refuses it: checked first, on the fresh cluster).
recluster domains 4 --switch 's0=node[1-2]' --switch 's1=node[3-4]'
BEFORE_KILL= AFTER_KILL=
r=$T/domains
run_and_kill "$r" domains node1 --nnodes 3 --spare-nodes 1 --max-restarts 2 \
    --peer-domains slurm \
    --persist-every 100000 -- "$TOY" --steps $STEPS --sleep-ms 40 --ckpt-every 5
want_sources "$r" 0:peer,1:peer,2:peer "run 3"
grep -q "failure domains from Slurm's topology (leaf switches): node1=s0,node2=s0,node3=s1,node4=s1" domains.err \
    || fail "run 3: the domains read: $(grep -i 'domain' domains.err)"
step=$(jq1 "$r" "select restored_step from attempt where number = 1")
grep -q "will restore checkpoint $step: 0 of 3 ranks from their node's memory, 3 from a peer's copy (2 moved before the launch)" domains.err \
    || fail "run 3: the supervisor's choice: $(grep 'will restore' domains.err)"
same_hashes "$r" 3 $STEPS
nothing_in_shm "$r" node2 node3 node4
ok "failure domains from Slurm's topology: node1's copy on node3, moved to node2 when node1 was lost, same hashes"

# 4. Two nodes lost at once (node2 and its peer node3, five nodes, two
#    spares): both are left out together, not one attempt each; rank 1's
#    copies were on both, so it restores from storage; rank 2's peer copy
#    on node1 is moved to a spare; rank 0 from its own memory.
recluster double 5
BEFORE_KILL=
r=$T/double
AFTER_KILL='"$SRC/scripts/slurm-cluster.sh" fail "$CL" node3 kill'
NALLOC=5 run_and_kill "$r" double node2 --nnodes 3 --spare-nodes 2 --max-restarts 3 \
    --persist-every 1 -- "$TOY" --steps $STEPS --sleep-ms 40 --ckpt-every 5
AFTER_KILL=
[ "$(jq1 "$r" "select count(*) from incident")" = 1 ] \
    || fail "run 4: incidents: $(jq1 "$r" "select kind, node, rank, detail from incident")"
detail=$(jq1 "$r" "select detail from incident")
case "$detail" in *"lost with it"*) ;; *) fail "run 4: one node named lost: $detail" ;; esac
grep -q "leaving out node2" double.err && grep -q "leaving out node3" double.err \
    || fail "run 4: $(grep 'leaving out' double.err)"
src=$(jq1 "$r" "select group_concat(rank||':'||coalesce(source,'NULL'), ',') from
              (select e.rank, e.source from event e join attempt a on a.id = e.attempt_id
               where a.number = 1 and e.kind = 'restore_done' order by e.rank)")
got=$(jq1 "$r" "select max(e.step) from event e join attempt a on a.id = e.attempt_id
                where a.number = 1 and e.kind = 'restore_done'")
chosen=$(grep -o "attempt 1 will restore checkpoint [0-9]*" double.err | awk '{print $6}')
want=0:memory,1:storage,2:peer
[ -n "$got" ] && [ -n "$chosen" ] && [ "$got" -gt "$chosen" ] && want=0:storage,1:storage,2:storage
[ "$src" = "$want" ] || fail "run 4: attempt 1 restored step $got (chosen: $chosen) from '$src'"
same_hashes "$r" 3 $STEPS
nothing_in_shm "$r" node1 node4 node5
ok "node2 and node3 lost at once: both left out in one failure, rank 1 from storage, rank 2 from a peer, same hashes"

# 5. Under --memory-ckpt-max the node's cap covers the peer copies it
#    receives and its receive pool, not only its own steps: a cap of two
#    of the rank's steps (1 MiB of state each) leaves no room for a copy
#    while a node holds two shards, so copies are refused (the receiver
#    says so in the watchers' log) and the run goes on to the same hashes.
recluster cap 2
r=$T/cap
cap=$(( 2 * (1024 * 1024 + 8192) ))
salloc -Q -N2 "$FB" run --launcher slurm --run-dir "$r" --json --memory-ckpt-max "$cap" \
    --persist-every 4 -- "$TOY" --steps 60 --sleep-ms 40 --ckpt-every 5 --state-kb 1024 \
    >cap.json 2>cap.err || fail "run 5 exited $? ($(tail -5 cap.err))"
[ "$(json_field cap.json '["completed"]')" = True ] || fail "run 5 not completed"
grep -rqs "refused: .* do not fit under the node's cap of $cap" "$r" \
    || fail "run 5: no peer copy refused under the cap ($(grep -rhs 'replica of step' "$r" | head -3))"
for k in 0 1; do # the fault-free hashes, with the same state
    env -u FIREBREAK_JOB_ID RANK=$k WORLD_SIZE=2 "$TOY" --steps 60 --sleep-ms 0 \
        --ckpt-every 0 --state-kb 1024 --run-dir "$T/ref-cap" >/dev/null
    [ "$(cat "$r/final_hash.rank-$k")" = "$(cat "$T/ref-cap/final_hash.rank-$k")" ] \
        || fail "run 5: rank $k hash"
done
nothing_in_shm "$r" node1 node2
ok "the node's cap counts peer copies: copies refused beyond it, same hashes"

# 6. The supervisor SIGKILLed mid-run: its job id is never used again, so
#    every node's memory (own steps, peer copies, the receive pool) goes
#    with the watchers, which were stopped without the supervisor's `keep`.
recluster sigkill 2
r=$T/sigkill
# Each watcher's stderr, with its stop's stages timed, goes to
# $T/watch-NODE.err (test hook): the killed supervisor's srun, which
# carried it, is gone with it, and a failure shows these files.
FIREBREAK_TEST_WATCH_LOG_DIR=$T salloc -Q -N2 "$FB" run --launcher slurm --run-dir "$r" \
    --json --persist-every 4 \
    -- "$TOY" --steps 400 --sleep-ms 40 --ckpt-every 5 >sigkill.json 2>sigkill.err &
apid=$!
wait_ckpt "$r" 15
sup=$(pgrep -P "$apid" -f -- "$FB run" | head -1)
[ -n "$sup" ] || fail "run 6: no supervisor under salloc $apid"
# Both nodes hold the run's memory, a peer copy included, before the kill
# (a copy goes to the peer after its step completed: waited for, up to 20 s;
# once, in CI, node2 had none yet 1.4 s after step 5).
for n in node1 node2; do
    for _ in $(seq 1 200); do
        on "$n" ls "/dev/shm/fb.$(cat "$r/job").mem/peer" 2>/dev/null | grep -q '^step-' && break
        sleep 0.1
    done
    on "$n" ls "/dev/shm/fb.$(cat "$r/job").mem/peer" | grep -q '^step-' \
        || fail "run 6: no peer copy on $n 20 s after step 15 completed"
done
kill -9 "$sup"
wait "$apid" || true
for _ in $(seq 1 100); do # the watchers' stop, then 0.3 s for a `keep`
    left=$(for n in node1 node2; do on "$n" ls /dev/shm; done | grep -E "^fb\.$(cat "$r/job")(_gone[0-9]+)?\.mem" || true)
    [ -z "$left" ] && break
    sleep 0.1
done
# The watchers' stops, timed (shown with ctest -V, and on a failure).
for f in watch-*.err; do [ -e "$f" ] && sed "s/^/  $f: /" "$f"; done
nothing_in_shm "$r" node1 node2
ok "supervisor SIGKILLed: no node keeps the run's memory"
