#!/usr/bin/env bash
# The disk under the run directory fills mid-run (a 2 MiB tmpfs, in a
# private mount namespace so the mount cannot leak).  The supervisor says so
# on stderr, naming the journal and the error, keeps the failed writes in
# memory and retries them:
#  - space comes back: every delayed row reaches the journal, exit 0;
#  - it never does: the journal is declared INCOMPLETE with what was
#    dropped, exit 3, and --json says so.
# Needs root (mount) and unshare -m; skipped (77) otherwise.
if [ -z "${FB_JOURNAL_FULL_NS:-}" ]; then
    if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
        echo "skipped: needs root and unshare -m"
        exit 77
    fi
    FB_JOURNAL_FULL_NS=1 exec unshare -m bash "$0" "$@"
fi
source "$(dirname "$0")/lib.sh"
D=$T/disk
mkdir "$D" flags
mount -t tmpfs -o size=2m none "$D" || { echo "skipped: cannot mount tmpfs"; exit 77; }
at_exit+=('umount -l "$D" 2>/dev/null')
export FLAGS=$T/flags
# Attempt 0 fails (exit 3) once the disk is full; attempt 1 completes when told.
cat > "rank-$TAG.sh" <<'SH'
#!/bin/sh
if [ "$FIREBREAK_ATTEMPT" = 0 ]; then
    while [ ! -e "$FLAGS/go" ]; do sleep 0.05; done
    exit 3
fi
while [ ! -e "$FLAGS/done" ]; do sleep 0.05; done
exit 0
SH
chmod +x "rank-$TAG.sh"
wait_for() {   # wait_for WHAT COMMAND...: up to 20 s
    local what=$1; shift
    for _ in $(seq 200); do "$@" 2>/dev/null && return 0; sleep 0.1; done
    fail "timed out waiting for $what; stderr: $(cat err.txt)"
}
attempt_row() { [ "$(sqlite3 "$1/journal.sqlite" 'select count(*) from attempt')" -ge 1 ]; }
fill() { dd if=/dev/zero of="$D/filler" bs=4k 2>/dev/null || true; }

# 1. The disk fills, then frees up: nothing is lost.
"$FB" run --run-dir "$D/a" --max-restarts 2 --json -- "$T/rank-$TAG.sh" >out.json 2>err.txt &
pid=$!
wait_for "the first attempt" attempt_row "$D/a"
fill
touch flags/go
wait_for "the failure message" grep -q "journal $D/a/journal.sqlite cannot be written: .*full" err.txt
rm -f "$D/filler"
wait_for "the recovery message" grep -q "journal $D/a/journal.sqlite is written again" err.txt
touch flags/done
set +e; wait $pid; rc=$?; set -e
[ $rc = 0 ] || fail "run with a disk that freed up exited $rc: $(cat err.txt)"
j() { sqlite3 "$D/$1/journal.sqlite" "$2"; }
[ "$(j a "select kind||':'||exit_code from incident")" = "error_exit:3" ] ||
    fail "the incident written while the disk was full is missing: $(j a 'select * from incident')"
[ "$(j a "select status from run")" = completed ] || fail "run row: $(j a 'select * from run')"
[ "$(j a "select group_concat(outcome) from attempt")" = "failed,completed" ] || fail "attempts"
[ "$(json_field out.json '["journal"]["complete"]')" = True ] || fail "json journal"

# 2. The disk stays full: loud, counted, exit 3.
rm -f flags/go flags/done
"$FB" run --run-dir "$D/b" --max-restarts 2 --json -- "$T/rank-$TAG.sh" >out.json 2>err.txt &
pid=$!
wait_for "the first attempt" attempt_row "$D/b"
fill
touch flags/go
wait_for "the failure message" grep -q "journal $D/b/journal.sqlite cannot be written" err.txt
touch flags/done
set +e; wait $pid; rc=$?; set -e
[ $rc = 3 ] || fail "run with a full journal exited $rc, want 3: $(cat err.txt)"
grep -q "the journal $D/b/journal.sqlite is INCOMPLETE: [1-9][0-9]* rows\? and [0-9]* step samples\? could not be written (database or disk is full" err.txt ||
    fail "no final message: $(cat err.txt)"
[ "$(json_field out.json '["journal"]["complete"]')" = False ] || fail "json journal.complete"
[ "$(json_field out.json '["journal"]["dropped_rows"]')" -ge 1 ] || fail "json dropped_rows"
[ "$(json_field out.json '["completed"]')" = True ] || fail "json completed"
[ "$(json_field out.json '["exit_code"]')" = 3 ] || fail "json exit_code"
ok "a full disk under the journal is reported, retried, and counted (exit 3)"
