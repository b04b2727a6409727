#!/bin/sh
# test_limits.sh XRUN CTL -- the launcher holds two pipe ends per rank (and,
# hosting the store, a connection per rank while they rendezvous), more
# than a soft limit of 1024 open files allows from about 500 ranks: it
# raises its soft limit to the hard one, gives the ranks the limit it was
# given, and refuses a job the hard limit cannot hold before starting any
# rank.  Scaled down: 200 ranks under a limit of 256.
XRUN=$1 CTL=$2
. "$(dirname "$0")/lib.sh"

hard=$(ulimit -Hn)
if [ "$hard" = unlimited ] || [ "$hard" -ge 1024 ]; then
    (ulimit -Sn 256; exec "$XRUN" -n 200 sh -c 'echo "limit=$(ulimit -Sn)"') >"$TMP/out" 2>"$TMP/err"
    rc=$?
    expect_eq "200 ranks, soft limit 256: exit code" 0 $rc
    [ $rc = 0 ] || show "$TMP/err"
    expect_count "200 ranks, soft limit 256: each ran with the limit it was given" 200 \
        '^\[[0-9]+\] limit=256$' "$TMP/out"
else
    echo "note: hard limit of open files $hard < 1024: cannot test raising the soft one"
fi

(ulimit -Sn 256; ulimit -Hn 256; exec "$XRUN" -n 200 sh -c 'echo "pid=$$"') >"$TMP/out" 2>"$TMP/err"
expect_eq "200 ranks, hard limit 256: exit code" 1 $?
expect_grep "200 ranks, hard limit 256: says why" '^xcoll-run: -n 200 needs about [0-9]+ open files' "$TMP/err"
expect_count "200 ranks, hard limit 256: no rank started" 0 'pid=' "$TMP/out"

finish
