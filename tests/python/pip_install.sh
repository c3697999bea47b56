#!/usr/bin/env bash
# `pip install ./python` builds the package standalone from the repository's
# sources (no CMake build, no installed libfirebreak) into a fresh venv, and
# the API tests pass with that venv's python.  Offline: setuptools and torch
# come from PYTHON's site-packages (--no-build-isolation): the system's
# (--system-site-packages) for Debian's python; for a venv's python (the
# torch 2 venv), that venv's site-packages (pip and setuptools included:
# the test venv gets none of its own) through a .pth file, since a venv made
# by a venv's python sees only the base interpreter's packages.
set -euo pipefail
SRC=$1
PY=$2
"$PY" -c 'import torch, setuptools, venv' 2>/dev/null || { echo "SKIP: $PY lacks torch, setuptools or venv"; exit 77; }
T=$(mktemp -d /tmp/fbpy-pip.XXXXXX)
trap 'rm -rf "$T"' EXIT
mkdir "$T/repo"
cp -r "$SRC/include" "$SRC/src" "$SRC/python" "$T/repo/"   # a copy: pip builds in place
rm -rf "$T/repo/python/build" "$T/repo/python/"*.egg-info
parent=$("$PY" -c 'import sys, sysconfig; print(sysconfig.get_paths()["purelib"] if sys.prefix != sys.base_prefix else "")')
if [ -n "$parent" ]; then
    "$PY" -m venv --without-pip "$T/venv"
    own=$("$T/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$parent" >"$own/fb-test-parent.pth"
else
    "$PY" -m venv --system-site-packages "$T/venv"
fi
want=$("$PY" -c 'import torch; print(torch.__version__)')
have=$("$T/venv/bin/python" -c 'import torch; print(torch.__version__)')
[ "$want" = "$have" ] || { echo "FAIL: the test venv has torch $have, $PY has $want"; exit 1; }
"$T/venv/bin/python" -m pip install -q --no-build-isolation "$T/repo/python" >"$T/pip.log" 2>&1 \
    || { tail -20 "$T/pip.log"; echo "FAIL: pip install ./python"; exit 1; }
cd "$T"
got=$("$T/venv/bin/python" -c 'import firebreak; print(firebreak.__file__)')
case $got in
    "$T/venv/"*) ;;
    *) echo "FAIL: imported firebreak from $got, not the venv"; exit 1 ;;
esac
env -u PYTHONPATH "$T/venv/bin/python" "$SRC/tests/python/api.py"
echo "ok: pip install ./python into a venv (torch $have); api tests pass there"
