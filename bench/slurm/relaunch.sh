#!/usr/bin/env bash
# relaunch.sh FIREBREAK SRCDIR -- on the local four-node cluster, one rank per
# node, a rank killed on a different node in each of 6 attempts:
#   death -> relaunch     the rank's death to the new srun step started
#                         (detection, stopping the other ranks, recording,
#                         checkpoint check, node choice, spawning srun);
#   supervisor's share    detected -> relaunched;
#   srun's launch         the new attempt's launch -> every rank's first step;
# beside the baseline: a plain `srun -N4 -n4` of the same program for one
# step in the same allocation (median of 5), and the ratio.
source "$2/tests/slurm/lib.sh"
inj=""
for a in $(seq 0 5); do inj="$inj--inject kill:rank=$((a % 4)),step=$((6 + a)),attempt=$a "; done
cat >job.sh <<EOS
#!/bin/bash
set -e
for i in 1 2 3 4 5; do
    s=\$(date +%s.%N)
    srun --overlap -N4 -n4 "$TOY" --steps 1 --sleep-ms 0 --ckpt-every 0 >/dev/null
    e=\$(date +%s.%N)
    echo "srun \$s \$e"
done >"$T/baseline.txt"
# shellcheck disable=SC2086
"$FB" run --quiet --launcher slurm --run-dir "$T/run" --max-restarts 8 --crash-loop 0 \
    $inj -- "$TOY" --steps 40 --sleep-ms 5 --ckpt-every 5 >/dev/null
EOS
chmod +x job.sh
salloc -Q -N4 ./job.sh || fail "the benchmark job failed"
python3 - "$T/run/journal.sqlite" "$T/baseline.txt" <<'PY'
import sqlite3, statistics, sys
db = sqlite3.connect(sys.argv[1])
att = {n: (l, r) for n, l, r in db.execute("select number, launched_at, ready_at from attempt")}
relaunch, share, detect, start = [], [], [], []
for n, occ, det, dms in db.execute(
        "select a.number, i.occurred_at, i.detected_at, i.detect_ms from incident i"
        " join attempt a on i.attempt_id = a.id where i.kind = 'crash'"):
    nxt = att.get(n + 1)
    if nxt and nxt[0]:
        relaunch.append((nxt[0] - occ) * 1e3)
        share.append((nxt[0] - det) * 1e3)
        detect.append(dms)
for n, (l, r) in att.items():
    if l and r:
        start.append((r - l) * 1e3)
base = [(float(e) - float(s)) * 1e3 for _, s, e in (l.split() for l in open(sys.argv[2]))]
m = statistics.median
if not relaunch or not start:
    sys.exit("no restart measured")
print(f"rank death -> relaunch across the allocation: median {m(relaunch):.1f} ms over "
      f"{len(relaunch)} restarts (min {min(relaunch):.1f}, max {max(relaunch):.1f})")
print(f"  detection: median {m(detect):.2f} ms; supervisor's share (detected -> "
      f"relaunched): median {m(share):.1f} ms")
print(f"srun's launch inside firebreak (launched -> every rank's first step): median "
      f"{m(start):.1f} ms")
print(f"baseline: plain srun -N4 -n4 of the same program, one step: median "
      f"{m(base):.1f} ms")
print(f"ratio supervisor's share / srun launch (baseline) = {m(share) / m(base):.2f}")
PY
