#!/bin/sh
# hostname.sh -- a job whose store host reaches the store by the machine's
# name, across two namespace hosts of the test bed (bench/netbed.sh).
#
# Usage: hostname.sh PATH/TO/xcoll-run PATH/TO/xcoll-perf
#
# Host 0's launcher and ranks use "$(hostname):29500", which Debian's
# /etc/hosts maps to a loopback alias (127.0.1.1, or 127.0.0.1 here); the
# other host uses 10.77.0.1:29500.  Before 2026-12-07 both sides broke:
# xcoll-run bound the store on the loopback alias only (host 1 could not
# reach it), and rank 0, reaching its store over loopback, advertised a
# loopback address to its peers (host 1's ranks could not connect to it).
# Now a name is bound on every interface and such a rank advertises an
# interface's address.  The job runs every collective with checked
# results (xcoll-perf -c 1 exits non-zero on a wrong element).
# Exit 77 (skip) when the bed cannot be built here (netbed says why).
set -u
xrun=${1:-}
perf=${2:-}
if [ -z "$xrun" ] || [ -z "$perf" ] || [ ! -x "$xrun" ] || [ ! -x "$perf" ]; then
    echo "usage: $0 PATH/TO/xcoll-run PATH/TO/xcoll-perf" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
name=$(hostname 2>/dev/null || uname -n)
resolved=$(getent hosts "$name" | awk '{print $1; exit}')
case $resolved in
127.* | ::1) echo "== $name resolves to $resolved (loopback) on every host" ;;
*) # another address does not exist inside the namespace hosts
    echo "SKIP: $name resolves to '$resolved', not a loopback alias: the case this" \
        "test covers does not arise here"
    exit 77 ;;
esac
sh "$here/../../bench/netbed.sh" -H 2 -k 2 --timeout 60 --addr0 "$name" --xcoll-run "$xrun" \
    -- "$perf" -C all -b 8 -e 256K -f 64 -n 5 -w 1 -c 1
rc=$?
[ "$rc" = 77 ] && exit 77
if [ "$rc" = 0 ]; then echo "hostname: passed"; else echo "hostname: FAILED (exit $rc)"; fi
exit $rc
