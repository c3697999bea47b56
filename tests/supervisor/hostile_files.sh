#!/usr/bin/env bash
# A rank, or another local user, plants files where the supervisor writes
# (docs/threat-model.md):
#  1. FIFOs at the names the flight-recorder snapshots' temporary files
#     had (rank-R.fbseg.tmp.<supervisor pid>, the pid in every rank's
#     environment): the supervisor's open waited for a reader for good,
#     deaf to SIGTERM;
#  2. a FIFO in place of the rank's own log, opened again for the next
#     attempt (by its shims, forked ahead):
#     the same;
#  3. FIFOs at the temporary names of node memory's end-of-run copy;
#  4. another user's directory under the job's Open MPI name in /dev/shm
#     (the job id is in every segment's name): the supervisor removed it,
#     and all inside, as root at the end of every attempt, whatever the
#     launcher; with a symlink swapped in during the walk, files anywhere.
# Each run now ends as it would without them, well within its timeout, and
# the other user's directory is left alone.
source "$(dirname "$0")/lib.sh"
TOY=$BIN/fb-toy-train

# run NAME ARGS...: firebreak run, killed after 60 s (a hang fails the
# test instead of hanging it); the --json summary in NAME.json
run() {
    local name=$1 rc=0
    shift
    timeout -s KILL 60 "$FB" run --nproc-per-node 2 --json --run-dir "$T/$name" \
        "$@" >"$name.json" 2>"$name.err" || rc=$?
    [ "$rc" != 137 ] || fail "$name: the supervisor hung (killed after 60 s): $(tail -n 3 "$name.err")"
    [ "$(json_field "$name.json" '["completed"]')" = True ] \
        || fail "$name: not completed (exit $rc): $(tail -n 3 "$name.err")"
}

cat >fifo_fr.sh <<EOF
#!/bin/bash
# $TAG
if [ "\$FIREBREAK_ATTEMPT" = 0 ] && [ "\$FIREBREAK_RANK" = 1 ]; then
    D=\$FIREBREAK_RUN_DIR/fr/attempt-0; mkdir -p \$D
    for r in 0 1; do mkfifo \$D/rank-\$r.fbseg.tmp.\$FIREBREAK_SUPERVISOR_PID; done
    $TOY --steps 30 --ckpt-every 0 --run-dir none & sleep 0.3; kill -SEGV \$!; wait; exit 1
fi
exec $TOY --steps 30 --ckpt-every 0 --run-dir none
EOF
chmod +x fifo_fr.sh
run fifo_fr -- ./fifo_fr.sh
[ "$(json_field fifo_fr.json '["attempts"]')" = 2 ] || fail "fifo_fr: $(cat fifo_fr.json)"
ok "FIFOs at the snapshots' old temporary names: restarted and completed"

cat >fifo_log.sh <<EOF
#!/bin/bash
# $TAG
if [ "\$FIREBREAK_ATTEMPT" = 0 ] && [ "\$FIREBREAK_RANK" = 1 ]; then
    sleep 0.3; L=\$FIREBREAK_RUN_DIR/logs/rank-1.log; rm -f \$L; mkfifo \$L; exit 1
fi
sleep 0.5
EOF
chmod +x fifo_log.sh
run fifo_log -- ./fifo_log.sh
# (attempt 1's shims, forked ahead, hold the log the rank removed; the
# next attempt's, forked ahead in turn, met the FIFO)
[ -f fifo_log/logs/rank-1.log ] || fail "fifo_log: the log: $(ls -l fifo_log/logs)"
ok "a FIFO in place of a rank's log: a log file made again, the run went on"

# 3. FIFOs at the temporary names of the end-of-run copy from node memory
#    to storage (.rank-R.<supervisor pid>.tmp in the step's directory):
#    the copy's open waited for a reader for good, deaf to SIGTERM.
cat >fifo_copy.sh <<EOF
#!/bin/bash
# $TAG
if [ "\$FIREBREAK_RANK" = 0 ]; then
    D=\$FIREBREAK_RUN_DIR/checkpoints/step-0000000020; mkdir -p \$D
    for r in 0 1; do mkfifo \$D/.rank-0000\$r.\$FIREBREAK_SUPERVISOR_PID.tmp; done
fi
exec $TOY --steps 20 --ckpt-every 5 --sleep-ms 10
EOF
chmod +x fifo_copy.sh
run fifo_copy --persist-every 0 -- ./fifo_copy.sh
for r in 0 1; do
    [ -f fifo_copy/checkpoints/step-0000000020/rank-0000$r.safetensors ] ||
        fail "fifo_copy: step 20 not copied: $(ls -la fifo_copy/checkpoints/step-0000000020)"
done
"$FB" ckpt verify fifo_copy >/dev/null || fail "fifo_copy: the copy does not verify"
ok "FIFOs at the end-of-run copy's temporary names: replaced, step 20 copied whole"

if [ "$(id -u)" != 0 ] || ! command -v setpriv >/dev/null; then
    echo "skip: another user's /dev/shm directory needs root and setpriv"
    exit 0
fi
cat >plant.sh <<EOF
#!/bin/bash
# $TAG
if [ "\$FIREBREAK_ATTEMPT" = 0 ] && [ "\$FIREBREAK_RANK" = 1 ]; then
    for _ in \$(seq 100); do [ -e /dev/shm/fb.\$FIREBREAK_JOB_ID.ompi/mine ] && break; sleep 0.05; done
    exit 1
fi
sleep 0.3
EOF
chmod +x plant.sh
timeout -s KILL 60 "$FB" run --nproc-per-node 2 --json --run-dir "$T/plant" -- ./plant.sh \
    >plant.json 2>plant.err &
pid=$!
for _ in $(seq 100); do [ -s plant/job ] && break; sleep 0.05; done
job=$(cat plant/job)
planted=/dev/shm/fb.$job.ompi
at_exit+=('rm -rf "$planted"')
setpriv --reuid=nobody --regid=nogroup --clear-groups \
    sh -c "mkdir -m 0777 '$planted' && echo x > '$planted/mine'" || fail "plant: as nobody"
wait $pid || fail "plant: exit $?: $(tail -n 3 plant.err)"
[ "$(json_field plant.json '["attempts"]')" = 2 ] || fail "plant: $(cat plant.json)"
[ -f "$planted/mine" ] || fail "another user's $planted was removed"
ok "another user's directory under the job's Open MPI name left alone"
