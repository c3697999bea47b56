#!/usr/bin/env bash
# slurm-cluster.sh -- a four-node Slurm cluster on this one machine, for
# firebreak's tests and demos (docs/slurm.md).
#
#   scripts/slurm-cluster.sh up [DIR]     start munged, slurmctld and
#                                         `slurmd -N node1..node4`; state,
#                                         logs and sockets under DIR (default:
#                                         a new /tmp/fb-slurm.XXXXXX); prints
#                                         `export SLURM_CONF=DIR/slurm.conf`
#                                         as its last line
#   scripts/slurm-cluster.sh down DIR     cancel every job, stop every daemon
#                                         and every slurmstepd they started,
#                                         remove DIR
#   scripts/slurm-cluster.sh status DIR   daemons and `sinfo`
#
# Needs root and Debian's slurm-wlm and munge packages (scripts/deps.sh).
# Ports: five free TCP ports picked at random (slurmctld + one per slurmd),
# so several clusters can run side by side.  The configuration template is
# deploy/slurm-local/slurm.conf.in.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
template=$here/../deploy/slurm-local/slurm.conf.in
NODES="node1 node2 node3 node4"

die() { echo "slurm-cluster: $*" >&2; exit 1; }

# A TCP port nobody has bound (listening or not), from /proc/net/tcp{,6}.
port_free() {
    local hex
    hex=$(printf ':%04X ' "$1")
    ! cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '{print $2}' | grep -q "${hex% }\$"
}

pick_ports() {
    local base k ok
    for _ in $(seq 1 50); do
        base=$((20000 + RANDOM % 30000))
        ok=1
        for k in 0 1 2 3 4; do port_free $((base + k)) || { ok=0; break; }; done
        [ $ok = 1 ] && { echo "$base"; return 0; }
    done
    die "no five free ports in a row found"
}

pidof_file() { [ -s "$1" ] && cat "$1" || true; }

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null && \
          [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]; }

# Every descendant of a pid (children first found, then theirs).
descendants() {
    local p c
    for c in $(pgrep -P "$1" 2>/dev/null || true); do
        echo "$c"
        descendants "$c"
    done
}

wait_gone() { # pid... : wait up to 5 s for them to end
    local t=0 p left
    while [ $t -lt 50 ]; do
        left=0
        for p in "$@"; do alive "$p" && left=1; done
        [ $left = 0 ] && return 0
        sleep 0.1; t=$((t + 1))
    done
    return 1
}

cmd_up() {
    [ "$(id -u)" = 0 ] || die "needs root (slurmd and munged run as root here)"
    for b in munged slurmctld slurmd scontrol sinfo; do
        command -v "$b" >/dev/null || die "$b not found: install slurm-wlm and munge (scripts/deps.sh)"
    done
    [ -r "$template" ] || die "cannot read $template"
    local d=${1:-}
    if [ -z "$d" ]; then d=$(mktemp -d /tmp/fb-slurm.XXXXXX); else mkdir -p "$d"; fi
    d=$(cd "$d" && pwd)
    mkdir -p "$d/munge" "$d/ctld" "$d/log" "$d/spool"
    chmod 700 "$d/munge"
    for n in $NODES; do mkdir -p "$d/spool/$n"; done

    # munged: a private key and socket, so the host's own munge (if any) is
    # left alone.
    dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
    chmod 600 "$d/munge/munge.key"
    munged --force --socket="$d/munge/munge.socket" --key-file="$d/munge/munge.key" \
        --pid-file="$d/munge/munged.pid" --log-file="$d/log/munged.log" \
        --seed-file="$d/munge/munged.seed" \
        || die "munged did not start (see $d/log/munged.log)"

    local base host cluster
    base=$(pick_ports)
    host=$(hostname)
    cluster=fb$(printf '%05d' $((base % 100000)))
    sed -e "s|@CLUSTER@|$cluster|g" -e "s|@HOST@|$host|g" -e "s|@STATE@|$d|g" \
        -e "s|@CTLD_PORT@|$base|g" -e "s|@SLURMD_PORTS@|$((base + 1))-$((base + 4))|g" \
        "$template" >"$d/slurm.conf"
    export SLURM_CONF=$d/slurm.conf

    slurmctld -f "$d/slurm.conf" -i || die "slurmctld did not start (see $d/log/slurmctld.log)"
    for n in $NODES; do
        slurmd -f "$d/slurm.conf" -N "$n" || die "slurmd -N $n did not start (see $d/log/slurmd-$n.log)"
    done
    # Wait until every node is idle.
    local t=0 idle
    while :; do
        idle=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2=="idle"' | wc -l)
        [ "$idle" -ge 4 ] && break
        t=$((t + 1))
        if [ $t -ge 150 ]; then
            sinfo -N >&2 || true
            die "nodes not idle after 15 s (logs in $d/log)"
        fi
        sleep 0.1
    done
    echo "slurm-cluster: up in $d (slurmctld port $base, slurmd ports $((base + 1))-$((base + 4)))" >&2
    echo "export SLURM_CONF=$d/slurm.conf"
}

cmd_down() {
    local d=${1:-}
    [ -n "$d" ] && [ -d "$d" ] || die "down: no such state directory '$d'"
    d=$(cd "$d" && pwd)
    export SLURM_CONF=$d/slurm.conf
    local ctld munge pids="" p n
    ctld=$(pidof_file "$d/slurmctld.pid")
    if [ -f "$d/slurm.conf" ] && alive "$ctld"; then
        scancel --quiet --full -u root 2>/dev/null || true
        for _ in $(seq 1 30); do
            [ -z "$(squeue -h 2>/dev/null)" ] && break
            sleep 0.1
        done
    fi
    # slurmd first, together with the slurmstepd processes it started.
    for n in $NODES; do
        p=$(pidof_file "$d/slurmd-$n.pid")
        alive "$p" || continue
        pids="$pids $p $(descendants "$p" | tr '\n' ' ')"
    done
    [ -n "$ctld" ] && alive "$ctld" && pids="$pids $ctld"
    munge=$(pidof_file "$d/munge/munged.pid")
    [ -n "$munge" ] && alive "$munge" && pids="$pids $munge"
    # shellcheck disable=SC2086
    if [ -n "${pids// /}" ]; then
        kill -TERM $pids 2>/dev/null || true
        wait_gone $pids || { kill -KILL $pids 2>/dev/null || true; wait_gone $pids || true; }
    fi
    rm -rf "$d"
}

cmd_status() {
    local d=${1:-}
    [ -n "$d" ] && [ -d "$d" ] || die "status: no such state directory '$d'"
    export SLURM_CONF=$d/slurm.conf
    local p n rc=0
    for n in munge/munged slurmctld; do
        p=$(pidof_file "$d/$n.pid")
        if alive "$p"; then echo "${n#munge/}: running (pid $p)"; else echo "${n#munge/}: not running"; rc=1; fi
    done
    for n in $NODES; do
        p=$(pidof_file "$d/slurmd-$n.pid")
        if alive "$p"; then echo "slurmd -N $n: running (pid $p)"; else echo "slurmd -N $n: not running"; rc=1; fi
    done
    sinfo -N -o '%N %t %E' 2>/dev/null || rc=1
    return $rc
}

case "${1:-}" in
up) shift; cmd_up "$@" ;;
down) shift; cmd_down "$@" ;;
status) shift; cmd_status "$@" ;;
-h|--help|help)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
*) echo "usage: slurm-cluster.sh up [DIR] | down DIR | status DIR" >&2; exit 2 ;;
esac
