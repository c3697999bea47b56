#!/usr/bin/env bash
# Install the Debian packages firebreak builds and tests with, and the
# PyPI torch 2.x venv the Python tests also run against.
#
# Idempotent: installs only what is missing.  Daemons that a package would
# start on its own (prometheus, munge, slurm) are kept from starting with a
# temporary policy-rc.d: tests start their own, on free ports, and stop them.
#
#   scripts/deps.sh               build + test dependencies (+ the torch 2 venv)
#   scripts/deps.sh --build       only what the build needs (no venv)
#   scripts/deps.sh --torch2-venv print the venv's path, install nothing
#
# The torch 2 venv: torch $TORCH2_VERSION from PyPI (with numpy, safetensors
# and setuptools) in a venv of Debian's /usr/bin/python3, at
# $FIREBREAK_TORCH2_VENV (default /opt/firebreak/torch-$TORCH2_VERSION).
# Reused when its marker file .firebreak-ready is there; the marker is
# written only once `import torch, numpy, safetensors` works in it.
set -euo pipefail

TORCH2_VERSION=2.15.0   # the one place the torch 2 version is pinned
TORCH2_VENV=${FIREBREAK_TORCH2_VENV:-/opt/firebreak/torch-$TORCH2_VERSION}
TORCH2_READY=$TORCH2_VENV/.firebreak-ready

if [ "${1:-}" = "--torch2-venv" ]; then
    echo "$TORCH2_VENV"
    exit 0
fi

build_pkgs=(build-essential cmake pkg-config clang libclang-rt-14-dev
            libsqlite3-dev sqlite3 libxxhash-dev libmicrohttpd-dev
            libopenmpi-dev openmpi-bin libmpich-dev mpich python3-dev)
test_pkgs=(python3-torch python3-numpy fio hyperfine prometheus chromium jq curl bc
           slurm-wlm munge procps python3-venv python3-setuptools python3-pip
           util-linux iproute2) # unshare, setpriv; ip (the hosts' namespaces)

pkgs=("${build_pkgs[@]}")
if [ "${1:-}" != "--build" ]; then pkgs+=("${test_pkgs[@]}"); fi

install_debian() {
    missing=()
    for p in "${pkgs[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
            missing+=("$p")
        fi
    done
    if [ ${#missing[@]} -eq 0 ]; then return 0; fi

    if [ "$(id -u)" -ne 0 ]; then
        echo "deps.sh: missing packages: ${missing[*]}" >&2
        echo "deps.sh: run as root (or: sudo $0) to install them" >&2
        exit 1
    fi

    echo "deps.sh: installing ${missing[*]}" >&2
    policy=/usr/sbin/policy-rc.d
    had_policy=0
    [ -e "$policy" ] && had_policy=1
    if [ $had_policy -eq 0 ]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy"
        chmod +x "$policy"
        trap 'rm -f "$policy"' EXIT
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || true
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # Some postinst scripts start daemons despite policy-rc.d when there is no
    # init system; stop any we did not ask for.
    for d in prometheus munged slurmctld slurmd; do
        pkill -x "$d" 2>/dev/null || true
    done
    if [ $had_policy -eq 0 ]; then rm -f "$policy"; trap - EXIT; fi
    echo "deps.sh: done" >&2
}

# The torch 2 venv (needs python3-venv, so after the Debian packages).
install_torch2() {
    [ -e "$TORCH2_READY" ] && return 0
    local parent log
    parent=$(dirname "$TORCH2_VENV")
    if ! mkdir -p "$parent" 2>/dev/null || [ ! -w "$parent" ]; then
        echo "deps.sh: cannot create the torch $TORCH2_VERSION venv at $TORCH2_VENV" \
             "($parent is not writable): run as root, or set FIREBREAK_TORCH2_VENV" \
             "to a writable path" >&2
        exit 1
    fi
    log=$parent/torch-$TORCH2_VERSION-install.log
    echo "deps.sh: installing torch $TORCH2_VERSION from PyPI into $TORCH2_VENV" \
         "(downloads about 5 GB; this takes minutes; log: $log)" >&2
    if [ ! -x "$TORCH2_VENV/bin/python" ]; then
        /usr/bin/python3 -m venv "$TORCH2_VENV" >"$log" 2>&1 || {
            tail -5 "$log" >&2
            echo "deps.sh: FAILED: /usr/bin/python3 -m venv $TORCH2_VENV" >&2
            exit 1
        }
    fi
    # A half-finished venv (an earlier install interrupted) is reused: pip
    # installs what is missing.  On a terminal pip's progress shows.
    local pip=("$TORCH2_VENV/bin/pip" install --disable-pip-version-check
               "torch==$TORCH2_VERSION" numpy safetensors setuptools)
    local rc=0
    if [ -t 2 ]; then
        "${pip[@]}" 2>&1 | tee -a "$log" >&2 || rc=$?
    else
        "${pip[@]}" >>"$log" 2>&1 || rc=$?
    fi
    if [ $rc -ne 0 ]; then
        tail -15 "$log" >&2
        echo "deps.sh: FAILED: pip install torch==$TORCH2_VERSION into $TORCH2_VENV" \
             "(exit $rc; full log: $log)" >&2
        exit 1
    fi
    if ! "$TORCH2_VENV/bin/python" -c 'import torch, numpy, safetensors' >>"$log" 2>&1; then
        tail -15 "$log" >&2
        echo "deps.sh: FAILED: the venv at $TORCH2_VENV cannot import torch, numpy" \
             "and safetensors (log: $log)" >&2
        exit 1
    fi
    echo "$TORCH2_VERSION" >"$TORCH2_READY"
    echo "deps.sh: torch $TORCH2_VERSION ready in $TORCH2_VENV" >&2
}

install_debian
if [ "${1:-}" != "--build" ]; then install_torch2; fi
