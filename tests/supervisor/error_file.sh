#!/usr/bin/env bash
# TORCHELASTIC_ERROR_FILE, torchrun's per-rank contract: each rank gets its
# own path; a failed rank's exception (PyTorch's @record writes it there)
# joins the incident's detail with the user's file:line.  The file is the
# rank's: a link, a file too large or not JSON is not taken.
source "$(dirname "$0")/lib.sh"

detail() { q "select detail from incident"; }

# A rank that writes the file the way torch's @record does, then fails.
cat >"$T/rank.sh" <<'SH'
#!/bin/bash
# TAG
case "$MODE" in
json)   printf '{"message": {"message": "RuntimeError: CUDA out of memory\\nmore", "extraInfo": {"py_callstack": "Traceback (most recent call last):\\n  File \\"/home/u/train.py\\", line 88, in <module>\\n    main()\\n  File \\"/usr/lib/python3/dist-packages/torch/x.py\\", line 346, in wrapper\\n  File \\"/home/u/model.py\\", line 12, in forward\\n    y = f(x)\\n  File \\"/usr/lib/python3/dist-packages/torch/nn/y.py\\", line 5, in f\\nRuntimeError: CUDA out of memory\\n", "timestamp": "1"}}}' >"$TORCHELASTIC_ERROR_FILE" ;;
link)   echo '{"message": "secret"}' >"$TMPD/other.json"; ln -s "$TMPD/other.json" "$TORCHELASTIC_ERROR_FILE" ;;
big)    head -c 300000 /dev/zero | tr '\0' ' ' >"$TORCHELASTIC_ERROR_FILE" ;;
bad)    echo 'not json' >"$TORCHELASTIC_ERROR_FILE" ;;
esac
[ "$RANK" = 1 ] && exit 3
sleep 30
SH
sed -i "s/TAG/$TAG/" "$T/rank.sh"; chmod +x "$T/rank.sh"

run() { # MODE
    rm -rf runs
    MODE=$1 TMPD=$T "$FB" run --nproc-per-node 2 --max-restarts 0 --grace 1 -- "$T/rank.sh" \
        >/dev/null 2>err.txt && fail "$1: run succeeded"
    [ "$(q "select rank from incident")" = 1 ] || fail "$1: incident: $(q 'select * from incident')"
}
run json
[ "$(detail)" = "rank 1 exited with code 3; not attached to firebreak, so its step is unknown; RuntimeError: CUDA out of memory at /home/u/model.py:12 in forward" ] ||
    fail "detail: $(detail)"
f=$(run_dir)logs/error-attempt-0-rank-1.json
[ -f "$f" ] || fail "no per-rank error file at $f: $(ls "$(run_dir)logs")"
for m in link big bad; do
    run $m
    [ "$(detail)" = "rank 1 exited with code 3; not attached to firebreak, so its step is unknown" ] ||
        fail "$m: taken: $(detail)"
    grep -q "rank 1's error file .*error-attempt-0-rank-1.json" err.txt || fail "$m: not logged: $(cat err.txt)"
done

# The real thing: Debian's torch 1.13 and its @record.
if /usr/bin/python3 -c 'import torch.distributed.elastic.multiprocessing.errors' 2>/dev/null; then
    cat >"$T/rec_$TAG.py" <<'PY'
import os, time
from torch.distributed.elastic.multiprocessing.errors import record

def step(x):
    raise ValueError(f"loss is nan at step {x}")

@record
def main():
    if os.environ["RANK"] == "1":
        step(7)
    time.sleep(30)

if __name__ == "__main__":
    main()
PY
    rm -rf runs
    "$FB" run --nproc-per-node 2 --max-restarts 0 --grace 1 -- /usr/bin/python3 "$T/rec_$TAG.py" \
        >/dev/null 2>err.txt && fail "torch: run succeeded"
    case "$(detail)" in
    *"; ValueError: loss is nan at step 7 at $T/rec_$TAG.py:5 in step") ;;
    *) fail "torch @record: $(detail)" ;;
    esac
fi
ok "TORCHELASTIC_ERROR_FILE per rank; the exception and the user's line in the incident"
