#!/bin/bash
# cli_usage FIREBREAK -- usage mistakes said as what they are: `help
# NOTACOMMAND` and `ckpt NOTASUBCOMMAND` (it said "missing DIR") exit 2
# naming the word, as does `ckpt verify --per-rank` without --replicas
# (it was ignored), and `watch --job` of something that is not a job id
# (it names /dev/shm paths; only --sweep checked it); slurm-epilog, run
# by slurmd as the Epilog, says a bad option or user id and exits 0 all
# the same (a failing Epilog drains the node), removing nothing it was
# not asked to.
set -u
fb=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# expect WANT_RC PATTERN ARGS...: exit WANT_RC, PATTERN on stderr
expect() {
    local want=$1 pat=$2 rc
    shift 2
    timeout 30 "$fb" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc = "$want" ] || fail "firebreak $*: exit $rc, want $want: $(head -c 300 "$tmp/err")"
    grep -q -- "$pat" "$tmp/err" || fail "firebreak $*: stderr lacks '$pat': $(head -c 300 "$tmp/err")"
}

expect 2 "unknown command 'bogus'" help bogus
expect 2 "unknown subcommand bogus (ls, verify, inspect)" ckpt bogus
expect 2 "unknown subcommand bogus" ckpt bogus "$tmp"
expect 2 "--per-rank goes with --replicas" ckpt verify "$tmp" --per-rank 'rng*'
expect 2 "--job: not a job id: ../../etc" watch --job ../../etc --attempt 0 \
    --ranks-per-node 1 --world 1 --node-id 0
mkdir "$tmp/shm"
expect 0 "unknown option '--bogus' (see --help): nothing removed" slurm-epilog --bogus
expect 0 "no value after '--job' (see --help): nothing removed" slurm-epilog --job
expect 0 "'-1' is not a user id: only root's files are removed" \
    slurm-epilog --job 5 --uid -1 --shm "$tmp/shm"
[ $fails = 0 ] && echo PASS
exit $((fails > 0))
