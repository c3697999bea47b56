#!/usr/bin/env bash
# The live straggler check (docs/supervisor.md "Stragglers") on an
# unmodified DDP script (tests/python/ddp_plain.py, supervised through the
# Python hooks, docs/pytorch.md "Unmodified scripts"), 3 gloo ranks:
#  - rank 2 slowed 4x (--inject slow, fired at the hooks' per-step
#    fb_step) is named from the collectives the hooks record: an incident
#    of kind straggler on rank 2, a warning, lateness.prom, and the job
#    completes;
#  - two fault-free runs name no one, though the check ran (lateness.prom
#    has every rank).
# No process and no /dev/shm segment is left behind.
# Args: FIREBREAK_BINARY SOURCE_DIR PYTHON
source "$(dirname "$0")/../supervisor/lib.sh"
SRC=$2
PY=$3
unset PYTHONPATH
"$PY" -c 'import torch.distributed' 2>/dev/null || { echo "SKIP: $PY lacks torch"; exit 77; }
mkdir "$T/$TAG"                      # the tag in every rank's command line
S=$T/$TAG/ddp_plain.py
cp "$SRC/tests/python/ddp_plain.py" "$S"

train() {
    local steps=$1
    shift
    "$FB" run --nproc-per-node 3 --max-restarts 0 "$@" \
        -- "$PY" "$S" --steps "$steps" --ckpt "$T/ckpt.pt" --ckpt-every 1000 --sleep-ms 20
}

train 90 --inject 'slow:rank=2,step=5,factor=4' >out.txt 2>err.txt ||
    fail "slow run exited $? ($(tail -5 err.txt))"
assert_straggler 3
ok "slow: $(q 'select detail from incident')"
assert_no_segments
rm -rf runs "$T/ckpt.pt"

for i in 1 2; do
    train 150 >out.txt 2>err.txt || fail "fault-free run $i exited $? ($(tail -5 err.txt))"
    [ "$(q "select count(*) from incident")" = 0 ] ||
        fail "fault-free run $i: $(q 'select kind,rank,detail from incident')"
    [ "$(q "select count(*) from event where kind like 'straggler%'")" = 0 ] ||
        fail "fault-free run $i: $(q "select kind,rank,detail from event where kind like 'straggler%'")"
    [ "$(grep -c '^firebreak_rank_lateness_seconds{' "$(run_dir)/lateness.prom")" = 3 ] ||
        fail "fault-free run $i: lateness.prom: $(cat "$(run_dir)/lateness.prom")"
    echo "fault-free run $i: worst mean lateness $(q "select max(value_ms) from event where kind = 'lateness'") ms"
    assert_no_segments
    rm -rf runs "$T/ckpt.pt"
done
ok "ddp straggler: rank 2 slowed 4x named from the hooks' collectives; 2 fault-free runs name no one"
