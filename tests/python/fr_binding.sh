#!/usr/bin/env bash
# The extension's flight-recorder bindings, checked byte by byte in a real
# rank's segment: fr_binding.py runs as the one rank of `firebreak run`.
# Args: FIREBREAK_BINARY SOURCE_DIR PYTHON
source "$(dirname "$0")/../supervisor/lib.sh"
SRC=$2
PY=$3
"$PY" -c 'import firebreak' 2>/dev/null || { echo "SKIP: $PY lacks firebreak"; exit 77; }
cp "$SRC/tests/python/fr_binding.py" "$T/fr_binding_$TAG.py"
"$FB" run --nproc-per-node 1 --max-restarts 0 -- "$PY" "$T/fr_binding_$TAG.py" "$SRC/tests/python" \
    >out.txt 2>err.txt || fail "fr_binding.py failed: $(cat "$(run_dir)"/logs/rank-0.log | tail -20)"
grep -q "fr_binding: 5 events, 3 reports checked; 0 failures" "$(run_dir)/logs/rank-0.log" \
    || fail "no summary line: $(tail -5 "$(run_dir)/logs/rank-0.log")"
# The supervisor took the script's own commits as whole-job checkpoints.
[ "$(q "select group_concat(step || ':' || status, ' ') from checkpoint")" = "7:complete 9:complete" ] \
    || fail "checkpoints: $(q 'select step, ranks, status from checkpoint')"
assert_no_segments
rm -rf runs
# The hooks' sitecustomize runs first and hands over to the one it hides
# (here the user's own, on the user's PYTHONPATH); --no-python-hooks
# leaves PYTHONPATH as it was.
mkdir usersite
echo 'import sys; sys.stderr.write("user sitecustomize ran\n"); MARK = 42' >usersite/sitecustomize.py
PYTHONPATH=$T/usersite "$FB" run --quiet -- "$PY" -c '
import sys, sitecustomize
print("site", sitecustomize.MARK, "firebreak._hooks" in sys.modules)' >/dev/null 2>&1 \
    || fail "a rank with the user's sitecustomize failed"
log=$(cat "$(run_dir)/logs/rank-0.log")
case "$log" in *"user sitecustomize ran"*"site 42 True"*) ;;
*) fail "sitecustomize not chained, or hooks not armed: $log" ;; esac
rm -rf runs
PYTHONPATH=$T/usersite "$FB" run --quiet --no-python-hooks -- "$PY" -c '
import os, sys; print("path", os.environ["PYTHONPATH"], "firebreak._hooks" in sys.modules)' \
    >/dev/null 2>&1 || fail "a rank with --no-python-hooks failed"
grep -q "^path $T/usersite False$" "$(run_dir)/logs/rank-0.log" \
    || fail "--no-python-hooks: $(cat "$(run_dir)/logs/rank-0.log")"
ok "fr_skip/fr_comm/fr_begin/fr_end/committed/note/dump_wait/dump_done leave the right bytes"
