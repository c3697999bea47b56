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
echo PASS
