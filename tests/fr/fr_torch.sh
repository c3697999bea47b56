#!/bin/bash
# firebreak fr analyze over PyTorch flight-recorder dumps (JSON and pickle
# protocols 2-5, made by gen_torch.py): each scenario's verdict and culprits.
set -u
FB=$1 DATA=$2 GEN=$3
fail=0
check() { # DIR VERDICT CULPRITS [KIND] [WARNING]
  local d=$1 v=$2 c=$3 k=${4:-} w=${5:-}
  "$FB" fr analyze "$DATA/$d" --json >/tmp/fr_torch.$$ 2>&1
  local rc=$?
  python3 - /tmp/fr_torch.$$ "$v" "$c" "$k" "$w" "$rc" "$d" <<'PY' || fail=1
import json, sys
path, v, c, k, w, rc, name = sys.argv[1:]
d = json.loads(open(path).read().splitlines()[-1])
ok = d["verdict"] == v and d["culprits"] == json.loads(c)
ok = ok and int(rc) == (0 if v == "ok" else 1)
if k:
    ok = ok and any(f["kind"] == k and f["ranks"] == json.loads(c) for f in d["findings"])
if w:
    ok = ok and any(w in x for x in d["warnings"])
print(("ok  " if ok else "FAIL") + f" {name}: {d['verdict']} {d['culprits']}: {d['summary']}")
sys.exit(0 if ok else 1)
PY
}
for f in json p2 p3 p4 p5; do check hang-$f hang '[2]' missing_ranks; done
check hang_typed-p2 hang '[2]' missing_ranks
check type-json mismatch '[1]' type_mismatch
check type-p4 mismatch '[1]' type_mismatch
check size-json mismatch '[3]' size_mismatch
check size-p2 mismatch '[3]' size_mismatch
check dtype-p3 mismatch '[0]' dtype_mismatch
check allgather-json mismatch '[2]' size_mismatch
check p2p-p5 hang '[1]' p2p_mismatch
check subgroup-json hang '[2]'
check subgroup-p4 hang '[2]'
check straggler-json slow '[1]' late_ranks
check wrapped-p2 hang '[0]' missing_ranks 'older entries were dropped'
check versions-json hang '[3]' missing_ranks 'different dump versions'
check ok-json ok '[]'
check ok-p2 ok '[]'
# stack frames from the pickle name where the culprit was
grep -q "train.py:42 train_step" <<<"$("$FB" fr analyze "$DATA/hang-p2")" ||
  { echo "FAIL frames not shown"; fail=1; }
# a rank's dump missing is reported
T=$(mktemp -d); trap 'rm -rf "$T" /tmp/fr_torch.$$' EXIT
cp "$DATA"/hang-json/nccl_trace_rank_{0,1,3} "$T"/
"$FB" fr analyze "$T" --json | tail -1 | grep -q '"kind":"missing_dump"' ||
  { echo "FAIL missing dump"; fail=1; }
# mixed inputs: files given one by one, JSON and pickle together
"$FB" fr analyze "$DATA"/hang-json/nccl_trace_rank_{0,1} "$DATA"/hang-p4/nccl_trace_rank_{2,3} --json |
  tail -1 | grep -q '"culprits":\[2\]' || { echo "FAIL mixed formats"; fail=1; }
# truncated pickle: a clear error naming the file, exit 2
head -c 300 "$DATA/hang-p2/nccl_trace_rank_0" >"$T/nccl_trace_rank_9"
"$FB" fr analyze "$T/nccl_trace_rank_9" 2>"$T/err"; rc=$?
[ $rc -eq 2 ] && grep -q "nccl_trace_rank_9.*truncated" "$T/err" ||
  { echo "FAIL truncated pickle: rc $rc: $(cat "$T/err")"; fail=1; }
# the same rank read from a firebreak ring and a PyTorch dump: the one with
# entries wins over an empty one, in either order; of two with entries,
# firebreak's ring, in either order
"$GEN" empty "$T/empty" >/dev/null && "$GEN" ok "$T/ok" >/dev/null ||
  { echo "FAIL fr_gen"; fail=1; }
for order in "$T/empty $DATA/hang-json" "$DATA/hang-json $T/empty"; do
  "$FB" fr analyze $order --json | tail -1 | grep -q '"verdict":"hang","summary":"hang: rank 2 never' ||
    { echo "FAIL empty ring beside a dump ($order)"; fail=1; }
done
for order in "$T/ok $DATA/hang-json" "$DATA/hang-json $T/ok"; do
  "$FB" fr analyze $order --json | tail -1 | grep -q '"verdict":"ok"' ||
    { echo "FAIL ring and dump with entries ($order)"; fail=1; }
done
exit $fail
