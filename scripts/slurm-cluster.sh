#!/usr/bin/env bash
# slurm-cluster.sh -- a Slurm cluster of separate hosts on this one machine,
# for firebreak's tests and demos (docs/slurm.md, "Local cluster").
#
#   scripts/slurm-cluster.sh up DIR [--nodes N] [--share PATH]... [--epilog PATH|none]
#                                   [--switch NAME=NODES]...
#       start N nodes (default 4), node1..nodeN, each a host of its own:
#       its own network namespace (one address on a bridge that exists only
#       on this machine), UTS namespace (hostname = node name) and mount
#       namespace (a private /dev/shm and /tmp); then munged, slurmctld and
#       one slurmd per node.  DIR holds state, logs and sockets; every node
#       sees DIR and each --share PATH (the "shared filesystem": run
#       directories, checkpoints), and what lies outside /tmp and /dev/shm
#       (the installed binaries).  slurmd runs --epilog PATH (default: the
#       firebreak-slurm-epilog on PATH, if any; `none`: no Epilog) on every
#       node of a job when it ends.  Each --switch NAME=NODES (a Slurm host
#       list: node[1-2]) is a leaf switch of a tree topology (topology/tree,
#       DIR/topology.conf, all leaves under one top switch), as racks would
#       be.  Prints `export SLURM_CONF=DIR/slurm.conf` as its last line.
#   scripts/slurm-cluster.sh down DIR
#       cancel every job, stop every daemon and every process of every node,
#       remove the namespaces, links and DIR; exits 1 if anything of the
#       cluster is still there afterwards.  Safe on a half-started cluster.
#   scripts/slurm-cluster.sh status DIR
#       daemons, nodes (address, hostname) and `sinfo`
#   scripts/slurm-cluster.sh exec DIR NODE [--] CMD...
#       run CMD on NODE: in its network, UTS and mount namespaces
#   scripts/slurm-cluster.sh fail DIR NODE kill|link-down|stop
#       lose NODE: kill every process on it (slurmd too), take its link
#       down (its view of DIR and the shared paths turns read-only, as a
#       network filesystem would be lost), or SIGSTOP every process on it
#   scripts/slurm-cluster.sh heal DIR NODE
#       undo `fail`: link up, SIGCONT, slurmd started again if gone
#
# The controller (munged, slurmctld) and whoever runs salloc or srun stay
# in this machine's own namespaces and reach the nodes over the bridge, as
# a login node would.  Nothing is routed off the bridge: no forwarding, no
# NAT, no uplink.  Needs root, iproute2, util-linux (nsenter, unshare) and
# Debian's slurm-wlm and munge (scripts/deps.sh).  Several clusters can run
# side by side: names, subnet and ports come from a random cluster id.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
self=$here/$(basename "$0")
template=$here/../deploy/slurm-local/slurm.conf.in
SLURMD_PORT=6818   # the same in every node's network namespace

die() { echo "slurm-cluster: $*" >&2; exit 1; }
say() { echo "slurm-cluster: $*" >&2; }

# A TCP port nobody has bound here (listening or not), from /proc/net/tcp{,6}.
port_free() {
    local hex
    hex=$(printf ':%04X ' "$1")
    ! cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '{print $2}' | grep -q "${hex% }\$"
}

pidof_file() { [ -s "$1" ] && cat "$1" || true; }

