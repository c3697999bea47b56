#!/usr/bin/env bash
# A rank exiting with an error code is a failure (error_exit) with its code.
source "$(dirname "$0")/lib.sh"
"$FB" run --nproc-per-node 2 --max-restarts 1 --json \
    --inject 'exit:rank=1,step=4,code=7' -- "$RANK" --steps 10 --sleep-ms 5 "$TAG" \
    >out.json 2>err.txt || fail "run exited $?"
[ "$(json_field out.json '["incidents"][0]["kind"]')" = error_exit ] || fail "kind"
[ "$(q "select exit_code||':'||rank||':'||step from incident")" = "7:1:4" ] || fail "row"
# --json carries the root cause as the report decides it
[ "$(json_field out.json '["incidents"][0]["decided_by"]')|$(json_field out.json '["incidents"][0]["injected"]')" \
    = "injected|exit:rank=1,step=4" ] || fail "--json root cause: $(tail -1 out.json)"
ok "error exit recorded with its code and restarted"
# A rank's last lines reach the console with control bytes as '?': an
# escape sequence in its output cannot drive the operator's terminal.
printf '#!/bin/sh\nprintf "boom \\033[2J\\033]0;owned\\007 done\\n"\nexit 3\n' > esc.sh
chmod +x esc.sh
"$FB" run --max-restarts 0 --run-dir esc-run --json -- ./esc.sh >esc.json 2>err.txt && fail "esc.sh run succeeded"
c=$(python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print([(i["category"], i["component"], i["decided_by"], i["injected"]) for i in d["incidents"]])' esc.json)
[ "$c" = "[('Dependency', 'Software bug', 'exit_code', None)]" ] || fail "--json root cause of exit 3: $c"
grep -q 'boom ?\[2J?\]0;owned? done' err.txt || fail "last line not shown safely: $(cat -v err.txt)"
! grep -q $'\033' err.txt || fail "an escape byte reached the console: $(cat -v err.txt)"
ok "a rank's last lines are shown without control bytes"
