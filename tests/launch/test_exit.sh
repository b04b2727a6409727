#!/bin/sh
# test_exit.sh XRUN CTL -- the launcher's exit code is the first failing
# rank's; the other ranks are stopped at once (SIGTERM, then SIGKILL after
# --grace-ms); 77 from every rank propagates (ctest's skip code).
XRUN=$1 CTL=$2
. "$(dirname "$0")/lib.sh"

"$XRUN" -n 3 "$CTL" exit 0 >"$TMP/out" 2>&1
expect_eq "all exit 0" 0 $?

"$XRUN" -n 3 "$CTL" exit 77 >"$TMP/out" 2>&1
expect_eq "all exit 77" 77 $?

# Rank 2 exits 3; the others would sleep 60 s.
t0=$(now)
"$XRUN" -n 4 "$CTL" fail 2 3 60 >"$TMP/out" 2>"$TMP/err"
rc=$? t=$(($(now) - t0))
expect_eq "rank 2 exits 3: launcher exit code" 3 $rc
expect_le "rank 2 exits 3: seconds taken" 10 $t
expect_count "rank 2 exits 3: one line names rank and code" 1 '^xcoll-run: rank 2 \(pid [0-9]+\) exited with code 3' "$TMP/err"
expect_count "rank 2 exits 3: every rank had started" 4 'pid=' "$TMP/out"
expect_gone "rank 2 exits 3: no rank left" "$TMP/out"

# Rank 1 dies by SIGKILL: 128 + 9.
t0=$(now)
"$XRUN" -n 3 "$CTL" kill 1 60 >"$TMP/out" 2>"$TMP/err"
rc=$? t=$(($(now) - t0))
expect_eq "rank 1 SIGKILLed: launcher exit code" 137 $rc
expect_le "rank 1 SIGKILLed: seconds taken" 10 $t
expect_grep "rank 1 SIGKILLed: cause named" '^xcoll-run: rank 1 \(pid [0-9]+\) was killed by SIGKILL' "$TMP/err"
expect_gone "rank 1 SIGKILLed: no rank left" "$TMP/out"

# Two ranks fail while the launcher is stopped: rank 1 dies by SIGSEGV,
# then rank 0 exits 1 (as a rank that lost its peer would, with
# XC_ERR_PEER_LOST).  Both are zombies when it runs again and waitpid(-1)
# returns rank 0 first, yet the crash is the cause: 128 + 11, and a line
# for each.  Each rank waits for its go file, so the order is the test's.
# rank_pid R: the pid rank R printed
rank_pid() { sed -n "s/^\\[$1\\] pid=//p" "$TMP/out"; }
# wait_dead PID: wait up to 10 s until PID has ended (a zombie counts)
wait_dead() {
    tries=0
    while running "$1" && [ $tries -lt 100 ]; do sleep 0.1; tries=$((tries + 1)); done
    running "$1" && fail "pid $1 did not end"
}
: >"$TMP/out"
: >"$TMP/err"
prog='echo "pid=$$"; while [ ! -e "$0.$XCOLL_RANK" ]; do sleep 0.05; done
      [ "$XCOLL_RANK" = 1 ] && kill -SEGV $$; exit 1'
(ulimit -c 0; exec "$XRUN" -n 2 sh -c "$prog" "$TMP/go") >"$TMP/out" 2>"$TMP/err" &
lpid=$!
wait_lines 2 'pid=' "$TMP/out" || fail "ranks did not start: $(cat "$TMP/out" "$TMP/err")"
kill -STOP $lpid
touch "$TMP/go.1"
wait_dead "$(rank_pid 1)"
touch "$TMP/go.0"
wait_dead "$(rank_pid 0)"
kill -CONT $lpid
wait $lpid
expect_eq "rank 1 SIGSEGV, then rank 0 exits 1: launcher exit code" 139 $?
expect_count "rank 1 SIGSEGV, then rank 0 exits 1: the crash named" 1 '^xcoll-run: rank 1 \(pid [0-9]+\) was killed by SIGSEGV' "$TMP/err"
expect_count "rank 1 SIGSEGV, then rank 0 exits 1: the exit named" 1 '^xcoll-run: rank 0 \(pid [0-9]+\) exited with code 1' "$TMP/err"

# The others ignore SIGTERM: SIGKILL follows after --grace-ms.
t0=$(now)
"$XRUN" -n 3 --grace-ms 500 "$CTL" stubborn 0 5 60 >"$TMP/out" 2>"$TMP/err"
rc=$? t=$(($(now) - t0))
expect_eq "stubborn ranks: launcher exit code" 5 $rc
expect_le "stubborn ranks: seconds taken" 10 $t
expect_grep "stubborn ranks: SIGKILL announced" 'still running 500 ms after SIGTERM; sending SIGKILL' "$TMP/err"
expect_gone "stubborn ranks: no rank left" "$TMP/out"

# A program that cannot be run.
"$XRUN" -n 2 "$TMP/no-such-program" >"$TMP/out" 2>&1
expect_eq "missing program: exit code" 127 $?
"$XRUN" -n 2 no-such-program-in-path >"$TMP/out" 2>&1
expect_eq "program not in PATH: exit code" 127 $?
printf 'not a program\n' >"$TMP/data"
chmod -x "$TMP/data"
"$XRUN" -n 2 "$TMP/data" >"$TMP/out" 2>&1
expect_eq "non-executable program: exit code" 126 $?

finish