# Running: not gone, nor a zombie.  Read with builtins only (the state
# follows the last ')': a name may hold spaces), so that polling costs no
# fork.
alive() {
    local st=
    [ -n "$1" ] || return 1
    { read -r st <"/proc/$1/stat"; } 2>/dev/null || return 1
    st=${st##*) }
    [ -n "$st" ] && [ "${st%% *}" != Z ]
}

# Every descendant of a pid (children first found, then theirs).
descendants() {
    local c
    for c in $(pgrep -P "$1" 2>/dev/null || true); do
        echo "$c"
        descendants "$c"
    done
}

# Wait for every pid to end, looking every 20 ms: returns 0 as soon as
# they have, 1 after SECONDS.
wait_gone() { # SECONDS PID...
    local n=$(($1 * 50)) p left
    shift
    while :; do
        left=
        for p in "$@"; do alive "$p" && { left=$p; break; }; done
        [ -z "$left" ] && return 0
        n=$((n - 1))
        [ $n -gt 0 ] || return 1
        sleep 0.02
    done
}

# The cluster's names, from its id (4 hex digits) and node number.
netns_of() { echo "fb-$ID-$1"; }          # fb-1a2b-node3
veth_of() { echo "fbv${ID}n${1#node}"; }  # fbv1a2bn3 (host side; eth0 inside)
bridge_of() { echo "fbb$ID"; }
addr_of() { echo "$SUBNET.$((10 + ${1#node}))"; }

load() { # DIR: the cluster's id, subnet and node names from its state
    D=$(cd "$1" && pwd)
    [ -s "$D/cluster" ] || die "$D is not a cluster's state directory (no $D/cluster)"
    # shellcheck disable=SC1091
    source "$D/cluster"   # ID SUBNET NODES SHARED
}

holder_of() { pidof_file "$D/host-$1.pid"; }

node_pids() { # NODE: every process in its network namespace
    ip netns pids "$(netns_of "$1")" 2>/dev/null || true
}

job_pids() { # every process on the nodes but their slurmd and holder
    local node h d p
    for node in $NODES; do
        h=$(holder_of "$node")
        d=$(pidof_file "$D/slurmd-$node.pid")
        for p in $(node_pids "$node"); do
            [ "$p" = "$h" ] || [ "$p" = "$d" ] || echo "$p"
        done
    done
}

# ---- inside a node (run by `up` through nsenter + unshare) ----

# _host NODE DIR SHARED...: becomes the node's holder process.  Its mount
# namespace is private: a tmpfs on /dev/shm and on /tmp, then DIR and each
# shared path put back at their own place (opened before /tmp is covered,
# bound from the open descriptor after).
cmd_host() {
    local node=$1 d=$2; shift 2
    local p fds=() i=0 paths
    # Parents before children: a later bind must not cover an earlier one.
    mapfile -t paths < <(printf '%s\n' "$d" "$@" | awk '{print length($0) " " $0}' |
                         sort -n | cut -d' ' -f2-)
    for p in "${paths[@]}"; do
        exec {fd}<"$p" || exit 1
        fds+=("$fd")
    done
    hostname "$node"
    mount -t tmpfs -o mode=1777,size=4g "shm-$node" /dev/shm
    mount -t tmpfs -o mode=1777,size=4g "tmp-$node" /tmp
    for p in "${paths[@]}"; do
        mkdir -p "$p"
        mount --no-canonicalize --bind "/proc/self/fd/${fds[$i]}" "$p"
        eval "exec ${fds[$i]}<&-"
        i=$((i + 1))
    done
    echo $$ >"$d/host-$node.pid"
    exec sleep infinity
}

# ---- up ----

start_slurmd() { # NODE
    local h
    h=$(holder_of "$1")
    alive "$h" || die "host $1 is not running"
    nsenter -t "$h" --net --uts --mount -- slurmd -f "$D/slurm.conf" -N "$1" \
        || die "slurmd on $1 did not start (see $D/log/slurmd-$1.log)"
}

cmd_up() {
    [ "$(id -u)" = 0 ] || die "needs root (namespaces; slurmd and munged run as root here)"
    local b
    for b in munged slurmctld slurmd scontrol sinfo ip nsenter unshare; do
        command -v "$b" >/dev/null || die "$b not found: install slurm-wlm, munge, iproute2 (scripts/deps.sh)"
    done
    [ -r "$template" ] || die "cannot read $template"
    local d=${1:-} n=4 shared=() s epilog switches=()
    [ -n "$d" ] || die "usage: up DIR [--nodes N] [--share PATH]... [--epilog PATH|none] [--switch NAME=NODES]..."
    shift
    epilog=$(command -v firebreak-slurm-epilog || true)
    while [ $# -gt 0 ]; do
        case "$1" in
        --nodes) n=${2:?}; shift 2 ;;
        --epilog) epilog=${2:?}; shift 2
                  [ "$epilog" = none ] && epilog=
                  [ -z "$epilog" ] || [ -x "$epilog" ] || die "--epilog $epilog: not an executable"
                  [ -z "$epilog" ] || epilog=$(cd "$(dirname "$epilog")" && pwd)/$(basename "$epilog") ;;
        --share) [ -d "${2:?}" ] || die "--share $2: not a directory"
                 shared+=("$(cd "$2" && pwd)"); shift 2 ;;
        --switch) [[ "${2:?}" =~ ^[a-z][a-z0-9]*=[a-z0-9,\[\-]+[]]?$ ]] || die "--switch $2: NAME=NODES"
                  switches+=("$2"); shift 2 ;;
        *) die "up: unknown option $1" ;;
        esac
    done
    case "$n" in [1-9]|[1-5][0-9]|6[0-4]) ;; *) die "--nodes: 1 to 64" ;; esac
    mkdir -p "$d"
    D=$(cd "$d" && pwd)
    [ ! -e "$D/cluster" ] || die "$D already holds a cluster (down it first)"

    # An id nobody uses: no namespace, link or route of that name or subnet.
    local k=0
    while :; do
        ID=$(od -An -N2 -tx2 /dev/urandom | tr -d ' ')
        SUBNET=10.213.$((0x$ID % 250 + 1))
        if ! ip netns list | grep -q "^fb-$ID-" && ! ip link show "fbb$ID" >/dev/null 2>&1 &&
           ! ip -4 route | grep -q "^$SUBNET\."; then
            break
        fi
        k=$((k + 1)); [ $k -lt 50 ] || die "no free cluster id"
    done
    NODES=$(seq -f 'node%g' 1 "$n" | tr '\n' ' ')
    NODES=${NODES% }
    SHARED="${shared[*]:-}"
    # Written first, so that `down` can undo a half-started cluster.
    printf 'ID=%s\nSUBNET=%s\nNODES="%s"\nSHARED="%s"\n' "$ID" "$SUBNET" "$NODES" "$SHARED" \
        >"$D/cluster"
    mkdir -p "$D/munge" "$D/ctld" "$D/log" "$D/spool"
    chmod 700 "$D/munge"
    UP_DONE=0
    # A command that fails under set -e says which (a silent one, such as
    # a sinfo that could not reach the controller yet, left "up failed"
    # and nothing else: slurm_nodeloss, CI 2026-12-06 07:16).
    UP_ERR=
    trap 'UP_ERR="line $LINENO: $BASH_COMMAND (exit $?)"' ERR
    trap '[ "$UP_DONE" = 1 ] || { say "up failed${UP_ERR:+ at $UP_ERR}; taking down what started"; cmd_down "$D" >&2 || true; }' EXIT

    # The network: a bridge with the controller's address, one veth pair
    # per node.  The bridge has no other port, and nothing forwards.
    local br node ns
    netns_claim
    br=$(bridge_of)
    ip link add "$br" type bridge
    ip addr add "$SUBNET.1/24" dev "$br"
    ip link set "$br" up
    for node in $NODES; do
        ns=$(netns_of "$node")
        mkdir -p "$D/spool/$node"
        ip netns add "$ns"
        ip link add "$(veth_of "$node")" type veth peer name eth0 netns "$ns"
        ip link set "$(veth_of "$node")" master "$br" up
        ip -n "$ns" addr add "$(addr_of "$node")/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        # The node's holder: its own hostname and mounts, sleeping.
        setsid nsenter --net="/run/netns/$ns" -- \
            unshare --uts --mount --propagation private -- \
            bash "$self" _host "$node" "$D" "${shared[@]}" </dev/null >>"$D/log/host-$node.log" 2>&1 &
    done
    for node in $NODES; do
        for _ in $(seq 1 100); do [ -s "$D/host-$node.pid" ] && break; sleep 0.05; done
        alive "$(holder_of "$node")" || die "host $node did not start (see $D/log/host-$node.log)"
    done

    # munged: a private key and socket (a path: reachable from every
    # node's network namespace, and DIR is in every node's mounts).  One
    # munged serves every host here, where a real cluster has one per node:
    # a step's launch has each slurmd decode at once, and a slurmd whose
    # decode fails closes the connection unanswered (srun: "Zero Bytes were
    # transmitted or received"); Slurm's own advice for a busy munged is
    # more work threads than its default 2.
    dd if=/dev/urandom of="$D/munge/munge.key" bs=1024 count=1 status=none
    chmod 600 "$D/munge/munge.key"
    munged --force --socket="$D/munge/munge.socket" --key-file="$D/munge/munge.key" \
        --pid-file="$D/munge/munged.pid" --log-file="$D/log/munged.log" \
        --seed-file="$D/munge/munged.seed" --num-threads=16 \
        || die "munged did not start (see $D/log/munged.log)"

    local port k2=0 lines=""
    while :; do
        port=$((20000 + RANDOM % 30000))
        port_free "$port" && break
        k2=$((k2 + 1)); [ $k2 -lt 50 ] || die "no free port"
    done
    for node in $NODES; do
        lines="${lines}NodeName=$node NodeHostname=$node NodeAddr=$(addr_of "$node") Port=$SLURMD_PORT CPUs=2 RealMemory=2000 State=UNKNOWN\\n"
    done
    # Without an Epilog the line stays, commented out.
    local epi="s|@EPILOG@|$epilog|"
    [ -n "$epilog" ] || epi="s|^Epilog=@EPILOG@|#Epilog= (up without --epilog)|"
    sed -e "$epi" -e "s|@CLUSTER@|fb$ID|g" -e "s|@HOST@|$(hostname)|g" -e "s|@CTLD_ADDR@|$SUBNET.1|g" \
        -e "s|@STATE@|$D|g" -e "s|@CTLD_PORT@|$port|g" -e "s|@NODELINES@|$lines|" \
        -e "s|@NODELIST@|$(echo "$NODES" | tr ' ' ',')|g" \
        "$template" >"$D/slurm.conf"
    if [ ${#switches[@]} -gt 0 ]; then
        local sw leaves=
        : >"$D/topology.conf"
        for sw in "${switches[@]}"; do
            echo "SwitchName=${sw%%=*} Nodes=${sw#*=}" >>"$D/topology.conf"
            leaves=${leaves:+$leaves,}${sw%%=*}
        done
        echo "SwitchName=top Switches=$leaves" >>"$D/topology.conf"
        echo "TopologyPlugin=topology/tree" >>"$D/slurm.conf"
    fi
    export SLURM_CONF=$D/slurm.conf

    slurmctld -f "$D/slurm.conf" -i || die "slurmctld did not start (see $D/log/slurmctld.log)"
    for node in $NODES; do start_slurmd "$node"; done
    local t=0 idle
    while :; do
        # sinfo fails while the controller does not answer yet: not idle.
        idle=$({ sinfo -h -N -o '%N %t' 2>/dev/null || true; } | awk '$2=="idle"' | wc -l)
        [ "$idle" -ge "$n" ] && break
        t=$((t + 1))
        if [ $t -ge 300 ]; then
            sinfo -N >&2 || true
            die "nodes not idle after 30 s (logs in $D/log)"
        fi
        sleep 0.1
    done
    UP_DONE=1
    say "up in $D: $n hosts on bridge $br ($SUBNET.0/24), slurmctld at $SUBNET.1:$port"
    echo "export SLURM_CONF=$D/slurm.conf"
}

# ---- /run/netns ----

# `ip netns add` makes /run/netns a mount of its own the first time, and
# nothing takes it away.  A marker says that a cluster of ours made it
# (`dir`: /run/netns was not there either; `mount`: the directory was); the
# `down` that leaves it empty unmounts it then.  Several clusters side by
# side: only the last one down finds it empty (umount refuses a busy one).
NETNS_MARK=/run/firebreak-slurm-cluster.netns
netns_claim() {
    mountpoint -q /run/netns 2>/dev/null && return 0
    [ -e "$NETNS_MARK" ] && return 0
    if [ -d /run/netns ]; then echo mount; else echo dir; fi >"$NETNS_MARK"
}
netns_release() {
    [ -e "$NETNS_MARK" ] || return 0
    if mountpoint -q /run/netns 2>/dev/null; then
        [ -z "$(ls -A /run/netns 2>/dev/null)" ] || return 0
        umount /run/netns 2>/dev/null || return 0
    fi
    [ "$(cat "$NETNS_MARK" 2>/dev/null)" != dir ] || rmdir /run/netns 2>/dev/null || true
    rm -f "$NETNS_MARK"
}

# ---- down ----

# What of the cluster is still there, one line each; nothing if all gone.
remains() {
    local node ns p
    for node in $NODES; do
        ns=$(netns_of "$node")
        ip netns list 2>/dev/null | grep -q "^$ns\b" && echo "namespace $ns"
        ip link show "$(veth_of "$node")" >/dev/null 2>&1 && echo "link $(veth_of "$node")"
        p=$(node_pids "$node" | tr '\n' ' ')
        [ -n "${p// /}" ] && echo "processes on $node: $p"
        p=$(holder_of "$node")
        alive "$p" && echo "host $node: pid $p"
    done
    ip link show "$(bridge_of)" >/dev/null 2>&1 && echo "link $(bridge_of)"
    findmnt -rn -o TARGET 2>/dev/null | grep -q "/fb-$ID-" && echo "mount of /run/netns/fb-$ID-*"
    for p in "$D/slurmctld.pid" "$D/munge/munged.pid"; do
        p=$(pidof_file "$p"); alive "$p" && echo "daemon pid $p"
    done
    true
}

cmd_down() {
    local d=${1:-}
    [ -n "$d" ] && [ -d "$d" ] || die "down: no such state directory '$d'"
    D=$(cd "$d" && pwd)
    if [ ! -s "$D/cluster" ]; then rm -rf "$D"; return 0; fi
    load "$D"
    export SLURM_CONF=$D/slurm.conf
    local ctld munge pids="" p node ns left
    ctld=$(pidof_file "$D/slurmctld.pid")
    if [ -f "$D/slurm.conf" ] && alive "$ctld"; then
        # A stopped node would keep its jobs completing: wake it first.
        for node in $NODES; do
            p=$(node_pids "$node" | tr '\n' ' ')
            # shellcheck disable=SC2086
            [ -n "${p// /}" ] && kill -CONT $p 2>/dev/null || true
            ip link set "$(veth_of "$node")" up 2>/dev/null || true
        done
        # The jobs' processes end (slurmstepd, ranks): waited for as
        # processes, not as the queue, where a job on a killed node stays
        # completing until slurmctld gives the node up.
        p=$(job_pids | tr '\n' ' ')
        timeout 10 scancel --quiet --full -u root 2>/dev/null || true
        # shellcheck disable=SC2086
        [ -z "${p// /}" ] || wait_gone 3 $p || true
    fi
    # Every process on every node (slurmd, slurmstepd, ranks, the holder),
    # the slurmds' descendants wherever they are, then the controller.
    for node in $NODES; do
        pids="$pids $(node_pids "$node" | tr '\n' ' ')"
        p=$(pidof_file "$D/slurmd-$node.pid")
        alive "$p" && pids="$pids $p $(descendants "$p" | tr '\n' ' ')"
        p=$(holder_of "$node")
        alive "$p" && pids="$pids $p"
    done
    [ -n "$ctld" ] && alive "$ctld" && pids="$pids $ctld"
    munge=$(pidof_file "$D/munge/munged.pid")
    [ -n "$munge" ] && alive "$munge" && pids="$pids $munge"
    # shellcheck disable=SC2086
    # The cluster's state goes with DIR: a daemon that has not ended 1 s
    # after SIGTERM (slurmctld waits on its RPCs to a killed node) is
    # killed.
    if [ -n "${pids// /}" ]; then
        kill -CONT $pids 2>/dev/null || true
        kill -TERM $pids 2>/dev/null || true
        wait_gone 1 $pids || { kill -KILL $pids 2>/dev/null || true; wait_gone 5 $pids || true; }
    fi
    for node in $NODES; do
        ns=$(netns_of "$node")
        # shellcheck disable=SC2046
        kill -KILL $(node_pids "$node") 2>/dev/null || true
        ip link del "$(veth_of "$node")" 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    ip link del "$(bridge_of)" 2>/dev/null || true
    netns_release
    left=$(remains)
    if [ -n "$left" ]; then
        echo "slurm-cluster: down: left behind:" >&2
        echo "$left" | sed 's/^/  /' >&2
        return 1
    fi
    rm -rf "$D"
}

# ---- status, exec, fail, heal ----

cmd_status() {
    local d=${1:-}
    [ -n "$d" ] && [ -d "$d" ] || die "status: no such state directory '$d'"
    load "$d"
    export SLURM_CONF=$D/slurm.conf
    local p n rc=0 h
    for n in munge/munged slurmctld; do
        p=$(pidof_file "$D/$n.pid")
        if alive "$p"; then echo "${n#munge/}: running (pid $p)"; else echo "${n#munge/}: not running"; rc=1; fi
    done
    for n in $NODES; do
        p=$(pidof_file "$D/slurmd-$n.pid")
        h=$(holder_of "$n")
        if alive "$h"; then
            h="$(nsenter -t "$h" --uts hostname 2>/dev/null || echo ?) $(addr_of "$n")"
        else
            h="(host not running)"; rc=1
        fi
        if alive "$p"; then echo "$n: $h, slurmd running (pid $p)"; else echo "$n: $h, slurmd not running"; rc=1; fi
    done
    timeout 10 sinfo -N -o '%N %t %E' 2>/dev/null || rc=1
    return $rc
}

node_ok() { case " $NODES " in *" $1 "*) ;; *) die "no node '$1' (nodes: $NODES)" ;; esac; }

