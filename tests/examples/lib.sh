# Shared by the example tests: a scratch directory removed on exit, a clean
# environment (no supervisor: FIREBREAK_JOB_ID unset, so fb_init records
# nothing and checkpoints go to the directory given on the command line),
# and helpers.
set -u
scratch_base=$1
mkdir -p "$scratch_base"
T=$(mktemp -d "$scratch_base/run.XXXXXX")
pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill -KILL "$p" 2>/dev/null
    done
    rm -rf "$T"
}
trap cleanup EXIT
unset FIREBREAK_JOB_ID FIREBREAK_RUN_DIR FIREBREAK_INJECT FIREBREAK_CKPT_DIR \
      FIREBREAK_ATTEMPT TORCHELASTIC_RESTART_COUNT RANK WORLD_SIZE LOCAL_RANK
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# hash_of LOG: the 16 hex digits of the last final_hash= line.
hash_of() {
    sed -n 's/^final_hash=\([0-9a-f]\{16\}\)$/\1/p' "$1" | tail -n 1
}

# wait_all: wait for every pid in $pids, in order; sets $codes to their exit
# codes separated by spaces and empties $pids.
wait_all() {
    local p
    codes=""
    for p in "${pids[@]}"; do
        wait "$p"
        codes="$codes $?"
    done
    pids=()
    codes=${codes# }
}
