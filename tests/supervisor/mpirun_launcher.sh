#!/usr/bin/env bash
# --launcher mpirun: a rank SIGKILLed under mpirun is noticed through its
# pidfd, mpirun is stopped, the job restarts and completes.
source "$(dirname "$0")/lib.sh"
"$FB" run --launcher mpirun --nproc-per-node 3 --max-restarts 1 --json \
    --inject 'kill:rank=2,step=6' -- "$RANK" --steps 20 --sleep-ms 10 "$TAG" \
    >out.json 2>err.txt || fail "run exited $? ($(tail -5 err.txt))"
[ "$(json_field out.json '["completed"]')" = True ] || fail "not completed"
[ "$(json_field out.json '["incidents"][0]["rank"]')" = 2 ] || fail "rank"
[ "$(json_field out.json '["incidents"][0]["kind"]')" = crash ] || fail "kind"
[ "$(q "select count(*) from attempt")" = 2 ] || fail "attempts"
assert_no_segments
ok "mpirun launcher: crash of rank 2 detected and recovered"
