# Helpers of the checkpoint-tier tests (sourced by tests/supervisor/tiers.sh
# and tests/slurm/tiers.sh): the journal of a run directory, the tier each
# rank restored from, and whether a file was read since it was written.
jq1() { sqlite3 -batch -noheader "$1/journal.sqlite" "$2"; }
# restore_done's tier per rank in attempt 1: "0:memory,1:memory"
sources() {
    jq1 "$1" "select group_concat(rank||':'||coalesce(source,'NULL'), ',') from
              (select e.rank, e.source from event e join attempt a on a.id = e.attempt_id
               where a.number = 1 and e.kind = 'restore_done' order by e.rank)"
}
# What a test prints when `sources` is not what it wants: the attempts,
# attempt 1's events and the end of every rank's log (stderr).
restores_dump() {
    {
        echo "--- $1: attempts"
        sqlite3 -header "$1/journal.sqlite" "select number, started_at, ready_at,
            ended_at, restored_step, end_step, outcome from attempt" || true
        echo "--- $1: events of attempt 1"
        sqlite3 -header "$1/journal.sqlite" "select e.time, e.rank, e.kind, e.step,
            e.code, e.source, e.detail from event e join attempt a on a.id = e.attempt_id
            where a.number = 1 order by e.time" || true
        local log
        for log in "$1"/logs/*.log; do
            [ -f "$log" ] || continue
            echo "--- $log (last 15 lines)"
            tail -n 15 "$log"
        done
    } >&2
}
# want_sources RUNDIR WANT WHAT: fail, after the dump above, unless
# attempt 1's ranks restored from WANT ("0:memory,1:storage").
want_sources() {
    local got
    got=$(sources "$1")
    [ "$got" = "$2" ] || { restores_dump "$1"; fail "$3: restored from '$got', wanted '$2'"; }
}
# Seconds since a file was last read is not what we want: whether it was
# read at all since it was written.  With relatime, the first read after a
# write moves atime past mtime; a file never read keeps atime <= mtime.
never_read() {
    python3 - "$@" <<'EOF'
import os, sys
bad = [p for p in sys.argv[1:] if os.stat(p).st_atime_ns > os.stat(p).st_mtime_ns]
sys.exit(1 if bad else 0)
EOF
}
atime_works() {
    echo x >probe; sleep 0.05; echo y >>probe; sleep 0.05
    never_read probe || return 1
    cat probe >/dev/null
    ! never_read probe
}
