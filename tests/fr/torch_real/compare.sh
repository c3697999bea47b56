#!/bin/bash
# PyTorch's own analyzer and `firebreak fr analyze` on the same real dumps;
# writes what both said to DIR/ANALYSIS.txt.
#
#   compare.sh PYTHON FIREBREAK DIR
#
# PYTHON is an interpreter with the torch that made the dumps in
# DIR/{pickle,json}/ (gen_real_dumps.py), or a later one where that torch
# does not ship the analyzer (2.9.1). PyTorch's analyzer reads pickles only.
# It is run on the dumps as they are, and then, while it fails, on copies
# with the gloo quirks it trips on corrected (see fr_trace_compat.py).
set -u
PY=$1 FB=$2 DIR=$(cd "$3" && pwd)
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
HERE=$(cd "$(dirname "$0")" && pwd)
out=$DIR/ANALYSIS.txt
fr_trace() { # DIR
  "$PY" -W ignore -m torch.distributed.flight_recorder.fr_trace "$1" \
    -p nccl_trace_rank_ 2>&1 | grep -v -e 'Failed to initialize NumPy' \
    -e '_conversion_method_template' -e 'tabulate is not installed'
  return "${PIPESTATUS[0]}"
}
{
  echo "dumps: made by torch $(basename "$DIR") (tests/fr/torch_real/gen_real_dumps.py)"
  echo "PyTorch's analyzer: from torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
  echo
  echo "== PyTorch: python -m torch.distributed.flight_recorder.fr_trace pickle -p nccl_trace_rank_"
  fr_trace "$DIR/pickle" >"$T/raw"
  rc=$?
  sed "s|$DIR/||g" "$T/raw"
  echo "(exit $rc)"
  for flags in "" --gloo-as-nccl; do
    [ "$rc" -ne 0 ] || break
    echo
    echo "== PyTorch again, on a copy with the gloo quirks corrected:"
    echo "== fr_trace_compat.py pickle COPY $flags"
    rm -rf "$T/compat"
    "$PY" "$HERE/fr_trace_compat.py" "$DIR/pickle" "$T/compat" $flags
    fr_trace "$T/compat" >"$T/fixed"
    rc=$?
    sed "s|$T/compat/||g" "$T/fixed" | tail -n 40
    echo "(exit $rc)"
  done
  for k in pickle json; do
    echo
    echo "== firebreak fr analyze $k"
    "$FB" fr analyze "$DIR/$k" | sed -e "s|$DIR/||g" -e 's/waiting in it up to [0-9.]* s/waiting in it/'
    echo "(exit ${PIPESTATUS[0]})"
  done
} >"$out"
cat "$out"
