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

# A watcher that attaches late (the same test hook as the supervisor's
# passes, FIREBREAK_TEST_ATTACH_AFTER_MS: no segment in its first second,
# while the rank saves every step and writes hundreds of reports into a
# ring of 128) forwards what is left, in order by index: the supervisor
# counts the indexes it never got as lost and says so at the attempt's end,
# in its log and as a `reports_lost` event, as it does for the segments it
# reads itself (tests/supervisor/ckpt_count.sh).  It used to skip them
# silently.
FIREBREAK_TEST_ATTACH_AFTER_MS=1000 salloc -Q -N1 -w node1 "$FB" run --launcher slurm \
    --run-dir "$T/lost" -- "$TOY" --steps 1000 --sleep-ms 1 --ckpt-every 1 \
    >lost.out 2>lost.err || fail "second run exited $?: $(tail -n 3 lost.err)"
grep -Eq "attempt 0: [0-9]+ reports of 1 rank \(rank 0 first\) were overwritten in their segments before they were read" \
    lost.err || fail "no word of the lost reports: $(grep -v status: lost.err | tail -n 3)"
n=$(sqlite3 -batch -noheader "$T/lost/journal.sqlite" \
    "select code from event where kind = 'reports_lost' and rank = 0")
[ -n "$n" ] && [ "$n" -gt 0 ] || fail "reports_lost event: '$n'"
ok "a watcher's lost reports: $n, said in the log and the journal"
