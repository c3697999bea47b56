#!/bin/bash
# `firebreak ckpt ls|verify|inspect` on checkpoints written through the API
# by three ranks, then on a corrupted shard.
set -u
fb=$1 sample=$2
dir=$(mktemp -d /tmp/fb-ckpt-cli.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
ck=$dir/checkpoints

for r in 0 1 2; do "$sample" "$ck" $r 3 10 30 10 >/dev/null || fail "sample rank $r"; done
"$sample" "$ck" 0 3 40 40 >/dev/null || fail "sample step 40"   # rank 0 only

out=$("$fb" ckpt ls "$ck") || fail "ls exit $?"
echo "$out"
echo "$out" | grep -Eq '^30 +complete +3/3' || fail "ls: step 30 not complete"
echo "$out" | grep -Eq '^40 +incomplete +1/3' || fail "ls: step 40 not incomplete"
echo "$out" | grep -Eq '^10 ' && fail "ls: step 10 should have been deleted (keep 2)"
last=$("$fb" ckpt ls "$ck" --json | tail -n 1)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert d["complete"]==2 and d["checkpoints"][0]["step"]==40 and not d["checkpoints"][0]["complete"], d' "$last" || fail "ls --json: $last"

"$fb" ckpt verify "$ck" || fail "verify of good checkpoints exit $?"
shard=$ck/step-0000000030/rank-00001.safetensors
size=$(stat -c %s "$shard")
# flip one byte in the data of tensor model.U8 (inspect says where it is)
off=$("$fb" ckpt inspect "$shard" --json | tail -n 1 | python3 -c 'import json,sys; d=json.load(sys.stdin); t=[t for t in d["tensors"] if t["name"]=="model.U8"][0]; print(8+d["header_bytes"]+t["data_offsets"][0]+2)')
printf '\x5a' | dd of="$shard" bs=1 seek="$off" conv=notrunc status=none
[ "$(stat -c %s "$shard")" = "$size" ] || fail "size changed"
out=$("$fb" ckpt verify "$ck"); rc=$?
echo "$out"
[ $rc = 1 ] || fail "verify of a corrupt shard: exit $rc, wanted 1"
echo "$out" | grep -q 'rank-00001.safetensors: tensor "model.U8"' || fail "verify did not name shard and tensor"
last=$("$fb" ckpt verify "$ck" --step 30 --json | tail -n 1)
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); assert not d["ok"] and d["failed"]==1 and d["failures"][0]["rank"]==1, d' "$last" || fail "verify --json: $last"
"$fb" ckpt verify "$ck" --step 20 >/dev/null || fail "step 20 should verify"
"$fb" ckpt verify "$ck" --step 99 >/dev/null 2>&1; [ $? = 2 ] || fail "verify of a missing step should exit 2"
# Nothing to verify is not a pass (a script gating on the exit code).
mkdir -p "$dir/run/checkpoints"
"$fb" ckpt verify "$dir/run/checkpoints" >/dev/null 2>"$dir/err"; rc=$?
[ $rc = 2 ] || fail "verify of an empty directory: exit $rc, wanted 2"
grep -q 'no checkpoint to verify' "$dir/err" || fail "empty directory: $(cat "$dir/err")"
"$fb" ckpt verify "$dir/run" --json >"$dir/out" 2>"$dir/err"; rc=$?
[ $rc = 2 ] || fail "verify of a run directory without checkpoints: exit $rc, wanted 2"
grep -q "$dir/run/checkpoints: no checkpoint to verify" "$dir/err" || fail "run directory: $(cat "$dir/err")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert not d["ok"] and d["shards_checked"]==0, d' "$dir/out" \
    || fail "verify --json of an empty directory: $(cat "$dir/out")"
# A run directory stands for its checkpoints/ (where the supervisor keeps
# them): ls, verify and inspect take it.
mkdir "$dir/run2" && cp -r "$ck" "$dir/run2/checkpoints"
cols() { awk 'NF == 5 { print $1, $2, $3 }'; }
[ "$("$fb" ckpt ls "$dir/run2" | cols)" = "$("$fb" ckpt ls "$ck" | cols)" ] \
    || fail "ls of a run directory: $("$fb" ckpt ls "$dir/run2" 2>&1)"
