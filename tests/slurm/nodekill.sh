#!/usr/bin/env bash
# nodekill.sh FIREBREAK SRCDIR -- a killed node is lost, not a crashed
# rank (issue 18).  When a node is killed with everything on it, its
# watcher may see its rank vanish and report that end before it is killed
# itself; the supervisor used to take it for the rank's crash, never
# declared the node lost, and relaunched onto the dead node until the
# crash-loop limit ended the job.  The race, made certain: rank 2 on node3
# is SIGKILLed, and test hook FIREBREAK_TEST_WATCH_MUTE_NODE=node3 makes
# node3's watcher fall silent right after it reported that end (not even
# its `alive`), as a watcher killed with its node would.  A three-node job
# with one spare (node4): the incident is node3's node_failure, node3 is
# drained, the restart runs on node1, node2 and node4 from a checkpoint,
# and the job ends with the fault-free hashes.
# Then a node killed between two attempts: rank 2 crashes on node3
# (injected), node3 is killed during the pause before the restart (test
# hook FIREBREAK_TEST_PAUSE_BETWEEN_ATTEMPTS_MS), Slurm does not know yet
# and the restart's srun cannot launch there: that attempt's failure is
# node3's node_failure (not an error exit of no rank, which relaunched
# onto node3 until the restarts ran out), and the next runs on node4.
# Then the same, with Slurm knowing: node3 is killed and marked DOWN
# during the pause (as slurmctld does once its SlurmdTimeout passes), so
# the restart's srun is refused the step outright ("Unable to create step
# for job J: ..."), a message that names no node: the supervisor asks
# scontrol, finds node3 down, and that is node3's node_failure (it used to
# be an error exit of no rank, relaunched onto node3 until the restarts
# ran out).  Then node2 (whose rank did not fail) dies while the
# restart's srun launches there: srun kills the tasks it did start, and
# node2, not their node, is the lost one.  Last, a run resumed in that
# run directory does not read the last run's srun lines as its own.
[ "${FB_TEST_HOOKS:-ON}" = ON ] ||
    { echo "skipped: built without the supervisor's test hooks (FB_TEST_HOOKS)"; exit 77; }
source "$(dirname "$0")/lib.sh"
STEPS=150
NODE_TIMEOUT=3

# The pid of the toy trainer in a node's network namespace.
rank_pid_on() { # NODE
    local ns p
    ns="fb-$(sed -n 's/^ID=//p' "$CL/cluster")-$1"
    for p in $(ip netns pids "$ns" 2>/dev/null); do
        case "$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" in "$TOY "*) echo "$p" ;; esac
    done
}

r=$T/r
FIREBREAK_TEST_WATCH_MUTE_NODE=node3 salloc -Q -N4 --no-kill "$FB" run --launcher slurm \
    --nnodes 3 --spare-nodes 1 --drain --node-timeout $NODE_TIMEOUT --run-dir "$r" --json \
    --max-restarts 2 -- "$TOY" --steps $STEPS --sleep-ms 40 --ckpt-every 10 >k.json 2>k.err &
apid=$!
wait_started "$r" 0 1 2
wait_ckpt "$r" 10
pid=$(rank_pid_on node3)
[ "$(echo $pid | wc -w)" = 1 ] || fail "rank 2's process on node3: '$pid'"
kill -KILL $pid
wait $apid || fail "run exited $? ($(tail -5 k.err))"
[ "$(json_field k.json '["completed"]')" = True ] || fail "not completed"
[ "$(json_field k.json '["restarts"]')" = 1 ] || fail "restarts $(json_field k.json '["restarts"]')"
j=$r/journal.sqlite
row=$(sqlite3 "$j" "select kind, ifnull(rank, '-'), node from incident")
[ "$row" = "node_failure|-|node3" ] || fail "incidents: $row"
sqlite3 "$j" "select detail from incident" | grep -q "rank 2 vanished and its watcher said nothing after it" \
    || fail "detail: $(sqlite3 "$j" "select detail from incident")"
grep -q "attempt 1 on node1,node2,node4 (0 spares)" k.err || fail "restart nodes: $(grep attempt k.err)"
node_state node3 State | grep -q DRAIN || fail "node3 not drained: $(scontrol show node node3)"
case "$(node_reason node3)" in "firebreak: node lost"*) ;; *) fail "drain reason '$(node_reason node3)'" ;; esac
[ "$(sqlite3 "$j" "select restored_step is not null from attempt where number=1")" = 1 ] \
    || fail "attempt 1 did not restore a checkpoint"
same_hashes "$r" 3 $STEPS
ok "rank 2 vanished and node3's watcher fell silent: node_failure on node3, drained, resumed on node4"

