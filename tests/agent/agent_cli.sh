#!/bin/bash
# agent_cli.sh FIREBREAK FIXTURES -- `firebreak agent` refuses what it
# cannot start with: exit 2 and a message naming the option or file, for
# usage errors, a --root that is not there, a bad --listen and a FIFO as
# its database (which must not block it).
set -u
fb=$1 fx=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# expect CODE PATTERN ARGS...: exit CODE within 10 s, stderr matching PATTERN
expect() {
    local want=$1 pat=$2
    shift 2
    timeout 10 "$fb" agent "$@" >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ $rc = "$want" ] || fail "agent $*: exit $rc, want $want ($(head -c 300 "$tmp/err"))"
    grep -q -- "$pat" "$tmp/err" || fail "agent $*: stderr lacks '$pat': $(head -c 300 "$tmp/err")"
}
expect 2 "unknown argument '--bogus'" --bogus x
expect 2 "interval" --interval 0s
expect 2 "straggler-ratio" --straggler-ratio 0.5
expect 2 "/nonexistent/root" --root /nonexistent/root --once --quiet
expect 2 "$fx/healthy/sys/class" --root "$fx/healthy/sys/class/x" --once --quiet
: >"$tmp/file"
expect 2 "$tmp/file" --root "$tmp/file" --once --quiet
expect 2 "'bogus'" --listen bogus --root "$fx/healthy" --duration 1s --quiet
# a bad --listen is refused before anything starts: its error is the only
# line (not after NVML's "GPU metrics off"), with --once too
expect 2 "'127.0.0.1:99999'" --listen 127.0.0.1:99999 --once
[ "$(wc -l <"$tmp/err")" = 1 ] || fail "--listen error is not the only line: $(head -c 300 "$tmp/err")"
expect 2 "'localhost' is not an IPv4" --listen localhost:9400
[ "$(wc -l <"$tmp/err")" = 1 ] || fail "--listen error is not the only line: $(head -c 300 "$tmp/err")"
# --run that is no directory: said first and alone (it was SQLite's
# "unable to open database file" after the NVML line)
expect 2 "--run $tmp/nope: No such file or directory (give the run directory" --run "$tmp/nope" --once
[ "$(wc -l <"$tmp/err")" = 1 ] || fail "--run error is not the only line: $(head -c 300 "$tmp/err")"
expect 2 "--run $tmp/file: not a directory" --run "$tmp/file" --once --listen none
mkfifo "$tmp/fifo.sqlite"
expect 2 "$tmp/fifo.sqlite" --db "$tmp/fifo.sqlite" --listen none \
    --root "$fx/healthy" --duration 1s --quiet
# and what works still exits 0
timeout 10 "$fb" agent --root "$fx/healthy" --once --quiet >"$tmp/m" 2>"$tmp/err" \
    || fail "agent --once on a fixture: exit $? ($(head -c 300 "$tmp/err"))"
grep -q '^firebreak_agent_up 1' "$tmp/m" || fail "--once printed no metrics"
# ":PORT" binds loopback, and the address said is loopback's (it was
# "http://:PORT/metrics"); --port-file at a FIFO is refused, not replaced
timeout 10 "$fb" agent --root "$fx/healthy" --listen :0 --duration 1s \
    --db "$tmp/a.sqlite" >/dev/null 2>"$tmp/err" || fail "--listen :0: exit $?"
grep -q "serving http://127.0.0.1:[0-9]*/metrics" "$tmp/err" || fail "--listen :0: $(cat "$tmp/err")"
mkfifo "$tmp/port.fifo"
expect 2 "--port-file $tmp/port.fifo: not a regular file" --root "$fx/healthy" \
    --listen 127.0.0.1:0 --port-file "$tmp/port.fifo" --duration 1s --db "$tmp/b.sqlite"
[ -p "$tmp/port.fifo" ] || fail "--port-file replaced the FIFO"
[ $fails = 0 ] && echo "agent_cli: ok"
exit $fails
