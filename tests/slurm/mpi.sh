#!/usr/bin/env bash
# mpi.sh FIREBREAK SRCDIR -- the MLP trainer (examples/train_mlp.c) over
# Open MPI across separate hosts under `--launcher slurm --mpirun mpirun`,
# with the PMPI flight recorder, checkpoints and restarts:
#   1. a fault-free run on node1..node3, two ranks each: the reference hash;
#   2. rank 3 (node2) hangs at step 20: every node's watcher snapshots its
#      ranks' rings into the run directory before anything is stopped, and
#      the incident names rank 3, node2 and the collective where it
#      stopped (not rank 0, the first silent rank the watchers report);
#      `firebreak fr analyze` on the run's snapshots says the same, with
#      the host of rank 3 (its ring's identity); the
#      run resumes from a checkpoint and ends with the reference hash;
#   3. rank 3 killed on node2: restart, the reference hash.
#   4. rank 3 hangs with --max-restarts 0: the run gives up.
# After the hang, the kill and the give-up, nothing of the job is left on
# the nodes: no segment of any attempt (srun ends a stopped step's tasks,
# the watchers among them, by SIGKILL: the next attempt's watcher removes
# the earlier attempts' segments, and the end of a run whose ranks were
# stopped runs `firebreak watch --sweep` on every node) and none of Open
# MPI's session or shared-memory files.
source "$(dirname "$0")/lib.sh"
MLP=$BIN/fb-train-mlp
command -v mpirun >/dev/null || { echo "SKIP: no mpirun"; exit 0; }
[ -x "$MLP" ] || { echo "SKIP: no fb-train-mlp"; exit 0; }

# Open MPI between the nodes: only the cluster's bridge subnet (the nodes
# have nothing else but loopback; this machine has its own interfaces).
a=$(scontrol show node node1 | tr ' ' '\n' | sed -n 's/^NodeAddr=//p')
export OMPI_MCA_oob_tcp_if_include=${a%.*}.0/24 OMPI_MCA_btl_tcp_if_include=${a%.*}.0/24
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp

run() { # DIR [firebreak options...]
    local d=$1
    shift
    salloc -Q -N3 -w node1,node2,node3 "$FB" run --launcher slurm --mpirun mpirun --nproc-per-node 2 \
        --run-dir "$T/$d" --json --max-restarts 2 --hang-timeout 4s "$@" -- \
        "$MLP" --steps 60 --hidden 32 --batch 16 --log-every 20 --ckpt-every 10 \
        --sleep-ms 30 >"$T/$d.json" 2>"$T/$d.err"
}
q() { sqlite3 "$T/$1/journal.sqlite" "$2"; }
nothing_left() { # RUNDIR
    local job n left
    job=$(cat "$T/$1/job")
    for n in node1 node2 node3; do
        left=$(on "$n" ls -A /dev/shm /tmp | grep -E "^(fb\.$job\.|ompi\.|vader_segment|sm_segment)" || true)
        [ -z "$left" ] || fail "$1: left on $n: $left"
    done
}
why() { echo "$(tail -n 5 "$T/$1.err"); $(q $1 "select kind, rank, node, detail from incident")"; }

# 1. Fault-free.  The peer copies' key stays the watchers': not on
# mpirun's command line (-x NAME=VALUE), not in a rank's environment.
run ref &
rp=$!
p=
for _ in $(seq 200); do
    p=$(pgrep -f -- "^$MLP " | head -n 1 || true)
    [ -n "$p" ] && break
    sleep 0.05
done
[ -n "$p" ] || fail "no rank of the fault-free run seen"
tr '\0' '\n' <"/proc/$p/environ" | grep -q '^FIREBREAK_PEER_KEY=' \
    && fail "a rank's environment holds the peer copies' key"
for m in $(pgrep -x mpirun || true); do
    tr '\0' ' ' <"/proc/$m/cmdline" | grep -q 'FIREBREAK_PEER_KEY' \
        && fail "mpirun's command line holds the peer copies' key"
