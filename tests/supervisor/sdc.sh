#!/usr/bin/env bash
# The silent-data-corruption check (docs/sdc.md) on the MPI trainer, 3
# ranks under mpirun:
#  1. a fault-free run compares every replica piece and finds no `sdc`;
#  2. a bit flipped in rank 1's replica of w1 after step 25 is an `sdc`
#     incident naming rank 1, its node and w1; the checkpoints taken after
#     the corruption are set aside, the restart resumes after step 20 (the
#     newest checkpoint before the flip), and the run ends with weights
#     bit-identical to the fault-free run's;
#  3. the same, the hashes read only once the ranks have ended (a test
#     hook: a supervisor held back), and a job whose ranks all exit 0
#     with a disagreement read only then;
#  4. on 2 ranks there is no majority: the `sdc` incident names no rank.
source "$(dirname "$0")/lib.sh"
# A failure prints what the run under test left (ASan CI failed the flip
# run once with "rank 0 exited with code 1 before its first step" in two
# attempts, and nothing more was kept): each attempt's incident, the
# checkpoints left, and the last lines of every rank's stdout and stderr.
rd=
fail() {
    echo "FAIL: $*" >&2
    if [ -n "$rd" ] && [ -d "$rd" ]; then
        sqlite3 "$rd/journal.sqlite" "select a.number, i.kind, i.detail from incident i
            join attempt a on a.id = i.attempt_id" >&2 2>/dev/null
        echo "--- checkpoints: $(ls -a "$rd/checkpoints" 2>&1 | tr '\n' ' ')" >&2
        # the supervisor's own summary of each attempt's comparison
        grep -h "sdc check:" ./*.err >&2 2>/dev/null
        local f
        for f in "$rd"/logs/mpirun-attempt-*/*/rank.*/std*; do
            [ -s "$f" ] || continue
            echo "--- $f (last 10 lines)" >&2
            tail -n 10 "$f" >&2
        done
    fi
    exit 1
}
MLP=$BIN/fb-train-mlp
cp /usr/share/common-licenses/GPL-3 "$T/$TAG.txt" # names every rank process
opts=(--data "$T/$TAG.txt" --steps 60 --hidden 32 --batch 16 --log-every 20
      --ckpt-every 5 --ckpt-keep 20 --sleep-ms 30)
# Open MPI leaks what LeakSanitizer would report at exit (sanitizer builds).
# A rank late at collectives on a loaded machine is a `straggler` incident
# (warn): not what this test is about, and it would be one more incident.
mpi=(--launcher mpirun --nproc-per-node 3 --max-restarts 2 --on-straggler off
     --mpirun-arg -x --mpirun-arg ASAN_OPTIONS=detect_leaks=0)

rd=$T/ref
"$FB" run "${mpi[@]}" --run-dir "$T/ref" -- "$MLP" "${opts[@]}" >ref.out 2>ref.err ||
    fail "fault-free run exited $?: $(tail -5 ref.err)"
n=$(sqlite3 "$T/ref/journal.sqlite" "select count(*) from incident")
[ "$n" = 0 ] || fail "fault-free run has incidents: $(sqlite3 "$T/ref/journal.sqlite" 'select kind, detail from incident')"
# The comparison ran: most pieces compared, none disagreed.
line=$(grep 'sdc check:' ref.err) || fail "no sdc check summary: $(tail -5 ref.err)"
cmp=$(sed -n 's/.*sdc check: \([0-9]*\) pieces\{0,1\} compared across 3 ranks.*all agreed.*/\1/p' <<<"$line")
[ -n "$cmp" ] && [ "$cmp" -ge 300 ] || fail "too few pieces compared: $line"
ok "fault-free: $cmp pieces compared, all agreed, no incident"

rd=$T/flip
"$FB" run "${mpi[@]}" --run-dir "$T/flip" --inject 'flip:rank=1,step=25,tensor=w1' \
    -- "$MLP" "${opts[@]}" >flip.out 2>flip.err || fail "flip run exited $?: $(tail -5 flip.err)"
J=$T/flip/journal.sqlite
row=$(sqlite3 "$J" "select kind||'|'||rank||'|'||step||'|'||node||'|'||injected from incident")
host=$(hostname)
[ "$row" = "sdc|1|25|$host|flip:rank=1,step=25,tensor=w1" ] ||
    fail "incident: $row (want sdc|1|25|$host|flip...): $(sqlite3 "$J" 'select detail from incident')"
detail=$(sqlite3 "$J" "select detail from incident")
grep -q "tensor w1 disagree after step 25" <<<"$detail" || fail "detail: $detail"
grep -q "rank 1 on node " <<<"$detail" || fail "detail names no rank and node: $detail"
grep -q "last agreed at step 24" <<<"$detail" || fail "detail: $detail"
grep -q "the node is suspect; health check of node $host: " <<<"$detail" ||
    fail "no health check of the suspect node: $detail"
[ -d "$T/flip/checkpoints/.sdc-step-0000000025" ] ||
    fail "checkpoint 25 (taken after the flip) not set aside: $(ls -a "$T/flip/checkpoints")"
