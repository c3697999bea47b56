#!/usr/bin/env bash
# summary.sh RESULTS -- the last step of `make bench` (ctest's cleanup of
# the bench_results fixture): one table of every target the benchmarks
# recorded (bench/bench_result.h, bench/result.sh), its measured value and
# its baseline from the same run; exit 1 when any was missed, or when no
# benchmark recorded anything.  With --reset: empty the file (the
# fixture's setup).  With --elapsed SECONDS (make bench, after the whole
# label ran): one more row, the whole run's time against issue 14's 20
# minutes.
if [ "${1:-}" = --reset ]; then
    : >"$2"
    exit 0
fi
elapsed=
if [ "${1:-}" = --elapsed ]; then
    case ${2:-} in
    '' | *[!0-9]*) echo "bench summary: --elapsed wants whole seconds, not '${2:-}'" >&2; exit 2 ;;
    esac
    elapsed=$2
    shift 2
fi
f=$1
if [ ! -s "$f" ]; then
    echo "bench summary: no target recorded in $f"
    exit 1
fi
awk -F '\t' -v elapsed="$elapsed" '
    { n++; b[n] = $1; w[n] = $2; m[n] = $3; base[n] = $4; t[n] = $5; s[n] = $6
      if ($6 != "met") missed++ }
    END {
        if (elapsed != "") {
            n++; b[n] = "make bench"; w[n] = "the whole run, every benchmark"
            m[n] = sprintf("%.1f min", elapsed / 60); base[n] = "-"; t[n] = "< 20 min"
            s[n] = elapsed < 1200 ? "met" : "MISSED"
            if (s[n] != "met") missed++
        }
        printf "\n%-22s | %-58s | %-28s | %-34s | %-14s | %s\n", "benchmark", "target", "measured", "baseline (same run)", "goal", ""
        for (i = 1; i <= n; i++)
            printf "%-22s | %-58s | %-28s | %-34s | %-14s | %s\n", b[i], w[i], m[i], base[i], t[i], s[i]
        printf "\n%d targets, %d missed\n", n, missed
        exit missed > 0
    }' "$f"
