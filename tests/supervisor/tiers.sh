#!/usr/bin/env bash
# Node-memory checkpoints (docs/checkpoint.md, "Tiers") with the toy
# trainer under the local launcher, 2 ranks, a checkpoint every 5 steps.
# Every case ends with the final state of a run that never failed, bit for
# bit, and nothing of the job left in /dev/shm.
#   tiers.sh FIREBREAK CASE    CASE: shmfull | mixed | memory | corrupt | cap |
#                                    lifetime | worlds | endcopy | stale | mpirun
source "$(dirname "$0")/lib.sh"
CASE=$2
ln -s "$BIN/fb-toy-train" "$T/toy-$TAG"   # the tag in every command line
TOY=$T/toy-$TAG
STEPS=(--steps 40 --sleep-ms 20 --ckpt-every 5)

reference() {
    "$FB" run --nproc-per-node 2 --run-dir ref --quiet -- "$TOY" "${STEPS[@]}" "$@" \
        || fail "reference run failed"
}
same_as_reference() {  # run dir
    for r in 0 1; do
        a=$(cat ref/final_hash.rank-$r); b=$(cat "$1"/final_hash.rank-$r)
        [ -n "$a" ] && [ "$a" = "$b" ] || fail "$1: rank $r: reference $a, got $b"
    done
}
nothing_in_shm() {  # run dir
    local job
    job=$(cat "$1/job")
    if ls /dev/shm | grep -q "^fb\.$job\."; then
        fail "$1: left in /dev/shm: $(ls /dev/shm | grep "^fb\.$job\.")"
    fi
}
source "$(dirname "$0")/tiers_lib.sh"   # jq1, want_sources, never_read, atime_works

case "$CASE" in
shmfull)
    # /dev/shm too small for the steps kept (a private 400k one, in a mount
    # namespace of this test's own).  Before, every save from the first
    # that did not fit failed: a crash loop, "root cause: Host / SSD".
    #  a. 64 KiB a rank: a save that finds it full evicts the steps older
    #     than the newest complete one and is written there again, so node
    #     memory keeps serving (a save falling back to storage alone split
    #     steps between the tiers, complete in neither: the restart went
    #     back 5 steps further than it said);
    #  b. 256 KiB a rank, one step does not fit: saves go to storage, said.
    if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
        echo "skip: needs root and unshare"; exit 77
    fi
    for kb in 64 256; do
        unshare -m --propagation private bash -c '
            mount -t tmpfs -o size=400k fb-full /dev/shm || exit 77
            "$1" run --nproc-per-node 2 --run-dir f$3 --persist-every 0 --max-restarts 2 \
                --inject "kill:rank=1,step=17,attempt=0" -- "$2" --steps 40 --sleep-ms 20 \
                --ckpt-every 5 --state-kb $3 >out$3.txt 2>err$3.txt
            rc=$?
            [ -z "$(ls /dev/shm)" ] || { echo "left in /dev/shm: $(ls /dev/shm)" >&2; exit 1; }
            exit $rc' _ "$FB" "$TOY" $kb || fail "$kb KiB: run failed ($?): $(tail -5 err$kb.txt)"
        got=$(jq1 f$kb "select group_concat(rank||':'||step||':'||source, ',') from (select
                        e.rank, e.step, e.source from event e join attempt a on a.id = e.attempt_id
                        where a.number = 1 and e.kind = 'restore_done' order by e.rank)")
        "$FB" ckpt verify f$kb >/dev/null || fail "$kb KiB: storage does not verify"
        # (both ranks the same step; 10 when a save of 15 still split
        # between the tiers: docs/supervisor.md says when)
        if [ $kb = 64 ]; then
            case $got in
            0:15:memory,1:15:memory|0:10:memory,1:10:memory) ;;
            *) restores_dump f64; fail "64 KiB: restored $got" ;;
            esac
        else
            case $got in
            0:15:storage,1:15:storage|0:10:storage,1:10:storage) ;;
            *) restores_dump f256; fail "256 KiB: restored $got" ;;
            esac
            grep -q "does not fit in node memory (.*No space left on device); saved to storage" err256.txt ||
                fail "256 KiB: no save said to go to storage: $(grep -i 'checkpoint' err256.txt | tail -5)"
        fi
    done
    ok "node memory full: older steps evicted and memory kept serving; a step too big went to storage"
    ;;
