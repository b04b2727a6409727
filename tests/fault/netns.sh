#!/bin/sh
# netns.sh -- a two-host job on one machine: two network namespaces joined by
# a veth pair stand for two hosts (xcoll counts a network namespace as a
# node).  Needs root and `ip netns`; otherwise prints why and exits 77.
#
# Usage: netns.sh PATH/TO/twohost_check
#
# Creates namespaces xcfA<pid>/xcfB<pid>, a veth pair with 10.123.R.1/24 and
# 10.123.R.2/24 (R random; only addresses inside the namespaces made here),
# then runs
#   1. ranks 0,1 in A and 2,3 in B (rank 0 hosts the store in-process at
#      10.123.R.1:PORT): every rank must see node_count 2, local_size 2;
#   2. all four ranks in A: node_count 1, local_size 4;
#   3. a partition: ranks 0,1 in A and 2,3 in B loop on all-reduces; once
#      every rank has done 20, the link is taken down (ip link set down):
#      every rank must end with an error (XC_ERR_PEER_LOST or
#      XC_ERR_TIMEOUT) within the liveness timeout (2 s here) + 5 s of its
#      last all-reduce, never hang.
# twohost_check verifies allreduce/allgather/alltoall/bcast results.  The
# namespaces (and with them the veth pair) are removed on every exit path.
set -u

prog=${1:-}
if [ -z "$prog" ] || [ ! -x "$prog" ]; then
    echo "usage: $0 PATH/TO/twohost_check" >&2
    exit 2
fi

if [ "$(id -u)" != 0 ]; then
    echo "SKIP: netns.sh needs root to create network namespaces"
    exit 77
fi
if ! command -v ip >/dev/null 2>&1; then
    echo "SKIP: the ip command (iproute2) is not installed"
    exit 77
fi

tag=$$
nsA=xcfA$tag
nsB=xcfB$tag
vethA=xcva$tag
vethB=xcvb$tag
tmp=$(mktemp -d "${TMPDIR:-/tmp}/xcoll-netns.XXXXXX") || exit 1
pids=""
made_a=0
made_b=0

cleanup() {
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    [ "$made_a" = 1 ] && ip netns del "$nsA" 2>/dev/null
    [ "$made_b" = 1 ] && ip netns del "$nsB" 2>/dev/null
    # The veth pair goes with its namespaces; this catches a half-made one.
    ip link del "$vethA" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

if ! err=$(ip netns add "$nsA" 2>&1); then
    echo "SKIP: 'ip netns add' failed: $err"
    exit 77
fi
made_a=1
if ! err=$(ip netns add "$nsB" 2>&1); then
    echo "SKIP: 'ip netns add' failed for the second namespace: $err"
    exit 77
fi
made_b=1
if ! err=$(ip link add "$vethA" type veth peer name "$vethB" 2>&1); then
    echo "SKIP: cannot create a veth pair: $err"
    exit 77
fi

sub=$(( $(od -An -N1 -tu1 /dev/urandom) % 250 + 1 ))
ipA=10.123.$sub.1
ipB=10.123.$sub.2
port=29500

set -e
ip link set "$vethA" netns "$nsA"
ip link set "$vethB" netns "$nsB"
ip -n "$nsA" addr add "$ipA/24" dev "$vethA"
ip -n "$nsB" addr add "$ipB/24" dev "$vethB"
ip -n "$nsA" link set lo up
ip -n "$nsB" link set lo up
ip -n "$nsA" link set "$vethA" up
ip -n "$nsB" link set "$vethB" up
set +e
echo "namespaces $nsA ($ipA) and $nsB ($ipB), store at $ipA:$port"

# run_job NAME NODES LOCAL NS0 NS1 NS2 NS3
run_job() {
    name=$1 nodes=$2 lsize=$3
    shift 3
    r=0
    pids=""
    for ns in "$@"; do
        # ip execs env, which execs the program: $! is the rank itself (so
        # cleanup can kill it), and the program bounds itself with alarm().
        ip netns exec "$ns" env -u XCOLL_NODE_ID -u XCOLL_STORE_EXTERNAL \
            XCOLL_RANK=$r XCOLL_SIZE=4 XCOLL_ADDR="$ipA:$port" \
            "$prog" "$nodes" "$lsize" >"$tmp/$name.$r" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
    done
    fail=0
    r=0
    for p in $pids; do
        wait "$p"
        rc=$?
        sed "s/^/[$name rank $r] /" "$tmp/$name.$r"
        if [ "$rc" != 0 ]; then
            echo "FAIL: $name: rank $r exited with $rc"
            fail=1
        elif ! grep -q "^node_count=$nodes local_size=$lsize\$" "$tmp/$name.$r"; then
            echo "FAIL: $name: rank $r did not report node_count=$nodes local_size=$lsize"
            fail=1
        fi
        r=$((r + 1))
    done
    pids=""
    return $fail
}

# run_partition: as run_job's two_hosts layout, then the link goes down.
run_partition() {
    r=0
    pids=""
    for ns in "$nsA" "$nsA" "$nsB" "$nsB"; do
        ip netns exec "$ns" env -u XCOLL_NODE_ID -u XCOLL_STORE_EXTERNAL \
            XCOLL_RANK=$r XCOLL_SIZE=4 XCOLL_ADDR="$ipA:$port" \
            XCOLL_LIVENESS_MS=2000 XCOLL_HEARTBEAT_MS=250 XCOLL_TIMEOUT_MS=60000 \
            "$prog" 2 2 partition >"$tmp/part.$r" 2>&1 &
        pids="$pids $!"
        r=$((r + 1))
    done
    n=0
    while [ $n -lt 300 ]; do
        ready=0
        for r in 0 1 2 3; do grep -q '^looping$' "$tmp/part.$r" && ready=$((ready + 1)); done
        [ $ready = 4 ] && break
        sleep 0.1
        n=$((n + 1))
    done
    echo "partition: $ready of 4 ranks looping; taking the link down"
    ip -n "$nsA" link set "$vethA" down
    fail=0
    r=0
    for p in $pids; do
        wait "$p"
        rc=$?
        sed "s/^/[partition rank $r] /" "$tmp/part.$r" | grep -v '^.*looping$'
        if [ "$rc" != 0 ]; then
            echo "FAIL: partition: rank $r exited with $rc"
            fail=1
        elif ! grep -q '^partition: XC_ERR_' "$tmp/part.$r"; then
            echo "FAIL: partition: rank $r reported no error"
            fail=1
        fi
        r=$((r + 1))
    done
    pids=""
    ip -n "$nsA" link set "$vethA" up
    return $fail
}

status=0
run_job two_hosts 2 2 "$nsA" "$nsA" "$nsB" "$nsB" || status=1
port=$((port + 1))
run_job one_host 1 4 "$nsA" "$nsA" "$nsA" "$nsA" || status=1
port=$((port + 1))
run_partition || status=1
if [ "$status" = 0 ]; then echo "netns: passed"; else echo "netns: FAILED"; fi
exit $status
