#!/usr/bin/env bash
# nodes.sh FIREBREAK SRCDIR -- health checks, draining and spares on the
# local four-node cluster.  Node health comes from fixture trees
# (FIREBREAK_HEALTH_ROOT_<node>, a test hook of `firebreak watch --health`):
# a symlink per node that the test points at a failing fixture mid-run.
source "$(dirname "$0")/lib.sh"
STEPS=40
for n in node1 node2 node3 node4; do
    ln -sfn "$FIX/healthy" "$T/health-$n"
    export "FIREBREAK_HEALTH_ROOT_$n=$T/health-$n"
done
sick() { ln -sfn "$FIX/$2" "$T/health-$1"; }
well() { ln -sfn "$FIX/healthy" "$T/health-$1"; }
# Wait until rank $2 of run dir $1 has started, attempt 0.
started() {
    wait_file "$1/logs/slurm-attempt-0/rank-$2.log" 20 || fail "rank $2 never started"
    for _ in $(seq 1 100); do
        grep -q "starting at" "$1/logs/slurm-attempt-0/rank-$2.log" && return 0; sleep 0.1
    done
    fail "rank $2 never started"
}

# 1. Three nodes + one spare.  node3 loses a GPU while the job runs and its
#    rank dies: the health check before the restart fails on node3, which is
#    drained with firebreak's reason; the job restarts on node1, node2 and
#    the spare node4 and completes with the fault-free hashes.
salloc -Q -N4 "$FB" run --launcher slurm --nnodes 3 --spare-nodes 1 --health-check \
    --drain --run-dir "$T/r1" --json --inject 'kill:rank=2,step=20' -- \
    "$TOY" --steps $STEPS --sleep-ms 40 >r1.json 2>r1.err &
apid=$!
started "$T/r1" 2
sick node3 gpu-lost
wait $apid || fail "run 1 exited $? ($(tail -5 r1.err))"
[ "$(json_field r1.json '["completed"]')" = True ] || fail "run 1 not completed: $(tail -5 r1.err)"
grep -q "attempt 0 on node1,node2,node3 (1 spare)" r1.err || fail "run 1 first nodes: $(cat r1.err)"
grep -q "attempt 1 on node1,node2,node4 (0 spares)" r1.err || fail "run 1 restart nodes: $(cat r1.err)"
node_state node3 State | grep -q DRAIN || fail "node3 not drained: $(scontrol show node node3)"
reason=$(node_reason node3)
case "$reason" in firebreak:*xid79*) ;; *) fail "node3 drain reason: '$reason'" ;; esac
for r in 0 1 2; do
    [ "$(cat "$T/r1/final_hash.rank-$r")" = "$(ref_hash $r $STEPS)" ] || fail "run 1 rank $r hash"
done
# the drain is in the journal (an event "drain" on node3) and the fleet view
case "$(sqlite3 "$T/r1/journal.sqlite" "select node||'|'||code||'|'||detail from event where kind = 'drain'")" in
    "node3|0|firebreak:"*xid79*) ;;
    *) false ;;
esac ||
    fail "run 1 drain event: $(sqlite3 "$T/r1/journal.sqlite" "select * from event where kind = 'drain'")"
"$FB" report --fleet "$T/r1" --json | tail -n 1 | python3 -c '
import json, sys
d = {n["node"]: n for n in json.loads(sys.stdin.read())["nodes"]}
assert d["node3"]["drains"] == 1 and d["node3"]["evidence"][-1]["drain"], d["node3"]' ||
    fail "run 1: report --fleet does not count node3's drain"
ok "node3 unhealthy: drained ($reason), restarted on node1,node2,node4, fault-free hash"
scontrol update NodeName=node3 State=RESUME
well node3

# 2. Spare pool exhausted, --on-no-nodes stop (no --drain): node3 is bad from
#    the start (left out, the spare takes its place), node2 goes bad during
#    the run; two healthy nodes remain for a three-node job: the run stops
#    with a message that names both nodes.  Nodes are not drained.
sick node3 gpu-lost
set +e
salloc -Q -N4 "$FB" run --launcher slurm --nnodes 3 --spare-nodes 1 --health-check \
    --run-dir "$T/r2" --json --inject 'kill:rank=1,step=20' -- \
    "$TOY" --steps $STEPS --sleep-ms 40 >r2.json 2>r2.err &
apid=$!
set -e
started "$T/r2" 1
sick node2 ib-down
rc=0; wait $apid || rc=$?
[ $rc = 1 ] || fail "run 2 exit $rc, expected 1 ($(tail -5 r2.err))"
grep -q "attempt 0 on node1,node2,node4 (0 spares)" r2.err || fail "run 2 first nodes: $(cat r2.err)"
why=$(json_field r2.json '["reason"]')
for w in "too few healthy nodes" "needs 3, 2 remain" node2 node3 "on-no-nodes stop"; do
    case "$why" in *"$w"*) ;; *) fail "run 2 reason lacks '$w': $why" ;; esac
done
node_state node3 State | grep -q DRAIN && fail "node3 drained without --drain"
ok "spares exhausted: stopped with '$why'"

# 3. --on-no-nodes requeue in a batch job: with node2 and node3 bad and
#    drained, the job cannot run; firebreak asks Slurm to requeue it, and it
#    waits in the queue for nodes.
cat >batch.sh <<EOS
#!/bin/bash
exec "$FB" run --launcher slurm --nnodes 3 --spare-nodes 1 --health-check --drain \
    --on-no-nodes requeue --run-dir "$T/r3-\$SLURM_RESTART_COUNT" -- "$TOY" --steps 5
EOS
chmod +x batch.sh
job=$(sbatch --parsable --requeue -N4 -o "$T/batch-%j.out" batch.sh)
for _ in $(seq 1 150); do
    restarts=$(scontrol show job "$job" | tr ' ' '\n' | sed -n 's/^Restarts=//p')
    [ "${restarts:-0}" -ge 1 ] && break
    sleep 0.1
done
[ "${restarts:-0}" -ge 1 ] || fail "run 3: job $job not requeued: $(scontrol show job $job; cat $T/batch-*.out)"
# Right after the requeue the job may still be COMPLETING its first run.
for _ in $(seq 1 100); do
    state=$(scontrol show job "$job" | tr ' ' '\n' | sed -n 's/^JobState=//p')
    case "$state" in PENDING|REQUEUED|REQUEUE_HOLD|REQUEUE_FED) break ;; esac
    sleep 0.1
done
case "$state" in PENDING|REQUEUED|REQUEUE_HOLD|REQUEUE_FED) ;; *) fail "run 3: job state $state" ;; esac
grep -q "asked Slurm to requeue" "$T"/batch-*.out || fail "run 3: no requeue message: $(cat $T/batch-*.out)"
scancel "$job"
wait_no_jobs
ok "no nodes left, --on-no-nodes requeue: job $job requeued ($state)"
scontrol update NodeName=node2,node3 State=RESUME || true
