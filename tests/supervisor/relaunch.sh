#!/usr/bin/env bash
# The relaunch path (docs/supervisor.md, "At scale"): after a crash the
# segments' snapshots hold the ranks as they were at the failure, but their
# files are written once the next attempt is launched, not on the way to
# it; they are whole (no temporary left) and the flight-recorder analysis
# reads them.  A hang's snapshot is still written before its analysis
# (supervisor_hang_restart).
source "$(dirname "$0")/lib.sh"

# snapshots_whole WHAT: attempt 0's 4 snapshots are there, none half
# written (no temporary left), and the flight-recorder analysis reads
# every rank of them.
snapshots_whole() {
    local snap r rc=0
    snap="$(run_dir)/fr/attempt-0"
    for r in 0 1 2 3; do
        [ -s "$snap/rank-$r.fbseg" ] || fail "$1: no snapshot of rank $r: $(ls -la "$snap")"
    done
    ! ls "$snap" | grep -q tmp || fail "$1: a temporary file left: $(ls "$snap")"
    "$FB" fr analyze "$snap" --json >fr.json 2>fr.err || rc=$?
    [ "$rc" -le 1 ] || fail "$1: fr analyze exit $rc: $(cat fr.err)"
    python3 - fr.json <<'PY' || fail "$1: analysis of the snapshots: $(tail -1 fr.json)"
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
sys.exit(0 if d["ranks"] == 4 and d["missing_count"] == 0 else 1)
PY
}
"$FB" run --nproc-per-node 4 --max-restarts 1 --crash-loop 0 --json \
    --inject 'kill:rank=1,step=6' -- "$RANK" --steps 30 --sleep-ms 10 "$TAG" \
    >out.json 2>err.txt || fail "run exited $? ($(tail -3 err.txt))"
[ "$(json_field out.json '["restarts"]')" = 1 ] || fail "restarts != 1"
snapshots_whole "held"
snap="$(run_dir)/fr/attempt-0"
# Written after attempt 1 was launched (mtime against the journal's wall
# clock; the file system's clock is coarse: 10 ms of slack).
launched=$(q "select launched_at from attempt where number = 1")
detected=$(q "select detected_at from incident")
python3 - "$snap" "$launched" "$detected" <<'PY' || fail "snapshots written before the relaunch"
import os, sys
d, launched, detected = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
for f in sorted(os.listdir(d)):
    m = os.stat(os.path.join(d, f)).st_mtime
    print(f"{f}: written {1e3 * (m - detected):.1f} ms after the detection; "
          f"attempt 1 launched {1e3 * (launched - detected):.1f} ms after it")
    if m < launched - 0.010:
        sys.exit(1)
PY
assert_no_segments

# Over the hold's cap (256 MiB; 1 byte with the test hook
# FIREBREAK_TEST_SNAP_HOLD_MAX), snapshots are written at once, before the
# relaunch, said so, and are as whole and readable as the held ones.
if [ "${FB_TEST_HOOKS:-ON}" = ON ]; then
    rm -rf runs
    FIREBREAK_TEST_SNAP_HOLD_MAX=1 "$FB" run --nproc-per-node 4 --max-restarts 1 \
        --crash-loop 0 --inject 'kill:rank=1,step=6' -- "$RANK" --steps 30 --sleep-ms 10 \
        "$TAG" >/dev/null 2>err6.txt || fail "run exited $? ($(tail -3 err6.txt))"
    grep -q "attempt 0: 4 segment snapshots written before the relaunch: over the 1 bytes held" \
        err6.txt || fail "the cap not said: $(grep -i snapshot err6.txt)"
    snapshots_whole "over the cap"
    assert_no_segments
    ok "over the hold's cap: 4 snapshots written before the relaunch, whole and readable"
fi

