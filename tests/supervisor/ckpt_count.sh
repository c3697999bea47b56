#!/usr/bin/env bash
# The supervisor's count of each checkpoint's commits (watch.c, ckpt_track)
# when ranks do not keep together: rank 1 slowed tenfold from step 1 (fb-
# toy-train's ranks do not wait for each other), a checkpoint every step,
# rank 1 killed at step 20, one restart.  Rank 0 runs 150 steps while rank 1
# makes 15: each of rank 1's commits comes more than 64 of rank 0's
# checkpoints later.
#   - attempt 0: every step both ranks committed is "complete" with 2
#     ranks in the journal (with 64 steps counted at once, the oldest
#     dropped whatever it was, they stayed "partial", 1 rank);
#   - the restart names, as the newest complete checkpoint, the step the
#     next attempt restores (it named an older one, or none);
#   - attempt 1 counts its own commits: no row with more ranks than there
#     are (a step that attempt 0's rank 0 had committed was counted on from
#     there, "complete" at attempt 1's first commit of it, then 3 of 2).
# And reports overwritten in a rank's segment before a pass read them (test
# hook FIREBREAK_TEST_ATTACH_AFTER_MS: no pass attaches for the first
# second, while the rank writes thousands): said at the attempt's end, in
# the log and as a `reports_lost` event, where they went unsaid before.
source "$(dirname "$0")/lib.sh"
ln -s "$BIN/fb-toy-train" "$T/toy-$TAG"   # the tag in every command line
TOY=$T/toy-$TAG
mkdir -p runs
"$FB" run --run-dir runs/r --nproc-per-node 2 --max-restarts 1 --crash-loop 0 \
    --inject slow:rank=1,step=1,factor=10 --inject kill:rank=1,step=20 \
    -- "$TOY" --steps 150 --sleep-ms 20 --ckpt-every 1 >out.txt 2>err.txt \
    || fail "run exited $? ($(tail -3 err.txt))"
restored=$(q "select restored_step from attempt where number = 1")
[ -n "$restored" ] && [ "$restored" -ge 10 ] || fail "attempt 1 restored '$restored'"
# rank 1's commits of attempt 0: each step of them complete, with 2 ranks
r1=$(q "select group_concat(step) from (select e.step from event e join attempt a on
        a.id = e.attempt_id where a.number = 0 and e.kind = 'ckpt_committed' and e.rank = 1
        and e.step in (select e2.step from event e2 where e2.attempt_id = e.attempt_id
        and e2.kind = 'ckpt_committed' and e2.rank = 0) order by e.step)")
[ -n "$r1" ] || fail "no step committed by both ranks in attempt 0"
bad=$(q "select group_concat(c.step || ':' || c.status || ':' || c.ranks) from checkpoint c
         join attempt a on a.id = c.attempt_id where a.number = 0 and c.step in ($r1)
         and not (c.status = 'complete' and c.ranks = 2)")
[ -z "$bad" ] || fail "attempt 0, steps both ranks committed, counted otherwise: $bad"
grep -q "restarting from the newest complete checkpoint (step $restored)" err.txt \
    || fail "restart message: $(grep 'restarting from' err.txt) (attempt 1 restored $restored)"
over=$(q "select group_concat(a.number || '/' || c.step || ':' || c.ranks) from checkpoint c
          join attempt a on a.id = c.attempt_id where c.ranks > 2")
[ -z "$over" ] || fail "checkpoints counted with more ranks than the run has: $over"
early=$(q "select group_concat(c.step) from checkpoint c join attempt a on a.id = c.attempt_id
           where a.number = 1 and c.status = 'complete' and c.ranks < 2")
[ -z "$early" ] || fail "attempt 1: complete with fewer than 2 commits: $early"
[ "$(q "select outcome from attempt where number = 1")" = completed ] || fail "attempt 1 did not complete"
ok "rank 1 far behind: every step both committed complete ($(echo "$r1" | tr ',' '\n' | wc -l) in attempt 0), restart from step $restored as restored, attempt 1 counts its own commits"

if [ "${FB_TEST_HOOKS:-ON}" = ON ]; then
    # checkpoints in memory: more of them a second than fsyncs allow
    shm=/dev/shm/fb-ckpt-count-$TAG
    at_exit+=('rm -rf "$shm"')
    FIREBREAK_TEST_ATTACH_AFTER_MS=1000 "$FB" run --run-dir runs/lost --nproc-per-node 1 \
        -- "$TOY" --steps 1500 --sleep-ms 1 --ckpt-every 1 --ckpt-dir "$shm" >out2.txt \
        2>err2.txt || fail "run 2 exited $? ($(tail -3 err2.txt))"
    grep -Eq "attempt 0: [0-9]+ reports of 1 rank \(rank 0 first\) were overwritten in their segments before they were read" err2.txt \
        || fail "no word of the lost reports: $(grep -v status: err2.txt | tail -3)"
    n=$(sqlite3 -batch -noheader runs/lost/journal.sqlite \
        "select code from event where kind = 'reports_lost' and rank = 0")
    [ -n "$n" ] && [ "$n" -gt 0 ] || fail "reports_lost event: '$n'"
    ok "reports overwritten before a pass read them: $n, said in the log and the journal"
fi