# Rank 2 crashes at step 30 (injected); NODE (node3) is killed in the
# pause before the restart, and with `down` also set DOWN in Slurm (and
# the run under --drain).  The run must complete: attempt 1's failure is
# NODE's node_failure and attempt 2 runs on node4 instead with the
# fault-free hashes.  Leaves $r and $j.
killed_between() { # NAME [down|crashing] [NODE]
    local n=$1 node=${3:-node3} rest
    rest=$(echo node1 node2 node3 node4 | tr ' ' '\n' | grep -vx "$node" | paste -sd,)
    recluster "$n"
    r=$T/r-$n
    FIREBREAK_TEST_PAUSE_BETWEEN_ATTEMPTS_MS=4000 salloc -Q -N4 --no-kill "$FB" run --launcher slurm \
        --nnodes 3 --spare-nodes 1 --node-timeout $NODE_TIMEOUT --run-dir "$r" --json --max-restarts 3 \
        ${2:+--drain} --inject 'kill:rank=2,step=30,attempt=0' \
        -- "$TOY" --steps $STEPS --sleep-ms 40 --ckpt-every 10 >"$n.json" 2>"$n.err" &
    apid=$!
    for _ in $(seq 1 300); do grep -q "test hook: pausing" "$n.err" && break; sleep 0.1; done
    grep -q "test hook: pausing" "$n.err" || fail "$n: no pause after the crash ($(tail -5 "$n.err"))"
    if [ "${2:-}" = crashing ]; then
        # Its slurmd stops answering and dies while the restart's srun
        # waits for it ("Zero Bytes were transmitted or received").
        kill -STOP "$(cat "$CL/slurmd-$node.pid")"
        for _ in $(seq 1 300); do
            grep -qs "resuming after" "$r/logs/slurm-attempt-1/rank-0.log" && break; sleep 0.1
        done
        grep -qs "resuming after" "$r/logs/slurm-attempt-1/rank-0.log" ||
            fail "$n: rank 0 of attempt 1 did not start while $node's slurmd was stopped"
        sleep 0.5
    fi
    "$SRC/scripts/slurm-cluster.sh" fail "$CL" "$node" kill
    if [ "${2:-}" = down ]; then
        scontrol update NodeName="$node" State=DOWN Reason="test: killed" || fail "$n: scontrol update"
    fi
    wait $apid || fail "$n: run exited $? ($(tail -5 "$n.err"))"
    [ "$(json_field "$n.json" '["completed"]')" = True ] || fail "$n: not completed"
    j=$r/journal.sqlite
    rows=$(sqlite3 "$j" "select a.number, i.kind, ifnull(i.rank, '-'), ifnull(i.node, '-') from incident i
        join attempt a on a.id = i.attempt_id order by i.id" | tr '\n' ' ')
    [ "$rows" = "0|crash|2|node3 1|node_failure|-|$node " ] \
        || fail "$n: incidents: $rows ($(grep -i 'srun\|lost' "$n.err" | tail -5))"
    grep -q "attempt 2 on $rest (0 spares)" "$n.err" \
        || fail "$n: restart nodes: $(grep attempt "$n.err")"
    same_hashes "$r" 3 $STEPS
}

killed_between between
ok "node3 killed between two attempts: the launch that failed there is node3's node_failure; resumed on node4"

killed_between down down
detail=$(sqlite3 "$j" "select detail from incident where kind = 'node_failure'")
echo "$detail" | grep -Eq "srun was refused the step: .*; Slurm says (DOWN|out of job)" \
    || fail "down: detail: $detail"
case "$(node_reason node3)" in "firebreak: node lost (Slurm says "*) ;; *) fail "down: drain reason '$(node_reason node3)'" ;; esac
ok "node3 killed and marked DOWN between two attempts: srun refused the step; node3's node_failure ($detail); resumed on node4"
# node2, a node whose rank did not fail, dies while the restart's srun
# launches there: its slurmd stopped before the launch, killed once the
# other ranks run ("Connection reset by peer", or "Zero Bytes were
# transmitted or received" when slurmd itself crashed, as Slurm 22.05's
# did once in slurm_nodeloss).  srun aborts both steps and kills the tasks
# it did start on node1 and node3, watchers too.  Those ranks vanish with
# their watchers gone, which alone reads as their node's loss: srun's
# word comes first, and node2 is the lost node (the supervisor used to
# leave out node1 or node3, healthy, and go back to the dead node2: 3 of
# 5 runs failed so).
killed_between other crashing node2
detail=$(sqlite3 "$j" "select detail from incident where kind = 'node_failure'")
echo "$detail" | grep -q "node node2 lost: srun could not launch its tasks" \
    || fail "other: detail: $detail"
ok "node2 killed between two attempts, rank 2's crash on node3: node2's node_failure ($detail); resumed on node4"
# A run resumed in the same run directory appends to the last run's
# srun.log of each attempt number (logs/slurm-attempt-N): its lines are
# not this run's.  The run above left attempt 1's "Task launch ... failed
# on node node2"; on a cluster where every node is up, the resumed run's
# attempt 1 has rank 0 killed (injected): that is rank 0's crash on
# node1, not node2's loss read from the last run's line.
recluster stale
salloc -Q -N4 --no-kill "$FB" run --launcher slurm --nnodes 3 --spare-nodes 1 \
    --node-timeout $NODE_TIMEOUT --run-dir "$r" --json --max-restarts 3 --crash-loop 0 \
    --inject 'kill:rank=0,step=170,attempt=0' --inject 'kill:rank=0,step=190,attempt=1' \
    -- "$TOY" --steps 220 --sleep-ms 40 --ckpt-every 10 >stale.json 2>stale.err \
    || fail "stale: run exited $? ($(grep -v status: stale.err | tail -5))"
grep -q "failed on node node2" "$r/logs/slurm-attempt-1/srun.log" || fail "stale: no old line in srun.log"
rows=$(sqlite3 "$j" "select a.number, i.kind, ifnull(i.rank, '-'), ifnull(i.node, '-') from incident i
    join attempt a on a.id = i.attempt_id where i.run_id = (select max(id) from run) order by i.id" | tr '\n' ' ')
[ "$rows" = "0|crash|0|node1 1|crash|0|node1 " ] || fail "stale: incidents: $rows"
same_hashes "$r" 3 220
ok "a run resumed in the same run directory reads only its own srun lines: rank 0's crashes, no node lost"