# tree SUP N: sets $shims (SUP's shims with a rank: not the standby
# shims, which wait without one) and $ranks once N ranks run under them;
# fails after 10 s.
tree() {
    local p
    for _ in $(seq 100); do
        shims=$(for p in $(pgrep -P "$1" -x fb-shim || true); do
            [ -n "$(pgrep -P "$p" || true)" ] && echo "$p"; done || true)
        ranks=$(for p in $shims; do pgrep -P "$p" || true; done)
        [ "$(echo "$ranks" | grep -c .)" = "$2" ] && return 0
        sleep 0.1
    done
    fail "$2 ranks under shims never seen: $shims / $ranks"
}
# Pids grow, modulo pid_max: each is taken as its distance past the
# supervisor's own pid, forked before all of them (CI saw a wrap, shims
# 32755-32763 and ranks 300-302, on a machine whose pid_max is 32768).
pid_max=$(cat /proc/sys/kernel/pid_max)
age() { for p in "$@"; do echo $(( (p - sup + pid_max) % pid_max )); done; }

# A relaunch forks every shim before any rank starts (the go pipe), so the
# ranks' start-up does not compete with the forks: every shim's pid is
# older than every rank's.  (No standby shims, which would be older.)
rm -rf runs
FIREBREAK_STANDBY_SHIMS=0 "$FB" run --quiet --nproc-per-node 6 --max-restarts 1 \
    --crash-loop 0 --inject 'kill:rank=1,step=3' -- "$RANK" --steps 400 --sleep-ms 10 \
    "$TAG" >/dev/null 2>err2.txt &
sup=$!
for _ in $(seq 100); do
    [ "$(q "select count(*) from attempt where number = 1 and launched_at is not null" \
        2>/dev/null)" = 1 ] && break
    sleep 0.1
done
tree "$sup" 6
kill -TERM "$sup"
wait "$sup" || true
[ "$(q "select count(*) from attempt")" = 2 ] || fail "attempt 1 not seen: $(cat err2.txt)"
newest_shim=$(age $shims | sort -n | tail -1)
oldest_rank=$(age $ranks | sort -n | head -1)
[ "$newest_shim" -lt "$oldest_rank" ] ||
    fail "a rank of the relaunch started before its last shim was forked: shims $(echo $shims), ranks $(echo $ranks)"

# The first launch starts each rank as soon as its shim is forked, as a
# plain launcher does (no old ranks end beside the forks): with a pause
# after each shim (test hook), rank 0 runs before the last shim is forked.
if [ "${FB_TEST_HOOKS:-ON}" = ON ]; then
    rm -rf runs
    FIREBREAK_TEST_LAUNCH_PACE_MS=400 "$FB" run --quiet --nproc-per-node 3 \
        -- "$RANK" --steps 400 --sleep-ms 10 "$TAG" >/dev/null 2>err3.txt &
    sup=$!
    tree "$sup" 3
    kill -TERM "$sup"
    wait "$sup" || true
    newest_shim=$(age $shims | sort -n | tail -1)
    oldest_rank=$(age $ranks | sort -n | head -1)
    [ "$oldest_rank" -lt "$newest_shim" ] ||
        fail "no rank of the first launch started before its last shim: shims $(echo $shims), ranks $(echo $ranks)"
fi
ok "snapshots of attempt 0 written after attempt 1 launched, whole and readable; a relaunch forks every shim before any rank, the first launch starts each rank at once"

