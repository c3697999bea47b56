#!/bin/bash
# report_diagnose_run: real `firebreak run`s of the toy trainer whose rank
# dies of a real SIGKILL sent from outside (this script), with the kernel
# log read from a fixture file (--kmsg) written at the moment of the
# failure in /dev/kmsg's record format:
#   xid79  an XID 79 (GPU fell off the bus), then the rank dies -> GPU /
#          Faulty GPU, by the kernel log
#   oom    the OOM killer's lines naming the rank's pid -> Dependency /
#          Host out of memory, by the kernel log
#   ib     no kernel evidence, the health check after the failure (on the
#          ib-down fixture tree) finds an InfiniBand port down -> Network /
#          Network switch/cable (the check's own component), by health
#   kill   an injected SIGKILL with the XID 79 log -> Unknown (injected),
#          the kernel line still in the chain
#   full   a save failing with ENOSPC (test hook) -> Storage full
# The supervisor stores category, component, evidence and health in the
# journal; `firebreak report` shows them (text, JSON, HTML agree).
set -u
FB=$1 TOY=$2 FIXTURES=$3
D=$(mktemp -d)
TAG="diagnose-run-$$"
sups=()
cleanup() {
    # a supervisor stopped by SIGTERM stops its ranks first
    for p in "${sups[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${sups[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$D"
}
trap cleanup EXIT
fail() { echo "report_diagnose_run: FAIL: $*" >&2; exit 1; }
ln -s "$TOY" "$D/toy-$TAG"

# The kernel's clock (CLOCK_MONOTONIC, as /dev/kmsg's timestamps) in µs.
now_us() { python3 -c 'import time; print(int(time.monotonic() * 1e6))'; }

# rank_pid RUNDIR RANK: the pid of attempt 0's rank (its environment says
# RANK and the attempt: the next attempt's standby shims have exec'd the
# program ahead with the same RANK, and with pids wrapping around, 32768
# here, one can come first in pgrep's list: killing it was no failure).
rank_pid() {
    local p env
    for p in $(pgrep -f -- "toy-$TAG" 2>/dev/null); do
        env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null || true)
        if grep -qx "RANK=$2" <<<"$env" && grep -qx "FIREBREAK_ATTEMPT=0" <<<"$env" &&
           grep -qx "FIREBREAK_RUN_DIR=$(readlink -f "$1")" <<<"$env"; then
            echo "$p"; return 0
        fi
    done
    return 1
}

# scenario NAME KMSG_WRITER kill|inject [firebreak run options...]: run;
# kill: write the kernel log and kill rank 1 from outside once it has
# stepped; inject: write the kernel log first, the run injects the fault.
scenario() {
    local name=$1 writer=$2 mode=$3; shift 3
    local run="$D/$name" kmsg="$D/$name.kmsg"
    : >"$kmsg"
    [ "$mode" = inject ] && "$writer" "$kmsg" 0
    timeout 120 "$FB" run --nproc-per-node 2 --run-dir "$run" --max-restarts 1 \
        --kmsg "$kmsg" --quiet "$@" \
        -- "$D/toy-$TAG" --steps 60 --sleep-ms 50 >"$D/$name.log" 2>&1 &
    local sup=$! pid="" i
    sups+=("$sup")
    if [ "$mode" = kill ]; then
        for i in $(seq 200); do
            pid=$(rank_pid "$run" 1) && [ -s "$run/logs/rank-1.log" ] && break
            sleep 0.05
        done
        [ -n "$pid" ] || fail "$name: rank 1 never started: $(tail -n 5 "$D/$name.log")"
        sleep 0.5
        "$writer" "$kmsg" "$pid"
        kill -KILL "$pid"
    fi
    local rc=0
    wait $sup || rc=$?
    [ $rc = 0 ] || fail "$name: firebreak run exit $rc: $(tail -n 8 "$D/$name.log")"
    "$FB" report "$run" --html "$D/$name.html" >"$D/$name.txt" || fail "$name: report"
    "$FB" report "$run" --json >"$D/$name.json" || fail "$name: report --json"
    python3 "$(dirname "$0")/agree.py" "$D/$name.json" "$D/$name.txt" "$D/$name.html" ||
        fail "$name: outputs disagree"
}

