#!/bin/bash
# The supervisor's check before a launch (fb__ckpt_prepare_restore, through
# test_ckpt_prepare): with one corrupt shard in the newest checkpoint, that
# checkpoint is set aside and every rank restores the same older step; a
# shard of another world size is set aside too, and so is a bad newer
# checkpoint of another job size; a stop asked for during the check ends
# it with nothing set aside.
set -u
sample=$1 prepare=$2
dir=$(mktemp -d /tmp/fb-ckpt-prep.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
ck=$dir/ck
for r in 0 1 2; do "$sample" "$ck" $r 3 10 20 10 >/dev/null || fail "sample $r"; done
out=$("$prepare" "$ck" 3) || fail "prepare on good checkpoints: $out"
[ "$out" = "restore 20" ] || fail "want 'restore 20', got: $out"
shard=$ck/step-0000000020/rank-00002.safetensors
size=$(stat -c %s "$shard")
printf '\x01' | dd of="$shard" bs=1 seek=$((size - 20)) conv=notrunc status=none
out=$("$prepare" "$ck" 3) || fail "prepare: $out"
echo "$out"
echo "$out" | grep -q 'set aside step 20: .*rank-00002.safetensors' || fail "no reason given"
echo "$out" | tail -n 1 | grep -qx 'restore 10' || fail "want restore 10"
[ -d "$ck/.corrupt-step-0000000020" ] || fail "corrupt checkpoint not kept aside"
for r in 0 1 2; do
    out=$("$sample" --restore "$ck" $r 3 2>&1) || fail "restore $r: $out"
    echo "$out" | grep -q 'restored 10' || fail "rank $r: $out"
done
# A stop during the check: no verdict, nothing set aside.
out=$("$prepare" "$ck" 3 2) || fail "prepare with stop: $out"
echo "$out" | grep -qx 'none: Operation canceled' || fail "want canceled, got: $out"
[ -d "$ck/step-0000000010" ] || fail "a stopped check set step 10 aside"
# Rank 1 of step 10 replaced by rank 1 of a 4-rank run at step 10: step,
# rank and hashes verify, the world size does not.
"$sample" "$dir/w4" 1 4 10 10 >/dev/null || fail "sample world 4"
cp "$dir/w4/step-0000000010/rank-00001.safetensors" "$ck/step-0000000010/" || fail cp
out=$("$prepare" "$ck" 3) || fail "prepare: $out"
echo "$out"
echo "$out" | grep -q 'set aside step 10: .*rank-00001.safetensors: metadata firebreak.world_size is "4", expected 3' ||
    fail "world size not checked: $out"
# A checkpoint of another job size (every shard says 4 ranks) is passed
# over and left in place: a job relaunched with 3 ranks restores its own.
for r in 0 1 2; do "$sample" "$ck" $r 3 20 20 10 >/dev/null || fail "sample $r"; done
for r in 0 1 2 3; do "$sample" "$ck" $r 4 30 30 10 >/dev/null || fail "sample w4 $r"; done
out=$("$prepare" "$ck" 3) || fail "prepare: $out"
echo "$out"
echo "$out" | grep -q 'passed over step 30: saved by 4 ranks, this job has 3' ||
    fail "other job size not said: $out"
echo "$out" | tail -n 1 | grep -qx 'restore 20' || fail "want restore 20 (the 3-rank step)"
[ -d "$ck/step-0000000030" ] || fail "the 4-rank checkpoint was moved"
out=$("$prepare" "$ck" 4) || fail "prepare 4: $out"
echo "$out" | tail -n 1 | grep -qx 'restore 30' || fail "a 4-rank job wants its step 30: $out"
# Rank 0's shard truncated: it cannot say its world size, so it is not
# "another job's" -- it is bad, and the step is set aside (the other rank
# would otherwise restore it alone).
for r in 0 1 2; do "$sample" "$ck" $r 3 40 40 10 >/dev/null || fail "sample $r"; done
shard=$ck/step-0000000040/rank-00000.safetensors
truncate -s $(( $(stat -c %s "$shard") / 2 )) "$shard"
out=$("$prepare" "$ck" 3) || fail "prepare: $out"
echo "$out"
echo "$out" | grep -q 'set aside step 40: .*rank-00000.safetensors' || fail "truncated rank 0 not set aside: $out"
echo "$out" | tail -n 1 | grep -qx 'restore 20' || fail "want restore 20"
# A save cut short: ranks 0 and 1 of step 50 committed, rank 2 did not.
# Left there, the next attempt's save of step 50 by rank 2 alone (before
# ranks 0 and 1 restored and dropped theirs) makes it complete with shards
# of two runs.  With drop_incomplete (the supervisor, no node memory) every
# incomplete step newer than the one chosen is removed; an older one, and
# any without it, is left.
for r in 0 1; do "$sample" "$ck" $r 3 50 50 10 >/dev/null || fail "sample $r"; done
mkdir -p "$ck/step-0000000015"
"$sample" "$dir/s15" 0 3 15 15 10 >/dev/null && cp "$dir/s15/step-0000000015/rank-00000.safetensors" "$ck/step-0000000015/"
out=$("$prepare" "$ck" 3) || fail "prepare: $out"
[ -d "$ck/step-0000000050" ] || fail "without DROP step 50 was removed: $out"
out=$(DROP=1 "$prepare" "$ck" 3) || fail "prepare DROP: $out"
echo "$out"
echo "$out" | grep -q 'dropped step 50: incomplete (2 of 3 shards): removed' || fail "step 50 not dropped: $out"
echo "$out" | tail -n 1 | grep -qx 'restore 20' || fail "want restore 20: $out"
[ ! -e "$ck/step-0000000050" ] || fail "step 50 still there"
[ -d "$ck/step-0000000015" ] || fail "the older incomplete step 15 was removed"
[ -d "$ck/step-0000000030" ] || fail "the 4-rank step 30 was removed"
# A checkpoint complete for the smaller job that saved it (2 ranks) looks
# incomplete to a 3-rank job: it is that job's, restorable by it again,
# never removed (it was, by the 3-rank job's launch).
for r in 0 1; do "$sample" "$ck" $r 2 60 60 10 >/dev/null || fail "sample w2 $r"; done
out=$(DROP=1 "$prepare" "$ck" 3) || fail "prepare DROP with a 2-rank step: $out"
echo "$out"
[ -d "$ck/step-0000000060" ] || fail "the 2-rank step 60 was removed: $out"
out=$(DROP=1 "$prepare" "$ck" 2) || fail "prepare 2: $out"
echo "$out" | tail -n 1 | grep -qx 'restore 60' || fail "a 2-rank job wants its step 60: $out"
# Checkpoints of other job sizes newer than this job's (3 ranks, step 10):
# a program restoring across world sizes (firebreak.Checkpointer) takes
# the newest complete one of any size, so each is verified as a whole
# too, every shard of its own size, until one verifies: 50 (4 ranks, 2
# shards) is incomplete for them and left; 40 (2 ranks, rank 1 corrupt)
# and 30 (4 ranks, rank 3 corrupt: a rank past this job's, never read
# before) are set aside; 20 (2 ranks) verifies and is left; 15 (2 ranks,
# corrupt), older than it, is no reader's and not read.  None is this
# job's choice, and none is removed as incomplete.  (They were passed over
# unread: a 1-rank Python job restored the corrupt 2-rank step at every
# attempt and crash-looped.)
flip() { # one byte of a tensor's data, XORed
    local f=$1 off=$(( $(stat -c %s "$1") - 20 ))
    local b=$(od -An -tu1 -j $off -N1 "$f" | tr -d ' ')
    printf "$(printf '\\%03o' $(( b ^ 1 )))" | dd of="$f" bs=1 seek=$off conv=notrunc status=none
}
ox=$dir/ox
mkdir "$ox"
save() { # STEP WORLD RANKS...: each step made alone (retention is per size)
    local s=$1 w=$2 r
    shift 2
    for r; do "$sample" "$dir/ox$s" $r $w $s $s 10 >/dev/null || fail "sample $s $w $r"; done
    mv "$dir/ox$s/step-00000000$s" "$ox/" || fail "mv $s"
}
save 10 3 0 1 2
save 15 2 0 1
save 20 2 0 1
save 30 4 0 1 2 3
save 40 2 0 1
save 50 4 0 1
flip "$ox/step-0000000040/rank-00001.safetensors"
flip "$ox/step-0000000030/rank-00003.safetensors"
flip "$ox/step-0000000015/rank-00001.safetensors"
out=$(DROP=1 "$prepare" "$ox" 3) || fail "prepare other sizes: $out"
echo "$out"
echo "$out" | grep -qx 'passed over step 50: saved by 4 ranks, this job has 3; incomplete for them (2 of 4 shards): left in place' ||
    fail "step 50 (incomplete for 4) not said: $out"
echo "$out" | grep -q 'set aside step 40: .*step-0000000040/rank-00001.safetensors: .*data corrupted' ||
    fail "step 40 (2 ranks, rank 1 corrupt) not set aside: $out"
echo "$out" | grep -q 'set aside step 30: .*step-0000000030/rank-00003.safetensors: .*data corrupted' ||
    fail "step 30 (4 ranks, rank 3 corrupt) not set aside: $out"
echo "$out" | grep -qx 'passed over step 20: saved by 2 ranks, this job has 3: verified, left in place (only a program that restores across world sizes restores it)' ||
    fail "step 20 not said verified: $out"
echo "$out" | grep -q 'step 15' && fail "step 15, older than a verified step 20, was read: $out"
echo "$out" | tail -n 1 | grep -qx 'restore 10' || fail "want restore 10 (this job's size): $out"
for s in 40 30; do
    [ -d "$ox/.corrupt-step-00000000$s" ] && [ ! -e "$ox/step-00000000$s" ] || fail "step $s not set aside"
done
for s in 15 20 50; do [ -d "$ox/step-00000000$s" ] || fail "step $s was moved or removed"; done
# The same for a 1-rank job, from the side of fewer ranks: step 20 is
# verified (both shards), 15 left; no step of its own.
out=$("$prepare" "$ox" 1) || fail "prepare 1: $out"
echo "$out" | grep -q 'passed over step 20: saved by 2 ranks, this job has 1: verified' || fail "1 rank: $out"
echo "$out" | tail -n 1 | grep -qx 'none: .*' || fail "1 rank: want none: $out"
echo PASS
