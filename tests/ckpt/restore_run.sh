#!/bin/bash
# Restores under `firebreak run` with damaged checkpoints, end to end with
# the toy trainer (docs/checkpoint.md, "Restore").  One case per call:
#
#   first_launch  one corrupt byte in rank 0's newest shard: the check
#                 before the FIRST launch sets that checkpoint aside, so
#                 both ranks resume from the same older step
#   fifo          a FIFO in place of a shard: `ckpt verify` and `ckpt
#                 inspect` fail at once naming it, `firebreak run` does not
#                 hang and sets the checkpoint aside
#   all_corrupt   every checkpoint corrupt, the trainer run by hand: it
#                 starts fresh with state bit-identical to a fresh run's
#   save_wait     a save that waits for the previous one (slow writer,
#                 short hang timeout): no hang in train, the wait counted
#                 as checkpoint stall
#   inject_corrupt `--inject corrupt:rank=0,step=25`: rank 0's newest shard
#                 (found through the checkpoint store's layout; its async
#                 save waited for, even when slow) fails `ckpt verify`, and
#                 only that one
#   sigterm_check SIGTERM while the check before the first launch reads a
#                 16 GiB shard: the run ends at once, nothing launched,
#                 nothing set aside
#
# Usage: restore_run.sh FIREBREAK CASE   (exit 77: skipped; ctest passes
# FB_TEST_HOOKS=ON|OFF, the build's, in the environment)
set -u
FB=$1 CASE=$2
TOY=$(dirname "$FB")/fb-toy-train
T=$(mktemp -d /tmp/fb-ckpt-run.XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1
fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

# Flip one byte `back` bytes before the end of a file (in the data).
flip() {
    local size
    size=$(stat -c %s "$1")
    local b
    b=$(od -An -tu1 -j $((size - $2)) -N1 "$1" | tr -d ' ')
    printf "\\x$(printf %02x $((b ^ 0x5a)))" |
        dd of="$1" bs=1 seek=$((size - $2)) conv=notrunc status=none
}

# Save steps 10..40 of a 2-rank run into ck/.
two_rank_run() {
    "$FB" run --quiet --run-dir r0 --ckpt-dir ck --nproc-per-node 2 -- \
        "$TOY" --steps 40 --sleep-ms 1 --ckpt-every 10 >/dev/null 2>&1 ||
        fail "first run"
    [ -f ck/step-0000000040/rank-00000.safetensors ] || fail "no step 40"
}

# Resume it to step 50 (bounded: a hang is a failure, not a stuck test).
resume() {
    timeout -k 5 60 "$FB" run --run-dir r1 --ckpt-dir ck --nproc-per-node 2 \
        --json -- "$TOY" --steps 50 --sleep-ms 1 --ckpt-every 10 \
        >out.json 2>err.txt
    local rc=$?
    [ $rc = 124 ] && fail "firebreak run hung: $(tail -5 err.txt)"
    [ $rc = 0 ] || fail "run exit $rc: $(tail -5 err.txt)"
    for r in 0 1; do
        grep -q "resuming after step $1" r1/logs/rank-$r.log ||
            fail "rank $r: $(grep -h 'step' r1/logs/rank-$r.log | head -2)"
    done
}

incidents() { sqlite3 r1/journal.sqlite "select detail from incident where kind='restore_fallback'"; }

case $CASE in
first_launch)
    two_rank_run
    flip ck/step-0000000040/rank-00000.safetensors 20
    resume 30
    [ -d ck/.corrupt-step-0000000040 ] || fail "step 40 not set aside"
    incidents | grep -q 'checkpoint 40 set aside before the launch.*rank-00000.safetensors' ||
        fail "no reason naming the shard: $(incidents)"
    ok "corrupt rank-0 shard: both ranks resumed after 30 on the first launch"
    ;;
fifo)
    two_rank_run
    f=ck/step-0000000040/rank-00001.safetensors
    rm "$f" && mkfifo "$f"
    timeout 10 "$FB" ckpt verify ck >v.txt 2>&1
    rc=$?
    [ $rc = 124 ] && fail "ckpt verify hung on a FIFO"
    [ $rc = 1 ] || fail "ckpt verify exit $rc: $(cat v.txt)"
    grep -q "FAIL step 40 rank 1: .*rank-00001.safetensors: not a regular file" v.txt ||
        fail "verify: $(cat v.txt)"
    grep -q "step 40: FAILED" v.txt || fail "verify calls step 40 fine: $(cat v.txt)"
    timeout 10 "$FB" ckpt inspect ck --step 40 --rank 1 >i.txt 2>&1
    rc=$?
    [ $rc = 124 ] && fail "ckpt inspect hung on a FIFO"
    [ $rc != 0 ] || fail "ckpt inspect accepted a FIFO"
    grep -q "rank-00001.safetensors: not a regular file" i.txt || fail "inspect: $(cat i.txt)"
    resume 30
    [ -d ck/.corrupt-step-0000000040 ] || fail "step 40 not set aside"
    incidents | grep -q 'rank-00001.safetensors: not a regular file' ||
        fail "no reason naming the FIFO: $(incidents)"
    ok "FIFO shard refused by verify, inspect and the check before launch"
    ;;