xid79() {
    local t; t=$(now_us)
    {
        echo "6,901,$((t - 2000000)),-;NVRM: GPU at PCI:0000:3b:00: GPU-7c9f3a1e-0b6d-4e8c-9d0e-2f4a5b6c7d8e"
        echo "3,902,$((t - 1000000)),-;NVRM: Xid (PCI:0000:3b:00): 79, pid=$2, name=fb-toy-train, GPU has fallen off the bus."
        echo " SUBSYSTEM=pci"
        echo "3,903,$((t - 30000000000)),-;NVRM: Xid (PCI:0000:5e:00): 48, long before: outside the window"
    } >>"$1"
}
oom() {
    local t; t=$(now_us)
    {
        echo "4,1001,$t,-;fb-toy-train invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, oom_score_adj=0"
        echo "6,1002,$((t + 100)),-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task=fb-toy-train,pid=$2,uid=0"
        echo "3,1003,$((t + 200)),-;Out of memory: Killed process $2 (fb-toy-train) total-vm:98123456kB, anon-rss:97000000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:190000kB oom_score_adj:0"
    } >>"$1"
}
nothing() { :; }

# check NAME CATEGORY COMPONENT RULE INJECTED [TEXT-IN-EVIDENCE]
check() {
    python3 - "$D/$1.json" "$D/$1/journal.sqlite" "$@" <<'PY' || fail "$1: classification"
import json, sqlite3, sys
jpath, db, name, cat, comp, rule, inj = sys.argv[1:8]
text = sys.argv[8] if len(sys.argv) > 8 else None
j = json.loads(open(jpath).read().splitlines()[-1])
ends = [i for i in j["incidents"] if i["ended_attempt"]]
assert len(ends) == 1, ends
i = ends[0]
got = (i["category"], i["component"], i["decided_by"], i["injected_cause"])
want = (cat, comp, rule, inj == "yes")
assert got == want, "%s: got %r, want %r (%s)" % (name, got, want, i["evidence"])
assert i["rank"] == 1, i
if text:
    assert text in i["evidence"], (text, i["evidence"])
# stored by the supervisor, with the health verdict taken after it
row = sqlite3.connect(db).execute(
    "SELECT category, component, evidence, health FROM incident "
    "WHERE kind IN ('crash', 'error_exit')").fetchone()
assert row[0] == cat and row[1] == comp, row
assert row[2].startswith("[by %s] " % rule), row[2]
h = json.loads(row[3])
assert h["verdict"] in ("ok", "warn", "fail", "unknown"), h
print("%s: %s / %s by %s%s" % (name, cat, comp, rule, " (injected)" if inj == "yes" else ""))
PY
}

scenario xid79 xid79 kill --health-root "$FIXTURES/healthy"
check xid79 GPU "Faulty GPU" kernel_log no "Xid (PCI:0000:3b:00): 79"
grep -q "root cause: GPU / Faulty GPU, decided by kernel_log" "$D/xid79.txt" || fail "xid79: text"
grep -q "long before" "$D/xid79.json" && fail "xid79: a line outside the window is evidence"

scenario oom oom kill --health-root "$FIXTURES/healthy"
check oom Dependency "Host out of memory" kernel_log no "OOM killer killed the rank"
grep -q "also: the node's health check after it: ok" "$D/oom.json" || fail "oom: health ok not in the chain"

scenario ib nothing kill --health-root "$FIXTURES/ib-down"
check ib Network "Network switch/cable" health no "health check 'ib.mlx5_1.1'"

scenario injected xid79 inject --inject 'kill:rank=1,step=20'
check injected Unknown Unknown injected yes "also: kernel log"
grep -q "root cause: Unknown (injected), decided by injected" "$D/injected.txt" ||
    fail "injected: text"
grep -q '<span class="inj">(injected)</span>' "$D/injected.html" || fail "injected: html"

# A save that fails with ENOSPC (the engine's test hook): the failed-save
# incident is classified when the supervisor writes it -> Storage full.
if [ "${FB_TEST_HOOKS:-}" = ON ]; then
    FIREBREAK_CKPT_FAIL=ENOSPC@20 timeout 60 "$FB" run --nproc-per-node 1 \
        --run-dir "$D/full" --quiet -- "$D/toy-$TAG" --steps 30 --sleep-ms 10 \
        >"$D/full.log" 2>&1 || fail "diskfull: $(tail -n 5 "$D/full.log")"
    python3 - "$D/full/journal.sqlite" <<'PY' || fail "diskfull: classification"
import sqlite3, sys
rows = sqlite3.connect(sys.argv[1]).execute(
    "SELECT category, component, evidence FROM incident WHERE kind='save_failed'").fetchall()
assert len(rows) == 1, rows
cat, comp, ev = rows[0]
assert (cat, comp) == ("Dependency", "Storage full"), rows
assert ev.startswith("[by log] ") or ev.startswith("[by storage] "), ev
print("diskfull: %s / %s %s" % (cat, comp, ev.split("]")[0] + "]"))
PY
else
    echo "diskfull: skipped (FB_TEST_HOOKS is not ON)"
fi

[ -z "$(pgrep -f -- "$TAG")" ] || fail "processes left behind"
echo "report_diagnose_run: ok"