cmd_exec() {
    local d=${1:-} node=${2:-}
    [ -n "$d" ] && [ -d "$d" ] && [ -n "$node" ] || die "usage: exec DIR NODE [--] CMD..."
    shift 2
    [ "${1:-}" = -- ] && shift
    [ $# -gt 0 ] || die "exec: no command"
    load "$d"
    node_ok "$node"
    local h
    h=$(holder_of "$node")
    alive "$h" || die "host $node is not running"
    exec nsenter -t "$h" --net --uts --mount --wd="$PWD" -- "$@"
}

shared_mounts() { # NODE ro|rw: remount the node's view of DIR and --share paths
    local h p
    h=$(holder_of "$1")
    alive "$h" || return 0
    for p in "$D" $SHARED; do
        nsenter -t "$h" --mount -- mount -o "remount,bind,$2" "$p" 2>/dev/null || true
    done
}

cmd_fail() {
    local d=${1:-} node=${2:-} how=${3:-}
    [ -n "$d" ] && [ -d "$d" ] && [ -n "$node" ] || die "usage: fail DIR NODE kill|link-down|stop"
    load "$d"
    node_ok "$node"
    local p
    case "$how" in
    kill) # every process but the holder (the node's "kernel")
        p=$(node_pids "$node" | { grep -vx "$(holder_of "$node")" || true; } | tr '\n' ' ')
        # shellcheck disable=SC2086
        [ -n "${p// /}" ] && kill -KILL $p 2>/dev/null || true ;;
    link-down) # the network, and with it the shared filesystem: read-only
        ip link set "$(veth_of "$node")" down
        shared_mounts "$node" ro ;;
    stop)
        p=$(node_pids "$node" | { grep -vx "$(holder_of "$node")" || true; } | tr '\n' ' ')
        # shellcheck disable=SC2086
        [ -n "${p// /}" ] && kill -STOP $p 2>/dev/null || true ;;
    *) die "fail: kill, link-down or stop" ;;
    esac
}

