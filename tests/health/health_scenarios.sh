#!/bin/bash
# health_scenarios.sh FIREBREAK NVML_DOUBLE FIXTURES -- every fixture tree
# through `firebreak health --root ... --json` with the NVML double:
# expected exit code (Nagios: 0 ok, 1 warn, 2 fail, 3 could not check),
# verdict, and the status / category of the check that found the fault.
set -u
fb=$1 double=$2 fx=$3
fails=0

# run SCENARIO EXPECTED_EXIT [extra args...]; leaves the JSON in $json
run() {
    local s=$1 want=$2
    shift 2
    local out
    out=$(FIREBREAK_NVML_LIB=$double FIREBREAK_NVML_SCENARIO=$fx/$s/nvml.txt \
          "$fb" health --root "$fx/$s" --min-free 1M --json "$@")
    local rc=$?
    json=$(printf '%s\n' "$out" | tail -n 1)
    if [ "$rc" != "$want" ]; then
        echo "FAIL $s $*: exit $rc, expected $want"; echo "$json"; fails=$((fails + 1))
    fi
    if ! printf '%s' "$json" | jq -e '.version == "1.0" and (.checks | length) > 0' >/dev/null; then
        echo "FAIL $s: last line is not the health JSON object: $json"; fails=$((fails + 1))
    fi
}

