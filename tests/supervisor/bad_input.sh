#!/usr/bin/env bash
# Bad usage exits 2 with a message on stderr; a missing or non-executable
# program is refused before anything is launched.
source "$(dirname "$0")/lib.sh"
expect2() {
    set +e
    "$FB" run "$@" >out.txt 2>err.txt
    local rc=$?
    set -e
    [ $rc = 2 ] || fail "'run $*' exited $rc, want 2"
    [ -s err.txt ] || fail "'run $*': nothing on stderr"
    [ ! -s out.txt ] || fail "'run $*': wrote to stdout"
}
expect2 --bogus -- /bin/true
expect2 --nproc-per-node 0 -- /bin/true
grep -q "nproc-per-node" err.txt || fail "message does not name the option"
expect2 --hang-timeout abc -- /bin/true
grep -q "bad duration 'abc'" err.txt || fail "duration message"
expect2 --launcher pbs -- /bin/true
# Durations are bounded: an overflowing or zero timeout is not "detection off".
expect2 --hang-timeout 99999999999999999h -- /bin/true
grep -q -- "--hang-timeout: '99999999999999999h' is out of range" err.txt || fail "overflow: $(cat err.txt)"
for opt in --hang-timeout --startup-timeout --ckpt-timeout --attach-timeout; do
    expect2 $opt 0 -- /bin/true
    grep -q -- "$opt: '0' is out of range" err.txt || fail "$opt 0: $(cat err.txt)"
    expect2 $opt -5s -- /bin/true
    expect2 $opt 31d -- /bin/true
done
expect2 --grace 31d -- /bin/true
expect2 --max-restarts -1 -- /bin/true
expect2 --max-restarts 99999999999999999999 -- /bin/true
expect2 --crash-loop -1 -- /bin/true
for bad in -1 100 x; do
    expect2 --supervisor-rt "$bad" -- /bin/true
    grep -q -- "--supervisor-rt" err.txt || fail "--supervisor-rt $bad: $(cat err.txt)"
done
expect2 --fr-capacity 0 -- /bin/true
# --memory-ckpt-max: the bound every rank takes (a larger one was accepted,
# then refused by every rank at its start: a crash loop), said as it is.
for bad in 0 9000000T 8388608T 8E 9223372036854775808 x; do
    expect2 --memory-ckpt-max "$bad" -- /bin/true
    grep -q -- "--memory-ckpt-max '$bad': want a size above 0 and below 8388608T (2^63 bytes)" \
        err.txt || fail "--memory-ckpt-max $bad: $(cat err.txt)"
done
"$FB" run --memory-ckpt-max 8388607T --max-restarts 0 --quiet --run-dir big-cap \
    -- "$BIN/fb-toy-train" --steps 6 --sleep-ms 1 --ckpt-every 5 2>err.txt \
    || fail "--memory-ckpt-max 8388607T, the largest: $(tail -3 err.txt)"
rm -rf big-cap
for spec in node1 'node1=a,=b' 'node1=' "node1=$(printf 'd%.0s' $(seq 70))"; do
    expect2 --peer-domains "$spec" -- /bin/true
    grep -q -- "--peer-domains '" err.txt || fail "--peer-domains $spec: $(cat err.txt)"
done
expect2 --nproc-per-node 4096 --nnodes 100000 -- /bin/true
grep -q "more than 65536 ranks" err.txt || fail "world bound: $(cat err.txt)"
# A fault for a rank the job does not have, or a key given twice.
expect2 --inject 'kill:rank=5,step=3' -- /bin/true
grep -q "names rank 5, but the job has 1 rank" err.txt || fail "inject rank: $(cat err.txt)"
expect2 --nproc-per-node 2 --inject 'hang:rank=0,step=1;kill:rank=2,after=1s' -- /bin/true
grep -q "names rank 2, but the job has 2 ranks" err.txt || fail "inject rank: $(cat err.txt)"
expect2 --max-restarts 2 --inject 'kill:rank=0,step=3,attempt=3' -- /bin/true
grep -q "names attempt 3, but --max-restarts 2" err.txt || fail "inject attempt: $(cat err.txt)"
expect2 --inject 'kill:rank=1,rank=2,step=3' -- /bin/true
grep -q "key 'rank' given twice" err.txt || fail "inject duplicate: $(cat err.txt)"
expect2 --inject 'explode:rank=1,step=2' -- /bin/true
grep -q "unknown fault kind 'explode'" err.txt || fail "inject message"
expect2
grep -q "no program given" err.txt || fail "no program message"
expect2 -- ./no-such-program
grep -q "no-such-program" err.txt || fail "missing program not named"
printf '#!/bin/sh\n' > notexec.sh
expect2 -- ./notexec.sh
grep -qi "permission denied" err.txt || fail "non-executable: $(cat err.txt)"
grep -q "Python" err.txt && fail "a Python hint for a shell script: $(cat err.txt)"
# torchrun's habit, a script named without its interpreter: said how
printf 'print(1)\n' > train.py
expect2 --nproc_per_node 1 train.py
grep -q "cannot run 'train.py': not found on PATH; a Python script runs under its interpreter: firebreak run \[options\] -- python3 train.py" err.txt \
    || fail "train.py: $(cat err.txt)"
