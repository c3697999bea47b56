#!/bin/bash
# firebreak fr analyze at scale, for correctness: one dump whose group lists
# RANKS ranks (default 1,000,000; rank 0 waits in all_reduce #5 and no other
# rank's dump is there), and one dump in GROUPS groups of two (default
# 20,000; nothing wrong in it, the other ranks missing).  Not timed: the
# ctest TIMEOUT is a hang guard (the culprit step used to be quadratic in
# the ranks: minutes at 1M).  Times are bench/fr's fr_bench_wide.
set -u
FB=$1 GEN=$2 RANKS=${3:-1000000} NGROUPS=${4:-20000}
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
python3 "$GEN" "$T/wide" --wide "$RANKS" || exit 1
"$FB" fr analyze "$T/wide" --json >"$T/out" 2>"$T/err"; rc=$?
python3 - "$T/out" "$rc" "$RANKS" <<'PY' || fail=1
import json, sys
path, rc, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = json.loads(open(path).read().splitlines()[-1])
want = list(range(1, n))
miss = [f for f in d["findings"] if f["kind"] == "missing_ranks"]
dump = [f for f in d["findings"] if f["kind"] == "missing_dump"]
checks = {
    "rc 1": rc == 1,
    "verdict hang": d["verdict"] == "hang",
    "culprits 1..n-1": d["culprits"] == want,
    "summary names the range": f"ranks 1-{n - 1}" in d["summary"],
    "missing_ranks finding": len(miss) == 1 and miss[0]["ranks"] == want
                             and miss[0]["seq"] == 5,
    "missing_dump finding": len(dump) == 1 and dump[0]["ranks"] == want,
    "missing_count": d["missing_count"] == n - 1,
    "missing_ranks compact": d["missing_ranks"] == f"1-{n - 1}",
    "world_size": d["world_size"] == n,
}
bad = [k for k, v in checks.items() if not v]
print(("FAIL " + ", ".join(bad) if bad else "ok  ") +
      f" wide {n}: rc {rc} {d['verdict']} {len(d['culprits'])} culprits: {d['summary'][:200]}")
sys.exit(1 if bad else 0)
PY
# the text report stays a few short lines
"$FB" fr analyze "$T/wide" >"$T/text" 2>&1
grep -q "^culprit ranks: 1-$((RANKS - 1))$" "$T/text" &&
  [ "$(wc -c <"$T/text")" -lt 4000 ] ||
  { echo "FAIL wide text report:"; head -c 2000 "$T/text"; fail=1; }
rm -rf "$T/wide"

python3 "$GEN" "$T/groups" --groups "$NGROUPS" || exit 1
"$FB" fr analyze "$T/groups" --json >"$T/out" 2>"$T/err"; rc=$?
python3 - "$T/out" "$rc" "$NGROUPS" <<'PY' || fail=1
import json, sys
path, rc, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = json.loads(open(path).read().splitlines()[-1])
kinds = sorted({f["kind"] for f in d["findings"]})
ok = (rc == 2 and d["verdict"] == "incomplete" and d["culprits"] == []
      and d["missing_count"] == n and d["missing_ranks"] == f"1-{n}"
      and kinds == ["missing_dump"] and d["events"] == 2 * n)
print(("ok  " if ok else "FAIL") + f" groups {n}: rc {rc} {d['verdict']} "
      f"{kinds}: {d['summary']}")
sys.exit(0 if ok else 1)
PY
exit $fail
