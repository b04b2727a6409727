#!/bin/sh
# netbed.sh -- a multi-host test bed on one machine.
#
# Builds H network-namespace "hosts" (xcoll counts a network namespace as a
# node, so ranks in different ones talk over TCP), each with eth0 at
# 10.77.0.(h+1)/24: two hosts are joined by one veth pair, more by a switch
# (a bridge in a namespace of its own, one veth link per host).  With
# --rate, every link is shaped in both directions by a token bucket
# (`tc qdisc ... tbf`) at that rate, as a NIC of that speed would be.  Then, in the same run:
#   --iperf SEC   iperf3 --bidir between host 0 and host 1 (the reference
#                 figure for the link: what one TCP stream each way reaches);
#   COMMAND       run as K ranks per host, by one xcoll-run per host forming
#                 one job of H*K ranks (rank h*K+i is rank i of host h; host
#                 0's xcoll-run hosts the store at 10.77.0.1:29500).
# Nothing is made outside the namespaces it creates (the root namespace is
# not touched), and everything it made -- processes, namespaces and with
# them links, bridge and qdiscs -- is removed on every exit path (normal
# end, failure, Ctrl-C, SIGTERM).  Where namespaces cannot be made (not
# root, no iproute2, a container forbidding them) it says why and exits 77.
#
# Usage:
#   netbed.sh [options] [--] [COMMAND [ARGS...]]
# Options:
#   -H, --hosts N        hosts (default 2)
#   -k, --ranks K        ranks per host (default 1)
#   --topology T         "pair": one veth pair (2 hosts only; the default for
#                        2), "bridge": a veth per host into a bridge (the
#                        default for more; for 2 hosts it costs a second veth
#                        crossing and the bridge per packet)
#   --rate RATE          tbf rate per link and direction, e.g. 1gbit, 500mbit
#                        (default: unshaped)
#   --burst SIZE         tbf burst (default: 1 ms at the rate, at least 128 KiB)
#   --latency TIME       tbf queue as a delay (default 5ms)
#   --iperf SEC          iperf3 --bidir host 0 <-> host 1 for SEC seconds
#                        before COMMAND (and again after it with --iperf-after)
#   --iperf-after        also measure after COMMAND
#   --iperf-streams P    iperf3 -P (streams per direction, default 1)
#   --iperf-args "ARGS"  more iperf3 client options (e.g. "-l 32M": write and
#                        read 32 MiB at a time, as a collective's buffers are)
#   --xcoll-run PATH     launcher (default: build/xcoll-run of this tree)
#   --timeout SEC        per-host xcoll-run --timeout (default 600)
#   --env VAR=VALUE      set in every rank's environment (repeatable)
#   --addr0 HOST         host 0's launcher and ranks reach the store as
#                        HOST:29500 (e.g. the machine's name, which may
#                        resolve to a loopback alias), the others as
#                        10.77.0.1:29500
#   -q, --quiet          no set-up chatter
# Exit status: COMMAND's (the first host's non-zero status; 77 if every
# host's was 77), 0 after an iperf-only run, 77 = skipped, 2 = usage.
#
# Example (2 hosts x 2 ranks on a 1 Gbit/s link, with the reference):
#   bench/netbed.sh -H 2 -k 2 --rate 1gbit --iperf 5 -- build/xcoll-perf -b 1M -e 64M
set -u

here=$(cd "$(dirname "$0")" && pwd)
hosts=2
ranks=1
topo=""
rate=""
burst=""
latency=5ms
iperf=0
iperf_after=0
iperf_streams=1
iperf_args=""
xrun="$here/../build/xcoll-run"
timeout=600
quiet=0
envs=""
addr0=""

usage() {
    sed -n '/^# Usage:/,/^# Example/p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
need_arg() { [ $# -ge 2 ] || { echo "netbed: $1 needs a value" >&2; exit 2; }; }

while [ $# -gt 0 ]; do
    case $1 in
    -H | --hosts) need_arg "$@"; hosts=$2; shift 2 ;;
    -k | --ranks) need_arg "$@"; ranks=$2; shift 2 ;;
    --topology) need_arg "$@"; topo=$2; shift 2 ;;
    --rate) need_arg "$@"; rate=$2; shift 2 ;;
    --burst) need_arg "$@"; burst=$2; shift 2 ;;
    --latency) need_arg "$@"; latency=$2; shift 2 ;;
    --iperf) need_arg "$@"; iperf=$2; shift 2 ;;
    --iperf-after) iperf_after=1; shift ;;
    --iperf-streams) need_arg "$@"; iperf_streams=$2; shift 2 ;;
    --iperf-args) need_arg "$@"; iperf_args=$2; shift 2 ;;
    --xcoll-run) need_arg "$@"; xrun=$2; shift 2 ;;
    --timeout) need_arg "$@"; timeout=$2; shift 2 ;;
    --env)
        need_arg "$@"
        case $2 in *=*) ;; *) echo "netbed: --env wants VAR=VALUE" >&2; exit 2 ;; esac
        envs="$envs
