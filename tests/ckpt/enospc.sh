#!/bin/bash
# A real disk-full: checkpoints on a 2 MiB tmpfs.  The save that does not
# fit fails with ENOSPC, leaves no temporary file, and the older
# checkpoints stay complete, verified and restorable.
set -u
sample=$1 fb=$2
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root to mount a tmpfs"; exit 77; }
mnt=$(mktemp -d /tmp/fb-ckpt-full.XXXXXX)
mount -t tmpfs -o size=2m tmpfs "$mnt" || { rmdir "$mnt"; echo "SKIP: mount failed"; exit 77; }
trap 'umount "$mnt"; rmdir "$mnt"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export SAMPLE_PAD_KB=700
"$sample" "$mnt/ck" 0 1 1 2 || fail "the first two saves should fit"
out=$("$sample" "$mnt/ck" 0 1 3 3 2>&1); rc=$?
echo "$out"
[ $rc = 1 ] || fail "third save should fail (exit $rc)"
echo "$out" | grep -q 'No space left on device' || fail "no ENOSPC message"
echo "$out" | grep -q 'older checkpoints are intact' || fail "message"
[ -z "$(find "$mnt/ck" -name '*.tmp')" ] || fail "temporary file left behind"
[ -e "$mnt/ck/step-0000000003" ] && fail "empty step directory left behind"
"$fb" ckpt verify "$mnt/ck" || fail "old checkpoints do not verify"
out=$("$sample" --restore "$mnt/ck" 0 1) || fail "restore: $out"
echo "$out" | grep -q 'restored 2' || fail "restore should give step 2: $out"
echo PASS
