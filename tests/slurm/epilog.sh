#!/usr/bin/env bash
# epilog.sh FIREBREAK SRCDIR -- Slurm's Epilog for firebreak (docs/slurm.md,
# "Epilog") on the cluster of separate hosts, whose slurm.conf names this
# build's firebreak-slurm-epilog as its Epilog (CLUSTER_EPILOG=1):
#   1. a supervisor SIGKILLed between two attempts (its watchers stopped
#      with `keep`, the next ones not started; test hook
#      FIREBREAK_TEST_PAUSE_BETWEEN_ATTEMPTS_MS) leaves each node's
#      /dev/shm/fb.<job>.mem, with the marker naming the Slurm job, to
#      nobody; once the allocation ends, Slurm's Epilog removes it on every
#      node within seconds, and leaves another Slurm job's directory alone.
[ "${FB_TEST_HOOKS:-ON}" = ON ] ||
    { echo "skipped: built without the supervisor's test hooks (FB_TEST_HOOKS)"; exit 77; }
CLUSTER_EPILOG=1
source "$(dirname "$0")/lib.sh"

r=$T/between
FIREBREAK_TEST_PAUSE_BETWEEN_ATTEMPTS_MS=120000 salloc -Q -N2 "$FB" run --launcher slurm \
    --run-dir "$r" --json --max-restarts 2 --persist-every 4 \
    --inject 'kill:rank=1,step=12,attempt=0' \
    -- "$TOY" --steps 400 --sleep-ms 40 --ckpt-every 5 >between.json 2>between.err &
apid=$!
for _ in $(seq 1 600); do
    grep -q "test hook: pausing" between.err && break
    kill -0 "$apid" 2>/dev/null || fail "the run ended before the pause ($(tail -5 between.err))"
    sleep 0.1
done
grep -q "test hook: pausing .* before attempt 1" between.err \
    || fail "no pause between attempts 0 and 1 ($(tail -5 between.err))"
sup=$(pgrep -P "$apid" -f -- "$FB run" | head -1)
[ -n "$sup" ] || fail "no supervisor under salloc $apid"
job=$(cat "$r/job")
sjob=$(squeue -h -o %i | head -1)
[ -n "$sjob" ] || fail "no Slurm job"
# In the window: the watchers are gone, every node's memory is there
# with its marker.
[ -z "$(pgrep -f -- "$FB watch --job $job" || true)" ] || fail "a watcher still runs"
for n in node1 node2; do
    on "$n" ls "/dev/shm/fb.$job.mem" | grep -q '^step-' || fail "no step in $n's memory"
    [ "$(on "$n" cat "/dev/shm/fb.$job.mem/slurm-job")" = "SLURM_JOB_ID=$sjob" ] \
        || fail "$n's marker: $(on "$n" cat "/dev/shm/fb.$job.mem/slurm-job" || true)"
done
# Another Slurm job's memory on node1: not this Epilog's to remove.
other=/dev/shm/fb.other-job.mem
on node1 sh -c "mkdir -m 700 $other && echo SLURM_JOB_ID=$((sjob + 1000)) >$other/slurm-job"
kill -9 "$sup"
wait "$apid" || true
left=x
for _ in $(seq 1 100); do # the allocation ends, then each node's Epilog
    left=$(for n in node1 node2; do on "$n" ls /dev/shm | sed "s/^/$n:/"; done |
           grep "^node[12]:fb\.$job\.mem" || true)
    [ -z "$left" ] && break
    sleep 0.1
done
[ -z "$left" ] || fail "left after the job ended: $left (slurmd logs: $(grep -h -i epilog "$CL"/log/slurmd-*.log | tail -3))"
nothing_in_shm "$r" node1 node2
on node1 test -f "$other/slurm-job" || fail "another job's memory was removed"
on node1 rm -rf "$other"
ok "supervisor SIGKILLed between two attempts: the Epilog removed every node's memory, not another job's"
