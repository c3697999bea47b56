#!/usr/bin/env bash
# Priority (docs/supervisor.md, "Priority"): the supervisor and its shims
# run --supervisor-nice steps (default 10) above the ranks, and every rank,
# first attempt or a restart's rank exec'd ahead by a standby shim, runs at
# the nice firebreak was started with; --supervisor-nice 0 leaves all at it.
# From a failure's detection until its ranks are stopped the supervisor
# runs at real-time priority --supervisor-rt (default 1; 0: none), and at
# its nice again after; no rank ever runs real-time.
source "$(dirname "$0")/lib.sh"
if ! nice -n -1 true 2>/dev/null; then
    echo "skip: not allowed to lower a nice value here"
    exit 77
fi
# Real-time priority may be refused where nice is not (a container without
# an RT budget): then none is expected, and the log must say so.
rt_allowed=1
chrt -f 1 true 2>/dev/null || rt_allowed=0
# Each rank writes its own nice, its shim's (its parent) and the
# supervisor's; attempt 0 fails (rank 0 exits 3) so that attempt 1 runs.
# Ranks 1 and 2 of attempt 0 are stopped: on SIGTERM they write the
# supervisor's scheduling policy and real-time priority then; every rank of
# attempt 1 writes the supervisor's and its own at its start.
cat >rank.sh <<'SH'
#!/bin/sh
ni() { awk '{ sub(/^.*\) /, ""); print $17 }' "/proc/$1/stat"; }
rt() { awk '{ sub(/^.*\) /, ""); print $39, $38 }' "/proc/$1/stat"; }
echo "$(ni $$) $(ni $PPID) $(ni $FIREBREAK_SUPERVISOR_PID)" \
    >"$FIREBREAK_RUN_DIR/nice.$FIREBREAK_ATTEMPT.$RANK"
out="$FIREBREAK_RUN_DIR/rt.$FIREBREAK_ATTEMPT.$RANK"
if [ "$FIREBREAK_ATTEMPT" = 1 ]; then
    echo "$(rt $FIREBREAK_SUPERVISOR_PID) $(rt $$)" >"$out"
    exit 0
fi
[ "$RANK" = 0 ] && { sleep 1; exit 3; }
trap 'echo "$(rt $FIREBREAK_SUPERVISOR_PID)" >"$out"; exit 0' TERM
sleep 30 &
wait $!
SH
chmod +x rank.sh
check() { # NICE SUP_NICE RT ARGS: started at nice NICE, expect ranks NICE,
    # the supervisor and shims SUP_NICE, the supervisor's stop at real-time
    # priority RT (0: none)
    local want_rank=$1 want_sup=$2 want_rt=$3 asked_rt=$3; shift 3
    [ "$rt_allowed" = 1 ] || want_rt=0
    rm -rf runs
    nice -n "$want_rank" "$FB" run --nproc-per-node 3 --max-restarts 1 --json "$@" \
        -- sh "$T/rank.sh" "$TAG" >out.json 2>err.txt ||
        fail "run exited $? ($(tail -3 err.txt))"
    [ "$(json_field out.json '["completed"]')" = True ] || fail "not completed: $(tail -1 out.json)"
    local d n
    d=$(run_dir)
    n=$(cat "$d"/nice.* | grep -c "^$want_rank $want_sup $want_sup\$" || true)
    [ "$n" = 6 ] || fail "started at nice $want_rank with $*: want rank, shim and" \
        "supervisor at $want_rank $want_sup $want_sup in 6 ranks, got: $(cat "$d"/nice.*)"
    grep -q 'shims were standing by' err.txt ||
        fail "attempt 1 had no standby shims: $(grep 'attempt 1' err.txt)"
    # SCHED_FIFO is policy 1, SCHED_OTHER 0
    local stop="0 0"
    [ "$want_rt" = 0 ] || stop="1 $want_rt"
    for r in 1 2; do
        [ "$(cat "$d/rt.0.$r" 2>/dev/null)" = "$stop" ] || fail "with ${*:-no options}: the supervisor" \
            "while it stopped rank $r: want policy and priority '$stop', got" \
            "'$(cat "$d/rt.0.$r" 2>/dev/null)'"
    done
    for r in 0 1 2; do
        [ "$(cat "$d/rt.1.$r")" = "0 0 0 0" ] || fail "with ${*:-no options}: attempt 1's rank $r" \
            "saw the supervisor's and its own policy and priority" \
            "'$(cat "$d/rt.1.$r")', want all SCHED_OTHER"
    done
    if [ "$rt_allowed" = 0 ] && [ "$asked_rt" != 0 ]; then
        grep -q "real-time priority .* for a failure's stop" err.txt ||
            fail "real-time priority refused, and the log does not say so"
    fi
}
check 0 -10 1
ok "at nice 0: the ranks at 0, their shims and the supervisor at -10 (both attempts);" \
    "the stop at real-time priority 1, the rest SCHED_OTHER"
check 5 -5 1
ok "at nice 5: the ranks at 5, the rest at -5"
check 0 0 0 --supervisor-nice 0 --supervisor-rt 0
ok "--supervisor-nice 0 --supervisor-rt 0: all at 0, the stop too"
check 0 -20 7 --supervisor-nice 39 --supervisor-rt 7
ok "--supervisor-nice 39: the rest clamped at -20; --supervisor-rt 7: the stop at 7"
[ "$rt_allowed" = 1 ] || echo "note: real-time priority not allowed here: none expected"
