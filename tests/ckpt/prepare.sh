#!/bin/bash
# The supervisor's check before a restart (fb__ckpt_prepare_restore, through
# test_ckpt_prepare): with one corrupt shard in the newest checkpoint, that
# checkpoint is set aside and every rank restores the same older step.
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
echo PASS
