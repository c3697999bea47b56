#!/bin/bash
# cli_output_errors FIREBREAK REPORT_GEN TESTS_DIR -- no command exits 0
# when what it printed was lost: every command's --help and every --json
# form with stdout on /dev/full (a write fails with ENOSPC) and with stdout
# closed exit 2 (health: 3, could not check) with a message on stderr
# (on /dev/full: the write's own "No space left on device");
# `report --html /dev/full` exits 2 and does not claim the page was
# written.  The same commands with stdout on /dev/null exit 0, so the
# failure is the output's.
set -u
fb=$1 gen=$2 tests=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
[ -c /dev/full ] || { echo "no /dev/full here: skipped"; exit 0; }

# full WANT ARGS...: stdout on /dev/full, and closed: exit WANT and a
# message on stderr; stdout on /dev/null: exit 0.
full() {
    local want=$1 rc
    shift
    timeout 60 "$fb" "$@" >/dev/null 2>"$tmp/err"
    rc=$?
    [ $rc = 0 ] || { fail "firebreak $* >/dev/null: exit $rc, want 0: $(head -c 300 "$tmp/err")"; return; }
    timeout 60 "$fb" "$@" >/dev/full 2>"$tmp/err"
    rc=$?
    [ $rc = "$want" ] || fail "firebreak $* >/dev/full: exit $rc, want $want"
    # the write's own error (stdio keeps only a flag: "Input/output
    # error" was said when an earlier flush had failed)
    grep -q "No space left on device" "$tmp/err" ||
        fail "firebreak $* >/dev/full: no message on stderr naming ENOSPC: $(head -c 300 "$tmp/err")"
    timeout 60 "$fb" "$@" >&- 2>"$tmp/err"
    rc=$?
    [ $rc = "$want" ] || fail "firebreak $* >&-: exit $rc, want $want"
}

full 2 --help
full 2 --version
for c in run demo ckpt fr agent report sim watch; do
    full 2 "$c" --help
done
full 3 health --help
# "firebreak help COMMAND" is that command's --help (it crashed for run,
# whose option rewriting wrote into a string literal): the same text
for c in run demo ckpt fr agent report sim watch health slurm-epilog; do
    full "$([ $c = health ] && echo 3 || echo 2)" help "$c"
    cmp -s <("$fb" help "$c" 2>&1) <("$fb" "$c" --help 2>&1) || fail "help $c differs from $c --help"
done

# the --json forms, each on a small real input
fx=$tests/health/fixtures
"$gen" basic "$tmp/run" || fail "fb-report-gen"
mkdir -p "$tmp/ckpts"
fr_in=$tests/fr/data/torch/ok-json
full 3 health --root "$fx/healthy" --no-gpu --json
full 3 health --root "$fx/healthy" --no-gpu
full 2 report "$tmp/run" --json
full 2 report "$tmp/run"
full 2 sim --trials 20 --no-search --json
full 2 sim --trials 20 --no-search --csv
full 2 sim --trials 5 --sweep gpus=1024:2048 --json
full 2 ckpt ls "$tmp/ckpts" --json
full 2 fr analyze "$fr_in" --json
# a verdict's exit 1 (a hang) with the output lost is 2, never the verdict:
# a script gating on it would take the lost output for the analysis
for form in "" --json; do
    timeout 60 "$fb" fr analyze "$tests/fr/data/torch/hang-json" $form >/dev/null 2>&1
    [ $? = 1 ] || fail "fr analyze hang-json $form: want the verdict's exit 1"
    timeout 60 "$fb" fr analyze "$tests/fr/data/torch/hang-json" $form >/dev/full 2>/dev/null
    rc=$?
    [ $rc = 2 ] || fail "fr analyze hang-json $form >/dev/full: exit $rc, want 2"
done
full 2 run --json --run-dir "$tmp/r" -- true
# said once, with the write's own error (a second line said "Input/output
# error" after it)
"$fb" run --json --run-dir "$tmp/r" -- true >/dev/full 2>"$tmp/err"
[ "$(grep -c "cannot write" "$tmp/err")" = 1 ] && grep -q "No space left on device" "$tmp/err" ||
    fail "run --json >/dev/full said: $(grep "cannot write" "$tmp/err")"
full 2 agent --root "$fx/healthy" --once --quiet

# the files written for --html and --svg: every write checked.  First
# through a link to /dev/full: a writer that renames a temporary file over
# its target replaces the link, not the device.  Only when that is right
# is /dev/full itself given.
ln -s /dev/full "$tmp/full"
"$fb" report "$tmp/run" --html "$tmp/full" >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 2 ] || fail "report --html LINK-TO-/dev/full: exit $rc, want 2"
grep -q "HTML report" "$tmp/out" && fail "report --html LINK-TO-/dev/full claims the page was written"
grep -q "$tmp/full" "$tmp/err" || fail "report --html LINK-TO-/dev/full: message does not name the file: $(cat "$tmp/err")"
if [ $rc = 2 ] && [ -L "$tmp/full" ]; then
    "$fb" report "$tmp/run" --html /dev/full >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ $rc = 2 ] || fail "report --html /dev/full: exit $rc, want 2"
    grep -q "HTML report" "$tmp/out" && fail "report --html /dev/full claims the page was written"
    grep -q "/dev/full" "$tmp/err" || fail "report --html /dev/full: message does not name the file: $(cat "$tmp/err")"
    [ -c /dev/full ] || fail "report --html /dev/full replaced /dev/full"
fi
"$fb" report "$tmp/run" --html "$tmp/page.html" >"$tmp/out" 2>"$tmp/err" ||
    fail "report --html FILE: exit $?: $(cat "$tmp/err")"
grep -q "HTML report: $tmp/page.html" "$tmp/out" || fail "report --html FILE: not named"
grep -q "</html>" "$tmp/page.html" || fail "report --html FILE: page incomplete"
ls "$tmp" | grep -q "page.html.tmp" && fail "report --html left a temporary file"
"$fb" sim --trials 5 --sweep gpus=1024:2048 --svg "$tmp/full" >/dev/null 2>"$tmp/err"
rc=$?
[ $rc = 2 ] || fail "sim --svg LINK-TO-/dev/full: exit $rc, want 2"
grep -q "$tmp/full" "$tmp/err" || fail "sim --svg LINK-TO-/dev/full: message does not name the file"

[ $fails = 0 ] && echo "cli_output_errors: ok"
exit $fails