mixed)
    # Ranks that do not wait for each other (the toy trainer): rank 1,
    # slower, is killed at its step 30 while rank 0 has saved up to ~60 in
    # node memory; in attempt 1 rank 0 starts 1.5 s late, so rank 1 saves
    # steps 30, 35... first.  The steps rank 0 saved alone in attempt 0
    # must not be completed by rank 1's new shards: before, they were, and
    # rank 0 restored step 55 of two runs while rank 1 restored 25.
    cat >w.sh <<EOF
#!/bin/bash
# $TAG
SL=20
if [ "\$FIREBREAK_ATTEMPT" = 0 ] && [ "\$FIREBREAK_RANK" = 1 ]; then SL=40; fi
if [ "\$FIREBREAK_ATTEMPT" = 1 ] && [ "\$FIREBREAK_RANK" = 0 ]; then sleep 1.5; fi
exec $TOY "\$@" --sleep-ms \$SL
EOF
    chmod +x w.sh
    "$FB" run --nproc-per-node 2 --run-dir f --persist-every 0 --max-restarts 2 \
        --inject 'kill:rank=1,step=30,attempt=0' -- ./w.sh --steps 80 --ckpt-every 5 \
        2>err.txt || fail "run failed: $(tail -5 err.txt)"
    got=$(jq1 f "select group_concat(rank||':'||step, ',') from (select e.rank, e.step
                 from event e join attempt a on a.id = e.attempt_id
                 where a.number = 1 and e.kind = 'restore_done' order by e.rank)")
    # 25 (rank 1's last save before its kill at 30); 20 when a loaded
    # machine kept that asynchronous save from committing first.
    case "$got" in 0:25,1:25 | 0:20,1:20) ;;
    *) restores_dump f; fail "attempt 1 restored $got, wanted 0:25,1:25 (or 0:20,1:20)" ;; esac
    grep -q "checkpoint 30 before the launch: incomplete (1 of 2 shards): removed" err.txt ||
        fail "the cut-short step 30 not said removed: $(grep -i checkpoint err.txt)"
    nothing_in_shm f
    # The same with every memory step copied to storage as it is taken:
    # storage's cut-short steps go too, though node memory serves the
    # restore and storage is not read.
    "$FB" run --nproc-per-node 2 --run-dir p --persist-every 1 --max-restarts 2 \
        --inject 'kill:rank=1,step=30,attempt=0' -- ./w.sh --steps 80 --ckpt-every 5 \
        2>perr.txt || fail "persist run failed: $(tail -5 perr.txt)"
    n=$(grep -c "checkpoint 30 before the launch: incomplete (1 of 2 shards): removed" perr.txt)
    [ "$n" = 2 ] || fail "step 30 removed $n times, wanted 2 (memory, storage): $(grep -i checkpoint perr.txt)"
    "$FB" ckpt verify p >/dev/null || fail "storage does not verify after the persist run"
    nothing_in_shm p
    ok "ranks that do not wait for each other: cut-short steps removed from node memory and storage, both ranks restored $(echo "$got" | sed 's/^0:\([0-9]*\),.*/\1/')"
    ;;
memory)
    # A rank SIGKILLed: every rank restores from node memory, and the copy
    # of the same step in storage is never read.
    atime_works || { echo "skip: atime is not updated on $T (noatime?)"; exit 77; }
    reference
    "$FB" run --nproc-per-node 2 --run-dir f --persist-every 1 --max-restarts 2 \
        --quiet --inject 'kill:rank=1,step=39,attempt=0' -- "$TOY" "${STEPS[@]}" \
        2>err.txt || fail "run failed: $(tail -5 err.txt)"
    want_sources f 0:memory,1:memory "$CASE"
    shards=(f/checkpoints/step-0000000035/rank-0000{0,1}.safetensors)
    ls "${shards[@]}" >/dev/null || fail "storage lacks step 35: $(ls f/checkpoints)"
    never_read "${shards[@]}" || fail "the storage copy of step 35 was read"
    [ "$(jq1 f "select count(*) from incident where kind = 'restore_fallback'")" = 0 ] \
        || fail "fallbacks: $(jq1 f 'select detail from incident')"
    same_as_reference f
    nothing_in_shm f
    ok "rank killed: restored from node memory, storage not read, state bit-identical"
    ;;