resumed=$(sed -n 's/.*resuming after step \([0-9]*\)$/\1/p' "$T"/flip/logs/mpirun-attempt-1/*/rank.0/stdout)
[ "$resumed" = 20 ] || fail "attempt 1 resumed after step '$resumed', want 20"
want=$(cat "$T/ref/final_hash") got=$(cat "$T/flip/final_hash")
[ -n "$want" ] && [ "$want" = "$got" ] || fail "final hash $got, fault-free $want"
for r in ref flip; do
    job=$(cat "$T/$r/job")
    ! ls /dev/shm | grep -q "^fb\.$job\." || fail "segments of the $r run left in /dev/shm"
done
# the report counts it as the interruption that ended attempt 0, under
# its cause (it was left out of the table and of the attempt's failure)
"$FB" report "$T/flip" --json >flip.json || fail "report of the flip run: exit $?"
python3 - flip.json <<'PY' || fail "report: sdc not an interruption: $(cat flip.json)"
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
inc = [i for i in d["incidents"] if i["kind"] == "sdc"]
assert len(inc) == 1 and inc[0]["ended_attempt"], inc
assert d["interruptions"] == 1, d["interruptions"]
assert [(x["component"], x["count"]) for x in d["table"]] == [("Silent data corruption", 1)], d["table"]
PY
ok "flip on rank 1 (w1, step 25): sdc incident, resumed after step 20, final hash $got matches; the report's interruption"

# The supervisor held back: with FIREBREAK_TEST_SDC_DEFER=1 (a test hook,
# FB_TEST_HOOKS) it reads no hashes until the attempt has failed or every
# rank has ended, as a supervisor starved of CPU may.  The flip at step 30
# is then not seen before the ranks exit 1 (the trainer's own end check:
# the replicas' weights differ).  The hashes are still in the rings; read
# after the ends, the disagreement at step 30 is the failure's cause, not
# the exits after it, the checkpoints from step 30 on are set aside, and
# the restart resumes after step 25.  Before, the exit was the failure,
# the restart restored step 60 with the corrupted replica, and the job
# failed in a crash loop (CI, under ASan).
if [ "${FB_TEST_HOOKS:-ON}" = ON ]; then
    H=$T/held rd=$T/held
    FIREBREAK_TEST_SDC_DEFER=1 "$FB" run "${mpi[@]}" --run-dir "$H" \
        --inject 'flip:rank=1,step=30,tensor=w1' -- "$MLP" "${opts[@]}" \
        >held.out 2>held.err || fail "held-back run exited $?: $(tail -5 held.err)"
    J=$H/journal.sqlite
    row=$(sqlite3 "$J" "select kind||'|'||rank||'|'||step||'|'||injected from incident")
    [ "$row" = "sdc|1|30|flip:rank=1,step=30,tensor=w1" ] ||
        fail "held back: incident $row: $(sqlite3 "$J" 'select detail from incident')"
    detail=$(sqlite3 "$J" "select detail from incident")
    grep -q "seen after the attempt ended (error_exit of rank [0-9] at step 60), taken as its cause" <<<"$detail" ||
        fail "held back: not read after the ranks' ends: $detail"
    grep -q "last agreed at step 29" <<<"$detail" || fail "held back: $detail"
    resumed=$(sed -n 's/.*resuming after step \([0-9]*\)$/\1/p' "$H"/logs/mpirun-attempt-1/*/rank.0/stdout)
    [ "$resumed" = 25 ] || fail "held back: attempt 1 resumed after step '$resumed', want 25"
    got=$(cat "$H/final_hash")
    [ "$want" = "$got" ] || fail "held back: final hash $got, fault-free $want"
    ok "hashes read only after the ranks' ends: sdc at step 30 taken as the cause, resumed after step 25, final hash matches"
    # Every rank exits 0, and the disagreement is found only in the last
    # look: the job has not completed; the attempt fails with `sdc` and
    # the restart (no checkpoints: from the start) completes.
    rd=$T/clean
    FIREBREAK_TEST_SDC_DEFER=1 "$FB" run --nproc-per-node 3 --max-restarts 1 \
        --run-dir "$T/clean" --inject 'flip:rank=1,step=5' -- "$RANK" --steps 20 \
        --sleep-ms 5 --sdc -1 "$TAG" >clean.out 2>clean.err ||
        fail "exit-0 run exited $?: $(tail -5 clean.err)"
    J=$T/clean/journal.sqlite
    row=$(sqlite3 "$J" "select kind||'|'||rank||'|'||step from incident")
    [ "$row" = "sdc|1|5" ] || fail "exit 0: incident $row"
    att=$(sqlite3 "$J" "select group_concat(outcome, ',') from (select outcome from attempt order by number)")
    [ "$att" = "failed,completed" ] || fail "exit 0: attempts $att"
    ok "ranks exit 0, disagreement in the last look: attempt failed (sdc), restarted, completed"
else
    echo "skipped: the held-back cases need FB_TEST_HOOKS"
fi

# Two ranks: which replica is wrong cannot be told.
rd=$T/two
"$FB" run --launcher mpirun --nproc-per-node 2 --max-restarts 0 --run-dir "$T/two" --on-straggler off \
    --mpirun-arg -x --mpirun-arg ASAN_OPTIONS=detect_leaks=0 \
    --inject 'flip:rank=0,step=10' -- "$MLP" "${opts[@]}" --steps 20 >two.out 2>two.err &&
    fail "the 2-rank run with a flipped bit completed"
row=$(sqlite3 "$T/two/journal.sqlite" "select kind||'|'||ifnull(rank,-1)||'|'||step from incident")
[ "$row" = "sdc|-1|10" ] || fail "2 ranks: incident $row: $(sqlite3 "$T/two/journal.sqlite" 'select detail from incident')"
sqlite3 "$T/two/journal.sqlite" "select detail from incident" | grep -q "no majority among the 2 ranks" ||
    fail "2 ranks: $(sqlite3 "$T/two/journal.sqlite" 'select detail from incident')"
job=$(cat "$T/two/job")
! ls /dev/shm | grep -q "^fb\.$job\." || fail "segments of the 2-rank run left in /dev/shm"
ok "2 ranks: sdc incident without a rank (no majority)"
