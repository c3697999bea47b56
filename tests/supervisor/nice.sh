#!/usr/bin/env bash
# Priority (docs/supervisor.md, "Priority"): the supervisor and its shims
# run --supervisor-nice steps (default 10) above the ranks, and every rank,
# first attempt or a restart's rank exec'd ahead by a standby shim, runs at
# the nice firebreak was started with; --supervisor-nice 0 leaves all at it.
source "$(dirname "$0")/lib.sh"
if ! nice -n -1 true 2>/dev/null; then
    echo "skip: not allowed to lower a nice value here"
    exit 77
fi
# Each rank writes its own nice, its shim's (its parent) and the
# supervisor's; attempt 0 fails so that attempt 1 runs.
cat >rank.sh <<'SH'
#!/bin/sh
ni() { awk '{ sub(/^.*\) /, ""); print $17 }' "/proc/$1/stat"; }
echo "$(ni $$) $(ni $PPID) $(ni $FIREBREAK_SUPERVISOR_PID)" \
    >"$FIREBREAK_RUN_DIR/nice.$FIREBREAK_ATTEMPT.$RANK"
[ "$FIREBREAK_ATTEMPT" = 1 ] || { sleep 1; exit 3; }
SH
chmod +x rank.sh
check() { # NICE ARGS: started at nice NICE, expect ranks NICE, others $2
    local want_rank=$1 want_sup=$2; shift 2
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
}
check 0 -10
ok "at nice 0: the ranks at 0, their shims and the supervisor at -10 (both attempts)"
check 5 -5
ok "at nice 5: the ranks at 5, the rest at -5"
check 0 0 --supervisor-nice 0
ok "--supervisor-nice 0: all at 0"
check 0 -20 --supervisor-nice 39
ok "--supervisor-nice 39: the rest clamped at -20"
