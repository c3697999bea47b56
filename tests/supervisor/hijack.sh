#!/usr/bin/env bash
# Another local user plants a file under the name of a rank's next segment
# (the job id is world-readable in <run>/job) before a restart.  The rank
# refuses to write into it and says so; the supervisor refuses to read it,
# records a "segment_not_ours" incident naming the rank, the owner and the
# file, and neither crashes nor trusts the file's forged contents.  The
# next attempt (a new name) runs recorded and completes.
source "$(dirname "$0")/lib.sh"
if [ "$(id -u)" != 0 ]; then
    echo "skip: planting another uid's file needs root (chown)"
    exit 0
fi
planted=
at_exit+=('[ -z "$planted" ] || rm -f "$planted"')
rc=0
"$FB" run --nproc-per-node 1 --max-restarts 2 --json \
    --inject 'kill:rank=0,step=40' -- "$RANK" --steps 60 --sleep-ms 50 "$TAG" \
    >out.json 2>err.txt &
pid=$!
for _ in $(seq 100); do
    ls runs/*/job >/dev/null 2>&1 && [ -s "$(run_dir)/job" ] && break
    sleep 0.1
done
job=$(cat "$(run_dir)/job")
seg0=/dev/shm/fb.$job.0.0
for _ in $(seq 100); do [ -s "$seg0" ] && break; sleep 0.05; done
# A well-formed copy of the rank's own segment, with a report offset far
# past its end and a report head that says "read me": what an attacker
# who wants the supervisor to fault would write.
planted=/dev/shm/fb.$job.1.0
# Its supervisor_pid is this script, alive to the end, so a stale-segment
# sweep by an older firebreak elsewhere on the machine leaves it alone.
python3 - "$seg0" "$planted" $$ <<'PY'
import os, struct, sys
src, dst, keeper = sys.argv[1], sys.argv[2], int(sys.argv[3])
b = bytearray(open(src, 'rb').read())
struct.pack_into('<I', b, 28, 0xfffff000)        # report_offset
struct.pack_into('<i', b, 72, keeper)            # supervisor_pid
fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
os.write(fd, bytes(b))
os.fchown(fd, 65534, -1)
os.close(fd)
PY
wait $pid || rc=$?
[ "$rc" -lt 128 ] || fail "firebreak run died of signal $((rc - 128)) ($(tail -3 err.txt))"
[ "$rc" = 0 ] || fail "run exited $rc ($(tail -3 err.txt))"
[ "$(json_field out.json '["completed"]')" = True ] || fail "not completed"
[ "$(json_field out.json '["restarts"]')" = 2 ] || fail "restarts != 2"
[ "$(json_field out.json '["incidents"][0]["kind"]')" = crash ] || fail "first incident: $(tail -1 out.json)"
[ "$(json_field out.json '["incidents"][1]["kind"]')" = segment_not_ours ] \
    || fail "second incident: $(tail -1 out.json)"
[ "$(json_field out.json '["incidents"][1]["rank"]')" = 0 ] || fail "rank"
want="segment of rank 0 is not ours: owner uid 65534 mode 0600 ($planted"
grep -qF "$want" err.txt || fail "log: $(grep -i 'not ours' err.txt | head -3)"
q "select detail from incident where kind = 'segment_not_ours'" | grep -qF "$want" \
    || fail "incident detail: $(q 'select kind, detail from incident')"
[ "$(stat -c %u "$planted")" = 65534 ] || fail "the planted file was touched: $(ls -la "$planted" 2>&1); $(grep -i "not ours\|corrupt" err.txt | head -3)"
ok "planted segment refused by the supervisor; incident names $planted"

# The rank itself (the supervisor may stop it before it gets this far):
# fb_init fails loudly, naming the file and its owner, and leaves it alone.
# The program goes on, unrecorded (fb_init's contract): it exits 0.
out=$(FIREBREAK_JOB_ID=$job FIREBREAK_ATTEMPT=1 FIREBREAK_RANK=0 \
      "$RANK" --steps 1 --sleep-ms 1 "$TAG" 2>&1) || fail "the rank exited $?: $out"
echo "$out" | grep -qF "$planted already exists and is not ours (owner uid 65534, mode 0600)" \
    || fail "the rank did not say why it runs unrecorded: $out"
echo "$out" | grep -q "attached=0" || fail "the rank claims to be attached: $out"
[ "$(stat -c %u "$planted")" = 65534 ] || fail "the rank touched the planted file"
ok "the rank refuses the name loudly"
