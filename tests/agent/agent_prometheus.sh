#!/bin/bash
# agent_prometheus.sh FIREBREAK NVML_DOUBLE FIXTURES -- a real Prometheus
# server (Debian's `prometheus`) on a free loopback port scrapes the agent
# every second; the GPU temperature and a firebreak_* metric are read back
# through Prometheus's HTTP query API.  Both processes stop in the trap.
set -u
fb=$1 double=$2 fx=$3
command -v prometheus >/dev/null || { echo "prometheus not installed"; exit 1; }
tmp=$(mktemp -d)
apid= ppid_=
cleanup() {
    [ -n "$ppid_" ] && kill "$ppid_" 2>/dev/null && wait "$ppid_" 2>/dev/null
    [ -n "$apid" ] && kill "$apid" 2>/dev/null && wait "$apid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

FIREBREAK_NVML_LIB=$double FIREBREAK_NVML_SCENARIO=$fx/healthy/nvml.txt \
    "$fb" agent --root "$fx/healthy" --listen 127.0.0.1:0 --port-file "$tmp/aport" \
    --interval 200ms --quiet &
apid=$!
for _ in $(seq 100); do [ -s "$tmp/aport" ] && break; sleep 0.05; done
[ -s "$tmp/aport" ] || { fail "agent did not start"; exit 1; }
aport=$(cat "$tmp/aport")

# a free port for Prometheus: try a few until one binds
for attempt in 1 2 3 4 5; do
    pport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    cat > "$tmp/prometheus.yml" <<Y
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: firebreak-agent
    static_configs:
      - targets: ['127.0.0.1:$aport']
Y
    prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/data" \
        --web.listen-address="127.0.0.1:$pport" --log.level=warn \
        > "$tmp/prom.log" 2>&1 &
    ppid_=$!
    for _ in $(seq 100); do
        curl -sf "http://127.0.0.1:$pport/-/ready" >/dev/null 2>&1 && break
        kill -0 $ppid_ 2>/dev/null || break
        sleep 0.1
    done
    curl -sf "http://127.0.0.1:$pport/-/ready" >/dev/null 2>&1 && break
    kill $ppid_ 2>/dev/null; wait $ppid_ 2>/dev/null; ppid_=
done
[ -n "$ppid_" ] || { fail "prometheus did not start: $(tail -5 "$tmp/prom.log")"; exit 1; }

query() { # PROMQL -> JSON
    curl -s "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$1"
}
ok=0
for _ in $(seq 60); do
    n=$(query 'DCGM_FI_DEV_GPU_TEMP' | jq '.data.result | length' 2>/dev/null)
    [ "${n:-0}" = 8 ] && { ok=1; break; }
    sleep 0.25
done
[ $ok = 1 ] || fail "Prometheus has no 8 DCGM_FI_DEV_GPU_TEMP series: $(query DCGM_FI_DEV_GPU_TEMP | head -c 300)"
query 'DCGM_FI_DEV_GPU_TEMP{gpu="3"}' |
    jq -e '.data.result[0].value[1] == "41" and (.data.result[0].metric.UUID | startswith("GPU-")) and .data.result[0].metric.modelName == "NVIDIA H100 80GB HBM3"' >/dev/null ||
    fail "GPU 3 temperature through Prometheus: $(query 'DCGM_FI_DEV_GPU_TEMP{gpu="3"}')"
query 'firebreak_agent_up' | jq -e '.data.result[0].value[1] == "1" and .data.result[0].metric.job == "firebreak-agent"' >/dev/null ||
    fail "firebreak_agent_up through Prometheus: $(query firebreak_agent_up)"
query 'firebreak_node_power_watts' | jq -e '.data.result[0].value[1] == "5200"' >/dev/null ||
    fail "firebreak_node_power_watts through Prometheus"
query 'up{job="firebreak-agent"}' | jq -e '.data.result[0].value[1] == "1"' >/dev/null ||
    fail "scrape target not up"

[ $fails = 0 ] && echo "agent prometheus: all passed"
exit $((fails > 0))
