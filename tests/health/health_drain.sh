#!/bin/bash
# health_drain.sh FIREBREAK NVML_DOUBLE FIXTURES -- `health --drain` runs
# `scontrol update NodeName=<node> State=DRAIN Reason="firebreak: ..."` on
# a failure (and only then), checked with a fake scontrol on PATH that
# records its arguments.
set -u
fb=$1 double=$2 fx=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
mkdir "$tmp/bin"
cat > "$tmp/bin/scontrol" <<'S'
#!/bin/bash
for a in "$@"; do printf '%s\n' "$a"; done > "$SCONTROL_LOG"
exit ${SCONTROL_EXIT:-0}
S
chmod +x "$tmp/bin/scontrol"
export PATH="$tmp/bin:$PATH" SCONTROL_LOG="$tmp/args" FIREBREAK_NVML_LIB=$double

# a lost GPU on node "gpu-node-17" (SLURMD_NODENAME, as under slurmd)
SLURMD_NODENAME=gpu-node-17 FIREBREAK_NVML_SCENARIO=$fx/gpu-lost/nvml.txt \
    "$fb" health --root "$fx/gpu-lost" --min-free 1M --drain >/dev/null 2>"$tmp/err"
rc=$?
[ $rc = 2 ] || { echo "FAIL: exit $rc, expected 2"; fails=$((fails + 1)); }
if [ ! -f "$tmp/args" ]; then
    echo "FAIL: scontrol was not called"; cat "$tmp/err"; fails=$((fails + 1))
else
    mapfile -t args < "$tmp/args"
    [ "${args[0]}" = update ] && [ "${args[1]}" = NodeName=gpu-node-17 ] &&
        [ "${args[2]}" = State=DRAIN ] && [ "${#args[@]}" = 4 ] ||
        { echo "FAIL: scontrol args: ${args[*]}"; fails=$((fails + 1)); }
    case "${args[3]}" in
        "Reason=firebreak: gpu3.present: GPU 3"*"GPU is lost"*) ;;
        *) echo "FAIL: reason: ${args[3]}"; fails=$((fails + 1)) ;;
    esac
fi
grep -q "drained this node" "$tmp/err" || { echo "FAIL: no drain message"; fails=$((fails + 1)); }

# --node overrides SLURMD_NODENAME; without either the hostname is used
rm -f "$tmp/args"
SLURMD_NODENAME=ignored FIREBREAK_NVML_SCENARIO=$fx/uncorrectable-ecc/nvml.txt \
    "$fb" health --root "$fx/uncorrectable-ecc" --min-free 1M --drain --node n42 >/dev/null 2>&1
grep -qx "NodeName=n42" "$tmp/args" 2>/dev/null || { echo "FAIL: --node"; fails=$((fails + 1)); }
rm -f "$tmp/args"
env -u SLURMD_NODENAME FIREBREAK_NVML_SCENARIO=$fx/uncorrectable-ecc/nvml.txt \
    "$fb" health --root "$fx/uncorrectable-ecc" --min-free 1M --drain >/dev/null 2>&1
grep -qx "NodeName=$(hostname)" "$tmp/args" 2>/dev/null || { echo "FAIL: hostname default"; fails=$((fails + 1)); }

# warnings and healthy nodes are not drained
rm -f "$tmp/args"
FIREBREAK_NVML_SCENARIO=$fx/thermal-slowdown/nvml.txt \
    "$fb" health --root "$fx/thermal-slowdown" --min-free 1M --drain >/dev/null 2>&1
rc=$?
[ $rc = 1 ] && [ ! -f "$tmp/args" ] || { echo "FAIL: warn drained (exit $rc)"; fails=$((fails + 1)); }

# scontrol failing is reported; the verdict stays fail
SCONTROL_EXIT=1 FIREBREAK_NVML_SCENARIO=$fx/gpu-lost/nvml.txt \
    "$fb" health --root "$fx/gpu-lost" --min-free 1M --drain --json >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 2 ] && grep -q "drain failed" "$tmp/err" && tail -n 1 "$tmp/out" | jq -e '.verdict == "fail"' >/dev/null ||
    { echo "FAIL: scontrol failure (exit $rc)"; cat "$tmp/err"; fails=$((fails + 1)); }

[ $fails = 0 ] && echo "health drain: all passed"
exit $((fails > 0))
