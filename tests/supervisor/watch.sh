#!/usr/bin/env bash
# The node watcher (`firebreak watch`, Slurm's per-node reader) against a
# rank that scribbles over its segment: it does not crash, says on stderr
# and in a forwarded note report that the rank's segment is corrupt, stops
# reading it, and still reports the rank's end; the same when the rank
# truncates its segment file (to a page, to 0) instead.  Started by hand in
# the background of a terminal that someone types at: it runs on (no
# SIGTTIN stop).  And against another user's file under a rank's name:
# refused, naming owner and mode.  `firebreak watch --sweep` (the end of a
# run whose ranks were stopped): the job's segments of every attempt and
# its Open MPI directory go; another job's, and (as root) another user's
# file under the job's name, stay; bad input exits 2.
source "$(dirname "$0")/lib.sh"
SCR=$BIN/fb-test-scribbler
job=fbwatch-$$-$RANDOM
at_exit+=('rm -f /dev/shm/fb.$job.*')
for mode in all live truncate truncate0; do
    rm -f /dev/shm/fb.$job.*
    FIREBREAK_JOB_ID=$job FIREBREAK_RANK=0 FIREBREAK_WORLD_SIZE=1 \
        "$SCR" --mode $mode --delay-ms 600 --seconds 2 "$TAG" >rank.out 2>&1 &
    rpid=$!
    rc=0
    timeout -s KILL 30 "$FB" watch --job $job --attempt 0 --ranks-per-node 1 \
        --world 1 --node-id 0 --interval 0.1 >w.out 2>w.err </dev/null || rc=$?
    wait $rpid || fail "$mode: the scribbling rank failed: $(cat rank.out)"
    [ "$rc" -lt 124 ] || fail "$mode: firebreak watch exited $rc ($(tail -3 w.err))"
    grep -q "^fbw1 attach 0 " w.out || fail "$mode: never attached: $(head -3 w.out)"
    grep -Eq "^fbw1 report 0 [0-9]+ 10 0 0 0 0 0 [0-9]+ segment of rank 0 is corrupt: " w.out \
        || fail "$mode: no note report: $(grep report w.out | tail -3)"
    grep -q "firebreak watch: segment of rank 0 is corrupt" w.err \
        || fail "$mode: stderr: $(cat w.err)"
    grep -q "^fbw1 end 0 " w.out || fail "$mode: end not reported"
    ok "$mode: the watcher names the corrupt segment and survives"
done

# Started by hand in the background of a terminal, someone typing at it:
# not stopped by SIGTTIN, its alive lines go on (a pty; watch_bgtty.py).
rm -f /dev/shm/fb.$job.*
python3 "$(dirname "$0")/watch_bgtty.py" "$FB" $job >bg.out 2>&1 \
    || fail "in a terminal's background: $(cat bg.out)"
ok "in a terminal's background, typed at: $(tail -1 bg.out); no requests read from the terminal"

# --sweep: every attempt's segments of the job and fb.JOB.ompi go.
rm -rf /dev/shm/fb.$job.* /dev/shm/fb.$job-x.*
at_exit+=('rm -rf /dev/shm/fb.$job.ompi /dev/shm/fb.$job-x.*')
for f in 0.0 0.1 3.7; do head -c 4096 /dev/zero >/dev/shm/fb.$job.$f; done
head -c 4096 /dev/zero >/dev/shm/fb.$job-x.0.0
mkdir -p /dev/shm/fb.$job.ompi/session && touch /dev/shm/fb.$job.ompi/vader_segment.n1.0
if [ "$(id -u)" = 0 ]; then
    head -c 4096 /dev/zero >/dev/shm/fb.$job.5.0 && chown 65534 /dev/shm/fb.$job.5.0
fi
"$FB" watch --sweep --job $job --node n1 >sw.out 2>sw.err || fail "--sweep exited $?: $(cat sw.err)"
grep -qx "firebreak watch: n1: removed 3 segments of job $job left by stopped ranks" sw.err \
    || fail "--sweep said: $(cat sw.err)"
