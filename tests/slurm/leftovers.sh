#!/usr/bin/env bash
# leftovers.sh FIREBREAK SRCDIR -- lib.sh's check for processes a test
# leaves behind sees that test's processes and no one else's:
#   1. a test that leaves one of its processes running (a toy trainer in a
#      session of its own, as an orphan would be) fails, the message names
#      that process, and it is gone afterwards;
#   2. a test that runs a job under the slurm launcher and leaves nothing
#      passes, while a firebreak of the same build, started outside the
#      test (another person's run), goes on beside it.
# Each case is this script again, as a test of its own (`inner`) that
# sources lib.sh and brings up its cluster.
set -euo pipefail
FB=$1
SRC=$2

if [ "${3:-}" = inner ]; then
    source "$(dirname "$0")/lib.sh"
    case $4 in
    plant)
        setsid "$TOY" --steps 1000000 --sleep-ms 100 --ckpt-every 0 --run-dir "$T/plant" \
            </dev/null >/dev/null 2>&1 &
        echo "planted $!" ;;
    clean)
        salloc -Q -N2 "$FB" run --launcher slurm --run-dir "$T/r" --json -- \
            "$TOY" --steps 20 --sleep-ms 5 >r.json 2>r.err || fail "run exited $?"
        [ "$(json_field r.json '["completed"]')" = True ] || fail "run not completed" ;;
    esac
    exit 0
fi

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }
BIN=$(dirname "$FB")
TOY=$BIN/fb-toy-train
O=$(mktemp -d /tmp/fb-slurm-leftovers.XXXXXX)
outsider=
planted=
finish() {
    local rc=$?
    [ -z "$outsider" ] || { kill "$outsider" 2>/dev/null; wait "$outsider" 2>/dev/null; } || true
    [ -z "$planted" ] || kill -9 "$planted" 2>/dev/null || true
    rm -rf "$O"
    exit $rc
}
trap finish EXIT
trap 'exit 143' TERM INT HUP

# 1. A process of the test left running.
rc=0
bash "$0" "$FB" "$SRC" inner plant >"$O/plant.out" 2>"$O/plant.err" || rc=$?
planted=$(sed -n 's/^planted //p' "$O/plant.out")
[ -n "$planted" ] || fail "nothing planted: $(cat "$O/plant.out" "$O/plant.err")"
[ $rc = 1 ] || fail "a test that left pid $planted running exited $rc: $(cat "$O/plant.err")"
grep -q "processes left behind" "$O/plant.err" || fail "no leftovers message: $(cat "$O/plant.err")"
grep -Eq "^ *$planted .*fb-toy-train" "$O/plant.err" || fail "pid $planted not named: $(cat "$O/plant.err")"
for _ in $(seq 1 20); do kill -0 "$planted" 2>/dev/null || break; sleep 0.1; done
kill -0 "$planted" 2>/dev/null && fail "the planted pid $planted still runs"
planted=
ok "a process the test left running: the test fails, names it and stops it"

# 2. Someone else's firebreak of the same build, running beside the test.
"$FB" run --run-dir "$O/other" -- "$TOY" --steps 1000000 --sleep-ms 50 --ckpt-every 0 \
    >"$O/other.out" 2>"$O/other.err" &
outsider=$!
for _ in $(seq 1 100); do [ -s "$O/other/logs/rank-0.log" ] && break; sleep 0.1; done
[ -s "$O/other/logs/rank-0.log" ] || fail "the outside run did not start: $(cat "$O/other.err")"
rc=0
bash "$0" "$FB" "$SRC" inner clean >"$O/clean.out" 2>"$O/clean.err" || rc=$?
[ $rc = 0 ] || fail "a test that left nothing exited $rc beside another run: $(tail -n 20 "$O/clean.err")"
kill -0 "$outsider" || fail "the outside run ended: $(tail -n 5 "$O/other.err")"
ok "a clean test passes beside another firebreak of the same build"
