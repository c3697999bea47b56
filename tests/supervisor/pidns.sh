#!/usr/bin/env bash
# Two supervisors sharing /dev/shm from different pid namespaces (containers
# with `docker --ipc=host`, pods sharing the host's IPC): the second one's
# start-up sweep of stale files read the first one's pids, which mean
# nothing in its namespace, as gone, and removed the running job's
# segments and node-memory tier (its saves then failed and its restart
# trained from step 0 while saying step 70).  Liveness is now also a
# shared flock held on the segment (by its rank) and on the tier's pid
# file (by its supervisor), which any namespace sees.
# Root only (namespaces); all of it in a private mount namespace with its
# own /dev/shm, so no other test's files are in reach.
source "$(dirname "$0")/lib.sh"
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
    echo "skip: needs root and unshare"
    exit 77
fi
if [ "${1:-}" != inner ] && [ -z "${FB_PIDNS_INNER:-}" ]; then
    FB_PIDNS_INNER=1 unshare -m --propagation private bash -c '
        mount -t tmpfs -o size=256m fb-pidns /dev/shm && exec bash "$0" "$1"' \
        "$0" "$FB"
    exit $?
fi

ln -s "$BIN/fb-toy-train" "$T/toy-$TAG"   # the tag in every command line
TOY=$T/toy-$TAG
"$FB" run --nproc-per-node 2 --run-dir A --persist-every 0 --max-restarts 0 -- \
    "$TOY" --steps 200 --sleep-ms 20 --ckpt-every 5 >A.out 2>A.err &
a=$!
at_exit+=("kill $a 2>/dev/null; wait $a 2>/dev/null")
for _ in $(seq 200); do
    [ -s A/job ] && ls -d "/dev/shm/fb.$(cat A/job).mem/step-"* >/dev/null 2>&1 && break
    sleep 0.05
done
job=$(cat A/job)
[ -d "/dev/shm/fb.$job.mem" ] || fail "run A made no node-memory tier"
# B, in a pid namespace of its own (its /proc its own), same /dev/shm
unshare -p -f --mount-proc "$FB" run --run-dir B --quiet -- "$TOY" --steps 3 \
    >B.out 2>B.err || fail "run B failed: $(tail -3 B.err)"
for f in "fb.$job.mem" "fb.$job.0.0" "fb.$job.0.1"; do
    [ -e "/dev/shm/$f" ] || fail "run B removed run A's /dev/shm/$f: $(ls /dev/shm)"
done
wait $a || fail "run A failed: $(tail -5 A.err)"
grep -q "end of run: checkpoint 200 copied from node memory" A.err ||
    fail "run A's end: $(grep -i 'end of run\|node memory' A.err)"
"$FB" ckpt verify A >/dev/null || fail "run A's checkpoints do not verify"
[ -z "$(ls /dev/shm)" ] || fail "left in /dev/shm: $(ls /dev/shm)"
ok "a supervisor in another pid namespace left a running job's segments and tier alone"
