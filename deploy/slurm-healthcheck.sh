#!/bin/sh
# slurm-healthcheck.sh -- Slurm's HealthCheckProgram: check this node and
# drain it on a failure.  Install as /usr/local/libexec/firebreak/ (mode
# 0755).  Settings, e.g. per node type, in /etc/default/firebreak-health:
#   FIREBREAK_EXPECT_GPUS=8        fail when fewer GPUs are visible
#   FIREBREAK_CKPT_DIR=/ckpt       also check its free space
#   FIREBREAK_HEALTH_SINCE=2h      kernel-log window for XIDs
#   FIREBREAK_HEALTH_ARGS=...      anything else for `firebreak health`
[ -r /etc/default/firebreak-health ] && . /etc/default/firebreak-health
fb=${FIREBREAK_BIN:-/usr/local/bin/firebreak}
log=${FIREBREAK_HEALTH_LOG:-/var/log/firebreak-health.log}
set -- --drain --since "${FIREBREAK_HEALTH_SINCE:-2h}"
[ -n "${FIREBREAK_EXPECT_GPUS:-}" ] && set -- "$@" --expect-gpus "$FIREBREAK_EXPECT_GPUS"
[ -n "${FIREBREAK_CKPT_DIR:-}" ] && set -- "$@" --ckpt-dir "$FIREBREAK_CKPT_DIR"
# shellcheck disable=SC2086 # FIREBREAK_HEALTH_ARGS is a list of words
"$fb" health "$@" ${FIREBREAK_HEALTH_ARGS:-} >>"$log" 2>&1
rc=$?
# 0 ok, 1 warn: fine for Slurm; 2 fail: drained above; 3: could not check
# (logged; not a reason to drain by itself)
[ $rc -le 1 ] && exit 0
exit $rc
