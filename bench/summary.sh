#!/usr/bin/env bash
# summary.sh RESULTS -- the last step of `make bench` (ctest's cleanup of
# the bench_results fixture): one table of every target the benchmarks
# recorded (bench/bench_result.h, bench/result.sh), its measured value and
# its baseline from the same run; exit 1 when any was missed, or when no
# benchmark recorded anything.  With --reset: empty the file (the
# fixture's setup).
if [ "${1:-}" = --reset ]; then
    : >"$2"
    exit 0
fi
f=$1
if [ ! -s "$f" ]; then
    echo "bench summary: no target recorded in $f"
    exit 1
fi
awk -F '\t' '
    { n++; b[n] = $1; w[n] = $2; m[n] = $3; base[n] = $4; t[n] = $5; s[n] = $6
      if ($6 != "met") missed++ }
    END {
        printf "\n%-22s | %-58s | %-28s | %-34s | %-14s | %s\n", "benchmark", "target", "measured", "baseline (same run)", "goal", ""
        for (i = 1; i <= n; i++)
            printf "%-22s | %-58s | %-28s | %-34s | %-14s | %s\n", b[i], w[i], m[i], base[i], t[i], s[i]
        printf "\n%d targets, %d missed\n", n, missed
        exit missed > 0
    }' "$f"