corrupt)
    # Rank 0's memory copy of step 35 corrupted, then rank 0 killed (the
    # faults of one step fire in the order given): the memory copy is set
    # aside (recorded), storage's step 35 serves.
    reference
    "$FB" run --nproc-per-node 2 --run-dir f --persist-every 1 --max-restarts 2 \
        --quiet --inject 'corrupt:rank=0,step=39,attempt=0' \
        --inject 'kill:rank=0,step=39,attempt=0' -- "$TOY" "${STEPS[@]}" \
        2>err.txt || fail "run failed: $(tail -5 err.txt)"
    want_sources f 0:storage,1:storage "$CASE"
    [ "$(jq1 f "select restored_step from attempt where number = 1")" = 35 ] \
        || fail "restored step: $(jq1 f 'select restored_step from attempt')"
    jq1 f "select detail from incident where kind = 'restore_fallback' and step = 35" \
        | grep -q "/dev/shm/fb\..*\.mem/step-0000000035/rank-00000.safetensors" \
        || fail "corruption not recorded: $(jq1 f 'select kind, detail from incident')"
    same_as_reference f
    nothing_in_shm f
    ok "memory copy corrupted: recorded, restored from storage, state bit-identical"
    ;;
cap)
    # 64 KiB of state per rank: a step is about 134 KB on the node.  A cap
    # of 300K holds two: older steps are evicted.  A cap of 200K holds
    # none: every save goes to storage, and says so.
    STEPS+=(--state-kb 64)
    reference
    "$FB" run --nproc-per-node 2 --run-dir evict --memory-ckpt-max 300K --persist-every 0 \
        --max-restarts 2 --quiet --inject 'kill:rank=1,step=37,attempt=0' \
        -- "$TOY" "${STEPS[@]}" 2>err.txt || fail "run failed: $(tail -5 err.txt)"
    n=$(jq1 evict "select count(*) from event where kind = 'ckpt_deleted'
                   and detail like 'evicted from node memory%'")
    [ "$n" -ge 4 ] || fail "evictions: $n"
    want_sources evict 0:memory,1:memory "$CASE"
    same_as_reference evict
    nothing_in_shm evict
    "$FB" run --nproc-per-node 2 --run-dir full --memory-ckpt-max 200K --persist-every 0 \
        --max-restarts 2 --quiet --inject 'kill:rank=1,step=37,attempt=0' \
        -- "$TOY" "${STEPS[@]}" 2>err.txt || fail "run failed: $(tail -5 err.txt)"
    n=$(jq1 full "select count(*) from event where kind = 'note' and
                  detail like 'does not fit in node memory%saved to storage'")
    [ "$n" -ge 16 ] || fail "fallback notes: $n"
    grep -q "checkpoint step 35 does not fit in node memory" full/logs/rank-0.log \
        || fail "no stderr line: $(tail -3 full/logs/rank-0.log)"
    want_sources full 0:storage,1:storage "$CASE"
    same_as_reference full
    nothing_in_shm full
    ok "cap: oldest steps evicted; saves that cannot fit go to storage"
    ;;
lifetime)
    # A run that fails still removes node memory, after copying its newest
    # complete step to storage (--persist-every 0: the only copy there).
    "$FB" run --nproc-per-node 2 --run-dir failed --persist-every 0 --max-restarts 0 \
        --quiet --inject 'kill:rank=1,step=22' -- "$TOY" "${STEPS[@]}" 2>err.txt \
        && fail "the failing run exited 0"
    nothing_in_shm failed
    ls failed/checkpoints/step-0000000020/rank-0000{0,1}.safetensors >/dev/null \
        || fail "step 20 not copied to storage at the end: $(ls failed/checkpoints)"
    "$FB" ckpt verify failed/checkpoints >/dev/null || fail "copied step does not verify"
    # SIGUSR1 copies the newest complete memory step to storage (the toy
    # trainer, told the same, saves once more and stops).
    wait_mem_step() {  # run dir -> the tier's path, once it holds a step
        for _ in $(seq 200); do
            [ -f "$1/job" ] && ls -d /dev/shm/fb.$(cat "$1/job").mem/step-* >/dev/null 2>&1 && break
            sleep 0.05
        done
        [ -f "$1/job" ] && echo /dev/shm/fb.$(cat "$1/job").mem
    }
    # (a step every rank has completed: a step directory alone may hold one
    # rank's shard, and SIGUSR1 then has nothing to copy; once in CI)
    wait_mem_complete() {  # node-memory path
        for _ in $(seq 200); do
            [ "$("$FB" ckpt ls "$1" --json 2>/dev/null | tail -n 1 | jq .complete)" -ge 1 ] \
                2>/dev/null && return 0
            sleep 0.05
        done
        return 1
    }
    "$FB" run --nproc-per-node 2 --run-dir usr1 --persist-every 0 \
        -- "$TOY" --steps 100000 --sleep-ms 20 --ckpt-every 5 2>err2.txt &
    sup=$!
    mem=$(wait_mem_step usr1)
    [ -d "$mem" ] || { kill -9 $sup; fail "no node memory at $mem"; }
    wait_mem_complete "$mem" || { kill -9 $sup; fail "no complete step in $mem"; }
    kill -USR1 $sup
    rc=0; wait $sup || rc=$?
    [ $rc = 0 ] || fail "run told SIGUSR1 exited $rc: $(tail -3 err2.txt)"
    grep -q "SIGUSR1: checkpoint [0-9]* copied from node memory" err2.txt \
        || fail "SIGUSR1 copied nothing to storage: $(cat err2.txt)"
    nothing_in_shm usr1
    # With no complete step in node memory, the copy says so (it said
    # "storage already holds the newest"): a run that saves nothing. (Not
    # a SIGUSR1 before the first save: the toy's ranks, unsynchronized,
    # then save at steps of their own, and whether one is complete when
    # the copy looks is a race.)
    "$FB" run --nproc-per-node 2 --run-dir nosave --persist-every 0 \
        -- "$TOY" --steps 5 --sleep-ms 20 --ckpt-every 100000 2>err4.txt \
        || fail "a run without saves: exit $?: $(tail -3 err4.txt)"
    grep -q "end of run: nothing to copy to storage: node memory holds no complete checkpoint yet" err4.txt \
        || fail "a run without saves: $(cat err4.txt)"
    nothing_in_shm nosave
    # A supervisor SIGKILLed leaves node memory behind; the next start
    # removes it.
    "$FB" run --nproc-per-node 2 --run-dir killed --persist-every 0 --quiet \
        -- "$TOY" --steps 100000 --sleep-ms 20 --ckpt-every 5 2>err3.txt &
    sup=$!
    mem=$(wait_mem_step killed)
    [ -d "$mem" ] || { kill -9 $sup; fail "no node memory at $mem"; }
    # Every supervisor's start removes the node memories whose pid file
    # names a process that is gone, other tests' running beside this one
    # too (one did, in a CI run): until it is checked, the pid file names
    # a process of ours, which dies with this shell.
    setpriv --pdeathsig KILL sleep 300 &
    guard=$!
    echo $guard > "$mem/firebreak.pid"
    kill -9 $sup
    rc=0; wait $sup || rc=$?
    [ $rc = 137 ] || fail "supervisor status $rc"
    for _ in $(seq 100); do [ -z "$(leftovers)" ] && break; sleep 0.05; done
    [ -d "$mem" ] || fail "node memory already gone after SIGKILL (the next start must remove it)"
    kill $guard; wait $guard 2>/dev/null || true
    "$FB" run --nproc-per-node 1 --run-dir next --quiet -- "$TOY" --steps 3 --sleep-ms 1 \
        || fail "next run failed"
    [ ! -e "$mem" ] || fail "stale node memory $mem not removed by the next start"
    ok "node memory removed at the end of a failed run and at the next start after SIGKILL"
    ;;
worlds)
    # The same run directory rerun with another number of ranks: steps
    # saved by the other size are never this job's, never removed by it.
    # Grown 2 -> 4: ranks 0 and 1 pass over step 40 (2 of 4 shards) but
    # leave its shards (they unlinked them).
    "$FB" run --nproc-per-node 2 --run-dir grow --quiet -- "$TOY" "${STEPS[@]}" \
        2>err.txt || fail "2 ranks: $(tail -3 err.txt)"
    "$FB" run --nproc-per-node 4 --run-dir grow --quiet -- "$TOY" --steps 12 \
        --sleep-ms 20 --ckpt-every 5 2>err.txt || fail "4 ranks: $(tail -3 err.txt)"
    for s in 35 40; do
        ls grow/checkpoints/step-00000000$s/rank-0000{0,1}.safetensors >/dev/null \
            || fail "grown: the 2-rank step $s lost shards: $(ls grow/checkpoints/step-00000000$s)"
    done
    # Shrunk 4 -> 2: the 4-rank steps 35 and 40 make retention delete none
    # of the 2-rank job's steps (it counted them complete and kept only
    # them), nor stop the end-of-run copy ("storage already holds 40").
    "$FB" run --nproc-per-node 4 --run-dir shrink --quiet -- "$TOY" "${STEPS[@]}" \
        2>err.txt || fail "4 ranks: $(tail -3 err.txt)"
    "$FB" run --nproc-per-node 2 --run-dir shrink --quiet -- "$TOY" --steps 22 \
        --sleep-ms 20 --ckpt-every 5 2>err.txt || fail "2 ranks: $(tail -3 err.txt)"
    ls shrink/checkpoints/step-00000000{15,20}/rank-0000{0,1}.safetensors >/dev/null \
        || fail "shrunk: retention: storage holds $(ls shrink/checkpoints | tr '\n' ' ')"
    # Then node memory's step 25, after a restore from storage's 20.
    "$FB" run --nproc-per-node 2 --run-dir shrink --persist-every 0 --max-restarts 0 \
        --inject 'kill:rank=1,step=27' -- "$TOY" "${STEPS[@]}" 2>err.txt \
        && fail "the failing run exited 0"
    grep -q "end of run: checkpoint 25 copied from node memory" err.txt \
        || fail "shrunk: end-of-run copy: $(grep 'end of run' err.txt)"
    ls shrink/checkpoints/step-00000000{35,40}/rank-0000{0,1,2,3}.safetensors >/dev/null \
        || fail "shrunk: 4-rank steps lost shards: $(ls shrink/checkpoints/*)"
    nothing_in_shm shrink
    ok "another world size: its steps neither counted, nor removed, nor in the way of a copy"
    ;;
