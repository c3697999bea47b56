#!/usr/bin/env bash
# An unmodified PyTorch DDP script (Debian's python3-torch, gloo on CPU,
# torchrun's environment contract) runs under firebreak and is restarted
# after one of its ranks is SIGKILLed.
source "$(dirname "$0")/lib.sh"
SRC=$2
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "SKIP: /usr/bin/python3 has no torch"; exit 0; }
cp "$SRC/examples/ddp_train.py" "$T/ddp_$TAG.py"
"$FB" run --nproc-per-node 2 --max-restarts 2 --json --inject 'kill:rank=1,after=3s' \
    -- /usr/bin/python3 "$T/ddp_$TAG.py" --steps 200 --sleep-ms 25 >out.json 2>err.txt \
    || fail "run exited $?: $(tail -5 err.txt)"
[ "$(json_field out.json '["completed"]')" = True ] || fail "not completed"
[ "$(json_field out.json '["restarts"]')" = 1 ] || fail "restarts: $(tail -1 out.json)"
[ "$(q "select kind||':'||rank||':'||signal from incident")" = "crash:1:9" ] || fail "incident: $(q 'select * from incident')"
grep -q "final_hash=" "$(run_dir)/logs/rank-0.log" || fail "rank 0 did not finish"
ok "unmodified PyTorch DDP job restarted after SIGKILL of rank 1"
