#!/bin/bash
# Point-to-point pairing in firebreak fr analyze: PyTorch dumps that
# dropped their oldest entries (pairs counted from a dump's first entry
# are aligned by p2p_seq_id; no rank is blamed when they cannot be), and a
# send/recv pair both sides entered and neither completed (undecided, as
# for a collective: no culprit), in PyTorch dumps and firebreak rings.
set -u
FB=$1 GEN=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0

# dumps DIR SPEC: 2 ranks, rank 0 sends to rank 1.  SPEC (python):
# n (ops each), keep0 (rank 0's entries kept from), pend (first pending
# op), extra1 (recvs rank 1 posted past n), shift0 (added to rank 0's
# p2p_seq_id)
dumps() {
  python3 - "$1" "$2" <<'PY'
import json, os, sys
d, spec = sys.argv[1], dict(n=11, keep0=0, pend=10, extra1=0, shift0=0)
spec.update(eval("dict(%s)" % sys.argv[2]))
os.makedirs(d, exist_ok=True)
def e(rid, op, st, k):
    return {"record_id": rid, "pg_id": 0, "process_group": ["0", "default_pg"],
            "collective_seq_id": 0, "p2p_seq_id": k, "profiling_name": op,
            "time_created_ns": 1700000000000000000 + rid, "input_sizes": [[8]],
            "input_dtypes": ["Float"], "output_sizes": [[8]], "state": st,
            "retired": st == "completed", "is_p2p": True}
for r, op in ((0, "nccl:send 0->1"), (1, "nccl:recv 1<-0")):
    n = spec["n"] + (spec["extra1"] if r == 1 else 0)
    ents = [e(i, op, "completed" if i < spec["pend"] else "started",
              i + 1 + (spec["shift0"] if r == 0 else 0)) for i in range(n)]
    if r == 0:
        ents = ents[spec["keep0"]:]
    json.dump({"version": "2.10", "entries": ents,
               "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}}},
              open(f"{d}/nccl_trace_rank_{r}", "w"))
PY
}

# check NAME DIR VERDICT CULPRITS SUMMARY-PART
check() {
  local name=$1 d=$2 v=$3 c=$4 s=$5
  "$FB" fr analyze "$d" --json >"$T/out" 2>"$T/err"
  local rc=$?
  python3 - "$T/out" "$v" "$c" "$s" "$rc" "$name" <<'PY' || fail=1
import json, sys
path, v, c, s, rc, name = sys.argv[1:]
d = json.loads(open(path).read().splitlines()[-1])
ok = d["verdict"] == v and d["culprits"] == json.loads(c) and s in d["summary"]
ok = ok and int(rc) == (0 if v == "ok" else 1)
print(("ok  " if ok else "FAIL") + f" {name}: {d['verdict']} {d['culprits']} rc {rc}: {d['summary']}")
sys.exit(0 if ok else 1)
PY
}

# the last pair entered on both sides, neither completed
dumps "$T/stuck" ""
check torch-stuck-pair "$T/stuck" undecided '[]' "send and rank 1's recv #11 on default_pg were both entered and neither completed"
# rank 0's dump dropped its 5 oldest entries: still the same pair (it was
# "recv #11 has no matching send on rank 0", culprit 0)
dumps "$T/wrap" "keep0=5"
check torch-wrapped-stuck-pair "$T/wrap" undecided '[]' "recv #11 on default_pg were both entered"
grep -q 'older entries were dropped' "$T/out" || { echo "FAIL wrap: no warning"; fail=1; }
# wrapped, and rank 1 posted a 12th recv that rank 0 never sent: aligned by
# p2p_seq_id, rank 0 is still named
dumps "$T/wrapmiss" "keep0=5, pend=11, extra1=1"
check torch-wrapped-missing-send "$T/wrapmiss" hang '[0]' "recv #12 from rank 0 to rank 1 on default_pg (still pending) has no matching send on rank 0"
# wrapped, and the ids do not line up: the pair cannot be told, no culprit
dumps "$T/wrapodd" "keep0=5, shift0=1000"
check torch-wrapped-unaligned "$T/wrapodd" undecided '[]' "do not tell its pair"
# firebreak rings: rank 0's last send and rank 1's last recv both started
"$GEN" p2p_stuck "$T/ring" 4 >/dev/null || { echo "FAIL fr_gen p2p_stuck"; fail=1; }
check ring-stuck-pair "$T/ring" undecided '[]' "rank 0's send and rank 1's recv #2 on"
exit $fail