expect2 -- ./train.py
grep -q "Permission denied; a Python script .* -- python3 ./train.py" err.txt || fail "./train.py: $(cat err.txt)"
# executable but without "#!": /bin/sh would run it (a syntax error at its
# first line, at every restart): refused, said how
chmod +x train.py
expect2 -- ./train.py
grep -q "cannot run './train.py': it has no #! line, so it would run under /bin/sh; a Python script .* -- python3 ./train.py" err.txt \
    || fail "./train.py without #!: $(cat err.txt)"
printf '#!/bin/false\n' > shebang.py && chmod +x shebang.py
set +e; "$FB" run --quiet --max-restarts 0 --run-dir shebang-run -- ./shebang.py >out.txt 2>err.txt; set -e
grep -q "no #! line" err.txt && fail "./shebang.py was refused: $(cat err.txt)"
rm -rf shebang-run
# a "#!" naming an interpreter that is not there: exec says ENOENT as if
# the script were missing (at every restart); refused naming the interpreter
printf '#!/nonexistent/interp -x\n' > noint && chmod +x noint
expect2 -- ./noint
grep -q "cannot run './noint': its #! line names /nonexistent/interp: No such file or directory" err.txt \
    || fail "./noint: $(cat err.txt)"
# a corrupt program (an ELF file cut short) is the exec's error, said at
# the first attempt and not restarted; execvp used to hand it to /bin/sh,
# whose syntax errors each attempt hit until the crash loop
head -c 200 /bin/true > badelf && chmod +x badelf
set +e; "$FB" run --json --run-dir badelf-run -- ./badelf >out.txt 2>err.txt; rc=$?; set -e
grep -q "rank 0 could not start ./badelf: Exec format error; not restarting" err.txt \
    || fail "badelf: $(cat err.txt)"
[ "$rc" = 1 ] && grep -q '"attempts":1,' out.txt || fail "badelf: exit $rc, $(cat out.txt)"
rm -rf badelf-run
# an empty path (an unset shell variable) is said as that
for opt in --run-dir --run-root --ckpt-dir; do
    expect2 "$opt" "" -- /bin/true
    grep -q "firebreak run: $opt: an empty path" err.txt || fail "$opt '': $(cat err.txt)"
done
# a program in this directory named without ./: PATH only, and said so
cp notexec.sh here-prog && chmod +x here-prog
expect2 -- here-prog
grep -q "cannot run 'here-prog': not found on PATH; the file in this directory is ./here-prog" err.txt \
    || fail "here-prog: $(cat err.txt)"
# torchrun's one-node options, as a torchrun command line carried over has
# them (dashes or underscores, --opt=value or --opt value): taken, with
# torchrun's meaning.  --master-addr/--master-port reach every rank of
# every attempt (attempt 0 fails, so the restart's are seen too); the
# rendezvous options are said ignored, in one line.  (They were unknown
# options, exit 2.)
cat >env.sh <<'EOF'
#!/bin/sh
echo "rank=$RANK addr=$MASTER_ADDR port=$MASTER_PORT attempt=$TORCHELASTIC_RESTART_COUNT"
# attempt 0 fails on rank 0 only, once rank 1 has said its line (both
# failing at once, the first exit stopped the other before it wrote: ASan CI)
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 0 ] || exit 0
sleep 1
exit 1
EOF
chmod +x env.sh
torchrun_env() { # RUN_DIR ADDR PORT OPTIONS...: 2 ranks, 2 attempts each
    local d=$1 addr=$2 port=$3 r a
    shift 3
    "$FB" run --quiet --run-dir "$d" --nproc-per-node 2 --max-restarts 1 "$@" \
        -- ./env.sh 2>err.txt || fail "run $*: exited $?: $(cat err.txt)"
    for r in 0 1; do
        for a in 0 1; do
            grep -qx "rank=$r addr=$addr port=$port attempt=$a" "$d/logs/rank-$r.log" ||
                fail "run $*: rank $r, attempt $a: $(grep rank= "$d/logs/rank-$r.log")"
        done
    done
    rm -rf "$d"
}
torchrun_env tr1 localhost 29577 --standalone --nnodes=1:1 --node_rank=0 \
    --master_port=29577 --master-addr localhost --rdzv-backend c10d \
    --rdzv_endpoint=localhost:0 --rdzv-id job1 --rdzv_conf=timeout=5
