#!/usr/bin/env bash
# A node watcher's memory when Slurm stops it (docs/slurm.md, "Checkpoint
# tiers"): no cluster needed, the watcher runs here as srun would start it,
# its stdin a pipe that stays open (srun's, with the supervisor gone but
# srun's connection not closed yet).
#   1. SIGTERM without the supervisor's `keep`: the node's memory is gone
#      within 1.9 s of the signal.  Slurm SIGKILLs a step's tasks KillWait
#      after its SIGTERM (30 s by default, 2 s on the test cluster of
#      scripts/slurm-cluster.sh): a watcher that waited longer for a `keep`
#      was killed first under load, and the memory stayed (slurm_peer case
#      6, 2026-12-04).
#   2. `keep`, then SIGTERM: the memory stays.
#   3. As 1, with the peer tier's receiver up and its scrub (idle priority)
#      given no CPU, blind to the stop (test hook, FB_TEST_HOOKS builds):
#      the stop does not wait for it, the memory is gone within 1.9 s.  An
#      idle-priority thread beside busy processes got no CPU for 1-6 s
#      here, and a watcher that joined it was killed first (slurm_peer case
#      6, 2026-12-05).
#   4. A rank SIGKILLed, so an `alive` is owed 0.5 s after its end (the
#      supervisor's proof that the node outlived it; 20 s here, a test
#      hook), then the input ends (the supervisor gone) and SIGTERM: the
#      watcher does not wait out the owed `alive` nobody would read, and
#      the memory is gone within 1.9 s.  It waited it out (0.5 s of
#      KillWait's 2 s) before the input's end was looked at (slurm_peer
#      case 6).
# Args: FIREBREAK_BINARY
set -euo pipefail
FB=$1
T=$(mktemp -d /tmp/fb-watchstop.XXXXXX)
JOB=fb-watchstop-$$
TOY=$(dirname "$FB")/fb-toy-train
MEM=/dev/shm/fb.$JOB.mem
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$T" "$MEM" /dev/shm/fb."$JOB".0.0
}
trap cleanup EXIT
fail() {
    echo "FAIL: $*" >&2
    local f
    for f in "$T/err" "$T"/watch-*.err; do
        [ -s "$f" ] && sed 's/^/  watch: /' "$f" >&2
    done
    exit 1
}

# start [ARG...]: a watcher of one rank that never comes, its stdin the
# fifo; ARGs added to its command line
start() {
    rm -f "$T/in" "$T/err"
    mkfifo "$T/in"
    FIREBREAK_CKPT_MEM_DIR=$MEM SLURM_JOB_ID=7 "$FB" watch --job "$JOB" --attempt 0 \
        --ranks-per-node 1 --world 1 --node-id 0 --node n1 --interval 10s "$@" \
        <"$T/in" >"$T/out" 2>"$T/err" &
    wpid=$!
    pids+=("$wpid")
    exec 3>"$T/in" # held open: no end of input
    for _ in $(seq 1 100); do
        grep -q hello "$T/out" 2>/dev/null && [ -d "$MEM" ] && return 0
        sleep 0.05
    done
    fail "the watcher did not start (or made no $MEM)"
}

# stopped_without_keep CASE: SIGTERM, no keep; the memory gone within 1.9 s
stopped_without_keep() {
    local t0 gone=
    t0=$EPOCHREALTIME
    kill -TERM "$wpid"
    while awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { exit !(b - a < 1.9) }'; do
        [ -d "$MEM" ] || { gone=$EPOCHREALTIME; break; }
        sleep 0.01
    done
    [ -n "$gone" ] || fail "case $1: $MEM still there 1.9 s after SIGTERM (no keep)"
    wait "$wpid" || true
    exec 3>&-
    grep -q "stopped without the supervisor's word" "$T/err" "$T"/watch-*.err 2>/dev/null \
        || fail "case $1: no word of the removal"
    stop_s=$(awk -v a="$t0" -v b="$gone" 'BEGIN { printf "%.2f", b - a }')
}

# 1. stopped without `keep`
start
stopped_without_keep 1
echo "ok: stopped without keep: node memory gone $stop_s s after SIGTERM"

# 2. keep, then stopped
start
echo "fbw1 keep" >&3
sleep 0.2
kill -TERM "$wpid"
wait "$wpid" || true
exec 3>&-
[ -d "$MEM" ] || fail "case 2: $MEM removed after a keep"
echo "ok: keep, then stopped: node memory stays"

# 3. stopped without `keep`, the peer tier's scrub starved (test hook)
if [ "${FB_TEST_HOOKS:-}" = ON ]; then
    FIREBREAK_TEST_PEER_SCRUB_STALL_MS=5000 start --peer-port $((20000 + $$ % 20000))
    sleep 0.3 # the scrub's first pass has begun: held
    stopped_without_keep 3
    grep -q "the scrub (idle priority) got no CPU" "$T/err" || fail "case 3: the scrub was not held"
    echo "ok: stopped without keep, scrub starved: node memory gone $stop_s s after SIGTERM"
else
    echo "skipped: case 3 (a test hook: FB_TEST_HOOKS builds)"
fi

# 4. a rank's end owes an `alive`; the input ends, then SIGTERM (test hooks)
if [ "${FB_TEST_HOOKS:-}" = ON ]; then
    FIREBREAK_JOB_ID=$JOB FIREBREAK_RANK=0 FIREBREAK_WORLD_SIZE=1 FIREBREAK_ATTEMPT=0 \
        "$TOY" --steps 100000 --sleep-ms 10 --ckpt-dir "$T/ck" >"$T/rank.out" 2>&1 &
    rpid=$!
    pids+=("$rpid")
    FIREBREAK_TEST_WATCH_PROOF_MS=20000 FIREBREAK_TEST_WATCH_LOG_DIR=$T start
    for _ in $(seq 1 200); do grep -q "^fbw1 attach 0 " "$T/out" && break; sleep 0.05; done
    grep -q "^fbw1 attach 0 " "$T/out" || fail "case 4: the rank never attached"
    kill -9 "$rpid"
    for _ in $(seq 1 200); do grep -q "^fbw1 end 0 " "$T/out" && break; sleep 0.05; done
    grep -q "^fbw1 end 0 " "$T/out" || fail "case 4: the rank's end not reported"
    exec 3>&- # the supervisor gone: its end of the input closed
    stopped_without_keep 4
    grep -q "alive owed after a rank's end not waited for: the input ended" "$T/watch-n1.err" \
        || fail "case 4: the owed alive was waited for"
    echo "ok: a rank's end, then the input's end and SIGTERM: node memory gone $stop_s s after SIGTERM"
else
    echo "skipped: case 4 (test hooks: FB_TEST_HOOKS builds)"
fi
