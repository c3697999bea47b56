#!/bin/bash
# firebreak fr analyze reads a directory's files on several threads and
# adds them to the model in name order (docs/flight-recorder.md): the
# result must be the one a single thread gives, whatever the thread count.
# 129 rings (an odd count, more than the 64 files workers may run ahead)
# with unreadable files, a FIFO and a directory between them, whose
# warnings must keep their order.
set -u
FB=$1 GEN=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fail=0
"$GEN" many "$T/d" 129 20 >/dev/null || { echo "FAIL fr_gen"; exit 1; }
printf 'not a dump' >"$T/d/rank-50.junk"
printf '{"version": "2.10", "entries": [' >"$T/d/rank-7.json"
mkfifo "$T/d/rank-100.fifo"
mkdir "$T/d/rank-3.dir"
for n in 1 2 3 8; do
  FIREBREAK_FR_THREADS=$n "$FB" fr analyze "$T/d" --json >"$T/json.$n" 2>&1
  FIREBREAK_FR_THREADS=$n "$FB" fr analyze "$T/d" >"$T/text.$n" 2>&1
done
python3 - "$T/json.1" <<'PY' || fail=1
import json, sys
d = json.loads(open(sys.argv[1]).read().splitlines()[-1])
w = d["warnings"]
ok = (d["ranks"] == 129 and d["events"] == 129 * 20 - 1 and
      d["culprits"] == [43] and len(w) == 3 and
      "rank-100.fifo" in w[0] and "rank-50.junk" in w[1] and "rank-7.json" in w[2])
print(("ok  " if ok else "FAIL") + f" 1 thread: {d['ranks']} ranks, {d['events']} "
      f"events, culprits {d['culprits']}, warnings {w}")
sys.exit(0 if ok else 1)
PY
for n in 2 3 8; do
  for k in json text; do
    if cmp -s "$T/$k.1" "$T/$k.$n"; then
      echo "ok   $n threads: $k output as with 1"
    else
      echo "FAIL $n threads: $k output differs from 1 thread's"; diff "$T/$k.1" "$T/$k.$n" | head -5
      fail=1
    fi
  done
done
# a count that is not a whole number from 1 is said, and the default
# taken: the result is the one thread's
for v in abc 4x 0; do
  FIREBREAK_FR_THREADS=$v "$FB" fr analyze "$T/d" --json >"$T/json.bad" 2>"$T/err.bad"
  if grep -q "FIREBREAK_FR_THREADS='$v' is not a whole number" "$T/err.bad" &&
     cmp -s <(tail -n 1 "$T/json.1") "$T/json.bad"; then
    echo "ok   FIREBREAK_FR_THREADS=$v said, default taken"
  else
    echo "FAIL FIREBREAK_FR_THREADS=$v: $(head -c 300 "$T/err.bad")"; fail=1
  fi
done
exit $fail
