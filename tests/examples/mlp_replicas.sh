# `firebreak ckpt verify --replicas` (docs/sdc.md) on fb-train-mlp's
# checkpoints, 3 ranks without a supervisor: a bit flipped in rank 1's
# replica of w1 after step 25 is saved into checkpoints 30 and 40, whose
# shards still verify against their own hashes; --replicas names rank 1
# and w1 there, passes steps 10 and 20, and calls the per-rank tensors
# (rng.state, data.cursor) per-rank state rather than failures.
mlp=$1 mpirun=$2 firebreak=$3
. "$(dirname "$0")/lib.sh" "$4"

FIREBREAK_INJECT='flip:rank=1,step=25,tensor=w1' timeout -k 5 60 "$mpirun" -np 3 \
    "$mlp" --steps 40 --hidden 32 --batch 16 --ckpt-every 10 --ckpt-keep 10 \
    --ckpt-dir "$T/ck" >"$T/run.log" 2>&1
grep -q "the ranks' weights differ at the end" "$T/run.log" ||
    fail "the flip did not make the replicas differ: $(tail -n 5 "$T/run.log")"
"$firebreak" ckpt verify "$T/ck" >"$T/plain.txt" 2>&1 ||
    fail "plain verify failed, the shards should verify: $(cat "$T/plain.txt")"
"$firebreak" ckpt verify "$T/ck" --replicas >"$T/rep.txt" 2>&1
rc=$?
[ $rc = 1 ] || fail "verify --replicas exited $rc, want 1: $(cat "$T/rep.txt")"
fails=$(grep '^FAIL' "$T/rep.txt" | sed 's/: replica differs from the majority (2 of 3 ranks).*//')
want="FAIL step 40 rank 1 tensor w1
FAIL step 30 rank 1 tensor w1"
[ "$fails" = "$want" ] || fail "failures: $fails; want: $want; output: $(cat "$T/rep.txt")"
grep -Eq '^step 20: replicas agree \([0-9]+ tensor\(s\) compared\)$' "$T/rep.txt" || fail "step 20: $(cat "$T/rep.txt")"
grep -q '^step 40: rng.state differs on every rank: per-rank state' "$T/rep.txt" ||
    fail "rng.state not called per-rank state: $(cat "$T/rep.txt")"
# One step, JSON, with the per-rank tensors named.
"$firebreak" ckpt verify "$T/ck" --replicas --step 30 --json --per-rank 'rng.*' \
    --per-rank data.cursor >"$T/rep.json" 2>&1
[ $? = 1 ] || fail "json: $(cat "$T/rep.json")"
python3 - "$T/rep.json" <<'PY' || fail "json: $(cat "$T/rep.json")"
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert d["replicas_ok"] is False and d["per_rank"] == 0, d
assert [(f["step"], f["rank"], f["tensor"]) for f in d["replica_failures"]] == [(30, 1, "w1")], d
PY
"$firebreak" ckpt verify "$T/ck" --replicas --step 20 >/dev/null 2>&1 ||
    fail "step 20 (before the flip) does not pass --replicas"
echo "ok: verify --replicas names rank 1's w1 in steps 30 and 40, passes 10 and 20"
