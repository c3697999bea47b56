#!/bin/bash
# report_errors: journals that cannot be reported on give exit 2 and a
# message that names the file and the problem.
set -u
FB=$1 GEN=$2
D=$(mktemp -d)
LOCKER=
cleanup() { [ -n "$LOCKER" ] && kill "$LOCKER" 2>/dev/null; wait 2>/dev/null; rm -rf "$D"; }
trap cleanup EXIT
fail() { echo "report_errors: FAIL: $*" >&2; exit 1; }

expect2() { # DIR TEXT
    "$FB" report "$1" >"$D/out" 2>"$D/err"
    local rc=$?
    [ $rc = 2 ] || fail "$1: exit $rc, expected 2"
    grep -q -- "$2" "$D/err" || fail "$1: stderr lacks '$2': $(cat "$D/err")"
    grep -q -- "$1" "$D/err" || fail "$1: stderr does not name the file"
}

"$GEN" empty "$D/empty";        expect2 "$D/empty" "holds no run"
"$GEN" nostart "$D/nostart";    expect2 "$D/nostart" "never started"
"$GEN" oldschema "$D/old";      expect2 "$D/old" "schema version 0.9 is not supported"
expect2 "$D/missing" "No such file"
mkdir "$D/nojournal";           expect2 "$D/nojournal" "no journal.sqlite"
# A directory of run directories (--run-root's): the runs are named.
mkdir -p "$D/root/a" "$D/root/b"
"$GEN" basic "$D/root/a"; "$GEN" basic "$D/root/b"; touch -d '1 hour ago' "$D/root/a/journal.sqlite"
expect2 "$D/root" "it holds 2 run directories (the newest $D/root/b)"
# Where `firebreak run` was started (its runs/), and a directory inside a
# run (its checkpoints/): each says where the runs are.
mkdir -p "$D/cwd/runs/a" "$D/root/b/checkpoints"
"$GEN" basic "$D/cwd/runs/a"
expect2 "$D/cwd" "but $D/cwd/runs holds 1 run directory (the newest $D/cwd/runs/a)"
expect2 "$D/root/b/checkpoints/" "it is inside the run directory $D/root/b: give that one"
# deeper in it, and "." from inside it: the run named absolute
mkdir -p "$D/root/b/fr/torch/attempt-1"
expect2 "$D/root/b/fr/torch/attempt-1" "it is inside the run directory $D/root/b: give that one"
(cd "$D/root/b/checkpoints" && expect2 . "it is inside the run directory $D/root/b: give that one") || exit 1

"$GEN" basic "$D/ok"
cp -r "$D/ok" "$D/hdr"
printf 'this is not an sqlite header at all' | dd of="$D/hdr/journal.sqlite" conv=notrunc status=none
expect2 "$D/hdr" "corrupted"
cp -r "$D/ok" "$D/pages"
head -c 24576 /dev/zero | tr '\0' 'x' | dd of="$D/pages/journal.sqlite" bs=4096 seek=1 conv=notrunc status=none
expect2 "$D/pages" "corrupted"

# Locked: another process holds an exclusive lock on the journal.
cp -r "$D/ok" "$D/locked"
mkfifo "$D/fifo"
sqlite3 "$D/locked/journal.sqlite" <"$D/fifo" >/dev/null &
LOCKER=$!
exec 3>"$D/fifo"
echo "PRAGMA locking_mode=EXCLUSIVE; BEGIN EXCLUSIVE; SELECT count(*) FROM run;" >&3
for _ in $(seq 50); do # until the lock is held
    sqlite3 "file:$D/locked/journal.sqlite?mode=ro" "SELECT count(*) FROM run" >/dev/null 2>&1 || break
    sleep 0.1
done
expect2 "$D/locked" "locked by another process"
exec 3>&-
wait "$LOCKER"; LOCKER=
"$FB" report "$D/locked" >/dev/null || fail "unlocked journal not readable"

# A FIFO where a database should be: SQLite would block opening it, so
# the report refuses it, within seconds, naming the file (bounded by
# timeout: a hang fails the test instead of stalling it).
expect2_fifo() { # DIR-OR-FILE FIFO-PATH
    timeout 10 "$FB" report "$1" >"$D/out" 2>"$D/err"
    local rc=$?
    [ $rc = 2 ] || fail "$2 is a FIFO: exit $rc, expected 2 (124: it blocked)"
    grep -q -- "$2: not a regular file" "$D/err" || fail "$2 is a FIFO: message: $(cat "$D/err")"
}
mkdir "$D/fifojournal" && mkfifo "$D/fifojournal/journal.sqlite"
expect2_fifo "$D/fifojournal" "$D/fifojournal/journal.sqlite"
expect2_fifo "$D/fifojournal/journal.sqlite" "$D/fifojournal/journal.sqlite"
cp -r "$D/ok" "$D/fifowal" && mkfifo "$D/fifowal/journal.sqlite-wal"
expect2_fifo "$D/fifowal" "$D/fifowal/journal.sqlite-wal"
# agent.sqlite as a FIFO: the report goes on without the agent's data
cp -r "$D/ok" "$D/fifoagent" && mkfifo "$D/fifoagent/agent.sqlite"
timeout 10 "$FB" report "$D/fifoagent" >"$D/out" 2>"$D/err" ||
    fail "agent.sqlite a FIFO: exit $? (124: it blocked)"
grep -q "agent.sqlite: not a regular file" "$D/out" || fail "agent.sqlite a FIFO: not said"

# The HTML file cannot be written.
"$FB" report "$D/ok" --html "$D/no/such/dir/r.html" >/dev/null 2>"$D/err"
[ $? = 2 ] || fail "unwritable --html should exit 2"
grep -q "r.html" "$D/err" || fail "unwritable --html: message"
echo "report_errors: ok"
