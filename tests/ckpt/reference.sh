#!/bin/bash
# Shards written by firebreak load in the reference safetensors package
# (installed from PyPI here) with identical bytes for every dtype.
set -u
sample=$1 script=$2
py=${FB_PYTHON:-python3}
if ! "$py" -c 'import safetensors, numpy' 2>/dev/null; then
    "$py" -m pip install -q safetensors numpy >/dev/null 2>&1
fi
if ! "$py" -c 'import safetensors, numpy' 2>/dev/null; then
    echo "SKIP: pip could not install safetensors and numpy for $py"
    exit 77
fi
dir=$(mktemp -d /tmp/fb-ckpt-ref.XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$sample" "$dir" 0 1 7 7 || exit 1
"$py" "$script" "$dir/step-0000000007/rank-00000.safetensors" "$dir/expect-r0"
