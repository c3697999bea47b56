#!/usr/bin/env bash
# Everything of a run is private to the user by default -- run directory,
# logs, checkpoints (shards written by the ranks), journal and its -wal/-shm,
# `job`, flight-recorder dumps: directories 0700, files 0600, whatever the
# user's umask -- and readable by one group with --shared-group (directories
# 2750, files 0640, that group).
source "$(dirname "$0")/lib.sh"
ln -s "$BIN/fb-toy-train" "$T/toy-$TAG"   # the tag in every command line
TOY=$T/toy-$TAG
umask 022
# Nothing under $1 that is not (dirs $2, files $3, group $4).
check_modes() {
    local bad
    bad=$(find "$1" \( -type d ! -perm "$2" \) -o \( -type f ! -perm "$3" \) -o ! -group "$4")
    [ -z "$bad" ] || fail "$1: not $2/$3 group $4: $(ls -ld $bad)"
}
mkdir -m 755 R   # an existing, open run directory is made private too
"$FB" run --quiet --nproc-per-node 2 --run-dir R --ckpt-dir ck --max-restarts 1 \
    --inject 'kill:rank=1,step=5' -- "$TOY" --steps 8 --sleep-ms 5 --ckpt-every 2 ||
    fail "run failed"
ls R/supervisor.lock ck/supervisor.lock R/job R/journal.sqlite R/logs/rank-1.log \
    R/fr/attempt-0/rank-1.fbseg R/final_hash.rank-1 ck/step-*/rank-00001.safetensors \
    >/dev/null || fail "a file is missing: $(find R ck)"
check_modes R 700 600 "$(id -gn)"
check_modes ck 700 600 "$(id -gn)"

# The journal's -wal and -shm, while a run is live.
"$FB" run --quiet --run-dir L -- "$TOY" --steps 100000 --sleep-ms 10 &
pid=$!
for _ in $(seq 100); do [ -e L/journal.sqlite-wal ] && [ -e L/journal.sqlite-shm ] && break; sleep 0.1; done
[ "$(stat -c %a L/journal.sqlite-wal L/journal.sqlite-shm)" = "$(printf '600\n600')" ] ||
    fail "journal -wal/-shm: $(ls -l L/journal.sqlite-*)"
kill -TERM $pid
rc=0; wait $pid || rc=$?
[ $rc = 143 ] || fail "the run exited $rc after SIGTERM, want 143 (128 + SIGTERM)"

# A group that may read: setgid directories, 0640 files, that group.
group=$(getent group users >/dev/null && echo users || id -gn)
"$FB" run --quiet --nproc-per-node 2 --run-dir G --shared-group "$group" \
    --inject 'kill:rank=0,step=3' -- "$TOY" --steps 6 --sleep-ms 5 --ckpt-every 2 ||
    fail "run with --shared-group failed"
ls G/checkpoints/step-*/rank-00000.safetensors G/fr/attempt-0/rank-0.fbseg >/dev/null ||
    fail "a file is missing: $(find G)"
check_modes G 2750 640 "$group"
set +e
"$FB" run --shared-group no-such-group-$$ -- "$TOY" >/dev/null 2>err.txt
rc=$?
set -e
[ $rc = 2 ] && grep -q "no group 'no-such-group-$$'" err.txt || fail "unknown group: $rc $(cat err.txt)"
ok "run directories private by default (0700/0600), shared with --shared-group (2750/0640)"
