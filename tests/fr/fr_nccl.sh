#!/bin/bash
# The NCCL profiler plugin, loaded and driven as NCCL would (no GPU): its
# events land in the rank's ring and the analyzer reads them.
set -u
FB=$1 DRIVE=$2 PLUGIN=$3
JOB=frnccl$$
trap 'rm -f /dev/shm/fb.$JOB.*' EXIT
FIREBREAK_JOB_ID=$JOB FIREBREAK_RANK=1 FIREBREAK_WORLD_SIZE=4 "$DRIVE" "$PLUGIN" || exit 1
"$FB" fr analyze /dev/shm/fb.$JOB.0.1 --json --min-wait 0 | tail -n 1 | python3 -c '
import json, sys
d = json.load(sys.stdin)
ok = d["events"] == 4 and d["verdict"] == "hang" and any(
    f["kind"] == "missing_ranks" and f["seq"] == 3 and f["op"] == "all_reduce"
    and f["group_name"] == "dp" for f in d["findings"])
print(("ok  " if ok else "FAIL") + " nccl plugin:", d["events"], "events;", d["summary"])
sys.exit(0 if ok else 1)'
