#!/bin/bash
# deploy_files.sh FIREBREAK NVML_DOUBLE FIXTURES DEPLOY -- the deployment
# files work: Prometheus accepts the scrape config, the systemd unit starts
# the agent in the foreground, and the Slurm HealthCheckProgram wrapper
# drains a bad node (fake scontrol) and passes a healthy one.
set -u
fb=$1 double=$2 fx=$3 deploy=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

promtool check config "$deploy/prometheus-firebreak.yml" >/dev/null 2>"$tmp/e" ||
    fail "promtool check config: $(cat "$tmp/e")"
grep -q '^ExecStart=/usr/local/bin/firebreak agent --listen ' "$deploy/firebreak-agent.service" ||
    fail "unit ExecStart"
grep -q '^Type=simple' "$deploy/firebreak-agent.service" || fail "unit must run in the foreground"
if command -v systemd-analyze >/dev/null 2>&1; then
    sed "s|/usr/local/bin/firebreak|$fb|" "$deploy/firebreak-agent.service" > "$tmp/firebreak-agent.service"
    systemd-analyze verify "$tmp/firebreak-agent.service" 2>"$tmp/e" ||
        grep -qv "firebreak-agent" "$tmp/e" || fail "systemd-analyze: $(cat "$tmp/e")"
fi
grep -q '^HealthCheckProgram=/usr/local/libexec/firebreak/slurm-healthcheck.sh' "$deploy/slurm-healthcheck.conf" ||
    fail "slurm.conf snippet"

mkdir "$tmp/bin"
printf '#!/bin/sh\nprintf "%%s\\n" "$@" > "$SCONTROL_LOG"\n' > "$tmp/bin/scontrol"
chmod +x "$tmp/bin/scontrol"
export PATH="$tmp/bin:$PATH" SCONTROL_LOG=$tmp/args FIREBREAK_BIN=$fb \
       FIREBREAK_HEALTH_LOG=$tmp/log FIREBREAK_NVML_LIB=$double SLURMD_NODENAME=node7
FIREBREAK_NVML_SCENARIO=$fx/gpu-lost/nvml.txt FIREBREAK_EXPECT_GPUS=8 \
FIREBREAK_HEALTH_ARGS="--root $fx/gpu-lost --min-free 1M" sh "$deploy/slurm-healthcheck.sh"
rc=$?
[ $rc = 2 ] || fail "bad node: wrapper exit $rc"
grep -qx "NodeName=node7" "$tmp/args" 2>/dev/null && grep -q "^Reason=firebreak: " "$tmp/args" ||
    fail "bad node not drained: $(cat "$tmp/args" 2>/dev/null)"
rm -f "$tmp/args"
FIREBREAK_NVML_SCENARIO=$fx/thermal-slowdown/nvml.txt \
FIREBREAK_HEALTH_ARGS="--root $fx/thermal-slowdown --min-free 1M" sh "$deploy/slurm-healthcheck.sh"
rc=$?
[ $rc = 0 ] && [ ! -e "$tmp/args" ] || fail "warning node: exit $rc, drained: $([ -e "$tmp/args" ] && echo yes)"
grep -q "verdict: warn" "$tmp/log" || fail "wrapper log"

[ $fails = 0 ] && echo "deploy files: all passed"
exit $((fails > 0))
