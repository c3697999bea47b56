#!/usr/bin/env bash
# The end-of-run copy from node memory to a full disk (a 1 MiB tmpfs, in a
# private mount namespace so the mount cannot leak): the copy fails, so the
# node-memory tier, the only copy of the job's checkpoints, is kept (not
# removed, nor by another directory's start), the log says where and how
# to take it, the summary claims no step storage does not hold, and the
# next run of the same directory copies it once there is room.
# Needs root (mount) and unshare -m; skipped (77) otherwise.
#   tiers_full.sh FIREBREAK
if [ -z "${FB_TIERS_FULL_NS:-}" ]; then
    if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
        echo "skipped: needs root and unshare -m"
        exit 77
    fi
    FB_TIERS_FULL_NS=1 exec unshare -m bash "$0" "$@"
fi
source "$(dirname "$0")/lib.sh"
D=$T/disk
mkdir "$D"
mount -t tmpfs -o size=1m none "$D" || { echo "skipped: cannot mount tmpfs"; exit 77; }
at_exit+=('umount -l "$D" 2>/dev/null')
at_exit+=('[ -n "${mem:-}" ] && rm -rf "$mem"')
ln -s "$BIN/fb-toy-train" "$T/toy-$TAG"
mkdir "$D/ck"
dd if=/dev/zero of="$D/filler" bs=1k count=900 status=none
"$FB" run --nproc-per-node 2 --run-dir d --ckpt-dir "$D/ck" --persist-every 0 \
    --max-restarts 0 --inject 'kill:rank=1,step=22' -- "$T/toy-$TAG" --steps 40 \
    --sleep-ms 20 --ckpt-every 5 --state-kb 64 2>err.txt \
    && fail "the failing run exited 0"
mem=/dev/shm/fb.$(cat d/job).mem
grep -q "end of run: copying .* failed: .*No space left on device" err.txt \
    || fail "no copy failure said: $(grep 'end of run' err.txt)"
[ -z "$(ls "$D/ck" | grep step-)" ] || fail "storage holds $(ls "$D/ck"): a partial step"
! grep -q "to resume from its newest checkpoint" err.txt \
    || fail "the summary claims a step storage does not hold: $(grep resume err.txt)"
grep -q "node memory $mem is KEPT" err.txt || fail "kept tier not said: $(tail -5 err.txt)"
grep -q "firebreak run: node memory $mem is kept" err.txt \
    || fail "the summary does not name the kept tier: $(tail -4 err.txt)"
[ -d "$mem/step-0000000020" ] || fail "node memory's step 20 is gone: $(ls "$mem" 2>&1)"
"$FB" ckpt verify "$mem" >/dev/null || fail "the kept step does not verify"
# The next start on the machine leaves it (its owner is gone, but its
# checkpoint is nowhere else).
"$FB" run --nproc-per-node 1 --run-dir other --quiet -- "$T/toy-$TAG" --steps 3 \
    --sleep-ms 1 || fail "another run failed"
[ -d "$mem/step-0000000020" ] || fail "the next start removed the kept tier"
# Storage has room again: the next run of the same checkpoint directory
# copies step 20 there first, removes the tier, and resumes from it.
rm -f "$D/filler"
"$FB" run --nproc-per-node 2 --run-dir d --ckpt-dir "$D/ck" -- "$T/toy-$TAG" \
    --steps 24 --sleep-ms 1 --ckpt-every 5 --state-kb 64 2>err2.txt \
    || fail "the next run failed: $(tail -3 err2.txt)"
grep -q "node memory $mem, left by a run that is gone: checkpoint 20 copied" err2.txt \
    || fail "the kept tier not copied by the next run: $(grep 'node memory' err2.txt)"
[ ! -e "$mem" ] || fail "the kept tier stays after its copy"
ok "a failed end-of-run copy keeps node memory, says where, claims nothing"
