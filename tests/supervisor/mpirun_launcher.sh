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
rm -rf runs
# A rank that finalizes cleanly and then dies (SIGABRT in an exit handler) is
# still named, with its signal, from its own end record.
set +e
"$FB" run --launcher mpirun --nproc-per-node 3 --max-restarts 0 \
    -- "$RANK" --steps 5 --sleep-ms 5 --abort-after-finalize 1 "$TAG" >out.txt 2>err.txt
rc=$?
set -e
[ $rc = 1 ] || fail "abort after finalize: exit $rc"
[ "$(q "select kind||':'||rank||':'||signal||':'||phase from incident")" = "crash:1:6:done" ] \
    || fail "abort after finalize: $(q 'select kind,rank,signal,phase,detail from incident')"
ok "mpirun launcher: crash of rank 2 detected and recovered; abort after finalize named"
