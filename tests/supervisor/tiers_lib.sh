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
