#!/usr/bin/env bash
# Install the Debian packages firebreak builds and tests with.
#
# Idempotent: installs only what is missing.  Daemons that a package would
# start on its own (prometheus, munge, slurm) are kept from starting with a
# temporary policy-rc.d: tests start their own, on free ports, and stop them.
#
#   scripts/deps.sh            build + test dependencies
#   scripts/deps.sh --build    only what the build needs
set -euo pipefail

build_pkgs=(build-essential cmake pkg-config clang libclang-rt-14-dev
            libsqlite3-dev sqlite3 libxxhash-dev libmicrohttpd-dev
            libopenmpi-dev openmpi-bin libmpich-dev mpich python3-dev)
test_pkgs=(python3-torch python3-numpy fio hyperfine prometheus chromium jq curl bc
           slurm-wlm munge procps python3-venv python3-setuptools python3-pip)

pkgs=("${build_pkgs[@]}")
if [ "${1:-}" != "--build" ]; then pkgs+=("${test_pkgs[@]}"); fi

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi

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
echo "deps.sh: done" >&2
