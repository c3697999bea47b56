# fb-train-mlp on 2 ranks without the supervisor: the loss falls, and two
# runs with the same options end with the same weights hash.
mlp=$1 mpirun=$2
. "$(dirname "$0")/lib.sh" "$3"

opts=(--steps 60 --hidden 32 --batch 16 --log-every 20 --lr 0.01)
for i in 1 2; do
    timeout -k 5 60 "$mpirun" -np 2 "$mlp" "${opts[@]}" >"$T/run$i.log" 2>&1 ||
        fail "run $i exited $?: $(tail -n 5 "$T/run$i.log")"
done
cat "$T/run1.log"
line=$(grep '^loss .* fell by' "$T/run1.log") ||
    fail "no 'loss ... fell by' summary: the loss did not fall"
first=$(echo "$line" | awk '{print $2}')
last=$(echo "$line" | awk '{print $9}')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.85 * a) }' ||
    fail "loss fell too little: $first -> $last"
h1=$(hash_of "$T/run1.log") h2=$(hash_of "$T/run2.log")
[ -n "$h1" ] || fail "no final_hash line"
[ "$h1" = "$h2" ] || fail "two identical runs ended with different weights: $h1 $h2"
echo "ok: loss $first -> $last, hash $h1 stable"
