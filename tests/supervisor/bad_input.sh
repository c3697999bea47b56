#!/usr/bin/env bash
# Bad usage exits 2 with a message on stderr; a missing or non-executable
# program is refused before anything is launched.
source "$(dirname "$0")/lib.sh"
expect2() {
    set +e
    "$FB" run "$@" >out.txt 2>err.txt
    local rc=$?
    set -e
    [ $rc = 2 ] || fail "'run $*' exited $rc, want 2"
    [ -s err.txt ] || fail "'run $*': nothing on stderr"
    [ ! -s out.txt ] || fail "'run $*': wrote to stdout"
}
expect2 --bogus -- /bin/true
expect2 --nproc-per-node 0 -- /bin/true
grep -q "nproc-per-node" err.txt || fail "message does not name the option"
expect2 --hang-timeout abc -- /bin/true
grep -q "bad duration 'abc'" err.txt || fail "duration message"
expect2 --launcher pbs -- /bin/true
expect2 --inject 'explode:rank=1,step=2' -- /bin/true
grep -q "unknown fault kind 'explode'" err.txt || fail "inject message"
expect2
grep -q "no program given" err.txt || fail "no program message"
expect2 -- ./no-such-program
grep -q "no-such-program" err.txt || fail "missing program not named"
printf '#!/bin/sh\n' > notexec.sh
expect2 -- ./notexec.sh
grep -qi "permission denied" err.txt || fail "non-executable: $(cat err.txt)"
[ ! -d runs ] || fail "a run directory was created for bad input"
grep -q -- "--max-restarts" <<<"$("$FB" run --help)" || fail "--help"
ok "usage errors exit 2 with messages"