# The health check after a failure (diagnose.c) runs beside the relaunch,
# not before it: a check that answers only after 3 s (test hook) does not
# hold attempt 1 back, and its verdict and the root cause still reach the
# incident.  (A build without test hooks cannot slow the check: skipped.)
if [ "${FB_TEST_HOOKS:-ON}" = ON ]; then
    rm -rf runs
    FIREBREAK_TEST_HEALTH_DELAY_MS=3000 "$FB" run --nproc-per-node 2 --max-restarts 1 \
        --crash-loop 0 --inject 'kill:rank=1,step=6' -- "$RANK" --steps 20 --sleep-ms 10 \
        "$TAG" >/dev/null 2>err3.txt || fail "run exited $? ($(tail -3 err3.txt))"
    gap=$(q "select cast((a.launched_at - i.detected_at) * 1000 as int) from incident i,
             attempt a where a.number = 1")
    [ -n "$gap" ] && [ "$gap" -lt 2500 ] ||
        fail "attempt 1 launched ${gap} ms after the detection: it waited for the health check"
    [ "$(q "select substr(health, 1, 1) from incident")" = "{" ] ||
        fail "no health verdict in the incident: $(grep health err3.txt)"
    [ -n "$(q "select category from incident where category is not null")" ] ||
        fail "no root cause in the incident"
    took=$(sed -n 's/.*health check after the failure: [a-z]* in \([0-9]*\) ms.*/\1/p' err3.txt)
    [ -n "$took" ] && [ "$took" -ge 3000 ] || fail "the check did not take 3 s: $(grep health err3.txt)"
    ok "attempt 1 launched ${gap} ms after the detection, beside a health check of ${took} ms"

    # A second failure while the first's check still runs: its relaunch
    # does not wait for that check either (both run at once), and both
    # incidents get their verdict and root cause.
    rm -rf runs
    FIREBREAK_TEST_HEALTH_DELAY_MS=3000 "$FB" run --nproc-per-node 2 --max-restarts 2 \
        --crash-loop 0 --inject 'kill:rank=1,step=6,attempt=0;kill:rank=0,step=6,attempt=1' \
        -- "$RANK" --steps 20 --sleep-ms 10 "$TAG" >/dev/null 2>err5.txt ||
        fail "run exited $? ($(tail -3 err5.txt))"
    [ "$(q "select count(*) from incident")" = 2 ] || fail "want 2 incidents: $(tail -3 err5.txt)"
    gap=$(q "select cast((a.launched_at - i.detected_at) * 1000 as int) from incident i
             join attempt a on a.number = 2 join attempt b on b.id = i.attempt_id
             where b.number = 1")
    [ -n "$gap" ] && [ "$gap" -lt 1500 ] ||
        fail "attempt 2 launched ${gap} ms after its failure: it waited for the first check"
    [ "$(q "select count(*) from incident where substr(health, 1, 1) = '{'
            and category is not null")" = 2 ] ||
        fail "not both incidents diagnosed: $(q "select id, substr(health, 1, 20), category from incident")"
    [ "$(grep -c 'health check after the failure: [a-z]* in' err5.txt)" = 2 ] ||
        fail "two checks wanted: $(grep health err5.txt)"
    ok "a second failure relaunched ${gap} ms after its detection, the first's check still running"

    # A supervisor SIGKILLed while its check runs leaves no check behind
    # (the child's parent-death signal).
    rm -rf runs
    mkdir -p "$T/hroot-$TAG"
    FIREBREAK_TEST_HEALTH_DELAY_MS=5000 "$FB" run --nproc-per-node 2 --max-restarts 1 \
        --crash-loop 0 --health-root "$T/hroot-$TAG" --inject 'kill:rank=1,step=6' \
        -- "$RANK" --steps 300 --sleep-ms 10 "$TAG" >/dev/null 2>err4.txt &
    sup=$!
    for _ in $(seq 100); do
        pgrep -f "health --json.*hroot-$TAG" >/dev/null && break
        sleep 0.05
    done
    pgrep -f "health --json.*hroot-$TAG" >/dev/null || fail "the health check never ran: $(tail -3 err4.txt)"
    kill -KILL $sup
    wait $sup 2>/dev/null || true
    for _ in $(seq 40); do
        pgrep -f "health --json.*hroot-$TAG" >/dev/null || break
        sleep 0.05
    done
    ! pgrep -af "health --json.*hroot-$TAG" || fail "a health check outlived its supervisor"
    for _ in $(seq 40); do
        pgrep -f -- "$TAG" >/dev/null || break
        sleep 0.05
    done
    ! pgrep -af -- "$TAG" || fail "ranks outlived their supervisor"
    job=$(cat "$(run_dir)/job")
    rm -rf runs /dev/shm/fb."$job".*
    ok "a SIGKILLed supervisor leaves no health check and no rank"
fi