"$fb" ckpt ls "$dir/run2" | tail -n 1 | grep -q " in $dir/run2/checkpoints\$" || fail "ls of a run directory: not named"
"$fb" ckpt verify "$dir/run2" --step 20 >/dev/null || fail "verify of a run directory: exit $?"
"$fb" ckpt inspect "$dir/run2" --step 20 --rank 2 | grep -q 'firebreak.world_size = 3' \
    || fail "inspect of a run directory"
rm -rf "$dir/run2"
# A directory with no checkpoint says where the runs are, on stderr (ls
# still lists nothing, exit 0): the runs below it, the run it is inside;
# a run's own empty checkpoints/ gets no hint.
mkdir -p "$dir/root/job-a/checkpoints" "$dir/root/job-a/logs"; : >"$dir/root/job-a/journal.sqlite"
"$fb" ckpt ls "$dir/root" >/dev/null 2>"$dir/err" || fail "ls of a directory of runs: exit $?"
grep -q "ckpt ls: $dir/root holds no checkpoint, but it holds 1 run directory (the newest $dir/root/job-a): give one" "$dir/err" \
    || fail "ls of a directory of runs: $(cat "$dir/err")"
"$fb" ckpt verify "$dir/root/job-a/logs" >/dev/null 2>"$dir/err"; rc=$?
[ $rc = 2 ] && grep -q "it is inside the run directory $(realpath "$dir/root/job-a"): give that one" "$dir/err" \
    || fail "verify inside a run: exit $rc: $(cat "$dir/err")"
for p in "$dir/root/job-a" "$dir/root/job-a/checkpoints"; do
    "$fb" ckpt ls "$p" >/dev/null 2>"$dir/err" && [ ! -s "$dir/err" ] || fail "ls $p: $(cat "$dir/err")"
done
# A shard, or a step's directory, inside the run's checkpoints/ is no
# directory "holding no checkpoint": inspect of the shard says nothing
# more; ls of the step directory says what it is.
cp -r "$ck/step-0000000020" "$dir/root/job-a/checkpoints/"
"$fb" ckpt inspect "$dir/root/job-a/checkpoints/step-0000000020/rank-00000.safetensors" \
    >/dev/null 2>"$dir/err" && [ ! -s "$dir/err" ] || fail "inspect of a run's shard: $(cat "$dir/err")"
"$fb" ckpt ls "$dir/root/job-a/checkpoints/step-0000000020/" >/dev/null 2>"$dir/err" \
    || fail "ls of a step directory: exit $?"
! grep -q "holds no checkpoint" "$dir/err" \
    && grep -q "checkpoints/step-0000000020/ is the directory of checkpoint step 20, not a checkpoint directory: give the directory above it\$" "$dir/err" \
    || fail "ls of a step directory: $(cat "$dir/err")"
rm -rf "$dir/root"

# The rank whose shard is corrupt falls back to step 20.
out=$("$sample" --restore "$ck" 1 3 2>&1) || fail "restore rank 1: $out"
echo "$out" | grep -q 'restored 20' || fail "rank 1 should fall back to step 20: $out"
echo "$out" | grep -q 'not restoring checkpoint step 30' || fail "fallback not explained: $out"

out=$("$fb" ckpt inspect "$ck" --step 20 --rank 2) || fail "inspect exit $?"
echo "$out" | grep -q 'firebreak.world_size = 3' || fail "inspect: metadata"
echo "$out" | grep -Eq 'model.BF16 +BF16 +\[4,11\]' || fail "inspect: tensors"
# the table's columns line up: every row's hash starts where the header's does
echo "$out" | python3 -c '
import re, sys
rows = sys.stdin.read().split("tensors:\n")[1].splitlines()
col = {rows[0].index("hash")} | {re.search(r"  [0-9a-f]{16}  ", r).start() + 2 for r in rows[1:]}
assert len(col) == 1, rows' || fail "inspect: columns do not line up"
printf 'garbage!' > "$dir/bad.safetensors"
"$fb" ckpt inspect "$dir/bad.safetensors" 2>"$dir/err"; rc=$?
[ $rc = 1 ] || fail "inspect of garbage: exit $rc, wanted 1"
grep -q 'bad.safetensors' "$dir/err" || fail "error does not name the file"
"$fb" ckpt inspect "$dir/missing" 2>/dev/null; [ $? = 2 ] || fail "missing file: want 2"
"$fb" ckpt ls 2>/dev/null; [ $? = 2 ] || fail "usage error: want 2"
"$fb" ckpt frob "$ck" 2>/dev/null; [ $? = 2 ] || fail "unknown subcommand: want 2"
grep -q 'usage: firebreak ckpt' <<<"$("$fb" ckpt --help)" || fail "--help"