all_corrupt)
    "$TOY" --steps 30 --sleep-ms 1 --ckpt-every 0 --run-dir fresh >/dev/null ||
        fail "fresh run"
    "$TOY" --steps 30 --sleep-ms 1 --ckpt-every 10 --ckpt-dir ck --run-dir a >/dev/null ||
        fail "saving run"
    n=0
    for f in ck/step-*/rank-*.safetensors; do flip "$f" 1; n=$((n + 1)); done
    "$TOY" --steps 30 --sleep-ms 1 --ckpt-every 10 --ckpt-dir ck --run-dir b \
        >b.txt 2>b.err || fail "run over corrupt checkpoints: $(tail -3 b.err)"
    grep -q "starting at step 0" b.txt || fail "$(cat b.txt)"
    [ "$(grep -c 'not restoring checkpoint' b.err)" = $n ] || fail "$(cat b.err)"
    a=$(cat fresh/final_hash.rank-0) b=$(cat b/final_hash.rank-0)
    [ -n "$a" ] && [ "$a" = "$b" ] ||
        fail "fresh run $a, after failed restores $b: rejected bytes were kept"
    ok "failed restores left the state untouched (final hash $b)"
    ;;
save_wait)
    # The slow writer is a test hook (FIREBREAK_CKPT_WRITE_DELAY_MS).
    [ "${FB_TEST_HOOKS:-ON}" = ON ] ||
        { echo "skipped: built without the checkpoint test hooks (FB_TEST_HOOKS)"; exit 77; }
    FIREBREAK_CKPT_WRITE_DELAY_MS=3000 timeout -k 5 60 "$FB" run --run-dir r1 \
        --ckpt-dir ck --hang-timeout 1.5s --max-restarts 0 --nproc-per-node 1 -- \
        "$TOY" --steps 10 --sleep-ms 10 --ckpt-every 5 >/dev/null 2>err.txt ||
        fail "run: $(tail -3 err.txt)"
    n=$(sqlite3 r1/journal.sqlite "select count(*) from incident")
    [ "$n" = 0 ] || fail "incidents: $(sqlite3 r1/journal.sqlite 'select detail from incident')"
    stall=$(sqlite3 r1/journal.sqlite "select cast(stall_ms as int) from checkpoint where step=10")
    [ -n "$stall" ] && [ "$stall" -ge 2000 ] ||
        fail "stall of step 10 is ${stall:-missing} ms; the wait was not counted"
    ok "waiting for the previous save: no hang, stall $stall ms"
    ;;
inject_corrupt)
    # Saves at 10 and 20.  With the hooks, each async save's write is held
    # back 1 s (FIREBREAK_CKPT_WRITE_DELAY_MS), so step 20's is still in
    # flight when step 25 corrupts: the fault must wait for it and hit 20,
    # the newest, not 10.
    delay=0
    [ "${FB_TEST_HOOKS:-ON}" = ON ] && delay=1000
    FIREBREAK_CKPT_WRITE_DELAY_MS=$delay "$FB" run --quiet --run-dir r --ckpt-dir ck \
        --inject 'corrupt:rank=0,step=25' -- \
        "$TOY" --steps 25 --sleep-ms 20 --ckpt-every 10 >/dev/null 2>err.txt ||
        fail "run: $(tail -3 err.txt)"
    grep -q "injecting fault corrupt:rank=0,step=25" r/logs/rank-0.log ||
        fail "no injection message: $(tail -3 r/logs/rank-0.log)"
    grep -q "corrupted byte [0-9]* of .*ck/step-0000000020/rank-00000.safetensors" \
        r/logs/rank-0.log || fail "not step 20's shard: $(grep -i corrupt r/logs/rank-0.log)"
    "$FB" ckpt verify ck >v.txt 2>&1
    rc=$?
    [ $rc = 1 ] || fail "ckpt verify exit $rc after the corruption: $(cat v.txt)"
    [ "$(grep -c '^FAIL ' v.txt)" = 1 ] &&
        grep -Eq "^FAIL step 20 rank 0: .*rank-00000.safetensors: .*data corrupted" v.txt ||
        fail "verify: $(cat v.txt)"
    ok "corrupt: $(grep '^FAIL' v.txt | cut -d: -f1)"
    ;;
sigterm_check)
    # A sparse shard that claims 16 GiB: read as zeros at memory speed, it
    # keeps the check busy for seconds (and fails its hash at the end).
    mkdir -p ck/step-0000000010
    python3 - ck/step-0000000010/rank-00000.safetensors <<'PY' || fail "shard"
import json, struct, sys
n = 16 << 30
meta = {"firebreak.format": "1", "firebreak.step": "10", "firebreak.rank": "0",
        "firebreak.world_size": "1", "firebreak.hash": "xxh3-64",
        "firebreak.hash.big": "0123456789abcdef"}
h = json.dumps({"__metadata__": meta,
                "big": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}).encode()
h += b" " * ((8 - (8 + len(h)) % 8) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h)
    f.truncate(8 + len(h) + n)
PY
    timeout -k 5 60 "$FB" run --run-dir r1 --ckpt-dir ck --nproc-per-node 1 \
        --grace 2s -- "$TOY" --steps 5 >/dev/null 2>err.txt &
    pid=$!
    sleep 1
    kill -TERM $pid
    t0=$(date +%s%N)
    wait $pid
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    [ $rc = 143 ] || fail "exit $rc, wanted 143 (SIGTERM): $(tail -3 err.txt)"
    [ $ms -lt 3000 ] || fail "the run took $ms ms to end after SIGTERM"
    grep -q 'launched' err.txt && fail "ranks launched after SIGTERM: $(cat err.txt)"
    [ -f ck/step-0000000010/rank-00000.safetensors ] ||
        fail "a stopped check set the checkpoint aside"
    ok "SIGTERM during the check: ended in $ms ms, nothing launched"
    ;;
*)
    fail "unknown case $CASE"
    ;;
esac
