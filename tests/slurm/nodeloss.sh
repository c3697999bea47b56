#!/usr/bin/env bash
# nodeloss.sh FIREBREAK SRCDIR -- losing a whole node, on the cluster of
# separate hosts, three ways (scripts/slurm-cluster.sh fail):
#   kill       every process of node3, its slurmd too (power lost)
#   link-down  node3's network link down (and its shared filesystem gone)
#   stop       every process of node3 stopped with SIGSTOP (frozen kernel)
# Each time, a three-node job with one spare (node4): the loss is detected
# from the node watcher's silence within --node-timeout plus its one-second
# beat, recorded as node_failure naming node3 (not a rank's hang), node3 is
# drained with firebreak's reason, the job restarts on node1, node2 and
# node4 from the newest complete checkpoint and ends with the fault-free
# hashes, and no rank of the lost attempt runs on the surviving nodes.
# Each loss gets a fresh cluster.  Then: a rank's hang is not a lost node;
# the supervisor's loop held up past --node-timeout while the watchers
# speak loses no node; a lost node comes back only through the health
# check: at each launch with --health-check, and without it when too few
# nodes remain.
source "$(dirname "$0")/lib.sh"
CLS="$SRC/scripts/slurm-cluster.sh"
STEPS=150
NODE_TIMEOUT=3
# The limit the test holds detection to: the timeout, the watcher's beat
# interval (1 s), and the supervisor's tick and scheduling on a loaded
# two-core machine.
BOUND_S=$((NODE_TIMEOUT + 3))

# Wait up to SECONDS (30) until FILE holds PATTERN; 1 if it never did.
wait_says() { # FILE PATTERN [SECONDS]
    local _
    for _ in $(seq 1 $((${3:-30} * 10))); do grep -qs -- "$2" "$1" && return 0; sleep 0.1; done
    return 1
}
# Freeze NODE once rank 2 of attempt A in RUNDIR stepped for a second
# (the toy trainer's "starting at" or "resuming after").
freeze_after_start() { # RUNDIR A NODE
    wait_says "$1/logs/slurm-attempt-$2/rank-2.log" "starting at\|resuming after" ||
        fail "$1: attempt $2's rank 2 did not start"
    sleep 1
    "$CLS" fail "$CL" "$3" stop
}

# Ranks of this build running in a node's network namespace.
ranks_on() { # NODE
    local ns p
    ns="fb-$(sed -n 's/^ID=//p' "$CL/cluster")-$1"
    for p in $(ip netns pids "$ns" 2>/dev/null); do
        tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null; echo
    done | grep -c "^$TOY " || true
}


