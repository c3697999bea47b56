#!/usr/bin/env bash
# An unmodified DDP script (tests/python/ddp_plain.py: no firebreak in it,
# and no firebreak on its PYTHONPATH) under `firebreak run`, supervised
# through the Python hooks (docs/pytorch.md, "Unmodified scripts"):
#  - crash: rank 1 SIGKILLed at step 12 -> restart from the script's own
#    torch.save checkpoint (step 10), said so, the step count continuing
#    from 10, ETTR > 0;
#  - sleep: rank 1 sleeps before the loss all_reduce -> a hang detected
#    within the limit + 1 s, rank 1 named with the all_reduce's line;
#  - barrier: rank 1 (of 3) calls a barrier where the others all_reduce ->
#    the mismatch named, with both lines;
#  - all: every rank stops at once -> a hang blamed on no rank;
#  - dcp: a torch.distributed.checkpoint save makes its step durable, and
#    its load after the restart continues the step count;
#  - with torch >= 2.7, PyTorch's own flight recorder dumped on request.
# No process and no /dev/shm segment is left behind (lib.sh, per run).
# Args: FIREBREAK_BINARY SOURCE_DIR PYTHON
source "$(dirname "$0")/../supervisor/lib.sh"
SRC=$2
PY=$3
unset PYTHONPATH
"$PY" -c 'import torch.distributed' 2>/dev/null || { echo "SKIP: $PY lacks torch"; exit 77; }
mkdir "$T/$TAG"                      # the tag in every rank's command line
S=$T/$TAG/ddp_plain.py
cp "$SRC/tests/python/ddp_plain.py" "$S"
AR=$(grep -n 'dist.all_reduce(loss.detach())' "$S" | cut -d: -f1)
BAR=$(grep -n 'dist.barrier()' "$S" | cut -d: -f1)
# A failed check also prints the end of every rank's own log of the run
# under test ($rd): a rank that died by a signal says why there (torch's
# abort message, a C++ terminate, a gloo error), not in the supervisor's
# stderr.
rd=
fail() {
    echo "FAIL: $*" >&2
    local log
    for log in ${rd:+"$rd"/logs/*.log}; do
        [ -f "$log" ] || continue
        echo "--- $log (last 20 lines)" >&2
        tail -n 20 "$log" >&2
    done
    exit 1
}
torch_fr=$("$PY" -c 'import torch; v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]); print(int(v >= (2, 7)))')

# run CASE NPROC MAX_RESTARTS ARGS...: one run in $T/CASE, its journal in $rd.
run() {
    local case=$1 n=$2 mr=$3
    shift 3
    mkdir "$T/$case"
    rd=$T/$case/run
    set +e
    (cd "$T/$case" && "$FB" run --nproc-per-node "$n" --max-restarts "$mr" \
        --hang-timeout 3 --run-dir "$rd" --json -- "$PY" "$S" --ckpt "$T/$case/ckpt.pt" \
        "$@" >out.json 2>err.txt)
    rc=$?
    set -e
    local job
    job=$(cat "$rd/job")
    if ls /dev/shm | grep -q "^fb\.$job\."; then
        fail "$case: segments of job $job left in /dev/shm"
    fi
}
qq() { sqlite3 -batch -noheader "$rd/journal.sqlite" "$1"; }
field() { json_field "$T/$1/out.json" "$2"; }

# ---- crash -> restart from the script's own checkpoint
run crash 2 2 --fault crash --fault-step 12
[ $rc = 0 ] || fail "crash: exit $rc: $(tail -5 "$T/crash/err.txt")"
[ "$(field crash '["restarts"]')" = 1 ] || fail "crash: $(tail -1 "$T/crash/out.json")"
grep -q "restarting from the newest complete checkpoint (step 10)" "$T/crash/err.txt" \
    || fail "crash: restart message: $(grep restarting "$T/crash/err.txt")"
grep -q "rank 0 attempt 1 start at step 10" "$rd/logs/rank-0.log" \
    || fail "crash: the script did not resume at step 10: $(grep start "$rd/logs/rank-0.log")"
python3 - "$T/crash/out.json" <<'PY' || fail "crash: accounting: $(tail -1 "$T/crash/out.json")"
import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
assert d["ettr"] > 0 and d["useful_s"] > 0, d
assert d["last_step"] == 30, d
inc = d["incidents"][0]
assert inc["kind"] == "crash" and inc["rank"] == 1 and inc["step"] == 12, inc
PY
[ "$(qq "select count(*) from checkpoint where status = 'complete' and step = 10")" -ge 1 ] \
    || fail "crash: no complete checkpoint 10 in the journal: $(qq 'select step, status from checkpoint')"
first=$(qq "select min(step) from step_sample where attempt_id = (select max(id) from attempt)")
[ -n "$first" ] && [ "$first" -gt 10 ] || fail "crash: attempt 1's steps start at '$first', not after 10"
qq "select detail from event where kind = 'note'" | grep -q "the step count continues from step 10" \
    || fail "crash: no note of the resumed step count"
ok "crash: restarted from the script's torch.save at step 10, ETTR $(field crash '["ettr"]')"

# ---- a torch.distributed.checkpoint save and load (one rank; Debian's
# torch 1.13 has no torch.distributed.checkpoint)
if "$PY" -c 'import torch.distributed.checkpoint' 2>/dev/null; then
cp "$SRC/tests/python/dcp_plain.py" "$T/$TAG/dcp_plain.py"
mkdir "$T/dcp"
rd=$T/dcp/run
(cd "$T/dcp" && "$FB" run --max-restarts 1 --run-dir "$rd" -- "$PY" "$T/$TAG/dcp_plain.py" \
    "$T/dcp/ckpt" >out.txt 2>err.txt) || fail "dcp: exit $?: $(tail -5 "$T/dcp/err.txt")"
grep -q "restarting from the newest complete checkpoint (step 4)" "$T/dcp/err.txt" \
    || fail "dcp: restart message: $(grep restarting "$T/dcp/err.txt")"
qq "select detail from event where kind = 'note'" | grep -q "dcp.load .*: the step count continues from step 4" \
    || fail "dcp: no note of the resumed step count: $(qq "select kind, step, detail from event")"
ok "dcp: dcp.save made step 4 durable, dcp.load resumed the count"
else
    echo "dcp: skipped, $PY's torch has no torch.distributed.checkpoint"
fi

# ---- rank 1 sleeps before an all_reduce
run sleep 2 0 --fault sleep --fault-step 12
[ $rc = 1 ] || fail "sleep: exit $rc: $(tail -5 "$T/sleep/err.txt")"
[ "$(qq "select kind || ':' || rank from incident")" = "hang:1" ] \
    || fail "sleep: incident $(qq 'select kind, rank, detail from incident')"
ms=$(qq "select cast(detect_ms as int) from incident")
[ "$ms" -le 4000 ] || fail "sleep: detected in $ms ms, limit 3 s"
d=$(qq "select detail from incident")
case "$d" in
*"rank 1 never entered all_reduce #"*" at ddp_plain.py:$AR "*) ;;
*) fail "sleep: detail does not name rank 1 and ddp_plain.py:$AR: $d" ;;
esac
if [ "$torch_fr" = 1 ]; then
    for r in 0 1; do
        [ -s "$rd/fr/torch/attempt-0/nccl_trace_rank_$r" ] \
            || fail "sleep: no PyTorch flight-recorder dump of rank $r: $(ls -R "$rd/fr")"
    done
fi
# The flight recorder's verdict is logged once, in the hang's own line
# (the summary's "Last failure" repeats that line).
[ "$(grep -c '^\[firebreak .*never entered all_reduce' "$T/sleep/err.txt")" = 1 ] \
    || fail "sleep: the verdict is not logged once: $(grep "never entered" "$T/sleep/err.txt")"
ok "sleep: hang detected in $ms ms, rank 1 named at ddp_plain.py:$AR"

# ---- rank 1 calls a barrier where the others call all_reduce
run barrier 3 0 --fault barrier --fault-step 12
[ $rc = 1 ] || fail "barrier: exit $rc: $(tail -5 "$T/barrier/err.txt")"
[ "$(qq "select kind || ':' || rank from incident")" = "hang:1" ] \
    || fail "barrier: incident $(qq 'select kind, rank, detail from incident')"
d=$(qq "select detail from incident")
case "$d" in
*"mismatch: rank 1 called barrier at ddp_plain.py:$BAR where the other ranks called all_reduce #"*" at ddp_plain.py:$AR "*) ;;
*) fail "barrier: detail does not name the mismatch: $d" ;;
esac
ok "barrier: mismatch named, rank 1 at ddp_plain.py:$BAR"

# ---- collectives that complete are progress: a hand-written update loop
# of 8 s and an evaluation pass of 8 s, no optimizer step in either,
# all_reduces completing all along, under a 3 s --hang-timeout (both were
# declared hung, blamed on a collective timeout, and the job stopped as a
# crash loop).  After two optimizer steps: start-up (an import of torch
# may take longer than 3 s on a loaded machine) is over.
cat >"$T/$TAG/talking.py" <<PYEOF
import datetime, time, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
o = torch.optim.SGD(m.parameters(), lr=0.01)
w = torch.zeros(4)
for s in range(6):
    m(torch.randn(2, 4)).sum().backward()
    o.step()
    o.zero_grad()
    if s == 1:                       # manual updates, no optimizer step
        for i in range(40):
            g = torch.ones(4)
            dist.all_reduce(g)
            w -= 0.01 * g
            time.sleep(0.2)
    if s == 3:                       # evaluation, no optimizer step
        with torch.no_grad():
            for i in range(40):
                a = m(torch.randn(8, 4)).mean().reshape(1)
                dist.all_reduce(a)
                time.sleep(0.2)
# (gloo's teardown with a peer gone can abort: torch 1.13 did, once)
dist.barrier()
dist.destroy_process_group()
PYEOF
mkdir "$T/talking"
rd=$T/talking/run
rc=0
(cd "$T/talking" && "$FB" run --nproc-per-node 2 --max-restarts 0 --hang-timeout 3 \
    --run-dir "$rd" --json -- "$PY" "$T/$TAG/talking.py" \
    >out.json 2>err.txt) || rc=$?
[ $rc = 0 ] || fail "talking: exit $rc: $(qq 'select kind, detail from incident') $(tail -3 "$T/talking/err.txt")"
[ "$(qq 'select count(*) from incident')" = 0 ] || fail "talking: $(qq 'select kind, detail from incident')"
ok "talking: twice 8 s of completing all_reduces between two optimizer steps, not a hang"

# ---- a collective that raises is not progress: a loop retrying one
# that gloo refuses (BAND on floats, in torch 1.13 and 2.x alike) past
# --hang-timeout is a hang
cat >"$T/$TAG/retrying.py" <<PYEOF
import datetime, time, torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
m = torch.nn.Linear(4, 4)
o = torch.optim.SGD(m.parameters(), lr=0.01)
for s in range(3):
    m(torch.randn(2, 4)).sum().backward()
    o.step()
for i in range(100):
    try:
        dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND)
    except (RuntimeError, ValueError):
        time.sleep(0.1)
PYEOF
mkdir "$T/retrying"
rd=$T/retrying/run
rc=0
(cd "$T/retrying" && "$FB" run --nproc-per-node 2 --max-restarts 0 --hang-timeout 3 \
    --run-dir "$rd" --json -- "$PY" "$T/$TAG/retrying.py" >out.json 2>err.txt) || rc=$?
[ $rc = 1 ] && [ "$(qq 'select kind from incident')" = hang ] ||
    fail "retrying: exit $rc: $(qq 'select kind, detail from incident') $(tail -3 "$T/retrying/err.txt")"
ok "retrying: a collective raising again and again is no progress: a hang"

# ---- every rank stops at once: nobody to blame
run all 2 0 --fault all --fault-step 12
[ $rc = 1 ] || fail "all: exit $rc: $(tail -5 "$T/all/err.txt")"
[ "$(qq "select kind || ':' || ifnull(rank, -1) from incident")" = "hang:-1" ] \
    || fail "all: incident $(qq 'select kind, rank, detail from incident')"
qq "select detail from incident" | grep -q "^no rank blamed: .*could not tell which rank stopped first.*was only the one silent the longest" \
    || fail "all: detail $(qq 'select detail from incident')"
ok "all: no rank blamed"
