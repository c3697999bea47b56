#!/bin/bash
# Real PyTorch dumps (tests/fr/data/torch_real/<torch version>/{json,pickle}/,
# made by tests/fr/torch_real/gen_real_dumps.py): rank 2 never entered the
# 5th all_reduce, so the verdict is a hang with exactly rank 2 at fault,
# the finding is missing_ranks at seq 5, and nothing is skipped; from the
# pickles, the call site named is the script's, not torch's.
set -u
FB=$1 DATA=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0 n=0
for d in "$DATA"/*/json "$DATA"/*/pickle; do
  [ -d "$d" ] || continue
  n=$((n + 1))
  "$FB" fr analyze "$d" --json >"$T/out" 2>"$T/err"
  rc=$?
  python3 - "$T/out" "$rc" "$d" <<'PY' || { fail=1; cat "$T/err"; }
import json, sys
path, rc, name = sys.argv[1:]
d = json.loads(open(path).read().splitlines()[-1])
f = [x for x in d["findings"] if x["kind"] == "missing_ranks"]
ok = (int(rc) == 1 and d["verdict"] == "hang" and d["culprits"] == [2]
      and d["ranks"] == 4 and len(f) == 1 and f[0]["ranks"] == [2]
      and f[0]["seq"] == 5 and f[0]["op"] == "all_reduce"
      and not any("skipped" in w for w in d["warnings"]))
# pickles carry stack frames: the call site is the first frame outside
# torch (the script's worker), not torch's own all_reduce wrapper
if name.endswith("pickle"):
    ok = ok and "gen_real_dumps.py:" in d["summary"] and "torch/distributed" not in d["summary"]
print(("ok  " if ok else "FAIL") + f" {name}: rc {rc} {d['verdict']} "
      f"{d['culprits']}: {d['summary']}")
sys.exit(0 if ok else 1)
PY
done
[ "$n" -ge 2 ] || { echo "FAIL no real dumps under $DATA"; fail=1; }
exit $fail