for how in kill link-down stop; do
    [ $how = kill ] || recluster $how
    r=$T/r-$how
    salloc -Q -N4 --no-kill "$FB" run --launcher slurm --nnodes 3 --spare-nodes 1 --drain \
        --node-timeout $NODE_TIMEOUT --run-dir "$r" --json --max-restarts 2 \
        -- "$TOY" --steps $STEPS --sleep-ms 40 --ckpt-every 10 >"$how.json" 2>"$how.err" &
    apid=$!
    # Lose node3 once a checkpoint is complete.
    for _ in $(seq 1 300); do
        [ -n "$(sqlite3 "$r/journal.sqlite" "select step from checkpoint where status='complete' limit 1" 2>/dev/null)" ] && break
        sleep 0.1
    done
    grep -q "starting at" "$r/logs/slurm-attempt-0/rank-2.log" || fail "$how: rank 2 never started"
    t0=$(date +%s.%N)
    "$CLS" fail "$CL" node3 $how
    # The relaunch: nothing of attempt 0 on the surviving nodes.
    for _ in $(seq 1 300); do
        grep -Eqs "starting at|resuming after" "$r/logs/slurm-attempt-1/rank-2.log" && break; sleep 0.1
    done
    grep -Eqs "starting at|resuming after" "$r/logs/slurm-attempt-1/rank-2.log" || fail "$how: no relaunch ($(tail -5 $how.err))"
    # Rank 2 of attempt 1 resumed; the others may still be between srun's
    # fork and their exec (none yet): wait for one each, never two.
    for n in node1 node2 node4; do
        for _ in $(seq 1 50); do
            c=$(ranks_on $n)
            [ "$c" -le 1 ] || fail "$how: $c ranks on $n after the relaunch"
            [ "$c" = 1 ] && break
            sleep 0.1
        done
        [ "$c" = 1 ] || fail "$how: no rank on $n 5 s after the relaunch"
    done
    wait $apid || fail "$how: run exited $? ($(tail -5 $how.err))"
    [ "$(json_field $how.json '["completed"]')" = True ] || fail "$how: not completed"
    [ "$(json_field $how.json '["restarts"]')" = 1 ] || fail "$how: restarts $(json_field $how.json '["restarts"]')"
    j=$r/journal.sqlite
    row=$(sqlite3 "$j" "select kind, ifnull(rank, '-'), node, host from incident")
    [ "$row" = "node_failure|-|node3|node3" ] || fail "$how: incidents: $row"
    det=$(sqlite3 "$j" "select detected_at - $t0 from incident")
    python3 -c "import sys; sys.exit(0 if 0 < $det <= $BOUND_S else 1)" \
        || fail "$how: detected $det s after the loss (bound $BOUND_S s)"
    grep -q "attempt 1 on node1,node2,node4 (0 spares)" "$how.err" || fail "$how: restart nodes: $(grep attempt $how.err)"
    node_state node3 State | grep -q DRAIN || fail "$how: node3 not drained: $(scontrol show node node3)"
    case "$(node_reason node3)" in "firebreak: node lost"*) ;; *) fail "$how: drain reason '$(node_reason node3)'" ;; esac
    [ "$(sqlite3 "$j" "select restored_step is not null from attempt where number=1")" = 1 ] \
        || fail "$how: attempt 1 did not restore a checkpoint"
    for k in 0 1 2; do
        [ "$(cat "$r/final_hash.rank-$k")" = "$(ref_hash $k $STEPS)" ] || fail "$how: rank $k hash"
    done
    for n in node1 node2 node4; do
        [ "$(ranks_on $n)" = 0 ] || fail "$how: ranks left on $n"
    done
    ok "$how: node_failure on node3 detected in $(printf %.1f "$det") s, drained, resumed on node4 from step $(sqlite3 "$j" "select restored_step from attempt where number=1")"
done

# A rank that hangs on node3 is not a lost node: its watcher still speaks,
# the rank's heartbeat stops; a hang names rank 2, node3 is not drained.
recluster hang
r=$T/r-hang
salloc -Q -N4 --no-kill "$FB" run --launcher slurm --nnodes 3 --spare-nodes 1 --drain \
    --node-timeout $NODE_TIMEOUT --hang-timeout 4 --run-dir "$r" --json --max-restarts 2 \
    --inject 'hang:rank=2,step=30' -- "$TOY" --steps 60 --sleep-ms 40 --ckpt-every 10 \
    >hang.json 2>hang.err || fail "hang: run exited $? ($(tail -5 hang.err))"
row=$(sqlite3 "$r/journal.sqlite" "select kind, rank, node from incident")
[ "$row" = "hang|2|node3" ] || fail "hang: incidents: $row"
node_state node3 State | grep -q DRAIN && fail "hang: node3 drained"
ok "a rank's hang on node3 stays a hang: node3 not lost, not drained"

# The supervisor's own loop held up for longer than --node-timeout, once,
# mid-run, while every watcher goes on speaking (the test hook
# FIREBREAK_TEST_SLURM_LOOP_HOLD_MS): their lines wait in its pipe and are
# read before a silence is judged, so no node is taken for lost.
r=$T/r-held
FIREBREAK_TEST_SLURM_LOOP_HOLD_MS=$(((NODE_TIMEOUT + 1) * 1000)) \
salloc -Q -N4 --no-kill "$FB" run --launcher slurm --nnodes 3 --spare-nodes 1 \
    --node-timeout $NODE_TIMEOUT --run-dir "$r" --json --max-restarts 1 \
    -- "$TOY" --steps 200 --sleep-ms 40 --ckpt-every 10 \
    >held.json 2>held.err || fail "held: run exited $? ($(tail -5 held.err))"
row=$(sqlite3 "$r/journal.sqlite" "select kind || ' ' || ifnull(detail, '') from incident")
[ -z "$row" ] || fail "held: incidents: $row"
[ "$(json_field held.json '["restarts"]')" = 0 ] || fail "held: restarted"
for k in 0 1 2; do
    [ "$(cat "$r/final_hash.rank-$k")" = "$(ref_hash $k 200)" ] || fail "held: rank $k hash"