cmd_heal() {
    local d=${1:-} node=${2:-} p
    [ -n "$d" ] && [ -d "$d" ] && [ -n "$node" ] || die "usage: heal DIR NODE"
    load "$d"
    node_ok "$node"
    ip link set "$(veth_of "$node")" up
    shared_mounts "$node" rw
    p=$(node_pids "$node" | tr '\n' ' ')
    # shellcheck disable=SC2086
    [ -n "${p// /}" ] && kill -CONT $p 2>/dev/null || true
    export SLURM_CONF=$D/slurm.conf
    alive "$(pidof_file "$D/slurmd-$node.pid")" || start_slurmd "$node"
}

# The Slurm tests tag every process they start (FB_SLURM_TEST_TAG,
# tests/slurm/lib.sh) to find those left behind; the daemons and hosts
# started here are the cluster's, stopped and checked by `down`.
case "${1:-}" in up|heal) unset FB_SLURM_TEST_TAG ;; esac

case "${1:-}" in
up) shift; cmd_up "$@" ;;
down) shift; cmd_down "$@" ;;
status) shift; cmd_status "$@" ;;
exec) shift; cmd_exec "$@" ;;
fail) shift; cmd_fail "$@" ;;
heal) shift; cmd_heal "$@" ;;
_host) shift; cmd_host "$@" ;;
-h|--help|help)
    sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
*) echo "usage: slurm-cluster.sh up DIR [--nodes N] [--share PATH]... [--epilog PATH|none] [--switch NAME=NODES]... | down DIR | status DIR |" \
        "exec DIR NODE -- CMD | fail DIR NODE kill|link-down|stop | heal DIR NODE" >&2; exit 2 ;;
esac