# Shards that disagree on the world size: rank 0 of a 1-rank run beside
# ranks 1-3 of a 4-rank run.  Counted by rank 0's world size the step
# looks complete (1/1); a step with any failed shard is never complete.
ws=$dir/ws
"$sample" "$ws" 0 1 240 240 >/dev/null || fail "sample world 1"
for r in 1 2 3; do "$sample" "$ws" $r 4 240 240 >/dev/null || fail "sample $r"; done
out=$("$fb" ckpt verify "$ws"); rc=$?
echo "$out"
[ $rc = 1 ] || fail "verify of mixed world sizes: exit $rc, wanted 1"
echo "$out" | grep -q 'FAIL step 240 rank 2: .*firebreak.world_size is "4", expected 1' ||
    fail "verify did not name the world size"
echo "$out" | grep -q '^step 240: complete' && fail "a step with failures called complete"
echo "$out" | grep -q '^step 240: FAILED, 1/1 shards (not restorable)' || fail "step line"

# inspect DIR: the newest step with the rank's shard, saying what it passed
# (a save cut short leaves a newer step without it); it was an error.
mkdir "$ck/step-0000000070"
"$fb" ckpt inspect "$ck" >"$dir/out" 2>"$dir/err" || fail "inspect past an empty step: exit $?: $(cat "$dir/err")"
grep -q "step 70 has no shard of rank 0 (incomplete): step 40" "$dir/err" || fail "said: $(cat "$dir/err")"
grep -q "step-0000000040/rank-00000.safetensors: " "$dir/out" || fail "inspected: $(head -1 "$dir/out")"
# (rank 1's shard of step 30 was set aside by its restore above: step 20)
"$fb" ckpt inspect "$ck" --rank 1 2>"$dir/err" | grep -q "step-0000000020/rank-00001.safetensors: " ||
    fail "inspect --rank 1: $(cat "$dir/err")"
