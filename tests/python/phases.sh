#!/usr/bin/env bash
# firebreak.phase() under `firebreak run`: the block's end restores the
# phase it was entered in, not always training's (docs/pytorch.md):
#  - entered before the first step: start-up's limit again after it (it
#    was training's: a rank still starting up was declared hung);
#  - nested: the outer block's limit again after the inner one (the outer
#    block's rest ran under the hang limit).
# Each script would be declared hung at --hang-timeout 2s in the old way;
# here both complete.
# Args: FIREBREAK_BINARY PYTHON
source "$(dirname "$0")/../supervisor/lib.sh"
PY=$2
cat >"$T/before_first_step.py" <<PYEOF
# $TAG
import time, firebreak
with firebreak.phase("eval"):
    pass
time.sleep(4)          # more start-up work, under --startup-timeout
for s in range(1, 4):
    time.sleep(0.1)
    firebreak.step(s)
PYEOF
cat >"$T/nested.py" <<PYEOF
# $TAG
import time, firebreak
for s in range(1, 4):
    time.sleep(0.1)
    firebreak.step(s)
with firebreak.phase("eval"):
    with firebreak.phase("eval"):
        pass
    time.sleep(4)      # the rest of the evaluation, under --ckpt-timeout
PYEOF
for s in before_first_step nested; do
    rc=0
    timeout -s KILL 60 "$FB" run --max-restarts 0 --json --hang-timeout 2s \
        --startup-timeout 60s --ckpt-timeout 60s --run-dir "$T/run-$s" \
        -- "$PY" "$T/$s.py" >"$T/$s.json" 2>"$T/$s.err" || rc=$?
    [ "$rc" = 0 ] && [ "$(json_field "$T/$s.json" '["completed"]')" = True ] ||
        fail "$s: exit $rc: $(tail -n 3 "$T/$s.err")"
    ok "$s: completed under the phase it was in"
done

# A rank that ended badly after three optimizer steps failed in the phase
# it was in, not "in phase done" (the Python hooks' exit handler finalizes
# whatever ends the script):
#  - raised: an uncaught exception (the hooks then do not finalize);
#  - exited: sys.exit(3) (they do, and the exit status puts the phase back).
failed_in_train() { # CASE LAST_LINE CODE
    local c=$1 rc=0 detail
    cat >"$T/$c.py" <<PYEOF
# $TAG
import sys, torch
m = torch.nn.Linear(2, 2)
o = torch.optim.SGD(m.parameters(), lr=0.1)
for s in range(3):
    m(torch.ones(1, 2)).sum().backward()
    o.step()
$2
PYEOF
    timeout -s KILL 60 "$FB" run --max-restarts 0 --run-dir "$T/run-$c" \
        -- "$PY" "$T/$c.py" >"$T/$c.out" 2>"$T/$c.err" || rc=$?
    [ "$rc" = 1 ] || fail "$c: exit $rc, want 1: $(tail -n 3 "$T/$c.err")"
    detail=$(sqlite3 "$T/run-$c/journal.sqlite" "select detail from incident")
    case $detail in
    *"exited with code $3 at step 3 in phase train"*) ;;
    *) fail "$c: incident '$detail', want the exit at step 3 in phase train" ;;
    esac
    ok "$c: the rank failed in phase train, not done"
}
failed_in_train raised 'raise RuntimeError("raised on purpose")' 1
failed_in_train exited 'sys.exit(3)' 3
