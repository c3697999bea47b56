#!/bin/bash
# Analysis of RANKS x ENTRIES generated firebreak rings (default 16,384 x
# 2,000; rank RANKS/3 never enters the last all_reduce): wall time and max
# RSS of `firebreak fr analyze`, beside the time to read the same bytes
# (cat > /dev/null) as the floor.  Also 1,024 x 2,000 PyTorch JSON and
# pickle dumps.  Files live in /dev/shm and are removed afterwards.
set -u
FB=$1 GEN=$2 TORCHGEN=$3 RANKS=${4:-16384} ENTRIES=${5:-2000}
D=$(mktemp -d /dev/shm/frbench.XXXXXX); trap 'rm -rf "$D"' EXIT
"$GEN" many "$D/rings" "$RANKS" "$ENTRIES" || exit 1
echo "generated $RANKS rings x $ENTRIES events: $(du -sh "$D/rings" | cut -f1)"
t0=$(date +%s.%N); cat "$D"/rings/* >/dev/null; t1=$(date +%s.%N)
/usr/bin/time -f "%e %M" -o "$D/time" "$FB" fr analyze "$D/rings" --json >"$D/out"
read -r secs rss_kb < <(tail -n 1 "$D/time")
PYTHONPATH=$(dirname "$0")/.. python3 - "$D/out" "$secs" "$rss_kb" "$t0" "$t1" "$RANKS" <<'PY'
import json, sys
from result import target
out, secs, rss, t0, t1, ranks = sys.argv[1:]
d = json.loads(open(out).read().splitlines()[-1])
secs, rss = float(secs), int(rss) / 1024
read = float(t1) - float(t0)
print(f"analysis: {secs:.2f} s (target < 10), max RSS {rss:.0f} MiB (target < 4096); "
      f"reading the files alone {read:.2f} s, ratio {secs / read:.1f}x")
print(f"verdict {d['verdict']} culprits {d['culprits'][:5]} ({d['events']} events)")
met = target("fr_bench_analyze", f"fr analyze, {ranks} rings x 2,000 events",
             f"{secs:.2f} s, {rss:.0f} MiB", f"reading the files {read:.2f} s",
             "< 10 s, < 4 GiB", secs < 10 and rss < 4096)
sys.exit(0 if d["culprits"] == [int(ranks) // 3] and met else 1)
PY
rc=$?
rm -rf "$D/rings"
for fmt in json p4; do
  python3 "$TORCHGEN" "$D/torch-$fmt" --many 1024 2000 $fmt || exit 1
  /usr/bin/time -f "%e %M" -o "$D/time" "$FB" fr analyze "$D/torch-$fmt" --json >"$D/out"
  read -r secs rss_kb < <(tail -n 1 "$D/time")
  echo "PyTorch $fmt dumps 1024 x 2000: $(du -sh "$D/torch-$fmt" | cut -f1), analysis $secs s, max RSS $((rss_kb / 1024)) MiB, verdict $(tail -n1 "$D/out" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["verdict"], d["culprits"])')"
  echo "  (PyTorch's own analyzer: torch 2.x is not installed here; no side-by-side time)"
  rm -rf "$D/torch-$fmt"
done
exit $rc
