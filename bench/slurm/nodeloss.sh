#!/usr/bin/env bash
# nodeloss.sh FIREBREAK SRCDIR -- on the cluster of separate hosts, node3 of
# a three-node job (one spare) lost three ways (scripts/slurm-cluster.sh
# fail: kill, link-down, stop), each on a fresh cluster:
#   detection       the loss to firebreak's node_failure (--node-timeout 3s;
#                   the bound docs/slurm.md states is the timeout plus the
#                   watcher's one-second beat);
#   relaunch        detected -> the job relaunched on the spare;
# beside the baseline: Slurm's own notice of the same loss (slurmctld
# marking node3 not responding or down; SlurmdTimeout=30 in the test
# cluster's slurm.conf), and the ratio.  Each loss's detection against
# the bound goes to the results file (bench/result.py): the timeout, plus
# the watcher's one-second beat, plus the supervisor's tick (POLL_MS,
# 50 ms, src/supervisor/supervisor.c).  The relaunch has no target and is
# only printed.  A missed bound exits 1.  A line per phase gives its wall
# time: each loss takes about Slurm's notice (14-16 s after the fault,
# the run itself ends 10 s after it) and its start (3 s); a cluster comes
# up in 1-2 s.
t_phase=$EPOCHREALTIME
phase() {
    echo "phase: $1: $(awk -v a="$t_phase" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s (load $(cut -d' ' -f1 /proc/loadavg))"
    t_phase=$EPOCHREALTIME
}
source "$2/tests/slurm/lib.sh"
phase "the first cluster up"
CLS="$SRC/scripts/slurm-cluster.sh"
NODE_TIMEOUT=3
TICK_S=0.05
recluster() {
    "$CLS" down "$CL" || fail "down"
    CL=$T/cluster-$1
    "$CLS" up "$CL" "${SHARE[@]}" >"$T/cluster.env" 2>"$T/cluster.err" || fail "up: $(cat "$T/cluster.err")"
    eval "$(tail -n 1 "$T/cluster.env")"
    phase "the used cluster down, a fresh one up"
}
: >results.txt
for how in kill link-down stop; do
    [ $how = kill ] || recluster $how
    r=$T/r-$how
    salloc -Q -N4 --no-kill "$FB" run --quiet --launcher slurm --nnodes 3 --spare-nodes 1 \
        --node-timeout $NODE_TIMEOUT --run-dir "$r" --max-restarts 2 \
        -- "$TOY" --steps 150 --sleep-ms 40 --ckpt-every 10 >/dev/null 2>"$how.err" &
    apid=$!
    for _ in $(seq 1 300); do
        grep -qs "starting at" "$r/logs/slurm-attempt-0/rank-2.log" && break; sleep 0.1
    done
    sleep 1
    t0=$(date +%s.%N)
    "$CLS" fail "$CL" node3 $how
    wait $apid || fail "$how: run exited $? ($(tail -3 $how.err))"
    phase "$how: the run, to its end"
    # Slurm's own notice: node3 not responding (*) or down.
    slurm=""
    for _ in $(seq 1 1200); do
        st=$(sinfo -h -n node3 -o %t 2>/dev/null || true)
        case "$st" in *'*'*|down*) slurm=$(python3 -c "import time; print(time.time() - $t0)"); break ;; esac
        sleep 0.1
    done
    read -r det rel < <(sqlite3 -separator ' ' "$r/journal.sqlite" \
        "select i.detected_at - $t0, a.launched_at - i.detected_at from incident i, attempt a
         where i.kind = 'node_failure' and a.number = 1")
    [ -n "$det" ] || fail "$how: no node_failure recorded"
    echo "$how $det $rel ${slurm:-nan}" >>results.txt
    phase "$how: Slurm's notice"
done
PYTHONPATH="$SRC/bench" python3 - results.txt $NODE_TIMEOUT $TICK_S <<'PY'
import math, sys
from result import target
limit, tick = float(sys.argv[2]), float(sys.argv[3])
bound = limit + 1 + tick
missed = 0
for line in open(sys.argv[1]):
    how, det, rel, slurm = line.split()
    det, rel, slurm = float(det), float(rel), float(slurm)
    print(f"node lost by {how}: firebreak detected it in {det:.2f} s (--node-timeout "
          f"{limit:g} s, bound {bound:g} s), relaunched on the spare {rel:.2f} s later")
    if math.isnan(slurm):
        print(f"  baseline: Slurm did not mark the node within 120 s")
        base = "Slurm: no notice in 120 s"
    else:
        print(f"  baseline: Slurm marked the node not responding after {slurm:.2f} s; "
              f"ratio firebreak / Slurm = {det / slurm:.2f}")
        base = f"Slurm's notice {slurm:.2f} s ({det / slurm:.2f}x)"
    missed += not target("bench_slurm_nodeloss",
                         f"node lost ({how}) -> detected, --node-timeout {limit:g} s",
                         f"{det:.2f} s", base, f"<= {bound:g} s", det <= bound)
sys.exit(1 if missed else 0)
PY