rmdir "$ck/step-0000000070"
# A tensor name with control bytes is shown with '?', not sent to the terminal.
python3 - "$dir/ctl.safetensors" <<'PY'
import json, struct, sys
h = json.dumps({"a\u0007b\u001b[2J": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + b"\0" * 4)
PY
"$fb" ckpt inspect "$dir/ctl.safetensors" >"$dir/out" 2>&1 || fail "inspect ctl: $(cat "$dir/out")"
grep -q $'\x07\|\x1b' "$dir/out" && fail "control bytes printed: $(cat -v "$dir/out")"
grep -q 'a?b?\[2J' "$dir/out" || fail "name not shown: $(cat -v "$dir/out")"

# Checkpoints that are all incomplete (the first save of a job cut short):
# nothing bad, and nothing to restore from either: not ok, exit 1, said.
inc=$dir/inc
"$sample" "$inc" 0 2 50 50 >/dev/null || fail "sample incomplete"     # rank 0 of 2
"$fb" ckpt verify "$inc" >"$dir/out" 2>"$dir/err"; rc=$?
[ $rc = 1 ] || fail "verify of incomplete checkpoints only: exit $rc, wanted 1"
grep -q "no checkpoint is restorable (every one incomplete)" "$dir/err" || fail "said: $(cat "$dir/err")"
"$fb" ckpt verify "$inc" --json 2>/dev/null | tail -n 1 | python3 -c 'import json,sys; d=json.load(sys.stdin); assert not d["ok"] and d["failed"]==0 and d["restorable"]==0 and d["newest_restorable"] is None, d' ||
    fail "verify --json of incomplete checkpoints"
# --step of an incomplete one, where an older one is complete: that one
# is asked about, so exit 1; without --step the older one is enough.
"$fb" ckpt verify "$ck" --step 40 >/dev/null 2>"$dir/err"; rc=$?
[ $rc = 1 ] || fail "verify --step of an incomplete step: exit $rc, wanted 1"
grep -q "step 40 is not restorable (incomplete, 1/3 shards)" "$dir/err" || fail "said: $(cat "$dir/err")"
good=$dir/good
for r in 0 1 2; do "$sample" "$good" $r 3 10 20 10 >/dev/null || fail "sample good $r"; done
"$sample" "$good" 0 3 30 30 >/dev/null || fail "sample good 30"
"$fb" ckpt verify "$good" >/dev/null || fail "verify with an older complete step: exit $?"
"$fb" ckpt verify "$good" --json | tail -n 1 | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["ok"] and d["restorable"]==2 and d["newest_restorable"]==20, d' ||
    fail "verify --json: newest restorable"
# --replicas does not call a step whose shards it could not read "agree".
out=$("$fb" ckpt verify "$ck" --replicas --step 40 2>/dev/null)
echo "$out" | grep -q '^step 40: .*2 of 3 shards missing or unreadable, not compared' ||
    fail "replicas of a step with missing shards: $out"
echo "$out" | grep -q 'replicas agree' && fail "replicas agree without comparing: $out"
# One digit of a slice's recorded place changed (metadata the tensors'
# hashes do not cover): verify fails the shard by its header hash (it said
# ok, and every restore stopped at that step as at a program error), and a
# restore falls back to the older step.
hh=$dir/hh
"$sample" "$hh" 0 1 10 20 10 >/dev/null || fail "sample hh"
shard=$hh/step-0000000020/rank-00000.safetensors
python3 - "$shard" <<'PY' || fail "no global_shape.model.U8 in $(head -c 300 "$shard")"
import sys
b = bytearray(open(sys.argv[1], "rb").read())
k = b'"firebreak.global_shape.model.U8":"'
i = b.index(k) + len(k)
b[i] = ord("1") if b[i] != ord("1") else ord("2")  # same length: one digit
open(sys.argv[1], "wb").write(b)
PY
"$fb" ckpt verify "$hh" >"$dir/out" 2>&1; rc=$?
[ $rc = 1 ] && grep -q "rank-00000.safetensors: its header does not match its firebreak.header_hash" "$dir/out" ||
    fail "verify of a changed place: exit $rc: $(cat "$dir/out")"
out=$("$sample" --restore "$hh" 0 1 2>&1) || fail "restore: $out"
echo "$out" | grep -q 'restored 10' || fail "restore of a changed place: $out"
# and the shard is set aside (rank-R.corrupt) as for a data hash, so that
# every other rank's restore passes the step over too (it kept its name:
# the other ranks restored step 20, this one step 10)
[ -e "$hh/step-0000000020/rank-00000.corrupt" ] && [ ! -e "$shard" ] ||
    fail "the shard with a bad header hash not set aside: $(ls "$hh/step-0000000020")"
# A step directory the reader may not read is said by ls and verify (it
# was left out without a word: verify passed, restore skipped it unsaid).
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    nb="setpriv --reuid=65534 --regid=65534 --clear-groups"
    un=$dir/unread
    "$sample" "$un" 0 1 10 20 10 >/dev/null || fail "sample unread"
    chmod 755 "$dir"; chown -R 65534:65534 "$un"; chmod 000 "$un/step-0000000010"
    $nb "$fb" ckpt ls "$un" | grep -Eq '^10 +unreadable .*Permission denied' ||
        fail "ls of an unreadable step: $($nb "$fb" ckpt ls "$un" 2>&1)"
    $nb "$fb" ckpt verify "$un" >"$dir/out" 2>&1; rc=$?
    [ $rc = 1 ] && grep -q "FAIL step 10: its directory cannot be read: Permission denied" "$dir/out" ||
        fail "verify of an unreadable step: exit $rc: $(cat "$dir/out")"
    chmod 700 "$un/step-0000000010"
fi
echo PASS
