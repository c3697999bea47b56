# examples/ddp_train.py, 2 ranks started by hand with torchrun's environment
# (no supervisor): a first run of 40 steps leaves a checkpoint, a second run
# asked for 60 steps resumes from it and finishes.
script=$1 py=$2
. "$(dirname "$0")/lib.sh" "$3"

free_port() {
    "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
run_pair() { # STEPS LOGTAG [extra args]: both ranks, sets $codes
    local steps=$1 tag=$2 r
    shift 2
    export MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) WORLD_SIZE=2
    pids=()
    for r in 0 1; do
        RANK=$r LOCAL_RANK=$r timeout -k 5 60 "$py" "$script" --steps "$steps" \
            --ckpt-every 20 --log-every 10 --ckpt-dir "$T/ckpt" "$@" \
            >"$T/$tag.rank-$r.log" 2>&1 &
        pids+=($!)
    done
    wait_all
}

run_pair 40 first
[ "$codes" = "0 0" ] || fail "first run exit codes $codes: $(tail -n 5 "$T/first.rank-0.log")"
grep -q "starting fresh" "$T/first.rank-0.log" || fail "first run did not start fresh"
[ -s "$T/ckpt/ckpt.pt" ] || fail "no checkpoint at $T/ckpt/ckpt.pt"

run_pair 60 second
[ "$codes" = "0 0" ] || fail "second run exit codes $codes: $(tail -n 5 "$T/second.rank-0.log")"
grep -q "resuming from step 40" "$T/second.rank-0.log" ||
    fail "second run did not resume from step 40: $(head -n 3 "$T/second.rank-0.log")"
grep -q "step 60/60" "$T/second.rank-0.log" || fail "second run did not reach step 60"
grep -q "^final_hash=[0-9a-f]\{16\}$" "$T/second.rank-0.log" || fail "no final_hash line"
echo "ok: resumed from step 40 and finished"