endcopy)
    # The end-of-run copy (--persist-every 0: storage has nothing else).
    # Rank 0's shard of step 20 damaged in node memory, then rank 1 killed:
    # step 20 cannot be copied, step 15 is (it copied nothing).
    "$FB" run --nproc-per-node 2 --run-dir bad --persist-every 0 --max-restarts 0 \
        --inject 'corrupt:rank=0,step=21' --inject 'kill:rank=1,step=23' \
        -- "$TOY" "${STEPS[@]}" 2>err.txt && fail "the failing run exited 0"
    grep -q "end of run: checkpoint 15 copied from node memory to .*; a newer one could not be: checkpoint 20: .*rank-00000.safetensors" err.txt \
        || fail "damaged step 20: $(grep -i 'end of run\|resume' err.txt)"
    got=$(ls bad/checkpoints | grep step- | tr '\n' ' ')
    [ "$got" = "step-0000000015 " ] || fail "damaged step 20: storage holds $got"
    "$FB" ckpt verify bad/checkpoints >/dev/null || fail "copied step 15 does not verify"
    grep -q "to resume from its newest checkpoint (step 15 when" err.txt \
        || fail "the summary's step is not storage's: $(grep resume err.txt)"
    nothing_in_shm bad
    ok "end-of-run copy: a damaged newest step, the older intact one copied"
    ;;
