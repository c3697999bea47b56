#!/bin/bash
# health_bad_sysfs.sh FIREBREAK FIXTURES -- sysfs values that cannot be
# used never read as ok: a 5 GB file (sparse: no disk), a 3-byte file of
# NUL bytes, a FIFO (which must not hang the check), and the same for the
# kernel log read from a file, make their check
# "unknown", exit 3, with the file named; a definite failure elsewhere
# still exits 2; `watch --health` (the supervisor's view, which knows
# ok / warn / fail) says warn; control bytes from sysfs never reach the
# terminal raw.  Each case is a copy of the healthy fixture with one file
# planted, every run bounded by timeout.
set -u
fb=$1 fx=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# tree NAME: a fresh copy of the healthy tree; prints its path
tree() {
    rm -rf "$tmp/$1"
    cp -r "$fx/healthy" "$tmp/$1"
    echo "$tmp/$1"
}
# expect TREE WANT_EXIT JQ_FILTER WHAT: run health on TREE, check the exit
# and that the filter holds on the JSON
expect() {
    local t=$1 want=$2 filter=$3 what=$4
    timeout 10 "$fb" health --root "$t" --no-gpu --min-free 1M --json \
        >"$tmp/out" 2>"$tmp/err"
    local rc=$?
    [ $rc = "$want" ] || fail "$what: exit $rc, want $want (124: it hung): $(tail -c 400 "$tmp/out") $(cat "$tmp/err")"
    tail -n 1 "$tmp/out" | jq -e "$filter" >/dev/null 2>&1 ||
        fail "$what: not ($filter): $(tail -n 1 "$tmp/out" | jq -c '[.checks[] | select(.status != "ok")]' 2>/dev/null)"
}
edac=sys/devices/system/edac/mc

t=$(tree big)
truncate -s 5G "$t/$edac/mc0/ce_count"
expect "$t" 3 '.verdict == "unknown" and ([.checks[] | select(.name == "host.edac" and .status == "unknown" and (.detail | test("mc0/ce_count: oversized")))] | length == 1)' \
    "5 GB ce_count"

t=$(tree nul)
printf '\0\0\0' >"$t/$edac/mc1/ue_count"
expect "$t" 3 '.verdict == "unknown" and ([.checks[] | select(.name == "host.edac" and .status == "unknown" and (.detail | test("mc1/ue_count: not a value")))] | length == 1)' \
    "3 NUL bytes in ue_count"

t=$(tree fifo)
rm "$t/sys/class/thermal/thermal_zone0/temp"
mkfifo "$t/sys/class/thermal/thermal_zone0/temp"
expect "$t" 3 '[.checks[] | select(.name == "host.thermal.thermal_zone0" and .status == "unknown" and (.detail | test("thermal_zone0/temp.*not a regular file")))] | length == 1' \
    "FIFO as a thermal zone's temp"

t=$(tree ibfifo)
rm "$t/sys/class/infiniband/mlx5_0/ports/1/state"
mkfifo "$t/sys/class/infiniband/mlx5_0/ports/1/state"
truncate -s 5G "$t/sys/class/infiniband/mlx5_1/ports/1/counters/symbol_error"
expect "$t" 3 '([.checks[] | select(.name == "ib.mlx5_0.1" and .status == "unknown" and (.detail | test("state: not a regular file")))] | length == 1) and ([.checks[] | select(.name == "ib.mlx5_1.1" and .status == "unknown" and (.detail | test("symbol_error: oversized")))] | length == 1)' \
    "FIFO as an IB port state, 5 GB IB counter"

t=$(tree aer)
aer=$(ls -d "$t"/sys/bus/pci/devices/*/ | head -n 1)
if [ -n "$aer" ] && [ -e "$aer/aer_dev_fatal" ]; then
    truncate -s 5G "$aer/aer_dev_fatal"
    expect "$t" 3 '[.checks[] | select((.name | startswith("pcie.aer.")) and .status == "unknown" and (.detail | test("aer_dev_fatal: oversized")))] | length == 1' \
        "5 GB aer_dev_fatal"
fi

# the kernel log as a plain file is read up to 256 MiB; past that, or as
# a FIFO, the XID check cannot decide (and does not read 5 GB or hang)
t=$(tree kmsgbig)
truncate -s 5G "$t/dev/kmsg"
expect "$t" 3 '[.checks[] | select(.name == "kernel.xid" and .status == "unknown" and (.detail | test("larger than 256 MiB")))] | length == 1' \
    "5 GB kernel log"
t=$(tree kmsgfifo)
rm "$t/dev/kmsg" && mkfifo "$t/dev/kmsg"
expect "$t" 3 '[.checks[] | select(.name == "kernel.xid" and .status == "unknown" and (.detail | test("not a regular file")))] | length == 1' \
    "FIFO as the kernel log"

# a definite failure beats a check that cannot decide
t=$(tree both)
truncate -s 5G "$t/$edac/mc0/ce_count"
echo "1: DOWN" >"$t/sys/class/infiniband/mlx5_0/ports/1/state"
expect "$t" 2 '.verdict == "fail" and ([.checks[] | select(.status == "unknown")] | length == 1)' \
    "a port down and an oversized counter"

# the supervisor's view: watch --health knows ok / warn / fail; an
# unknown node is warn there (not excluded), with the file in the reason
t=$(tree big)
truncate -s 5G "$t/$edac/mc0/ce_count"
out=$(FIREBREAK_HEALTH_ROOT=$t timeout 10 "$fb" watch --health --node n1 2>&1)
case "$out" in
"fbw1 health n1 warn firebreak: host.edac: "*mc0/ce_count*) ;;
*) fail "watch --health with an oversized counter: $out" ;;
esac

# sysfs text with a terminal escape (a thermal zone's type) is printed
# with the control byte as '?', in the text and in the JSON
t=$(tree esc)
printf 'evil\033[2Jzone\n' >"$t/sys/class/thermal/thermal_zone0/type"
echo 150000 >"$t/sys/class/thermal/thermal_zone0/temp"
timeout 10 "$fb" health --root "$t" --no-gpu --min-free 1M >"$tmp/out" 2>&1
grep -q "$(printf '\033')" "$tmp/out" && fail "a raw ESC from sysfs reached the terminal"
grep -q 'evil?\[2Jzone' "$tmp/out" || fail "the zone type is not shown sanitized: $(cat "$tmp/out")"

[ $fails = 0 ] && echo "health_bad_sysfs: ok"
exit $fails
