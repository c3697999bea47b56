#!/usr/bin/env bash
# A rank that stops making progress is declared hung within its timeout plus
# a second, every rank is stopped, and the job restarts and completes.
source "$(dirname "$0")/lib.sh"
"$FB" run --nproc-per-node 2 --max-restarts 1 --hang-timeout 1.5 --json \
    --inject 'hang:rank=0,step=5' -- "$RANK" --steps 20 --sleep-ms 10 "$TAG" \
    >out.json 2>err.txt || fail "run exited $?"
[ "$(json_field out.json '["incidents"][0]["kind"]')" = hang ] || fail "kind"
[ "$(json_field out.json '["incidents"][0]["rank"]')" = 0 ] || fail "rank"
d=$(json_field out.json '["incidents"][0]["detect_ms"]')
# detect_ms counts from the last heartbeat: timeout (1.5 s) <= d <= timeout + 1 s
python3 -c "import sys; sys.exit(0 if 1500 <= $d <= 2500 else 1)" || fail "detect_ms $d"
[ "$(json_field out.json '["completed"]')" = True ] || fail "not completed"
[ "$(q "select kind||':'||phase from incident")" = "hang:train" ] || fail "incident row"
# Evidence snapshot of the segments was taken before the kill.
ls "$(run_dir)"/fr/attempt-0/rank-0.fbseg >/dev/null || fail "no segment snapshot"
assert_no_segments
rm -rf runs

# A rank stopped (SIGSTOP: the supervisor's own after= hang, a debugger)
# takes its SIGTERM at once: the stop costs milliseconds, not --grace (20 s
# here; it waited for the SIGKILL at its end).
"$FB" run --nproc-per-node 2 --max-restarts 1 --hang-timeout 1 --grace 20 \
    --inject 'hang:rank=0,after=1s,attempt=0' -- "$RANK" --steps 300 --sleep-ms 10 "$TAG" \
    2>err.txt || fail "stopped rank: run exited $? $(tail -3 err.txt)"
line=$(grep "attempt 1: relaunched" err.txt) || fail "no relaunch line: $(tail -5 err.txt)"
stop=$(sed -E 's/.* stop ([0-9.]+),.*/\1/' <<<"$line")
python3 -c "import sys; sys.exit(0 if float('$stop') < 3000 else 1)" ||
    fail "the stopped rank's stop took $stop ms (grace 20 s): $line"
assert_no_segments
rm -rf runs

# One rank stops (SIGSTOP from outside: no injection it could record)
# while the other goes on stepping (no collective holds it): the silent
# rank alone is the hang's, named (it was "no rank blamed": silence is
# weak evidence only when every rank waits in a stalled collective).
"$FB" run --nproc-per-node 2 --max-restarts 1 --hang-timeout 2 --grace 2 --json \
    -- "$RANK" --steps 800 --sleep-ms 10 "$TAG" >out.json 2>err.txt &
sup=$!
r1=""
for _ in $(seq 100); do
    for p in $(pgrep -f -- "$TAG" || true); do
        [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$(readlink -f "$RANK")" ] || continue
        # attempt 0's rank 1, not the next attempt's standby (exec'd ahead)
        env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null || true)
        grep -qx "RANK=1" <<<"$env" && grep -qx "FIREBREAK_ATTEMPT=0" <<<"$env" && r1=$p
    done
    [ -n "$r1" ] && break
    sleep 0.05
done
[ -n "$r1" ] || fail "rank 1 not found"
sleep 0.3
kill -STOP "$r1"
wait $sup || fail "alone silent: run exited $? $(tail -3 err.txt)"
[ "$(json_field out.json '["incidents"][0]["kind"]')" = hang ] || fail "alone: kind: $(tail -5 err.txt)"
[ "$(json_field out.json '["incidents"][0]["rank"]')" = 1 ] ||
    fail "alone: rank $(json_field out.json '["incidents"][0]["rank"]'): $(q "select detail from incident")"
q "select detail from incident" | grep -q "it alone was silent" ||
    fail "alone: detail $(q "select detail from incident")"
assert_no_segments
ok "hang detected after $d ms (timeout 1500 ms), restarted, completed; a stopped rank stopped in $stop ms; a rank silent alone blamed"