[ "$(grep -c 'ignored' err.txt)" = 1 ] &&
    grep -qx "firebreak run: ignored: --rdzv-backend c10d --rdzv-endpoint localhost:0 --rdzv-id job1 --rdzv-conf timeout=5 (torchrun's rendezvous: firebreak run has none; it starts every rank itself and gives each MASTER_ADDR and MASTER_PORT)" err.txt ||
    fail "rdzv options not said ignored in one line: $(cat err.txt)"
torchrun_env tr2 127.0.0.2 29578 --master-port 29578 --master_addr=127.0.0.2 \
    --node-rank 0 --nnodes 2:2 --nnodes 1 --rdzv_backend=static
grep -q "ignored: --rdzv-backend static (" err.txt || fail "--rdzv_backend=static: $(cat err.txt)"
# ... and refused where they cannot mean what torchrun means, saying why.
expect2 --nnodes 1:2 -- /bin/true
grep -q -- "--nnodes 1:2: an elastic node count (MIN below MAX) is not supported" err.txt ||
    fail "--nnodes 1:2: $(cat err.txt)"
expect2 --nnodes=2:1 -- /bin/true
grep -q -- "--nnodes 2:1: MIN is above MAX" err.txt || fail "--nnodes 2:1: $(cat err.txt)"
expect2 --nnodes 1:x -- /bin/true
for nr in "--node-rank 1" "--node_rank=1" "--nnodes 2:2 --launcher slurm --node-rank 1"; do
    expect2 $nr -- /bin/true
    grep -q -- "--node-rank 1: firebreak run starts every rank of a job on this node itself" err.txt ||
        fail "$nr: $(cat err.txt)"
done
expect2 --launcher slurm --node-rank 0 -- /bin/true
grep -q -- "--node-rank: with --launcher slurm each node's rank comes from the allocation" err.txt ||
    fail "--node-rank 0, slurm: $(cat err.txt)"
expect2 --launcher slurm --standalone -- /bin/true
grep -q -- "--standalone is not for --launcher slurm" err.txt || fail "--standalone, slurm: $(cat err.txt)"
expect2 --launcher slurm --master-addr node1 -- /bin/true
grep -q -- "--master-addr is not for --launcher slurm" err.txt || fail "--master-addr, slurm: $(cat err.txt)"
for p in 0 65536 x; do
    expect2 --master-port "$p" -- /bin/true
    grep -q -- "--master-port: expected a whole number in \[1, 65535\]" err.txt ||
        fail "--master-port $p: $(cat err.txt)"
done
expect2 --master-addr= -- /bin/true
grep -q -- "--master-addr: want a host name or address" err.txt || fail "--master-addr '': $(cat err.txt)"
# torchrun's options firebreak has no use for: refused, saying why
expect2 -m mod
grep -q -- "-- python3 -m MODULE" err.txt || fail "-m: $(cat err.txt)"
# torchrun's --nproc-per-node names: gpu counts CUDA_VISIBLE_DEVICES (or
# NVML's devices), cpu the CPUs this process may use, auto the one or the
# other; gpu with none visible is refused.
CUDA_VISIBLE_DEVICES= expect2 --nproc-per-node gpu -- /bin/true
grep -q "nproc-per-node gpu: no GPU visible (CUDA_VISIBLE_DEVICES is empty)" err.txt \
    || fail "gpu, none: $(cat err.txt)"
