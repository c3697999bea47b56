#!/usr/bin/env bash
# What the whole suite leaves behind (the brief's "no orphans"), checked
# around `make test`'s ctest runs (Makefile):
#   leftovers.sh save FILE    note what is there now
#   leftovers.sh check FILE   exit 1, naming each, if anything is there now
#                             that FILE does not list
#   leftovers.sh around DIR CMD [ARG...]
#                             save, run CMD in DIR, check; exit 1 if either
#                             failed (what `make test` and `make bench` do)
# Looked at: the names in /tmp and /dev/shm, the network namespaces, the
# mount of /run/netns.  A test's own leftovers are its business and its
# own checks (most tests look at theirs); this catches what no test looks
# at: tools the tests start that leave files behind when stopped or on
# success (mpirun's session directories, torchrun's log directories, a
# Python test's mkdtemp), 700 and more of which had gathered in /tmp
# unseen.  In /tmp only the names the suite's programs and the tools they
# start make (fb*, mktemp's and Python's tmp*, Open MPI's ompi.*,
# torchrun's torchelastic_*, multiprocessing's pymp-*, test_*, fr_*,
# torch 2.x's torchinductor_<user>): what runs the suite (a CI harness, a
# user's shell) may write there too.  Everything in /dev/shm.
# `around` points torch 2.x's compiler cache (TORCHINDUCTOR_CACHE_DIR,
# made by any `import torch._dynamo`, which DDP does) into DIR, unless the
# caller chose one: a cache of the build, not a file in /tmp.
set -euo pipefail
now() {
    find /tmp -mindepth 1 -maxdepth 1 \( -name 'fb*' -o -name 'tmp*' -o -name 'ompi.*' \
        -o -name 'torchelastic_*' -o -name 'pymp-*' -o -name 'test_*' -o -name 'fr_*' \
        -o -name 'torchinductor_*' \) \
        -printf '/tmp/%f\n' 2>/dev/null || true
    find /dev/shm -mindepth 1 -maxdepth 1 -printf '/dev/shm/%f\n' 2>/dev/null || true
    ip netns list 2>/dev/null | sed 's/^/netns /' || true
    findmnt -n /run/netns >/dev/null 2>&1 && echo "mount /run/netns"
    true
}
save() {
    now | LC_ALL=C sort >"$1"
}
check() {
    local new
    new=$(now | LC_ALL=C sort | LC_ALL=C comm -13 "$1" -)
    if [ -n "$new" ]; then
        echo "FAIL: the suite left behind (not there before it):" >&2
        echo "$new" | head -n 40 | sed 's/^/  /' >&2
        return 1
    fi
    echo "leftovers: none (/tmp, /dev/shm, network namespaces, /run/netns)"
}
case ${1:-} in
save)
    save "$2"
    ;;
check)
    check "$2"
    ;;
around)
    [ $# -ge 3 ] || { echo "usage: leftovers.sh around DIR CMD [ARG...]" >&2; exit 2; }
    dir=$2
    shift 2
    export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-$(cd "$dir" && pwd)/torchinductor}
    before=$(mktemp "$dir/leftovers-before.XXXXXX")
    save "$before"
    rc=0
    (cd "$dir" && "$@") || rc=1
    check "$before" || rc=1
    rm -f "$before"
    exit $rc
    ;;
*)
    echo "usage: leftovers.sh save|check FILE | around DIR CMD [ARG...]" >&2
    exit 2
    ;;
esac