left=$(cd /dev/shm && ls -d fb.$job.* fb.$job-x.* 2>/dev/null | LC_ALL=C sort | tr '\n' ' ')
want=$( (echo fb.$job-x.0.0; [ "$(id -u)" != 0 ] || echo fb.$job.5.0) | LC_ALL=C sort | tr '\n' ' ')
[ "$left" = "$want" ] || fail "after --sweep: '$left', wanted '$want'"
rm -f /dev/shm/fb.$job.5.0 /dev/shm/fb.$job-x.0.0
"$FB" watch --sweep --job $job >sw.out 2>sw.err || fail "an empty --sweep exited $?"
[ ! -s sw.err ] || fail "an empty --sweep said: $(cat sw.err)"
rc=0; "$FB" watch --sweep >sw.out 2>sw.err || rc=$?
[ $rc = 2 ] && grep -q "needs --job" sw.err || fail "--sweep without --job: $rc $(cat sw.err)"
rc=0; "$FB" watch --sweep --job a/b >sw.out 2>sw.err || rc=$?
[ $rc = 2 ] && grep -q "not a job id: a/b" sw.err || fail "--sweep --job a/b: $rc $(cat sw.err)"
# One job id check for every --job (lib/segment.h): 1..48 of [A-Za-z0-9_-].
long=$(printf 'j%.0s' $(seq 49))
for bad in "$long" "a.b" ".."; do
    rc=0; "$FB" watch --sweep --job "$bad" >sw.out 2>sw.err || rc=$?
    [ $rc = 2 ] && grep -q "not a job id" sw.err || fail "--sweep --job '$bad': $rc $(cat sw.err)"
    rc=0; "$FB" watch --mem-finish --job "$bad" --ckpt-dir "$PWD/ck" --world 1 --step 1 \
        >sw.out 2>sw.err || rc=$?
    [ $rc = 2 ] && grep -q "not a job id" sw.err || fail "--mem-finish --job '$bad': $rc $(cat sw.err)"
done
ok "--sweep removes the job's segments of every attempt and its Open MPI directory, nothing else"

if [ "$(id -u)" != 0 ]; then
    echo "skip: planting another uid's file needs root (chown)"
    exit 0
fi
rm -f /dev/shm/fb.$job.*
planted=/dev/shm/fb.$job.0.0
head -c 65536 /dev/zero >"$planted"
chmod 0600 "$planted"
chown 65534 "$planted"
# Stopped by one SIGTERM of ours once it has refused and is still waiting,
# not by timeout(1): that also signals its whole process group (SIGTERM,
# SIGCONT), which can reach LeakSanitizer's tracer while it stops the
# exiting watcher's threads in an ASan build and leave both stuck.
"$FB" watch --job $job --attempt 0 --ranks-per-node 1 --world 1 \
    --node-id 0 >w.out 2>w.err </dev/null &
wpid=$!
for _ in $(seq 300); do
    grep -q "is not ours" w.err && break
    kill -0 $wpid 2>/dev/null || break
    sleep 0.1
done
sleep 0.5
kill -0 $wpid 2>/dev/null || fail "watch exited by itself (the rank never attached): $(cat w.err)"
kill -TERM $wpid
rc=0
for _ in $(seq 300); do kill -0 $wpid 2>/dev/null || break; sleep 0.1; done
kill -0 $wpid 2>/dev/null && { kill -9 $wpid; fail "watch did not stop within 30 s of SIGTERM"; }
wait $wpid || rc=$?
[ "$rc" = 0 ] || fail "watch exited $rc after SIGTERM, wanted 0: $(cat w.err)"
grep -qF "segment of rank 0 is not ours: owner uid 65534 mode 0600 ($planted)" w.err \
    || fail "stderr: $(cat w.err)"
! grep -q "^fbw1 attach" w.out || fail "attached to another user's file"
ok "the watcher refuses another user's file"
