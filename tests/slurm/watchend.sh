#!/usr/bin/env bash
# watchend.sh FIREBREAK SRCDIR -- the supervisor outlives its watchers'
# srun.  Both ranks of a two-node job are SIGKILLed at once: each node's
# watcher says `bye` and exits, and the supervisor's next line to the
# watchers' stdin (`keep`, as it stops the attempt) goes into a pipe
# nobody reads any more.  Test hook FIREBREAK_TEST_SLURM_REQ_DELAY_MS
# holds each such write 3 s, long enough for the watchers to be gone:
# the write fails (EPIPE), the run restarts and completes.  SIGPIPE's
# default action used to end the supervisor there, right after its
# `crash:` line, and salloc exited 1 (slurm_torch's flake).
[ "${FB_TEST_HOOKS:-ON}" = ON ] ||
    { echo "skipped: built without the supervisor's test hooks (FB_TEST_HOOKS)"; exit 77; }
source "$(dirname "$0")/lib.sh"

FIREBREAK_TEST_SLURM_REQ_DELAY_MS=3000 salloc -Q -N2 -w node1,node2 bash -c '"$@"; rc=$?
    [ $rc = 0 ] || echo "watchend.sh: firebreak run exited $rc" >&2
    exit $rc' sh "$FB" run --launcher slurm --run-dir "$T/r" --json --max-restarts 1 \
    -- "$TOY" --steps 150 --sleep-ms 20 --ckpt-every 0 >r.json 2>r.err &
apid=$!
wait_started "$T/r" 0 1
ranks=$(pgrep -f -- "^$TOY " || true)
[ "$(echo $ranks | wc -w)" = 2 ] || fail "ranks' processes: '$ranks'"
kill -KILL $ranks
wait $apid || fail "run exited $?: $(tail -n 3 r.err)"
[ "$(json_field r.json '["completed"]')" = True ] || fail "run not completed"
grep -q "restarting" r.err || fail "no restart: $(tail -n 5 r.err)"
ok "both ranks killed, the watchers gone before the supervisor's next line to them: restarted, completed"
