#!/usr/bin/env bash
# --console-ranks (torchrun's --local-ranks-filter / --tee; torchrun's
# underscore spellings are taken too): the chosen
# ranks' output also on stderr, each line after "[rankR]: ", made safe for
# a terminal, long lines cut; every byte still in logs/rank-R.log; nothing
# lost when a rank dies; a console that is not read does not stall ranks.
source "$(dirname "$0")/lib.sh"
log() { cat "$(run_dir)logs/rank-$1.log"; }

cat >"$T/rank.sh" <<'SH'
#!/bin/bash
# TAG
echo "out of rank $RANK"
printf 'err of rank %s \033]0;title\007\n' "$RANK" >&2
touch "MARKS/$RANK"
if [ "$RANK" = 2 ]; then
    # The others' lines first: once rank 2 dies they are stopped, and a
    # rank stopped before its echo (a loaded host) would have none.
    for _ in $(seq 1 300); do
        [ -e MARKS/0 ] && [ -e MARKS/1 ] && break
        sleep 0.1
    done
    head -c 5000 /dev/zero | tr '\0' L; echo
    for i in $(seq 1 500); do echo "line $i"; done
    printf 'no newline at the end'
    kill -9 $$
fi
SH
sed -i "s/TAG/$TAG/; s|MARKS|$T/marks|g" "$T/rank.sh"; chmod +x "$T/rank.sh"
mkdir "$T/marks"

# Default: the logs only, as always.
"$FB" run --nproc-per-node 3 --max-restarts 0 -- "$T/rank.sh" >/dev/null 2>err.txt && fail "rank 2 was killed"
grep -q '\[rank' err.txt && fail "rank output on the console by default: $(grep '\[rank' err.txt | head -3)"
log 0 | grep -q "out of rank 0" || fail "rank 0's log"
rm -rf runs "$T"/marks/*

"$FB" run --nproc-per-node 3 --max-restarts 0 --console-ranks 0,2 -- "$T/rank.sh" >/dev/null 2>err.txt && fail "rank 2 was killed"
grep -qx '\[rank0\]: out of rank 0' err.txt || fail "rank 0's stdout: $(cat err.txt)"
grep -qx '\[rank0\]: err of rank 0 ?\]0;title?' err.txt || fail "rank 0's stderr, made safe: $(grep rank0 err.txt)"
grep -q '\[rank1\]' err.txt && fail "rank 1 not chosen but shown"
grep -q $'\033' err.txt && fail "an escape reached the console"
# the log: raw and whole
log 0 | grep -q $'err of rank 0 \033]0;title\007' || fail "rank 0's log is not raw"
log 1 | grep -q "out of rank 1" || fail "rank 1's log"
[ "$(log 2 | grep -c '^L*$')" = 1 ] && [ "$(log 2 | grep '^LL*$' | tr -d '\n' | wc -c)" = 5000 ] ||
    fail "the long line is not whole in the log"
grep -q '^\[rank2\]: L\{2048\} \[firebreak: line cut; the log has it whole\]$' err.txt ||
    fail "the long line is not cut on the console: $(grep -c L err.txt)"
# a rank killed: every line it wrote, the last one without its newline too
[ "$(grep -c '^\[rank2\]: line [0-9]*$' err.txt)" = 500 ] || fail "rank 2's lines on the console: $(grep -c '^\[rank2\]: line' err.txt)"
grep -qx '\[rank2\]: no newline at the end' err.txt || fail "rank 2's last, unterminated line"
[ "$(log 2 | grep -c '^line [0-9]*$')" = 500 ] || fail "rank 2's log"
q "select last_lines from incident" | grep -q "no newline at the end" || fail "incident's last lines: $(q 'select last_lines from incident')"
rm -rf runs

# torchrun's spellings, underscores and all, as scripts carry them over:
# --nproc_per_node=3 --max_restarts 0 --local_ranks_filter 1
"$FB" run --nproc_per_node=3 --max_restarts 0 --local_ranks_filter 1 -- "$T/rank.sh" \
    >/dev/null 2>err.txt && fail "rank 2 was killed (torchrun spellings)"
grep -qx '\[rank1\]: out of rank 1' err.txt || fail "torchrun spellings: $(head -5 err.txt)"
grep -q '\[rank[02]\]' err.txt && fail "torchrun spellings: ranks 0 or 2 shown"
[ "$(q "select nproc from run")" = 3 ] || fail "torchrun spellings: nproc $(q 'select nproc from run')"
[ "$(q "select count(*) from attempt")" = 1 ] || fail "torchrun spellings: --max_restarts 0 not taken"
rm -rf runs "$T"/marks/*

# Bad values are usage errors.
for v in "" x 1- 3-1 "0,,1" -1; do
    "$FB" run --console-ranks "$v" -- true 2>err.txt && fail "--console-ranks '$v' accepted"
    grep -q "console-ranks" err.txt || fail "--console-ranks '$v': $(cat err.txt)"
done

"$FB" run --launcher mpirun --console-ranks 0 -- true 2>err.txt && fail "--console-ranks with mpirun accepted"
grep -q "console-ranks is for the local launcher" err.txt || fail "mpirun: $(cat err.txt)"

# A console that is not read: the rank's writes do not wait for it; the
# log gets everything; the console is told what it missed.
cat >"$T/loud.sh" <<'SH'
#!/bin/bash
# TAG
t0=$(date +%s%N)
for i in $(seq 1 40000); do echo "loud line $i of fifty bytes or so, padding.."; done
echo "$(( ($(date +%s%N) - t0) / 1000000 ))" >"$OUTDIR/write_ms"
SH
sed -i "s/TAG/$TAG/" "$T/loud.sh"; chmod +x "$T/loud.sh"
(OUTDIR=$T "$FB" run --nproc-per-node 1 --max-restarts 0 --console-ranks all -- "$T/loud.sh" \
    2>&1 >/dev/null; echo $? >"$T/rc") | (sleep 6; cat >"$T/console.txt")
[ "$(cat "$T/rc")" = 0 ] || fail "loud run: exit $(cat "$T/rc"): $(tail -3 "$T/console.txt")"
[ "$(log 0 | grep -c '^loud line')" = 40000 ] || fail "log lost lines: $(log 0 | grep -c '^loud line')"
ms=$(cat "$T/write_ms")
[ "$ms" -lt 5000 ] || fail "the rank waited for the console: $ms ms"
grep -q "lines\? of rank output not shown: the console did not keep up" "$T/console.txt" ||
    fail "lost console lines not said: $(tail -3 "$T/console.txt")"
ok "--console-ranks: prefixed, safe, cut, drained at death, never blocking"