$2"
        shift 2 ;;
    --addr0) need_arg "$@"; addr0=$2; shift 2 ;;
    -q | --quiet) quiet=1; shift ;;
    -h | --help) usage ;;
    --) shift; break ;;
    -*) echo "netbed: unknown option $1" >&2; usage ;;
    *) break ;;
    esac
done

is_uint() { case $1 in '' | *[!0-9]*) return 1 ;; esac; }
is_uint "$hosts" && [ "$hosts" -ge 2 ] && [ "$hosts" -le 200 ] ||
    { echo "netbed: --hosts wants 2..200" >&2; exit 2; }
[ -n "$topo" ] || { [ "$hosts" = 2 ] && topo=pair || topo=bridge; }
case $topo in
pair) [ "$hosts" = 2 ] || { echo "netbed: --topology pair needs exactly 2 hosts" >&2; exit 2; } ;;
bridge) ;;
*) echo "netbed: --topology wants pair or bridge" >&2; exit 2 ;;
esac
is_uint "$ranks" && [ "$ranks" -ge 1 ] || { echo "netbed: --ranks wants >= 1" >&2; exit 2; }
is_uint "$iperf" || { echo "netbed: --iperf wants whole seconds" >&2; exit 2; }
is_uint "$iperf_streams" && [ "$iperf_streams" -ge 1 ] ||
    { echo "netbed: --iperf-streams wants >= 1" >&2; exit 2; }
