#!/bin/bash
# bench_agent.sh FIREBREAK FAKE_RANK NVML_DOUBLE FIXTURES HTTP_GET
#
# 1. CPU: the agent at a 1 s interval with 8 (double) GPUs and 8 ranks,
#    measured from /proc/<pid>/stat (utime + stime) over BENCH_SECONDS
#    (default 20); budget: 1% of one core.
# 2. /metrics latency: BENCH_REQUESTS (default 2000) sequential GETs, a new
#    connection each, against the agent and against a static copy of the
#    same text served by `python3 -m http.server` (the baseline).
set -u
fb=$1 rank_bin=$2 double=$3 fx=$4 http_get=$5
secs=${BENCH_SECONDS:-20} reqs=${BENCH_REQUESTS:-2000}
tmp=$(mktemp -d)
job=agbench-$$-$RANDOM
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -f /dev/shm/fb."$job".*
    rm -rf "$tmp"
}
trap cleanup EXIT

run=$tmp/run
mkdir -p "$run"
echo "$job" > "$run/job"
for r in 0 1 2 3 4 5 6 7; do
    FIREBREAK_JOB_ID=$job FIREBREAK_RANK=$r FIREBREAK_WORLD_SIZE=8 \
    FIREBREAK_RUN_DIR=$run FIREBREAK_SUPERVISOR_PID=$$ "$rank_bin" 0 100 &
    pids+=($!)
done
FIREBREAK_NVML_LIB=$double FIREBREAK_NVML_SCENARIO=$fx/healthy/nvml.txt \
    "$fb" agent --run "$run" --root "$fx/healthy" --interval 1s \
    --listen 127.0.0.1:0 --port-file "$tmp/port" --quiet &
agent=$!
pids+=($agent)
for _ in $(seq 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
port=$(cat "$tmp/port")
sleep 2 # segments found, database created

ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
t0=$(date +%s.%N); c0=$(ticks $agent)
sleep "$secs"
t1=$(date +%s.%N); c1=$(ticks $agent)
cpu=$(awk -v c="$((c1 - c0))" -v hz="$hz" -v a="$t0" -v b="$t1" \
      'BEGIN { printf "%.3f", 100 * c / hz / (b - a) }')
ranks=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^firebreak_run_ranks/ {print $2}')
gpus=$(curl -s "http://127.0.0.1:$port/metrics" | awk '/^firebreak_gpus / {print $2}')
echo "agent CPU: ${cpu}% of one core over ${secs}s at 1s interval, $gpus GPUs (double), $ranks ranks"
awk -v c="$cpu" 'BEGIN { printf "agent CPU vs budget 1%%: ratio %.3f (%s)\n", c / 1.0, c < 1.0 ? "within" : "OVER" }'

# /metrics latency beside a static-file baseline of the same bytes
mkdir "$tmp/static"
curl -s "http://127.0.0.1:$port/metrics" > "$tmp/static/metrics"
sport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
(cd "$tmp/static" && exec python3 -m http.server "$sport" --bind 127.0.0.1) >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$sport/metrics" >/dev/null && break; sleep 0.05; done
a=$("$http_get" "$port" /metrics "$reqs")
b=$("$http_get" "$sport" /metrics "$reqs")
echo "agent  /metrics:          $a"
echo "static http.server file:  $b"
am=$(sed 's/.*median_us=\([0-9.]*\).*/\1/' <<<"$a")
bm=$(sed 's/.*median_us=\([0-9.]*\).*/\1/' <<<"$b")
awk -v a="$am" -v b="$bm" 'BEGIN { printf "/metrics median %.3f ms (budget 5 ms), %.2fx the static-file baseline\n", a / 1000, a / b }'

# shellcheck source=bench/result.sh
. "$(dirname "$0")/../result.sh"
ok=0
bench_target bench_agent "agent CPU, 1 s interval, 8 GPUs (double), 8 ranks" \
    "${cpu}% of a core" "-" "< 1%" "$(awk -v c="$cpu" 'BEGIN { print (c < 1.0) }')" || ok=1
bench_target bench_agent "/metrics scrape, median" \
    "$(awk -v a="$am" 'BEGIN { printf "%.3f ms", a / 1000 }')" \
    "$(awk -v b="$bm" 'BEGIN { printf "static file %.3f ms", b / 1000 }')" "< 5 ms" \
    "$(awk -v a="$am" 'BEGIN { print (a / 1000 < 5) }')" || ok=1
exit $ok
