#!/bin/bash
# shm_cleanup.sh BENCH_TIERS BENCH_CKPT: the benchmarks' /dev/shm
# directories are never left behind (bench/bench_shm.h):
#   1. a directory a killed run left (its process gone) is removed by the
#      next run, one of a process that runs is kept;
#   2. bench_tiers stopped by SIGTERM midway removes its directories;
#   3. bench_ckpt's process group stopped by SIGTERM (as `timeout` does)
#      during its start-up runs removes its directory.
set -u
tiers=$1 ckpt=$2
work=$(mktemp -d /tmp/fb-bench-shm.XXXXXX)
sleep 30 & alive=$!
mine="/dev/shm/fb-bench-tiers.$alive"   # removed at the end, pass or fail
trap 'kill $alive 2>/dev/null; rm -rf "$work" $mine' EXIT
fail=0
say() { echo "FAIL: $*"; fail=1; }

# 1. a dead process's directory, and a live one's
sh -c 'exit 0' & dead=$!
wait $dead
while kill -0 $dead 2>/dev/null; do dead=$((dead + 1)); done
mine="$mine /dev/shm/fb-bench-tiers.$dead"
mkdir -p /dev/shm/fb-bench-tiers.$dead/step-0000000001 /dev/shm/fb-bench-tiers.$alive
BENCH_TIERS_MIB=8 "$tiers" "$work" > "$work/out" 2> "$work/err"
rc=$?
[ $rc -eq 0 ] || { say "bench_tiers exited $rc"; cat "$work/err"; }
[ -e /dev/shm/fb-bench-tiers.$dead ] && say "the dead process's directory is still there"
grep -q "removed /dev/shm/fb-bench-tiers.$dead" "$work/err" ||
    say "no word of the removal: $(cat "$work/err")"
[ -d /dev/shm/fb-bench-tiers.$alive ] || say "the live process's directory was removed"
rmdir /dev/shm/fb-bench-tiers.$alive

# wait_dir PATTERN: until a /dev/shm entry matches (10 s); prints it
wait_dir() {
    for _ in $(seq 200); do
        m=$(ls -d /dev/shm/$1 2>/dev/null | head -n 1)
        [ -n "$m" ] && { echo "$m"; return 0; }
        sleep 0.05
    done
    return 1
}

# 2. bench_tiers, SIGTERM midway
"$tiers" "$work" > "$work/out" 2>&1 &
pid=$!
mine="$mine /dev/shm/fb-bench-tiers.$pid /dev/shm/fb-bench-tiers-node.$pid"
if d=$(wait_dir "fb-bench-tiers.$pid"); then
    kill -TERM $pid
    wait $pid
    rc=$?
    [ $rc -eq 143 ] || say "bench_tiers after SIGTERM exited $rc, not 143"
    [ -e "$d" ] && say "bench_tiers left $d after SIGTERM"
    [ -e /dev/shm/fb-bench-tiers-node.$pid ] && say "bench_tiers left its node directory"
else
    wait $pid
    say "bench_tiers made no /dev/shm/fb-bench-tiers.$pid"
fi

# 3. bench_ckpt's group, SIGTERM during the start-up runs
BENCH_CKPT_MIB=64 setsid "$ckpt" "$work/ckpt" > "$work/out" 2>&1 &
pid=$!
mine="$mine /dev/shm/fb-bench-startup.$pid"
if d=$(wait_dir "fb-bench-startup.$pid"); then
    kill -TERM -- -$pid
    wait $pid
    rc=$?
    [ $rc -eq 143 ] || say "bench_ckpt after SIGTERM exited $rc, not 143"
    sleep 0.2
    [ -e "$d" ] && say "bench_ckpt left $d after SIGTERM"
else
    kill -KILL -- -$pid 2>/dev/null
    wait $pid
    say "bench_ckpt made no /dev/shm/fb-bench-startup.$pid"
fi
left=$(ls -d /dev/shm/fb-bench-* 2>/dev/null | grep -v "\.$alive\$")
[ -z "$left" ] || say "left in /dev/shm: $left"
[ $fail -eq 0 ] && echo "ok: the benchmarks' /dev/shm directories are removed (exit, SIGTERM, and a killed run's by the next)"
exit $fail
