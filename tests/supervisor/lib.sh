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

cleanup() {
    local rc=$?
    local left
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
}