# expect JQ_FILTER DESCRIPTION: the filter must be true on $json
expect() {
    if ! printf '%s' "$json" | jq -e "$1" >/dev/null 2>&1; then
        echo "FAIL $s: $2 ($1)"
        printf '%s' "$json" | jq -c '[.checks[] | select(.status != "ok")]'
        fails=$((fails + 1))
    fi
}
check() { # NAME STATUS [CATEGORY [COMPONENT]]
    local f=".checks[] | select(.name == \"$1\") | .status == \"$2\""
    [ $# -ge 3 ] && f="$f and .category == \"$3\""
    [ $# -ge 4 ] && f="$f and .component == \"$4\""
    expect "[$f] | any" "check $1 should be $2 ${3:-} ${4:-}"
}

s=healthy; run healthy 0 --expect-gpus 8
expect '.verdict == "ok" and .exit == 0 and .category == null' "healthy verdict"
expect '[.checks[] | select(.name | test("^gpu[0-7][.]present$"))] | length == 8' "8 GPUs checked"
expect '[.checks[] | select(.status == "warn" or .status == "fail")] | length == 0' "no warnings"
check gpu.count ok; check kernel.xid ok; check host.edac ok; check ib.mlx5_0.1 ok
check host.thermal.thermal_zone0 ok; check disk.shm ok
expect '.checks[] | select(.name == "disk.shm") | .detail | test("^node memory [^ ]+/dev/shm: [0-9.]+ GiB free")' "disk.shm detail names node memory and the path once"

s=gpu-lost; run gpu-lost 2 --expect-gpus 8
expect '.verdict == "fail" and .category == "GPU"' "GPU lost fails"
check gpu3.present fail GPU "Faulty GPU"
check kernel.xid79.0000:48:00 fail GPU "Faulty GPU"
expect '[.checks[] | select(.name == "gpu3.present") | .action | test("drain")] | any' "lost GPU: action drains"

s=hbm-remap-failure; run hbm-remap-failure 2
check gpu5.remap fail GPU "GPU HBM3 memory"
check kernel.xid64.0000:68:00 fail GPU "GPU HBM3 memory"

s=uncorrectable-ecc; run uncorrectable-ecc 2
check gpu2.ecc fail GPU "GPU HBM3 memory"
check kernel.xid48.0000:38:00 fail GPU "GPU HBM3 memory"
expect '[.checks[] | select(.name == "gpu2.ecc") | .detail | test("3 uncorrectable")] | any' "ECC count in the evidence"

s=thermal-slowdown; run thermal-slowdown 1
expect '.verdict == "warn"' "thermal slowdown warns"
check gpu6.thermal warn GPU "GPU thermal interface + sensor"
expect '[.checks[] | select(.name == "gpu6.thermal") | .detail | test("93 C")] | any' "temperature in the evidence"

s=pcie-downtrained; run pcie-downtrained 1
check gpu1.pcie warn Host "IO expansion board"
expect '[.checks[] | select(.name == "gpu1.pcie") | .detail | test("gen 3 x8")] | any' "link in the evidence"

s=nvlink-errors; run nvlink-errors 2
check gpu4.nvlink fail GPU
check kernel.xid74.0000:58:00 fail GPU
expect '[.checks[] | select(.name == "gpu4.nvlink") | .detail | test("link 3 down") and test("1234 errors")] | any' "links in the evidence"

s=app-xid; run app-xid 0
check kernel.xid13.0000:18:00 ok
check kernel.xid31.0000:18:00 ok
expect '[.checks[] | select(.name == "kernel.xid13.0000:18:00") | .detail | test("2x")] | any' "old and new XID line formats counted together"

s=old-xid; run old-xid 2
check kernel.xid79.0000:48:00 fail GPU
run old-xid 0 --since 1h
check kernel.xid ok

s=recovery-action; run recovery-action 2
check gpu7.recovery fail GPU
check kernel.xid154.0000:88:00 fail GPU

s=edac-ue; run edac-ue 2
check host.edac fail Host "System memory"

s=ib-down; run ib-down 2
check ib.mlx5_1.1 fail Network "Network switch/cable"
check ib.mlx5_0.1 ok

s=aer-fatal; run aer-fatal 2
check pcie.aer.0000:28:00.0 fail Host

s=host-hot; run host-hot 2
check host.thermal.thermal_zone1 fail Host "Server chassis"

s=malformed; run malformed 3
expect '.verdict == "unknown"' "malformed sysfs values cannot be decided (exit 3), never crash"
check host.edac unknown
expect '[.checks[] | select(.name == "host.edac") | .detail | test("mc0/ce_count")] | any' "names the bad file"
check ib.mlx5_0.1 unknown
check pcie.aer.0000:18:00.0 unknown
check host.thermal.thermal_zone0 unknown
check gpu0.thermal warn
check gpu0.power warn
expect '[.checks[] | select(.name == "kernel.xid") | .detail | test("malformed")] | any' "truncated log noted"

# no driver: skipped, fail only when GPUs are expected
s=no-driver
out=$("$fb" health --root "$fx/no-driver" --min-free 1M --json); rc=$?
json=$(printf '%s\n' "$out" | tail -n 1)
[ $rc = 0 ] || { echo "FAIL no-driver: exit $rc"; fails=$((fails + 1)); }
check gpu.count skipped
out=$("$fb" health --root "$fx/no-driver" --min-free 1M --json --expect-gpus 8); rc=$?
json=$(printf '%s\n' "$out" | tail -n 1)
[ $rc = 2 ] || { echo "FAIL no-driver --expect-gpus: exit $rc"; fails=$((fails + 1)); }
check gpu.count fail GPU

# NVML init failing is reported, and --expect-gpus catches a short count
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
printf 'init_error 9\n' > "$tmp/init.txt"
out=$(FIREBREAK_NVML_LIB=$double FIREBREAK_NVML_SCENARIO=$tmp/init.txt \
      "$fb" health --root "$fx/healthy" --min-free 1M --json --expect-gpus 8); rc=$?
json=$(printf '%s\n' "$out" | tail -n 1); s=init-error
[ $rc = 2 ] || { echo "FAIL init error: exit $rc"; fails=$((fails + 1)); }
expect '[.checks[] | select(.name == "gpu.count") | .detail | test("nvmlInit_v2 failed")] | any' "init failure named"
printf 'count 7\n' > "$tmp/seven.txt"
out=$(FIREBREAK_NVML_LIB=$double FIREBREAK_NVML_SCENARIO=$tmp/seven.txt \
      "$fb" health --root "$fx/healthy" --min-free 1M --json --expect-gpus 8); rc=$?
json=$(printf '%s\n' "$out" | tail -n 1); s=seven
[ $rc = 2 ] || { echo "FAIL 7 of 8 GPUs: exit $rc"; fails=$((fails + 1)); }
expect '[.checks[] | select(.name == "gpu.count") | .detail | test("7 GPUs visible, 8 expected")] | any' "short count named"

# free space below --min-free fails
out=$("$fb" health --root "$fx/no-driver" --min-free 1000000T --json); rc=$?
json=$(printf '%s\n' "$out" | tail -n 1); s=disk
[ $rc = 2 ] || { echo "FAIL disk: exit $rc"; fails=$((fails + 1)); }
check disk.shm fail Host SSD

# usage errors: exit 3, message on stderr; --help: exit 0 on stdout
"$fb" health --expect-gpus lots >/dev/null 2>"$tmp/err"; rc=$?
[ $rc = 3 ] && grep -q -- "--expect-gpus" "$tmp/err" || { echo "FAIL usage: exit $rc"; fails=$((fails + 1)); }
"$fb" health --root /nonexistent/dir >/dev/null 2>"$tmp/err"; rc=$?
[ $rc = 3 ] && grep -q "/nonexistent/dir" "$tmp/err" || { echo "FAIL bad root: exit $rc"; fails=$((fails + 1)); }
"$fb" health --bogus >/dev/null 2>&1; rc=$?
[ $rc = 3 ] || { echo "FAIL unknown option: exit $rc"; fails=$((fails + 1)); }
grep -q "Exit: 0 ok, 1 warn, 2 fail, 3 could not check" <<<"$("$fb" health --help)" || { echo "FAIL --help"; fails=$((fails + 1)); }

# text output names the failing check
FIREBREAK_NVML_LIB=$double FIREBREAK_NVML_SCENARIO=$fx/gpu-lost/nvml.txt \
    "$fb" health --root "$fx/gpu-lost" --min-free 1M > "$tmp/text"
grep -q "^fail *gpu3.present" "$tmp/text" && grep -q "verdict: fail" "$tmp/text" \
    || { echo "FAIL text output"; cat "$tmp/text"; fails=$((fails + 1)); }

# A root with nothing but /dev/shm: one check ok (not "1 checks"), and a
# kernel log that is not there is not a matter of running as root.
mkdir -p "$tmp/bare/dev/shm"
"$fb" health --root "$tmp/bare" --min-free 1M -v > "$tmp/text"
grep -q "kmsg: No such file or directory$" "$tmp/text" \
    || { echo "FAIL missing kernel log: $(grep kernel.xid "$tmp/text")"; fails=$((fails + 1)); }
"$fb" health --root "$tmp/bare" --min-free 1M > "$tmp/text"
grep -q "^ *1 check ok, 6 skipped" "$tmp/text" \
    || { echo "FAIL counts: $(cat "$tmp/text")"; fails=$((fails + 1)); }

# --ckpt-dir: a directory is checked; a file (a mistyped path) is not
# called ok with its file system's free space, but a warning (exit 1)
mkdir -p "$tmp/bare/ck"
: >"$tmp/bare/afile"
"$fb" health --root "$tmp/bare" --min-free 1M --ckpt-dir "$tmp/bare/ck" --json >"$tmp/j"
[ $? = 0 ] && tail -n 1 "$tmp/j" | jq -e '.checks[] | select(.name == "disk.ckpt") | .status == "ok"' >/dev/null \
    || { echo "FAIL --ckpt-dir DIR: $(tail -n 1 "$tmp/j")"; fails=$((fails + 1)); }
"$fb" health --root "$tmp/bare" --min-free 1M --ckpt-dir "$tmp/bare/afile" --json >"$tmp/j"
[ $? = 1 ] && tail -n 1 "$tmp/j" | jq -e '.checks[] | select(.name == "disk.ckpt") | .status == "warn" and (.detail | test("afile: not a directory$"))' >/dev/null \
    || { echo "FAIL --ckpt-dir FILE: $(tail -n 1 "$tmp/j")"; fails=$((fails + 1)); }

# The kernel log read as a file: a line longer than the reader's 16 KiB
# is dropped whole (its tail was read as a record of its own, and an XID
# written there failed the node); the kernel's segfault line of a process
# that named itself like an XID is no XID, nor is a driver's line written
# to /dev/kmsg by a program (facility LOG_USER: priority 14, never 0).
mkdir -p "$tmp/klog/dev/shm"
{ printf '6,7,1000,-;%s' "$(head -c 16373 /dev/zero | tr '\0' A)"
  printf '6,8,95000000000,-;NVRM: Xid (PCI:0000:2b:00): 48, pid=1, DBE\n'
  printf '6,9,96000000000,-;NVRM: Xid (0)79[4242]: segfault at 0 ip 0000000000401136 sp 00007ffd8c2b2e40 error 6 in a.out[401000+1000]\n'
  printf '6,10,97000000000,-;eth0: link up\n'
  printf '14,11,98000000000,-;NVRM: Xid (PCI:0000:2b:00): 79, pid=1, name=x, GPU has fallen off the bus.\n'
} >"$tmp/klog/dev/kmsg"
"$fb" health --root "$tmp/klog" --min-free 1M --json >"$tmp/j"; rc=$?
[ $rc = 0 ] && tail -n 1 "$tmp/j" | jq -e '[.checks[] | select(.name | startswith("kernel."))] | length == 1 and .[0].name == "kernel.xid" and (.[0].detail | test("in 3 kernel log records.*1 malformed records"))' >/dev/null \
    || { echo "FAIL kernel log, long line and forged XID: exit $rc: $(tail -n 1 "$tmp/j")"; fails=$((fails + 1)); }
# --since 0 is no window at all: refused (it read the whole log)
"$fb" health --root "$tmp/klog" --since 0 >/dev/null 2>"$tmp/err"; rc=$?
[ $rc = 3 ] && grep -q -- "--since '0': want a duration above 0" "$tmp/err" \
    || { echo "FAIL --since 0: exit $rc: $(cat "$tmp/err")"; fails=$((fails + 1)); }

[ $fails = 0 ] && echo "health scenarios: all passed"
exit $((fails > 0))
