#!/bin/bash
# help.sh BENCH...: every benchmark binary answers --help (exit 0, "usage:
# NAME" first) and refuses an option it does not take (exit 2, the usage
# on stderr), each time without measuring anything or writing a file: run
# in an empty directory, which must stay empty, and /dev/shm unchanged.
# (bench_ckpt and bench_tiers once took "--help" for their DIR, created
# it and ran the whole benchmark.)
set -u
work=$(mktemp -d /tmp/fb-bench-help.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail=0
shm_before=$(ls -A /dev/shm | sort)
for bin in "$@"; do
    name=$(basename "$bin")
    for arg in --help -h; do
        (cd "$work" && timeout 10 "$bin" $arg > "$work.out" 2> "$work.err")
        rc=$?
        first=$(head -n 1 "$work.out")
        case $first in
        "usage: $name"*) ;;
        *) echo "FAIL: $name $arg: first line '$first', not 'usage: $name ...'"; fail=1 ;;
        esac
        if [ "$rc" -ne 0 ] || [ "$(wc -l < "$work.out")" -lt 2 ]; then
            echo "FAIL: $name $arg exited $rc with $(wc -l < "$work.out") lines"
            fail=1
        fi
    done
    (cd "$work" && timeout 10 "$bin" --no-such-option > "$work.out" 2> "$work.err")
    rc=$?
    if [ "$rc" -ne 2 ] || ! grep -q "usage: $name" "$work.err"; then
        echo "FAIL: $name --no-such-option exited $rc (want 2 and the usage):"
        head -c 400 "$work.err"
        fail=1
    fi
    if [ -n "$(ls -A "$work")" ]; then
        echo "FAIL: $name left in its directory: $(ls -A "$work")"
        rm -rf "${work:?}"/* "${work:?}"/.[!.]* 2>/dev/null
        fail=1
    fi
done
rm -f "$work.out" "$work.err"
shm_after=$(ls -A /dev/shm | sort)
new=$(comm -13 <(echo "$shm_before") <(echo "$shm_after") | grep 'fb-bench' || true)
if [ -n "$new" ]; then
    echo "FAIL: left in /dev/shm: $new"
    fail=1
fi
[ $fail -eq 0 ] && echo "ok: $# benchmarks answer --help and refuse an unknown option"
exit $fail
