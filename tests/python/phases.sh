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

# A rank that raised: failed in the phase it was in, not "in phase done"
# (the Python hooks' exit handler marked it finished whatever ended it).
cat >"$T/raised.py" <<PYEOF
# $TAG
import torch
m = torch.nn.Linear(2, 2)
o = torch.optim.SGD(m.parameters(), lr=0.1)
for s in range(3):
    m(torch.ones(1, 2)).sum().backward()
    o.step()
raise RuntimeError("raised on purpose")
PYEOF
rc=0
timeout -s KILL 60 "$FB" run --max-restarts 0 --run-dir "$T/run-raised" \
    -- "$PY" "$T/raised.py" >"$T/raised.out" 2>"$T/raised.err" || rc=$?
[ "$rc" = 1 ] || fail "raised: exit $rc, want 1: $(tail -n 3 "$T/raised.err")"
detail=$(sqlite3 "$T/run-raised/journal.sqlite" "select detail from incident")
case $detail in
*"exited with code 1 at step 3 in phase train"*) ;;
*) fail "raised: incident '$detail', want the exit at step 3 in phase train" ;;
esac
ok "raised: the rank failed in phase train, not done"

# sys.exit(3) after the loop: the hooks' exit handler finalizes, and the
# exit status then says the rank failed, in the phase it was in.
cat >"$T/exited.py" <<PYEOF
# $TAG
import sys, torch
m = torch.nn.Linear(2, 2)
o = torch.optim.SGD(m.parameters(), lr=0.1)
for s in range(3):
    m(torch.ones(1, 2)).sum().backward()
    o.step()
sys.exit(3)
PYEOF
rc=0
timeout -s KILL 60 "$FB" run --max-restarts 0 --run-dir "$T/run-exited" \
    -- "$PY" "$T/exited.py" >"$T/exited.out" 2>"$T/exited.err" || rc=$?
[ "$rc" = 1 ] || fail "exited: exit $rc, want 1: $(tail -n 3 "$T/exited.err")"
detail=$(sqlite3 "$T/run-exited/journal.sqlite" "select detail from incident")
case $detail in
*"exited with code 3 at step 3 in phase train"*) ;;
*) fail "exited: incident '$detail', want the exit at step 3 in phase train" ;;
esac
ok "exited: sys.exit(3) failed in phase train, not done"