done
ok "the supervisor held up $((NODE_TIMEOUT + 1)) s while the watchers spoke: no node taken for lost"

# A lost node that comes back is not trusted until it passes the health
# check (--health-check, no --drain): node3 frozen, lost; the next restart
# (rank 0 killed in attempt 1) finds it still frozen and leaves it out;
# node3 thawed; the restart after that (rank 0 killed in attempt 2) checks
# it, it passes, and attempt 3 runs on node1, node2 and node3 again.
# (--crash-loop 0: a crash on another host is journaled without its step,
# so two of them read as the same step to the crash-loop rule.)
recluster back
r=$T/r-back
salloc -Q -N4 --no-kill "$FB" run --launcher slurm --nnodes 3 --spare-nodes 1 --health-check \
    --node-timeout $NODE_TIMEOUT --run-dir "$r" --json --max-restarts 3 --crash-loop 0 \
    --inject 'kill:rank=0,step=150,attempt=1' --inject 'kill:rank=0,step=240,attempt=2' \
    -- "$TOY" --steps 300 --sleep-ms 50 --ckpt-every 10 >back.json 2>back.err &
apid=$!
freeze_after_start "$r" 0 node3
wait_says back.err "attempt 2 on" 60 || fail "back: no attempt 2 ($(tail -5 back.err))"
"$CLS" heal "$CL" node3
wait $apid || fail "back: run exited $? ($(grep -v "status:" back.err | tail -12))"
[ "$(json_field back.json '["completed"]')" = True ] || fail "back: not completed"
grep -q "attempt 1 on node1,node2,node4 (0 spares)" back.err || fail "back: attempt 1: $(grep attempt back.err)"
grep -q "node3, lost earlier, is still left out" back.err || fail "back: node3 not left out while frozen"
grep -q "attempt 2 on node1,node2,node4 (0 spares)" back.err || fail "back: attempt 2: $(grep attempt back.err)"
grep -q "node3, lost earlier, is back: it passed the health check" back.err || fail "back: node3 not taken back"
grep -q "attempt 3 on node1,node2,node3 (1 spare)" back.err || fail "back: attempt 3: $(grep attempt back.err)"
for k in 0 1 2; do
    [ "$(cat "$r/final_hash.rank-$k")" = "$(ref_hash $k 300)" ] || fail "back: rank $k hash"
done
ok "a lost node is taken back only after it passed the health check"

# Without --health-check a lost node is checked again only when the run
# would otherwise end for too few nodes: node3 frozen, lost; attempt 1 on
# node1, node2 and node4 (the spare); node3 thawed; node4 frozen, lost:
# two healthy nodes for three, so node3 is checked, passes, and attempt 2
# runs on node1, node2 and node3 (before, the run ended there: "too few
# healthy nodes", though node3 was back).
recluster short
r=$T/r-short
salloc -Q -N4 --no-kill "$FB" run --launcher slurm --nnodes 3 --spare-nodes 1 \
    --node-timeout $NODE_TIMEOUT --run-dir "$r" --json --max-restarts 3 --crash-loop 0 \
    -- "$TOY" --steps 300 --sleep-ms 50 --ckpt-every 10 >short.json 2>short.err &
apid=$!
freeze_after_start "$r" 0 node3
wait_says short.err "attempt 1 on" 60 || fail "short: no attempt 1 ($(tail -5 short.err))"
"$CLS" heal "$CL" node3
freeze_after_start "$r" 1 node4
wait_says short.err "attempt 2 on" 60 || true
"$CLS" heal "$CL" node4
wait $apid || fail "short: run exited $? ($(grep -v "status:" short.err | tail -12))"
[ "$(json_field short.json '["completed"]')" = True ] || fail "short: not completed"
grep -q "attempt 1 on node1,node2,node4 (0 spares)" short.err || fail "short: attempt 1: $(grep attempt short.err)"
grep -q "node3, lost earlier, is back: it passed the health check" short.err \
    || fail "short: node3 not taken back: $(grep -E "lost|healthy" short.err)"
grep -q "attempt 2 on node1,node2,node3 (0 spares)" short.err || fail "short: attempt 2: $(grep attempt short.err)"
for k in 0 1 2; do
    [ "$(cat "$r/final_hash.rank-$k")" = "$(ref_hash $k 300)" ] || fail "short: rank $k hash"
done
ok "without --health-check, lost node3 is checked again when too few nodes remain, and taken back"
