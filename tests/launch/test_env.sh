#!/bin/sh
# test_env.sh XRUN CTL -- every rank gets the right XCOLL_* variables, the
# store the launcher hosts is reachable, and no fd beyond 0-2 is inherited;
# two invocations with --rank-offset/--world-size form one job.
XRUN=$1 CTL=$2
. "$(dirname "$0")/lib.sh"

for n in 1 3 8; do
    "$XRUN" -n $n "$CTL" env >"$TMP/out" 2>"$TMP/err"
    expect_eq "n=$n: exit code" 0 $?
    expect_count "n=$n: one env line per rank" $n '^\[[0-9]+\] rank=' "$TMP/out"
    r=0
    while [ $r -lt $n ]; do
        expect_grep "n=$n: rank $r env" "^\[$r\] rank=$r size=$n local_rank=$r local_size=$n addr=127\.0\.0\.1:[0-9]+ external=1 store=ok fds=0,1,2 pid=[0-9]+\$" "$TMP/out"
        expect_grep "n=$n: rank $r stderr" "^\[$r\] stderr of rank $r\$" "$TMP/err"
        r=$((r + 1))
    done
    addrs=$(sed -n 's/.* addr=\([^ ]*\) .*/\1/p' "$TMP/out" | sort -u | wc -l)
    expect_eq "n=$n: one store address for all ranks" 1 "$addrs"
done

# Variables already in the environment are replaced, not duplicated.
XCOLL_RANK=99 XCOLL_SIZE=99 XCOLL_STORE_EXTERNAL=0 "$XRUN" -n 2 "$CTL" env >"$TMP/out" 2>&1
expect_eq "stale env: exit code" 0 $?
expect_grep "stale env: rank 1 overridden" '^\[1\] rank=1 size=2 .* external=1 ' "$TMP/out"

# --host: listen on all interfaces; the ranks still reach 127.0.0.1.
"$XRUN" -n 2 --host 0.0.0.0 "$CTL" env >"$TMP/out" 2>&1
expect_eq "--host 0.0.0.0: exit code" 0 $?
expect_count "--host 0.0.0.0: ranks reach the store" 2 'addr=127\.0\.0\.1:[0-9]+ external=1 store=ok' "$TMP/out"

# Two invocations, one job of 5 ranks: A hosts the store (ranks 0-1), B
# (ranks 2-4) only uses it.  B binding the port too would fail (in use), so
# B succeeding shows it did not host.  A's ranks hold the store up for 3 s.
port=$("$CTL" port)
"$XRUN" -n 2 --world-size 5 --addr 127.0.0.1:$port --host-store "$CTL" env 3000 >"$TMP/a" 2>&1 &
apid=$!
"$XRUN" -n 3 --rank-offset 2 --world-size 5 --addr 127.0.0.1:$port "$CTL" env >"$TMP/b" 2>&1
expect_eq "split job: invocation B exit code" 0 $?
wait $apid
expect_eq "split job: invocation A exit code" 0 $?
for r in 0 1; do
    expect_grep "split job: rank $r in A" "^\[$r\] rank=$r size=5 local_rank=$r local_size=2 addr=127\.0\.0\.1:$port external=1 store=ok " "$TMP/a"
done
for r in 2 3 4; do
    expect_grep "split job: rank $r in B" "^\[$r\] rank=$r size=5 local_rank=$((r - 2)) local_size=3 addr=127\.0\.0\.1:$port external=1 store=ok " "$TMP/b"
done

# --nodes 2 on 5 ranks: blocks {0,1,2} and {3,4}, each its own node id and
# local numbering.
"$XRUN" -n 5 --nodes 2 "$CTL" env >"$TMP/out" 2>&1
expect_eq "--nodes 2: exit code" 0 $?
for r in 0 1 2; do
    expect_grep "--nodes 2: rank $r" "^\[$r\] rank=$r size=5 local_rank=$r local_size=3 " "$TMP/out"
done
for r in 3 4; do
    expect_grep "--nodes 2: rank $r" "^\[$r\] rank=$r size=5 local_rank=$((r - 3)) local_size=2 " "$TMP/out"
done

# --addr alone for a whole job: the launcher hosts there.
port=$("$CTL" port)
"$XRUN" -n 2 --addr 127.0.0.1:$port "$CTL" env >"$TMP/out" 2>&1
expect_eq "--addr: exit code" 0 $?
expect_count "--addr: ranks use it" 2 "addr=127\.0\.0\.1:$port external=1 store=ok" "$TMP/out"

finish
