# Shared helpers for the Slurm tests (sourced): bring up the local cluster
# of separate hosts once per script (scripts/slurm-cluster.sh: four nodes,
# each with its own network, hostname, /dev/shm and /tmp; $T is the shared
# filesystem), tear it down on exit, and fail when any process of the test,
# any daemon, namespace, link or mount of the cluster is left behind.
#   $FB  firebreak    $TOY  fb-toy-train    $T  a fresh temporary directory
#   $FIX the health fixtures (tests/health/fixtures)
#   on NODE CMD...  run CMD on NODE (its namespaces)
# The cluster runs no Epilog, so that what the watchers and the supervisor
# clean up themselves is seen to be cleaned up; a script that sets
# CLUSTER_EPILOG=1 before sourcing this gets this build's
# firebreak-slurm-epilog as slurm.conf's Epilog (docs/slurm.md, "Epilog").
set -euo pipefail
FB=$1
SRC=$2
BIN=$(dirname "$FB")
TOY=$BIN/fb-toy-train
FIX=$SRC/tests/health/fixtures
T=$(mktemp -d /tmp/fb-slurm-test.XXXXXX)
CL=$T/cluster
MORE_CLUSTERS=()   # state directories of other clusters a test brings up
cd "$T"

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

# What a failure needs to be understood once $T is gone (a CI job keeps
# only the test's output): the end of every firebreak run's stderr
# ($T/*.err), the end of each attempt's srun and watcher logs, each
# journal's run, attempts, incidents and last events, and the ends of the
# clusters' logs
# (those of clusters already replaced were kept by recluster).  Bounded:
# DIAG_LINES lines from each file, DIAG_EVENTS events from each journal.
DIAG_LINES=200
DIAG_EVENTS=100
diag_tail() { # FILE N: its last N lines, under a header
    [ -s "$1" ] || return 0
    echo "---- ${1#"$T"/} (last $2 of $(wc -l <"$1") lines)"
    tail -n "$2" "$1" | cut -c1-1000
}
diag_journal() { # JOURNAL
    local q=(sqlite3 -cmd '.timeout 2000' -header -separator ' | ' "$1")
    echo "---- ${1#"$T"/}"
    "${q[@]}" "select status, exit_code, reason from run" || true
    "${q[@]}" "select number, outcome, nodes, restored_step, start_step, end_step from attempt order by id" || true
    "${q[@]}" "select a.number as attempt, i.kind, i.rank, i.node, i.phase, i.step,
        round(i.detect_ms) as detect_ms, i.detail from incident i join attempt a on a.id = i.attempt_id
        order by i.id" || true
    echo "(last $DIAG_EVENTS events)"
    "${q[@]}" "select * from (select printf('%.3f', e.time) as time, a.number as attempt,
        e.rank, e.node, e.kind, e.step, e.code, e.detail from event e join attempt a on a.id = e.attempt_id
        order by e.id desc limit $DIAG_EVENTS) order by time" || true
}
# The daemons' side first (a CI job may keep only the head and the tail of
# a long dump): whether each slurmd still runs, the cores of those that
# crashed, and the error lines of the daemons' logs (a slurmd whose munge
# decode failed closes the connection unanswered: srun's "Zero Bytes").
daemons_first() {
    local f c p
    # Whether each node's slurmd is still running: a launch that fails
    # with "Zero Bytes were transmitted or received" is a slurmd gone, or
    # one that could not authenticate the request.
    for c in "$CL" "${MORE_CLUSTERS[@]}"; do
        for f in "$c"/slurmd-*.pid; do
            [ -s "$f" ] || continue
            p=$(cat "$f")
            if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = slurmd ] &&
               ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$p/stat" 2>/dev/null; then
                echo "---- ${f#"$T"/}: slurmd $p running"
            else
                echo "---- ${f#"$T"/}: slurmd $p NOT running"
            fi
        done
    done
    # A daemon that crashed left a core in its working directory, its
    # log directory (slurmd and slurmctld chdir there; core_pattern
    # permitting).
    find "$T" -name 'core*' -type f 2>/dev/null | while read -r f; do
        what=$(file -b "$f" 2>/dev/null)
        echo "---- ${f#"$T"/}: ${what:0:200}"
        p=$(sed -n "s/.*execfn: '\([^']*\)'.*/\1/p" <<<"$what")
        [ -x "$p" ] && command -v gdb >/dev/null &&
            timeout 60 gdb -batch -nx -ex 'thread apply all bt 12' "$p" "$f" 2>/dev/null |
            grep -E '^(#|Thread|Program terminated)' | head -80
    done
    for c in "$T"/log-* "$CL" "${MORE_CLUSTERS[@]}"; do
        [ -d "$c" ] || continue
        [ -d "$c/log" ] && c=$c/log
        for f in "$c"/slurmctld.log "$c"/slurmd-*.log "$c"/munged.log; do
            [ -s "$f" ] || continue
            case "$f" in
            */munged.log) p=$(grep -a -E "^[-0-9 :+]*(Error|Alert|Critical|Emergency):" "$f" |
                              tail -n 12 | cut -c1-400) || true ;;
            *) p=$(grep -a -i -E "error|fail|refus|munge|timed out" "$f" |
                   grep -a -v -E "CANCELLED AT|state file|Trying backup state" |
                   tail -n 12 | cut -c1-400) || true ;;
            esac
            [ -n "$p" ] && printf '%s\n' "---- ${f#"$T"/}: its last error lines" "$p"
        done
    done
    return 0
}
diagnose() {
    local f c p
    echo "==== what the failure left in $T" >&2
    {
        daemons_first
        for f in $(ls -tr "$T"/*.err 2>/dev/null); do diag_tail "$f" $DIAG_LINES; done
        find "$T" -path "$T/cluster*" -prune -o -path '*/logs/slurm-attempt-*/srun.log' -print \
            -o -path '*/logs/slurm-attempt-*/watch.log' -print \
            2>/dev/null | sort | while read -r f; do diag_tail "$f" 40; done
        find "$T" -path "$T/cluster*" -prune -o -name journal.sqlite -print 2>/dev/null | sort |
            while read -r f; do diag_journal "$f"; done
        for c in "$T"/log-* "$CL" "${MORE_CLUSTERS[@]}"; do
            [ -d "$c" ] || continue
            [ -d "$c/log" ] && c=$c/log
            for f in "$c"/slurmctld.log "$c"/slurmd-*.log; do diag_tail "$f" 40; done
        done
    } 2>&1 | sed 's/^/  /' >&2
    echo "==== end of what the failure left" >&2
}

# Processes of this test, and only of this test: each one it starts
# carries FB_SLURM_TEST_TAG=$T in its environment (salloc, the supervisor,
# srun --export=ALL, and so the ranks and watchers on the nodes pass it
# on), so that another test's or another person's firebreak of the same
# build is not taken for one of ours, and an orphan of ours (reparented
# out of the test's process tree) still is.  The clusters' daemons are not
# tagged (slurm-cluster.sh drops the tag; `down` stops them and says what
# it left).  Neither the test's shell nor the subshell that looks.
export FB_SLURM_TEST_TAG=$T
leftovers() {
    local files f p me=$BASHPID
    files=(/proc/[0-9]*/environ)
    # grep exits 2 for the processes gone since the list was made.
    { grep -lzxF -- "FB_SLURM_TEST_TAG=$T" "${files[@]}" 2>/dev/null || true; } | while read -r f; do
        p=${f#/proc/}; p=${p%/environ}
        [ "$p" = $$ ] || [ "$p" = "$me" ] || echo "$p"
    done
}

cleanup() {
    local rc=$? left
    local c
    [ $rc = 0 ] || diagnose
    for c in "$CL" "${MORE_CLUSTERS[@]}"; do
        if [ -s "$c/cluster" ]; then
            "$SRC/scripts/slurm-cluster.sh" down "$c" || rc=1
        fi
    done
    if [ "${NETNS_WAS:-1}" = 0 ] && mountpoint -q /run/netns 2>/dev/null; then
        echo "FAIL: /run/netns left a mount (it was none before the test's clusters)" >&2
        rc=1
    fi
    # A process that is ending gets 2 s.
    for _ in $(seq 1 20); do
        left=$(leftovers)
        [ -z "$left" ] && break
        sleep 0.1
    done
    if [ -n "$left" ]; then
        echo "FAIL: processes left behind:" >&2
        ps -o pid,ppid,stat,args -p "$(echo $left | tr ' ' ',')" >&2 || true
        kill -9 $left 2>/dev/null || true
        rc=1
    fi
    # FB_SLURM_TEST_KEEP=1: a failed test's directory stays (its clusters
    # are down all the same).
    if [ $rc != 0 ] && [ "${FB_SLURM_TEST_KEEP:-0}" = 1 ]; then
        echo "kept: $T" >&2
    else
        rm -rf "$T"
    fi
    exit $rc
}
trap cleanup EXIT
# A command that fails outside `fail` (set -e) says where.
trap 'echo "FAIL: ${BASH_SOURCE[0]##*/} line $LINENO exited $?" >&2' ERR
# A test stopped by a signal (ctest's timeout, ^C) still takes its clusters down.
trap 'exit 143' TERM INT HUP

# Each node has its own /tmp: a checkout or build tree under /tmp (CI
# clones into /tmp/ci) is shared like $T, or the nodes could not run it.
SHARE=(--share "$T")
for p in "$(cd "$SRC" && pwd)" "$(cd "$BIN" && pwd)"; do
    case "$p" in /tmp/*) SHARE+=(--share "$p") ;; esac
done
# SHARE holds the options of every `up` (recluster, a second cluster).
if [ "${CLUSTER_EPILOG:-0}" = 1 ]; then
    SHARE+=(--epilog "$(cd "$BIN" && pwd)/firebreak-slurm-epilog")
else
    SHARE+=(--epilog none)
fi
# /run/netns, not a mount before the first cluster, is none after the last
# (`ip netns add` makes it one; slurm-cluster.sh's `down` undoes that).
NETNS_WAS=0
mountpoint -q /run/netns 2>/dev/null && NETNS_WAS=1
"$SRC/scripts/slurm-cluster.sh" up "$CL" "${SHARE[@]}" >"$T/cluster.env" 2>"$T/cluster.err" \
    || { cat "$T/cluster.err" >&2; fail "cluster did not come up"; }
eval "$(tail -n 1 "$T/cluster.env")"
export SLURM_CONF
# Every node healthy unless a test says otherwise (test hook, docs/slurm.md).
export FIREBREAK_HEALTH_ROOT=$FIX/healthy

on() { local n=$1; shift; "$SRC/scripts/slurm-cluster.sh" exec "$CL" "$n" -- "$@"; }

json_field() { python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(eval("d"+sys.argv[2]))' "$1" "$2"; }

# Reference hash of rank R after N steps, without any fault: the toy
# trainer's state depends only on its rank and the step count.
ref_hash() { # R STEPS
    mkdir -p "$T/ref"
    env -u FIREBREAK_JOB_ID RANK=$1 WORLD_SIZE=$(($1 + 1)) "$TOY" --steps "$2" --sleep-ms 0 \
        --ckpt-every 0 --run-dir "$T/ref" >/dev/null
    cat "$T/ref/final_hash.rank-$1"
}

# Wait (up to 20 s each) until the toy trainer's ranks say in their log of
# attempt 0 that they started.
wait_started() { # RUNDIR RANK...
    local d=$1 r
    shift
    for r in "$@"; do
        for _ in $(seq 1 200); do
            grep -qs "starting at" "$d/logs/slurm-attempt-0/rank-$r.log" && break; sleep 0.1
        done
        grep -qs "starting at" "$d/logs/slurm-attempt-0/rank-$r.log" || fail "$d: rank $r did not start"
    done
}

# Wait up to $2 seconds for a file to exist.
wait_file() {
    local i
    for i in $(seq 1 $(($2 * 10))); do [ -e "$1" ] && return 0; sleep 0.1; done
    return 1
}

wait_no_jobs() {
    local i
    for i in $(seq 1 100); do [ -z "$(squeue -h)" ] && return 0; sleep 0.1; done
    fail "jobs still in the queue: $(squeue -h)"
}

node_state() { scontrol show node "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
node_reason() { scontrol show node "$1" | sed -n 's/^ *Reason=//p'; }

# A fresh cluster in place of the current one (a node killed stays down in
# Slurm): CL becomes $T/cluster-NAME.
recluster() { # NAME [NODES [UP-OPTIONS...]]
    # Its logs stay for a failure's diagnosis (diagnose).
    cp -r "$CL/log" "$T/log-$(basename "$CL")" 2>/dev/null || true
    "$SRC/scripts/slurm-cluster.sh" down "$CL" || fail "down before $1"
    CL=$T/cluster-$1
    "$SRC/scripts/slurm-cluster.sh" up "$CL" --nodes "${2:-4}" "${SHARE[@]}" "${@:3}" \
        >"$T/cluster.env" 2>"$T/cluster.err" \
        || { cat "$T/cluster.err" >&2; fail "cluster for $1 did not come up"; }
    eval "$(tail -n 1 "$T/cluster.env")"
}
# The checkpoint-tier tests (tiers.sh, peer.sh): every rank's final hash is
# the fault-free run's; no fb.<job>.mem left in the nodes' /dev/shm.
same_hashes() { # RUNDIR RANKS STEPS
    local r
    for r in $(seq 0 $(($2 - 1))); do
        [ "$(cat "$1/final_hash.rank-$r")" = "$(ref_hash $r $3)" ] || fail "$1: rank $r hash"
    done
}
nothing_in_shm() { # RUNDIR NODE...
    local job n left
    job=$(cat "$1/job")
    shift
    for n in "$@"; do
        left=$(on "$n" ls /dev/shm | grep -E "^fb\.$job(_gone[0-9]+)?\.mem" || true)
        [ -z "$left" ] || fail "left in $n's /dev/shm: $left"
    done
}
# A peer-tier run (peer.sh, peerk.sh, peerlag.sh) of three ranks whose
# attempt 1 restored a step of MINSTEP (25) or later with journal sources
# SOURCES, one rank
# from its node's memory and two from peer copies, MOVED of them moved
# before the launch; storage held no shard of that step (each one there
# now was copied at the end of the run); the fault-free hashes after
# $STEPS steps; storage verifies.  Needs tiers_lib.sh (jq1, want_sources).
restored_from_peers() { # RUNDIR ERRFILE SOURCES MOVED TAG [MINSTEP]
    local r=$1 step
    want_sources "$r" "$3" "$5"
    step=$(jq1 "$r" "select restored_step from attempt where number = 1")
    [ -n "$step" ] && [ "$step" -ge "${6:-25}" ] || fail "$5: restored step '$step'"
    grep -q "will restore checkpoint $step: 1 of 3 ranks from their node's memory, 2 from a peer's copy ($4 moved before the launch)" "$2" \
        || fail "$5: the supervisor's choice: $(grep 'will restore' "$2")"
    [ -z "$(ls "$r/checkpoints/step-$(printf %010d "$step")" 2>/dev/null)" ] \
        || fail "$5: storage holds step $step"
    same_hashes "$r" 3 "$STEPS"
    "$FB" ckpt verify "$r/checkpoints" >/dev/null || fail "$5: storage does not verify"
}
# Wait (up to 30 s) until the run's journal has a complete checkpoint of
# STEP or later.
wait_ckpt() { # RUNDIR STEP
    local s
    for _ in $(seq 1 300); do
        s=$(sqlite3 "$1/journal.sqlite" "select max(step) from checkpoint where status='complete'" 2>/dev/null || true)
        [ -n "$s" ] && [ "$s" -ge "$2" ] && return 0
        sleep 0.1
    done
}
