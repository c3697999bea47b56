# result.sh -- sourced by the shell benchmarks: bench_target records one
# target in the results file `make bench` ends with (bench_result.h has
# the format; bench/summary.sh prints the table).
#   bench_target BENCH WHAT MEASURED BASELINE TARGET MET   (MET: 1 or 0)
# Returns 0 when met, 1 when not.
bench_target() {
    local status=met
    [ "$6" = 1 ] || status=MISSED
    if [ -n "${FB_BENCH_RESULTS:-}" ]; then
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$status" \
            >>"$FB_BENCH_RESULTS"
    fi
    [ "$status" = met ]
}
