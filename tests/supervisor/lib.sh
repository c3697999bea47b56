# Shared helpers for supervisor tests (sourced).
#   $FB    the firebreak binary        $RANK  the fb-test-rank binary
#   $TAG   a unique string in every process of this test (pgrep -f)
#   $T     a fresh temporary directory (removed on exit)
set -euo pipefail
FB=$1
BIN=$(dirname "$FB")
RANK=$BIN/fb-test-rank
TAG="fbtest-$$-$RANDOM"
T=$(mktemp -d /tmp/fb-sup-test.XXXXXX)
cd "$T"

leftovers() { pgrep -f -- "$TAG" | grep -v "^$$\$" || true; }

# Steps a test adds to the cleanup (`at_exit+=('rm -f "$x"')`), run first,
# each whatever the others did, on success and failure alike: a test never
# sets its own EXIT trap (one chained to cleanup under set -e ended before
# it on a failure, leaving $T and skipping the check below).
at_exit=()
cleanup() {
    local rc=$?
    local left c
    set +eu
    for c in "${at_exit[@]}"; do eval "$c"; done
    left=$(leftovers)
    if [ -n "$left" ]; then
        echo "FAIL: processes left behind:" >&2
        ps -o pid,ppid,stat,args -p $(echo $left | tr ' ' ',') >&2 || true
        kill -9 $left 2>/dev/null || true
        rc=1
    fi
    rm -rf "$T"
    exit $rc
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

# The run directory of the only run under runs/.
run_dir() { ls -d "$T"/runs/*/ | head -1; }

# Query the journal of the run directory.
q() { sqlite3 -batch -noheader "$(run_dir)/journal.sqlite" "$1"; }

# Last line of a file = the --json object.
json_field() { python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(eval("d"+sys.argv[2]))' "$1" "$2"; }

assert_no_segments() {
    local job
    job=$(cat "$(run_dir)/job")
    if ls /dev/shm | grep -q "^fb\.$job\."; then
        fail "segments (or Open MPI shared memory, fb.$job.ompi) of job $job left in /dev/shm"
    fi
    # A test giving its processes a TMPDIR of its own ($T/tmp) wants it empty.
    if [ "${TMPDIR:-}" = "$T/tmp" ] && [ -n "$(ls -A "$TMPDIR")" ]; then
        fail "left in TMPDIR: $(cd "$TMPDIR" && find . | head -5 | tr '\n' ' ')"
    fi
}

# assert_straggler NRANKS: the run under runs/ had rank 2 of NRANKS slowed
# (--inject slow:rank=2,step=5,...) and err.txt is its stderr: rank 2 is
# named a straggler on this host (incident, injected fault, console
# warning, lateness.prom; the others not) and the job went on.
assert_straggler() {
    local got prom
    got=$(q "select kind||':'||rank||':'||node from incident")
    [ "$got" = "straggler:2:$(hostname)" ] || fail "incidents: $got
$(q 'select kind,rank,detail from incident')
$(q "select kind,rank,detail from event where kind like 'late%' or kind like 'strag%'")"
    [ "$(q "select injected from incident")" = "slow:rank=2,step=5" ] ||
        fail "injected: $(q 'select injected from incident')"
    grep -q "straggler: rank 2 late by" err.txt || fail "no warning on the console: $(tail -5 err.txt)"
    grep -q "completed after 1 attempt" err.txt || fail "the job did not go on: $(tail -3 err.txt)"
    prom="$(run_dir)/lateness.prom"
    grep -q '^firebreak_rank_lateness_straggler{job_id="[^"]*",rank="2"} 1$' "$prom" ||
        fail "lateness.prom: $(cat "$prom")"
    [ "$(grep -c '^firebreak_rank_lateness_straggler{.*} 0$' "$prom")" = $(($1 - 1)) ] ||
        fail "lateness.prom, the others: $(cat "$prom")"
}