stale)
    # A supervisor SIGKILLed (--persist-every 0: its checkpoints are in node
    # memory only), then run again with the same run directory: its start
    # copies the left tier's newest complete step to storage before removing
    # it, and the ranks resume from it (they started at step 0).
    "$FB" run --nproc-per-node 2 --run-dir d --persist-every 0 --quiet \
        -- "$TOY" --steps 100000 --sleep-ms 20 --ckpt-every 5 2>err.txt &
    sup=$!
    for _ in $(seq 200); do
        [ -f d/job ] && [ "$("$FB" ckpt ls /dev/shm/fb.$(cat d/job).mem --json 2>/dev/null \
                             | tail -n 1 | jq .complete)" -ge 2 ] 2>/dev/null && break
        sleep 0.05
    done
    mem=/dev/shm/fb.$(cat d/job).mem
    at_exit+=('rm -rf "$mem"')
    # Other tests' starts sweep tiers whose pid file names a process that
    # is gone: until this test's own start, it names one of ours.
    setpriv --pdeathsig KILL sleep 300 &
    guard=$!
    echo $guard > "$mem/firebreak.pid"
    kill -9 $sup; wait $sup 2>/dev/null || true
    for _ in $(seq 100); do [ -z "$(leftovers)" ] && break; sleep 0.05; done
    n=$("$FB" ckpt ls "$mem" --json | tail -n 1 | jq '[.checkpoints[] | select(.complete)][0].step')
    [ "$n" -ge 5 ] 2>/dev/null || fail "no complete step in $mem: $("$FB" ckpt ls "$mem")"
    # A tier of another checkpoint directory, left the same way.
    other=/dev/shm/fb.toy-$TAG-other.mem
    at_exit+=('rm -rf "$other"')
    mkdir "$other"
    echo $guard > "$other/firebreak.pid"
    printf '2\n/nonexistent/checkpoints' > "$other/firebreak.owner"
    kill $guard; wait $guard 2>/dev/null || true
    "$FB" run --nproc-per-node 2 --run-dir d -- "$TOY" --steps $((n + 2)) --sleep-ms 1 \
        --ckpt-every 5 2>err.txt || fail "the run after SIGKILL failed: $(tail -3 err.txt)"
    grep -q "node memory $mem, left by a run that is gone: checkpoint $n copied from node memory" err.txt \
        || fail "stale tier not copied: $(grep -i 'node memory' err.txt)"
    [ ! -e "$mem" ] || fail "stale tier $mem not removed after its copy"
    [ "$(jq1 d "select count(*) from event where kind = 'restore_done' and step = $n")" -ge 2 ] \
        || fail "ranks did not resume from step $n: $(jq1 d "select rank, kind, step from event where kind like 'restore%'")"
    grep -q "removing node memory $other, left by a run that is gone (checkpoint directory /nonexistent/checkpoints)" err.txt \
        || fail "another directory's tier: $(grep -i 'node memory' err.txt)"
    [ ! -e "$other" ] || fail "another directory's stale tier not removed"
    ok "a SIGKILLed run's node memory copied to storage by the next run of its directory"
    ;;