if [ $# -eq 0 ] && [ "$iperf" = 0 ]; then
    echo "netbed: nothing to run (give a COMMAND and/or --iperf SEC)" >&2
    exit 2
fi

say() { [ "$quiet" = 1 ] || echo "netbed: $*"; }

# ------------------------------------------------------------ can we?
if [ "$(id -u)" != 0 ]; then
    echo "SKIP: netbed needs root to create network namespaces"
    exit 77
fi
for tool in ip; do
    command -v $tool >/dev/null 2>&1 ||
        { echo "SKIP: the $tool command (iproute2) is not installed"; exit 77; }
done
if [ -n "$rate" ] && ! command -v tc >/dev/null 2>&1; then
    echo "SKIP: --rate needs the tc command (iproute2)"
    exit 77
fi
if [ "$iperf" -gt 0 ] && ! command -v iperf3 >/dev/null 2>&1; then
    echo "SKIP: --iperf needs iperf3 (apt-get install -y iperf3)"
    exit 77
fi
if [ $# -gt 0 ] && [ ! -x "$xrun" ]; then
    echo "netbed: launcher $xrun not found (build it, or give --xcoll-run)" >&2
    exit 2
fi

# ------------------------------------------------------------ clean-up
tag=$$
sw=xcnb${tag}s          # the switch namespace
tmp=$(mktemp -d "${TMPDIR:-/tmp}/xcoll-netbed.XXXXXX") || exit 1
made=""                 # namespaces made, removed in reverse order
pids=""                 # processes started (ip netns exec execs them)

host_ns() { echo "xcnb${tag}h$1"; }
host_ip() { echo "10.77.0.$(($1 + 1))"; }

cleanup() {
    trap '' INT TERM HUP
    for p in $pids; do kill -TERM "$p" 2>/dev/null; done
    # xcoll-run stops its ranks on SIGTERM; give it its grace, then insist.
    for p in $pids; do
        n=0
        while kill -0 "$p" 2>/dev/null && [ $n -lt 40 ]; do sleep 0.1; n=$((n + 1)); done
        kill -KILL "$p" 2>/dev/null
    done
    for ns in $made; do
        # Anything still running inside a namespace we made was started by
        # us (a rank that outlived its launcher): stop it by pid.
        for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

mkns() {
    if ! err=$(ip netns add "$1" 2>&1); then
        echo "SKIP: 'ip netns add' failed: $err"
        exit 77
    fi
    made="$1 $made"
    ip -n "$1" link set lo up
}

# tbf on the egress of `dev` in namespace `ns`.
shape() {
    [ -n "$rate" ] || return 0
    if ! err=$(tc -n "$1" qdisc add dev "$2" root tbf rate "$rate" burst "$burst" \
                  latency "$latency" 2>&1); then
        echo "SKIP: cannot add a tbf qdisc (rate $rate burst $burst latency $latency): $err"
        exit 77
    fi
}

# Default burst: 1 ms worth of the rate, at least 128 KiB (a veth hands tbf
# GSO packets of up to 64 KiB, which a smaller bucket would have to split).
if [ -n "$rate" ] && [ -z "$burst" ]; then
    bps=$(echo "$rate" | awk '
        { s = tolower($0); n = s + 0; u = substr(s, length(n "") + 1) }
        u == "bit" || u == ""  { print n; exit }
        u == "kbit" { print n * 1e3; exit }  u == "mbit" { print n * 1e6; exit }
        u == "gbit" { print n * 1e9; exit }  u == "tbit" { print n * 1e12; exit }
        u == "bps"  { print n * 8; exit }    u == "kbps" { print n * 8e3; exit }
        u == "mbps" { print n * 8e6; exit }  u == "gbps" { print n * 8e9; exit }
        { print -1 }')
    case $bps in -1 | '') echo "netbed: cannot read --rate $rate (e.g. 1gbit, 500mbit)" >&2; exit 2 ;; esac
    burst=$(awk -v b="$bps" 'BEGIN { x = b / 8 * 0.001; if (x < 131072) x = 131072; printf "%d", x }')
fi

# ------------------------------------------------------------ the bed
if [ "$topo" = pair ]; then
    # Two hosts, one veth pair: eth0 in each, shaped on each side's egress.
    mkns "$(host_ns 0)"
    mkns "$(host_ns 1)"
    if ! err=$(ip -n "$(host_ns 0)" link add eth0 type veth peer name eth0 \
                   netns "$(host_ns 1)" 2>&1); then
        echo "SKIP: cannot create a veth pair: $err"
        exit 77
    fi
    for h in 0 1; do
        ip -n "$(host_ns $h)" addr add "$(host_ip $h)/24" dev eth0 || exit 1
        ip -n "$(host_ns $h)" link set eth0 up || exit 1
        shape "$(host_ns $h)" eth0
    done
    where="joined by a veth pair"
else
    mkns "$sw"
    if ! err=$(ip -n "$sw" link add br0 type bridge 2>&1); then
        echo "SKIP: cannot create a bridge: $err"
        exit 77
    fi
    ip -n "$sw" link set br0 up
    h=0
    while [ $h -lt "$hosts" ]; do
        ns=$(host_ns $h)
        mkns "$ns"
        # Both ends are created inside our namespaces: eth0 in the host,
        # p<h> on the switch.
        if ! err=$(ip -n "$sw" link add "p$h" type veth peer name eth0 netns "$ns" 2>&1); then
            echo "SKIP: cannot create a veth pair: $err"
            exit 77
        fi
        ip -n "$sw" link set "p$h" master br0 || exit 1
        ip -n "$sw" link set "p$h" up || exit 1
        ip -n "$ns" addr add "$(host_ip $h)/24" dev eth0 || exit 1
        ip -n "$ns" link set eth0 up || exit 1
        shape "$ns" eth0     # host -> switch
        shape "$sw" "p$h"    # switch -> host
        h=$((h + 1))
    done
    where="on bridge br0 in $sw"
fi
say "$hosts hosts $(host_ns 0)..$(host_ns $((hosts - 1))) at 10.77.0.1..$(host_ip $((hosts - 1)))/24 $where${rate:+, links shaped by tbf rate $rate burst $burst latency $latency}"

# Wait until every host's eth0 reports carrier (operstate UP), at most 5 s.
h=0
while [ $h -lt "$hosts" ]; do
    n=0
    while [ $n -lt 50 ] &&
          ! ip -n "$(host_ns $h)" -br link show eth0 2>/dev/null | grep -q ' UP '; do
        sleep 0.1
        n=$((n + 1))
    done
    [ $n -lt 50 ] || say "warning: eth0 of host $h is not up after 5 s"
    h=$((h + 1))
done

# ------------------------------------------------------------ iperf3
run_iperf() {
    out="$tmp/iperf.$1.json"
    ip netns exec "$(host_ns 1)" iperf3 -s -1 -B "$(host_ip 1)" >/dev/null 2>&1 &
    srv=$!
    pids="$pids $srv"
    # Wait until the server listens (ss from iproute2), at most 5 s.
    n=0
    while [ $n -lt 50 ]; do
        ip netns exec "$(host_ns 1)" ss -Hltn 2>/dev/null | grep -q ':5201 ' && break
        sleep 0.1
        n=$((n + 1))
    done
    ip netns exec "$(host_ns 0)" iperf3 -c "$(host_ip 1)" --bidir -t "$iperf" \
        -P "$iperf_streams" $iperf_args -J >"$out" 2>"$tmp/iperf.err"
    rc=$?
    # A one-off server exits after its test; a client that failed before
    # connecting leaves it waiting.
    sleep 0.2
    kill -TERM "$srv" 2>/dev/null
    wait "$srv" 2>/dev/null
    pids=""
    if [ $rc != 0 ]; then
        echo "netbed: iperf3 failed: $(cat "$tmp/iperf.err") $(head -c 300 "$out")" >&2
        return 1
    fi
    # Per-direction throughput, and their mean in GB/s (the unit of busbw).
    /usr/bin/python3 - "$out" "$1" <<'EOF' || awk '/bits_per_second/ { print "netbed: iperf3 output:", $0 }' "$out"
import json, sys
d = json.load(open(sys.argv[1]))
e = d["end"]
up = e["sum_sent"]["bits_per_second"]            # host 0 -> host 1
down = e["sum_sent_bidir_reverse"]["bits_per_second"]  # host 1 -> host 0
mean = (up + down) / 2
print("netbed: iperf3 --bidir (%s): 0->1 %.3f Gbit/s, 1->0 %.3f Gbit/s, per direction %.3f GB/s"
      % (sys.argv[2], up / 1e9, down / 1e9, mean / 8e9))
print("netbed: iperf3_bidir_GBps=%.4f" % (mean / 8e9))
EOF
}

status=0
if [ "$iperf" -gt 0 ]; then
    run_iperf before || status=1
fi

# ------------------------------------------------------------ the job
if [ $# -gt 0 ]; then
    world=$((hosts * ranks))
    addr="$(host_ip 0):29500"
    say "job: $world ranks ($ranks per host), store at $addr: $*"
    jobpids=""
    h=$hosts
    # The hosts' launchers form one job: give it one token (xcoll-run draws
    # one per invocation otherwise, and the job would run unauthenticated),
    # unless the caller gave one (environment or --env).
    token=""
    case "$envs" in *XCOLL_TOKEN*) ;; *)
        if [ -z "${XCOLL_TOKEN:-}" ] && [ -z "${XCOLL_TOKEN_FILE:-}" ]; then
            token=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
        fi ;;
    esac
    # Start the other hosts first, host 0 (which hosts the store) last, so
    # that host 0's launcher does not wait for the rest to be started.
    while [ $h -gt 0 ]; do
        h=$((h - 1))
        hostflag=""
        haddr=$addr
        [ $h = 0 ] && hostflag=--host-store
        [ $h = 0 ] && [ -n "$addr0" ] && haddr="$addr0:29500"
        (
            # Rank environment: the given --env values; the launcher sets the
            # rank variables itself.
            IFS='
'
            for kv in $envs; do export "$kv"; done
            unset IFS
            [ -n "$token" ] && export XCOLL_TOKEN="$token"
            exec ip netns exec "$(host_ns $h)" "$xrun" -n "$ranks" --rank-offset $((h * ranks)) \
                --world-size "$world" --addr "$haddr" $hostflag --timeout "$timeout" -- "$@"
        ) &
        jobpids="$! $jobpids"
        pids="$pids $!"
    done
    # Exit status: the first host's non-zero status; 77 only if all skipped.
    all77=1
    first=0
    for p in $jobpids; do
        wait "$p"
        rc=$?
        [ "$rc" = 77 ] || all77=0
        if [ "$rc" != 0 ] && [ "$rc" != 77 ] && [ "$first" = 0 ]; then first=$rc; fi
    done
    if [ "$first" != 0 ]; then status=$first
    elif [ "$all77" = 1 ] && [ "$status" = 0 ]; then status=77
    fi
    pids=""
fi

if [ "$iperf" -gt 0 ] && [ "$iperf_after" = 1 ]; then
    run_iperf after || [ "$status" != 0 ] || status=1
fi
exit $status
