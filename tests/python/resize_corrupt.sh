#!/usr/bin/env bash
# A resume with fewer ranks over a checkpoint of the larger job with one
# corrupt shard: examples/ddp_firebreak.py with the DDP object in its
# Checkpointer's state (replicated, so firebreak.Checkpointer restores it
# on another world size) saves steps 20 and 30 with 2 ranks; one byte of a
# tensor's data in rank 1's shard of step 30 is flipped; the job resumed
# with 1 rank.  The supervisor verifies the 2-rank step 30 as a whole, sets
# it aside (restore_fallback) and says step 20 verified; the rank restores
# 20 and the job completes.  (Step 30 was passed over unread as "not
# restorable", the rank restored it anyway and every attempt failed on its
# hash: a crash loop.)
# Args: FIREBREAK_BINARY SOURCE_DIR PYTHON
source "$(dirname "$0")/../supervisor/lib.sh"
SRC=$2
PY=$3
"$PY" -c 'import torch, firebreak' 2>/dev/null || { echo "SKIP: $PY lacks torch or firebreak"; exit 77; }
sed 's/Checkpointer({"model": model,/Checkpointer({"model": ddp,/' \
    "$SRC/examples/ddp_firebreak.py" >"$T/ddp_$TAG.py"
grep -q 'Checkpointer({"model": ddp,' "$T/ddp_$TAG.py" || fail "the example's Checkpointer line changed"

# --on-straggler off: a loaded machine made one rank a straggler once
# (an incident beside the one this test checks; the fresh-clone CI).
"$FB" run --nproc-per-node 2 --run-dir "$T/r" --on-straggler off -- "$PY" "$T/ddp_$TAG.py" --steps 30 \
    >out1.txt 2>err1.txt || fail "2-rank run exited $?: $(tail -5 err1.txt)"
shard=$T/r/checkpoints/step-0000000030/rank-00001.safetensors
[ -f "$shard" ] || fail "no $shard: $(ls "$T/r/checkpoints")"
# One byte inside the first tensor's data (past the 8-byte length and the
# JSON header), XORed.
"$PY" - "$shard" <<'PYEOF' || fail "flip"
import struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    f.seek(8 + n + 100)
    b = f.read(1)[0]
    f.seek(8 + n + 100)
    f.write(bytes([b ^ 1]))
PYEOF

"$FB" run --nproc-per-node 1 --max-restarts 1 --run-dir "$T/r" -- "$PY" "$T/ddp_$TAG.py" \
    --steps 40 >out2.txt 2>err2.txt || fail "1-rank resume exited $?: $(grep -v status: err2.txt | tail -20)"
grep -q 'checkpoint 30 set aside before the launch.*rank-00001.safetensors.*data corrupted' err2.txt ||
    fail "step 30 not set aside: $(grep checkpoint err2.txt)"
grep -q 'checkpoint 20, another job size.s, not chosen: saved by 2 ranks, this job has 1: verified' err2.txt ||
    fail "step 20 not said verified: $(grep checkpoint err2.txt)"
grep -q 'not restorable by it' err2.txt && fail "a verified step said not restorable: $(grep checkpoint err2.txt)"
grep -q 'completed after 1 attempt' err2.txt || fail "not completed at once: $(tail -3 err2.txt)"
[ -d "$T/r/checkpoints/.corrupt-step-0000000030" ] || fail "step 30 not kept aside: $(ls -a "$T/r/checkpoints")"
grep -qx 'start at step 20 (restart 0)' "$T/r/logs/rank-0.log" ||
    fail "rank 0 did not restore 20: $(grep 'start at' "$T/r/logs/rank-0.log")"
got=$(sqlite3 -batch -noheader "$T/r/journal.sqlite" "select kind||':'||step from incident")
[ "$got" = "restore_fallback:30" ] || fail "incidents: $got"
job=$(cat "$T/r/job")
ls /dev/shm | grep -q "^fb\.$job\." && fail "segments of job $job left in /dev/shm"
ok "2-rank step 30 with a corrupt shard set aside before a 1-rank resume, which restored 20"
