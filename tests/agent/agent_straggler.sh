#!/bin/bash
# agent_straggler.sh FIREBREAK FAKE_RANK NVML_DOUBLE FIXTURES -- four ranks
# attach through the supervisor's environment; fault injection makes rank 2
# four times slower from step 5.  The agent, given the run directory, must
# flag rank 2 (and only rank 2) as a straggler with its evidence, in its
# database and on /metrics.
set -u
fb=$1 rank_bin=$2 double=$3 fx=$4
tmp=$(mktemp -d)
job=agtest-$$-$RANDOM
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -f /dev/shm/fb."$job".*
    rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

run=$tmp/run
mkdir -p "$run"
echo "$job" > "$run/job"
for r in 0 1 2 3; do
    FIREBREAK_JOB_ID=$job FIREBREAK_RANK=$r FIREBREAK_WORLD_SIZE=4 \
    FIREBREAK_RUN_DIR=$run FIREBREAK_SUPERVISOR_PID=$$ \
    FIREBREAK_INJECT="slow:rank=2,step=5,factor=4" \
        "$rank_bin" 0 40 &
    pids+=($!)
done

export FIREBREAK_NVML_LIB=$double FIREBREAK_NVML_SCENARIO=$fx/healthy/nvml.txt
"$fb" agent --run "$run" --root "$fx/healthy" --listen none --interval 100ms \
    --duration 3s 2>"$tmp/err"
rc=$?
[ $rc = 0 ] || fail "agent exit $rc: $(cat "$tmp/err")"
# while the ranks still run: their metrics
"$fb" agent --run "$run" --db "$tmp/once.sqlite" --root "$fx/healthy" --once --quiet > "$tmp/m"
db=$run/agent.sqlite
[ -f "$db" ] || { fail "no $db"; exit 1; }
[ ! -e "$run/journal.sqlite" ] || fail "the agent must not write journal.sqlite"

q() { sqlite3 "$db" "$1"; }
[ "$(q "select count(*) from events where kind='straggler' and subject='rank2'")" = 1 ] ||
    fail "rank 2 not flagged once: $(q "select kind, subject, detail from events")"
[ "$(q "select count(*) from events where kind='straggler' and subject<>'rank2'")" = 0 ] ||
    fail "another rank flagged: $(q "select subject from events where kind='straggler'")"
q "select evidence from events where kind='straggler'" |
    jq -e '.rank == 2 and .ratio > 1.5 and .step >= 5 and .others_median_s > 0.03 and .others_median_s < 0.1 and .samples_over >= 3' >/dev/null ||
    fail "straggler evidence: $(q "select evidence from events where kind='straggler'")"
grep -q "straggler rank2: rank 2 is a straggler" "$tmp/err" || fail "no straggler line on stderr"
[ "$(q "select count(distinct rank) from rank_samples")" = 4 ] || fail "rank samples for 4 ranks"
[ "$(q "select max(straggler) from rank_samples where rank=2")" = 1 ] || fail "rank 2 samples not marked"
[ "$(q "select max(steps_done) > 10 from rank_samples where rank=0")" = 1 ] || fail "rank 0 progress"

grep -q '^firebreak_run_ranks{job_id="'"$job"'"} 4$' "$tmp/m" || fail "firebreak_run_ranks"
grep -q '^firebreak_run_restarts{job_id="'"$job"'"} 0$' "$tmp/m" || fail "firebreak_run_restarts"
s0=$(awk -F' ' '/^firebreak_rank_step_seconds\{.*rank="0"\}/ {print $2}' "$tmp/m")
s2=$(awk -F' ' '/^firebreak_rank_step_seconds\{.*rank="2"\}/ {print $2}' "$tmp/m")
awk -v a="$s2" -v b="$s0" 'BEGIN { exit !(a > 2 * b && b > 0) }' || fail "step seconds rank2 $s2 vs rank0 $s0"
grep -q '^firebreak_rank_steps_total{job_id="'"$job"'",rank="3"} [1-9]' "$tmp/m" || fail "steps_total"

# a restart: the agent follows the highest attempt present
FIREBREAK_JOB_ID=$job FIREBREAK_RANK=0 FIREBREAK_WORLD_SIZE=1 FIREBREAK_ATTEMPT=1 \
FIREBREAK_RUN_DIR=$run FIREBREAK_SUPERVISOR_PID=$$ "$rank_bin" 0 40 &
pids+=($!)
for _ in $(seq 50); do [ -e "/dev/shm/fb.$job.1.0" ] && break; sleep 0.05; done
"$fb" agent --run "$run" --db "$tmp/once2.sqlite" --root "$fx/healthy" --once --quiet > "$tmp/m2"
grep -q '^firebreak_run_restarts{job_id="'"$job"'"} 1$' "$tmp/m2" || fail "restart not followed"
grep -q '^firebreak_run_ranks{job_id="'"$job"'"} 1$' "$tmp/m2" || fail "old attempt's ranks still counted"

# A long-running agent on the attempt-1 rank: its productive time is a
# counter, never going down across a stall (the rank stopped 1.5 s:
# steps x smoothed step time fell after it, 19.6 -> 4.0 s), and its
# series go once its segment is removed (they stayed, the heartbeat's
# age growing, after the job was over).
"$fb" agent --run "$run" --db "$tmp/live.sqlite" --root "$fx/healthy" --listen 127.0.0.1:0 \
    --port-file "$tmp/port" --interval 100ms --quiet 2>"$tmp/live.err" &
apid=$!
pids+=($apid)
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
url=http://127.0.0.1:$(cat "$tmp/port")/metrics
prod() { curl -s --max-time 2 "$url" | awk '/^firebreak_rank_productive_seconds_total\{.*rank="0"\}/ {print $2}'; }
vals=()
for i in $(seq 1 24); do
    [ $i = 6 ] && kill -STOP "${pids[-2]}"
    [ $i = 14 ] && kill -CONT "${pids[-2]}"
    vals+=("$(prod)")
    sleep 0.2
done
echo "${vals[*]}" | awk '{ for (i = 2; i <= NF; i++) if ($i + 0 < $(i - 1) + 0) bad = bad " " $(i - 1) "->" $i
                          exit (NF < 20 || bad != "") ? 1 : 0 }' ||
    fail "productive seconds went down or were missing: ${vals[*]}"
kill "${pids[-2]}"; wait "${pids[-2]}" 2>/dev/null
rm -f /dev/shm/fb."$job".*
# and, after the sweep, another user's file under the rank's name: not
# the segment the agent had open (nor one it opens: not the job's user)
if id nobody >/dev/null 2>&1; then
    head -c 65536 /dev/zero >"/dev/shm/fb.$job.1.0"
    chown nobody "/dev/shm/fb.$job.1.0"
fi
sleep 0.5
curl -s --max-time 2 "$url" >"$tmp/after"
grep -q '^firebreak_agent_up 1$' "$tmp/after" || fail "no agent_up after the segments went: $(head -c 300 "$tmp/after")"
left=$(grep -c '^firebreak_rank_' "$tmp/after")
[ "$left" = 0 ] || fail "$left rank series left after the segments were removed"

[ $fails = 0 ] && echo "agent straggler: all passed"
exit $((fails > 0))
