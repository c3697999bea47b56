# fb-toy-train on 2 ranks started by hand (torchrun's RANK/WORLD_SIZE):
# rank 1 is SIGKILLed at step 17 while rank 0 runs on to step 30; the rerun
# restores both ranks from the newest checkpoint complete on every rank (15,
# or 10 when rank 1's asynchronous save of 15 had not committed) and ends
# with the per-rank hashes of an uninterrupted run.
toy=$1
. "$(dirname "$0")/lib.sh" "$2"

run_ranks() { # DIR LOGTAG [INJECT]: start both ranks, wait; sets $codes
    local dir=$1 tag=$2 inject=${3:-} r
    pids=()
    for r in 0 1; do
        RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r FIREBREAK_INJECT=$inject \
            "$toy" --steps 30 --ckpt-every 5 --sleep-ms 2 --state-kb 8 \
            --run-dir "$dir" >"$dir/$tag.rank-$r.log" 2>&1 &
        pids+=($!)
    done
    wait_all
}

mkdir -p "$T/ref" "$T/faulty"
run_ranks "$T/ref" ref
[ "$codes" = "0 0" ] || fail "uninterrupted run exit codes: $codes"

run_ranks "$T/faulty" first "kill:rank=1,step=17"
[ "$codes" = "0 137" ] || fail "injected run exit codes (want '0 137'): $codes"
[ -e "$T/faulty/final_hash.rank-1" ] && fail "killed rank 1 wrote a final hash"

run_ranks "$T/faulty" second
[ "$codes" = "0 0" ] || fail "restored run exit codes: $codes"
for r in 0 1; do
    grep -Eq "resuming after step (10|15)$" "$T/faulty/second.rank-$r.log" ||
        fail "rank $r did not resume after step 10 or 15: $(head -n 3 "$T/faulty/second.rank-$r.log")"
    want=$(cat "$T/ref/final_hash.rank-$r")
    got=$(cat "$T/faulty/final_hash.rank-$r")
    [ -n "$want" ] && [ "$want" = "$got" ] ||
        fail "rank $r: restored hash $got != uninterrupted $want"
    [ "$(hash_of "$T/faulty/second.rank-$r.log")" = "$want" ] ||
        fail "rank $r: printed final_hash differs from final_hash.rank-$r"
done
[ "$(grep -ho 'resuming after step [0-9]*' "$T"/faulty/second.rank-*.log | sort -u | wc -l)" = 1 ] ||
    fail "the ranks resumed from different steps"
[ "$(cat "$T/ref/final_hash.rank-0")" != "$(cat "$T/ref/final_hash.rank-1")" ] ||
    fail "both ranks ended with the same state: the rank is not mixed in"
echo "ok: restored hashes match ($(cat "$T/ref/final_hash.rank-0"), $(cat "$T/ref/final_hash.rank-1"))"