done
wait $rp || fail "fault-free run exited $? ($(why ref))"
want=$(cat "$T/ref/final_hash")
[ -n "$want" ] || fail "no final_hash"
[ "$(q ref "select nodes from attempt")" = '["node1","node2","node3"]' ] \
    || fail "attempt.nodes $(q ref "select nodes from attempt")"
[ "$(q ref "select count(*) from placement where node = 'node' || (rank / 2 + 1)")" = 6 ] \
    || fail "placement: $(q ref "select * from placement")"
# The ranks ran on their nodes (the MPI rank, not the orted's SLURM_PROCID).
[ "$(q ref "select count(distinct node) from event where kind='ckpt_committed'")" = 3 ] \
    || fail "checkpoint events: $(q ref "select rank, node from event where kind='ckpt_committed' limit 8")"
ok "fault-free over Open MPI on node1..node3: $want"

# 2. A hang on node2.
run hang --inject 'hang:rank=3,step=20' || fail "hang run exited $? ($(why hang))"
inc=$(q hang "select kind || ' ' || rank || ' ' || node from incident")
[ "$inc" = "hang 3 node2" ] || fail "hang incident: $(why hang)"
detail=$(q hang "select detail from incident")
echo "$detail" | grep -q "flight recorder: hang: rank 3 never entered all_reduce" \
    || fail "the incident does not name the collective: $detail"
echo "$detail" | grep -q "rank 3" || fail "the incident does not name rank 3: $detail"
ls "$T/hang/fr/attempt-0"/rank-{0,1,2,3,4,5}.fbseg >/dev/null \
    || fail "snapshots missing: $(ls "$T/hang/fr/attempt-0")"
grep -q "snapshots from 3 of 3 node watchers" "$T/hang.err" "$T/hang/logs/"*.log 2>/dev/null \
    || fail "the watchers did not all snapshot: $(grep -h 'flight recorder' "$T/hang.err" "$T/hang/logs/"*.log)"
"$FB" fr analyze "$T/hang/fr/attempt-0" --json >fr.out 2>&1 && fail "fr analyze found no hang"
[ "$(json_field fr.out '["culprits"]')" = "[3]" ] || fail "fr analyze: $(tail -n 3 fr.out)"
grep -q "rank 3 never entered all_reduce" fr.out || fail "fr analyze names no collective: $(head -n 5 fr.out)"
grep -q "rank 3 (host node2) last completed" fr.out || fail "fr analyze names no host: $(head -n 5 fr.out)"
[ "$(cat "$T/hang/final_hash")" = "$want" ] || fail "hang run ended with $(cat "$T/hang/final_hash"), not $want"
nothing_left hang
ok "hang of rank 3 on node2: $detail"

# 3. Rank 3 killed on node2.
run kill --inject 'kill:rank=3,step=25' || fail "kill run exited $? ($(why kill))"
[ "$(q kill "select kind || ' ' || rank || ' ' || node from incident")" = "crash 3 node2" ] \
    || fail "kill incident: $(why kill)"
[ "$(q kill "select count(*) from attempt")" = 2 ] || fail "attempts: $(q kill "select * from attempt")"
[ "$(cat "$T/kill/final_hash")" = "$want" ] || fail "kill run ended with $(cat "$T/kill/final_hash"), not $want"
nothing_left kill
ok "rank 3 killed on node2: restarted, same hash"

# 4. The last attempt stopped: the run's end sweeps the nodes.
run giveup --inject 'hang:rank=3,step=20' --max-restarts 0 && fail "the give-up run exited 0"
[ "$(q giveup "select kind || ' ' || rank || ' ' || node from incident")" = "hang 3 node2" ] \
    || fail "give-up incident: $(why giveup)"
nothing_left giveup
[ "$(grep -c "removed 2 segments of job" "$T/giveup/logs/slurm-sweep.log")" = 3 ] \
    || fail "the end of run's sweep: $(cat "$T/giveup/logs/slurm-sweep.log")"
ok "rank 3 hung, no restart left: the run's end removed its ranks' segments on node1..node3"