for spec in "0,1,2 gpu 3" "0,1 auto 2" ",, auto $(nproc)" "0 cpu $(nproc)"; do
    read -r cvd v want <<<"$spec"
    [ "$cvd" = ",," ] && cvd=
    CUDA_VISIBLE_DEVICES=$cvd "$FB" run --quiet --run-dir "np-$v" --nproc_per_node="$v" \
        -- "$RANK" --steps 1 "$TAG" 2>err.txt || fail "--nproc-per-node $v: $(cat err.txt)"
    [ "$(sqlite3 "np-$v/journal.sqlite" 'select nproc from run')" = "$want" ] \
        || fail "--nproc-per-node $v with CUDA_VISIBLE_DEVICES='$cvd': not $want ranks"
    rm -rf "np-$v"
done
# More nodes than this one need --launcher slurm; torchrun's common
# "--nnodes=1" is taken with any launcher.
expect2 --nnodes 2 -- /bin/true
grep -q -- "--nnodes 2: jobs across nodes run under --launcher slurm" err.txt || fail "--nnodes 2: $(cat err.txt)"
"$FB" run --quiet --run-dir nn1 --nnodes=1 -- "$RANK" --steps 1 "$TAG" 2>err.txt || fail "--nnodes=1: $(cat err.txt)"
rm -rf nn1
# An option its launcher does not act on would do nothing: refused, named.
expect2 --drain -- /bin/true
grep -q -- "--drain is for --launcher slurm .* with --launcher local it would do nothing" err.txt \
    || fail "--drain, local: $(cat err.txt)"
expect2 --launcher mpirun --node-timeout=5s -- /bin/true
grep -q -- "--node-timeout is for --launcher slurm .* with --launcher mpirun" err.txt \
    || fail "--node-timeout, mpirun: $(cat err.txt)"
expect2 --no-fr-preload -- /bin/true
grep -q -- "--no-fr-preload is for --launcher mpirun" err.txt || fail "--no-fr-preload: $(cat err.txt)"
expect2 --launcher slurm --mpirun-arg x -- /bin/true
grep -q -- "with --launcher slurm and no --mpirun it would do nothing" err.txt \
    || fail "--mpirun-arg, slurm: $(cat err.txt)"
# mpirun options firebreak sets itself: refused, not silently in its place
expect2 --launcher mpirun --mpirun-arg -np --mpirun-arg 3 -- /bin/true
grep -q -- "--mpirun-arg -np: the rank count is firebreak's: --nproc-per-node" err.txt \
    || fail "--mpirun-arg -np: $(cat err.txt)"
expect2 --launcher mpirun --mpirun-arg --output-filename --mpirun-arg x -- /bin/true
grep -q -- "--mpirun-arg --output-filename: .*logs/mpirun-attempt-<N>" err.txt \
    || fail "--mpirun-arg --output-filename: $(cat err.txt)"
expect2 --launcher slurm --mpirun mpirun --mpirun-arg --host --mpirun-arg a,b -- /bin/true
grep -q -- "--mpirun-arg --host: the host list and mapping are firebreak's under Slurm" \
    err.txt || fail "--mpirun-arg --host, slurm: $(cat err.txt)"
# a setup that fails after the run directory was made (a checkpoint
# directory that is a file): the run directory it made goes again, and the
# runs/ made for it; one that was there before stays
: >a-file
expect2 --ckpt-dir a-file -- /bin/true
grep -q "cannot create the checkpoint directory a-file: Not a directory" err.txt \
    || fail "--ckpt-dir a-file: $(cat err.txt)"
expect2 --run-dir new-run --ckpt-dir a-file -- /bin/true
[ ! -e new-run ] || fail "--run-dir new-run was left behind: $(ls -A new-run)"
mkdir kept-run
expect2 --run-dir kept-run --ckpt-dir a-file -- /bin/true
[ -d kept-run ] || fail "an existing --run-dir was removed"
[ ! -d runs ] || fail "a run directory was created for bad input"
# Output that cannot be written is an error, not a silent success.
set +e
"$FB" run --json --quiet --run-dir full-run -- /bin/true >/dev/full 2>err.txt
rc=$?
"$FB" run --help >/dev/full 2>err2.txt
rc2=$?
set -e
[ $rc = 2 ] || fail "run --json >/dev/full exited $rc, want 2"
grep -q "cannot write the --json summary to stdout: No space left on device" err.txt ||
    fail "run --json >/dev/full: $(cat err.txt)"
[ $rc2 = 2 ] || fail "run --help >/dev/full exited $rc2, want 2"
grep -q "cannot write the help to stdout" err2.txt || fail "run --help >/dev/full: $(cat err2.txt)"
grep -q -- "--max-restarts" <<<"$("$FB" run --help)" || fail "--help"
ok "usage errors exit 2 with messages"
