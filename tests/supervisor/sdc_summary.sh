#!/usr/bin/env bash
# The SDC check's summary (docs/sdc.md) when pieces cannot be compared:
# rank 2 of 3 publishes pieces no other rank does, so nothing is compared
# and the pending pieces are dropped; the summary says how many records
# were overwritten before they were read (none, unless the supervisor was
# held back for a second) and how many records each rank gave, rank 2 more
# than the others (3 pieces a step against 2).
source "$(dirname "$0")/lib.sh"
"$FB" run --nproc-per-node 3 --max-restarts 0 -- "$RANK" --steps 300 --sleep-ms 2 \
    --sdc 2 "$TAG" >out.txt 2>err.txt || fail "run exited $? ($(tail -3 err.txt))"
line=$(grep 'sdc check:' err.txt) || fail "no sdc check summary: $(tail -5 err.txt)"
echo "$line"
grep -q 'sdc check: 0 pieces compared across 3 ranks' <<<"$line" || fail "compared: $line"
grep -Eq '; [0-9]+ overwritten before read; records read per rank: ' <<<"$line" ||
    fail "no per-rank counts: $line"
over=$(sed -n 's/.*; \([0-9]*\) overwritten before read;.*/\1/p' <<<"$line")
read -r a b c < <(sed -n 's/.*records read per rank: \([0-9]*\) \([0-9]*\) \([0-9]*\)$/\1 \2 \3/p' <<<"$line")
[ -n "$c" ] && [ "$a" -gt 0 ] && { [ "$over" != 0 ] || { [ "$c" -gt "$a" ] && [ "$c" -gt "$b" ]; }; } ||
    fail "per-rank counts $a $b $c (rank 2 publishes 3 a step, the others 2)"
ok "nothing compared; records read per rank $a $b $c"