mpirun)
    # The MPI trainer under mpirun: a rank killed, both restore from node
    # memory, the final weights are the fault-free run's.
    MLP=(--steps 120 --hidden 32 --batch 16 --ckpt-every 10 --log-every 40)
    ln -s "$BIN/fb-train-mlp" "$T/mlp-$TAG"
    "$FB" run --launcher mpirun --nproc-per-node 2 --run-dir ref --quiet \
        --mpirun-arg -x --mpirun-arg ASAN_OPTIONS=detect_leaks=0 \
        -- "$T/mlp-$TAG" "${MLP[@]}" 2>err.txt || fail "reference: $(tail -3 err.txt)"
    "$FB" run --launcher mpirun --nproc-per-node 2 --run-dir f --persist-every 3 \
        --mpirun-arg -x --mpirun-arg ASAN_OPTIONS=detect_leaks=0 \
        --max-restarts 2 --quiet --inject 'kill:rank=1,step=75,attempt=0' \
        -- "$T/mlp-$TAG" "${MLP[@]}" 2>err.txt || fail "run failed: $(tail -5 err.txt)"
    want_sources f 0:memory,1:memory "$CASE"
    a=$(cat ref/final_hash); b=$(cat f/final_hash)
    [ -n "$a" ] && [ "$a" = "$b" ] || fail "final weights: reference $a, got $b"
    nothing_in_shm f
    ok "mpirun: restored from node memory, final weights bit-identical"
    ;;
*) fail "unknown case $CASE" ;;
esac
