# fb-train-mlp on 2 ranks, killed twice (rank 1 at step 35, then rank 0 at
# step 47 of the resumed run) and restored from its checkpoints each time:
# it ends with weights bit-identical to an uninterrupted run.  Saves are
# asynchronous, so a rank killed soon after a save may not have committed
# it: each attempt resumes from some checkpoint at or before the kill.
mlp=$1 mpirun=$2
. "$(dirname "$0")/lib.sh" "$3"

opts=(--steps 60 --hidden 32 --batch 16 --log-every 20 --ckpt-every 10)
run() { # DIR LOG [INJECT]
    FIREBREAK_INJECT=${3:-} timeout -k 5 60 "$mpirun" -np 2 "$mlp" "${opts[@]}" \
        --ckpt-dir "$1/ckpt" --hash-out "$1/final_hash" >"$1/$2" 2>&1
}
mkdir -p "$T/ref" "$T/faulty"
run "$T/ref" run.log || fail "uninterrupted run exited $?: $(tail -n 5 "$T/ref/run.log")"
run "$T/faulty" a.log "kill:rank=1,step=35" &&
    fail "the run with rank 1 killed at step 35 exited 0"
[ -e "$T/faulty/final_hash" ] && fail "a killed run wrote final_hash"
run "$T/faulty" b.log "kill:rank=0,step=47" &&
    fail "the run with rank 0 killed at step 47 exited 0"
resumed_at() { # LOG: the step an attempt resumed after
    sed -n 's/.*resuming after step \([0-9]*\)$/\1/p' "$1"
}
b=$(resumed_at "$T/faulty/b.log")
case "$b" in 10|20|30) ;; *) fail "second attempt did not resume from a checkpoint of steps 10-30: $(head -n 3 "$T/faulty/b.log")" ;; esac
run "$T/faulty" c.log || fail "third attempt exited $?: $(tail -n 5 "$T/faulty/c.log")"
c=$(resumed_at "$T/faulty/c.log")
[ -n "$c" ] && [ "$c" -ge "$b" ] && [ "$c" -le 40 ] ||
    fail "third attempt did not resume from a checkpoint of steps $b-40: $(head -n 3 "$T/faulty/c.log")"
want=$(cat "$T/ref/final_hash") got=$(cat "$T/faulty/final_hash")
[ -n "$want" ] && [ "$want" = "$got" ] ||
    fail "restored run ended with $got, uninterrupted run with $want"
[ "$(hash_of "$T/faulty/c.log")" = "$got" ] || fail "printed hash != final_hash file"
echo "ok: killed twice, resumed after steps $b and $c, final_hash $got matches"
