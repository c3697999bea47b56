#!/usr/bin/env bash
# torch.sh FIREBREAK SRCDIR -- an unmodified PyTorch DDP script
# (examples/ddp_train.py, gloo on CPU, torchrun's environment contract)
# across separate hosts under `--launcher slurm`, one rank on each of
# node1 and node2, MASTER_ADDR node1's address (two ranks: with three,
# gloo's sums are not bit-reproducible across a resume, see docs/slurm.md):
#   1. fault-free: the reference hash;
#   2. rank 1 SIGKILLed on node2 after a checkpoint: the incident names
#      rank 1 and node2, the job resumes from its checkpoint and ends with
#      the reference hash.  Rank 1 stops itself (SIGSTOP) before step 41
#      of attempt 0, where the test finds and kills it: rank 0 cannot pass
#      step 41 without it, so the kill falls between the checkpoints of
#      steps 30 and 60 however loaded the machine (a kill timed from rank
#      0's log came after step 60 at load 150-250);
#   3. rank 1 stops in Python (a sleep) at step 40 on node2: a hang of
#      rank 1 on node2, and node2's watcher asked its Python hooks for
#      their dumps before the snapshot: the incident says where rank 1's
#      main thread was (its script and line); resumed, the reference hash.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
$PY -c 'import torch' 2>/dev/null || { echo "SKIP: $PY has no torch"; exit 0; }
cp "$SRC/examples/ddp_train.py" "$T/ddp_slurm.py"
# gloo binds where the hostname resolves unless told: each node's one
# interface is eth0.
export GLOO_SOCKET_IFNAME=eth0

# salloc exits 1 for a command killed by most signals (0 for SIGKILL): a
# shell between them says how the supervisor itself ended (the shell
# names a signal that killed it, too).
start() { # DIR [firebreak options...]
    local d=$1 script=${SCRIPT:-ddp_slurm.py}
    shift
    salloc -Q -N2 -w node1,node2 bash -c '"$@"; rc=$?
        [ $rc = 0 ] || echo "torch.sh: firebreak run exited $rc" >&2
        exit $rc' sh "$FB" run --launcher slurm --run-dir "$T/$d" \
        --json --max-restarts 2 "$@" -- $PY "$T/$script" --steps 90 --hidden 64 \
        --batch 16 --ckpt-every 30 --log-every 10 --sleep-ms 40 >"$T/$d.json" 2>"$T/$d.err"
}
q() { sqlite3 "$T/$1/journal.sqlite" "$2"; }
hash_in() { sed -n 's/^final_hash=//p' "$T/$1/logs/slurm-attempt-$2/rank-0.log"; }

# 1. Fault-free.
start ref || fail "fault-free run exited $? ($(tail -n 5 "$T/ref.err"))"
want=$(hash_in ref 0)
[ -n "$want" ] || fail "no final hash: $(tail -n 5 "$T/ref/logs/slurm-attempt-0/rank-0.log")"
ok "fault-free DDP on node1 and node2: $want"

# 2. Rank 1 killed on node2 while stopped before step 41 (the checkpoint
# of step 30 written, that of step 60 not possible).
sed 's/^\( *\)for step in range(start + 1, args.steps + 1):$/&\n\1    if rank == 1 and step == 41 and os.environ.get("FIREBREAK_ATTEMPT") == "0":\n\1        os.kill(os.getpid(), __import__("signal").SIGSTOP)/' \
    "$T/ddp_slurm.py" >"$T/ddp_stop.py"
grep -q "SIGSTOP" "$T/ddp_stop.py" || fail "could not make the stopping script"
SCRIPT=ddp_stop.py start kill &
apid=$!
log=$T/kill/logs/slurm-attempt-0/rank-0.log
victim=
for _ in $(seq 1 600); do
    for p in $(pgrep -f -- "ddp_stop.py"); do
        [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" = T ] || continue
        env=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null) || continue
        if grep -qx "SLURM_PROCID=1" <<<"$env" && grep -qx "RANK=1" <<<"$env" &&
            grep -qx "SLURMD_NODENAME=node2" <<<"$env"; then victim=$p; fi
    done
    [ -n "$victim" ] && break
    sleep 0.1
done
[ -n "$victim" ] || fail "rank 1 (RANK=1) not found stopped on node2: $(tail -n 3 "$log" "$T/kill.err")"
for _ in $(seq 1 100); do grep -q "^step 40/" "$log" && break; sleep 0.1; done
grep -q "^step 40/" "$log" || fail "attempt 0 did not reach step 40: $(tail -n 3 "$log")"
kill -9 "$victim"
wait $apid || fail "run exited $? ($(tail -n 5 "$T/kill.err"))"
[ "$(json_field "$T/kill.json" '["completed"]')" = True ] || fail "not completed"
[ "$(q kill "select kind || ' ' || rank || ' ' || node from incident")" = "crash 1 node2" ] \
    || fail "incident: $(q kill "select kind, rank, node, detail from incident")"
grep -q "resuming from step 30" "$T/kill/logs/slurm-attempt-1/rank-0.log" \
    || fail "attempt 1 did not resume from step 30: $(head -n 2 "$T/kill/logs/slurm-attempt-1/rank-0.log")"
[ "$(hash_in kill 1)" = "$want" ] || fail "restarted run ended with $(hash_in kill 1), not $want"
ok "rank 1 killed on node2: resumed from step 30, same hash"

# 3. Rank 1 hangs in Python on node2 (the GIL released: its hooks answer).
sed 's/^\( *\)for step in range(start + 1, args.steps + 1):$/&\n\1    if rank == 1 and step == 40 and os.environ.get("FIREBREAK_ATTEMPT") == "0":\n\1        while True: time.sleep(1)/' \
    "$T/ddp_slurm.py" >"$T/ddp_hang.py"
grep -q "while True: time.sleep(1)" "$T/ddp_hang.py" || fail "could not make the hanging script"
line=$(grep -n "while True: time.sleep(1)" "$T/ddp_hang.py" | cut -d: -f1)
SCRIPT=ddp_hang.py start hang --hang-timeout 5s || fail "hang run exited $? ($(tail -n 5 "$T/hang.err"))"
inc=$(q hang "select kind || ' ' || rank || ' ' || node from incident")
detail=$(q hang "select detail from incident")
[ "$inc" = "hang 1 node2" ] || fail "hang incident: $inc: $detail"
echo "$detail" | grep -q "rank 1 was at .*ddp_hang.py:$line" \
    || fail "the incident does not say where rank 1 was (line $line): $detail"
[ "$(hash_in hang 1)" = "$want" ] || fail "hang run ended with $(hash_in hang 1), not $want"
ok "rank 1 hung in Python on node2: $detail"
