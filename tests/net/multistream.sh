#!/bin/sh
# multistream.sh -- several TCP streams per peer, across two namespace
# hosts of the test bed (bench/netbed.sh: 2 hosts x 2 ranks, a bridge, the
# links shaped by tbf at 2 gbit so the shaping path runs too).
#
# Usage: multistream.sh PATH/TO/xcoll-run PATH/TO/multistream_check
#
# Four jobs, each on a fresh bed:
#   1. every rank with XCOLL_SOCKETS_PER_PEER=3;
#   2. mixed settings (rank r: 1 + r % 3; a pair uses the connecting,
#      higher rank's), which also covers pairs of one stream beside pairs
#      of two and three;
#   3. one stream with tiny fixed buffers (XCOLL_SOCKET_BUF_KB=8): the
#      receive low-water mark (tcp.c, rx_lowat) must stay below what such
#      a buffer can hold, or a large payload would never wake the reader;
#   4. two streams with the kernel's autotuned buffers (XCOLL_SOCKET_BUF_KB=0).
# multistream_check verifies results and stream usage (see its header).
# Exit 77 (skip) when the bed cannot be built here (netbed says why).
set -u
xrun=${1:-}
prog=${2:-}
if [ -z "$xrun" ] || [ -z "$prog" ] || [ ! -x "$xrun" ] || [ ! -x "$prog" ]; then
    echo "usage: $0 PATH/TO/xcoll-run PATH/TO/multistream_check" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
bed="$here/../../bench/netbed.sh"

status=0
for job in 3 mixed 1:8 2:0; do
    mode=${job%%:*}
    echo "== XCOLL_SOCKETS_PER_PEER=$mode, 2 hosts x 2 ranks"
    # (mixed: every rank sets its own value)
    env=""
    [ "$mode" = mixed ] || env="--env XCOLL_SOCKETS_PER_PEER=$mode"
    if [ "$job" != "$mode" ]; then
        echo "   XCOLL_SOCKET_BUF_KB=${job#*:}"
        env="$env --env XCOLL_SOCKET_BUF_KB=${job#*:}"
    fi
    sh "$bed" -H 2 -k 2 --rate 2gbit --timeout 80 --xcoll-run "$xrun" $env \
        -- "$prog" 2 2 "$mode"
    rc=$?
    [ "$rc" = 77 ] && exit 77
    if [ "$rc" != 0 ]; then
        echo "FAIL: job $job: exit status $rc"
        status=1
    fi
done
if [ "$status" = 0 ]; then echo "multistream: passed"; else echo "multistream: FAILED"; fi
exit $status
