#!/usr/bin/env bash
# A rank exiting with an error code is a failure (error_exit) with its code.
source "$(dirname "$0")/lib.sh"
"$FB" run --nproc-per-node 2 --max-restarts 1 --json \
    --inject 'exit:rank=1,step=4,code=7' -- "$RANK" --steps 10 --sleep-ms 5 "$TAG" \
    >out.json 2>err.txt || fail "run exited $?"
[ "$(json_field out.json '["incidents"][0]["kind"]')" = error_exit ] || fail "kind"
[ "$(q "select exit_code||':'||rank||':'||step from incident")" = "7:1:4" ] || fail "row"
ok "error exit recorded with its code and restarted"
