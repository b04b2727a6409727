#!/bin/sh
# test_signal.sh XRUN CTL -- SIGTERM/SIGINT/SIGHUP sent to the launcher reach
# every rank, the launcher exits 128+signal and leaves no rank behind; one
# the launcher was started with ignored stays ignored, there and in the
# ranks; a launcher killed outright takes its ranks with it; --timeout
# exits 124.
XRUN=$1 CTL=$2
. "$(dirname "$0")/lib.sh"

# start_job N ARGS...: run the launcher in the background, wait until its N
# ranks printed their pids.  Sets $lpid.
start_job() {
    n=$1; shift
    # Empty the files first: the background shell truncates them only when
    # it gets to run, and the previous job's pid lines must not be mistaken
    # for this one's (the launcher would be signalled before it is ready).
    : >"$TMP/out"
    : >"$TMP/err"
    # A background job of a script starts with SIGINT ignored, and the
    # launcher leaves an ignored signal ignored: sigdfl restores it.
    "$CTL" sigdfl "$XRUN" -n "$n" "$@" >"$TMP/out" 2>"$TMP/err" &
    lpid=$!
    wait_lines "$n" 'pid=' "$TMP/out" || fail "ranks did not start: $(cat "$TMP/out" "$TMP/err")"
}

# Default action: the forwarded SIGTERM kills the sleeping ranks.
start_job 3 "$CTL" sleep 60
t0=$(now)
kill -TERM $lpid
wait $lpid
rc=$? t=$(($(now) - t0))
expect_eq "SIGTERM: launcher exit code" 143 $rc
expect_le "SIGTERM: seconds taken" 5 $t
expect_grep "SIGTERM: announced" '^xcoll-run: caught SIGTERM; forwarding it' "$TMP/err"
expect_gone "SIGTERM: no orphans" "$TMP/out"

# Ranks that catch the signal see it (the same signal, forwarded once).
for sig in INT TERM HUP; do
    start_job 3 "$CTL" trap 60
    kill -$sig $lpid
    wait $lpid
    rc=$?
    case $sig in INT) num=2 ;; TERM) num=15 ;; HUP) num=1 ;; esac
    expect_eq "SIG$sig: launcher exit code" $((128 + num)) $rc
    expect_count "SIG$sig: every rank caught it once" 3 "^\[[0-9]\] caught $num\$" "$TMP/out"
    expect_gone "SIG$sig: no orphans" "$TMP/out"
done

# A signal the launcher was started with ignored (nohup, `trap '' HUP`, a
# background job of a script) stays ignored, in the launcher and in the
# ranks: neither the launcher's hangup nor the ranks' own ends the job.
for sig in HUP INT; do
    : >"$TMP/out"
    : >"$TMP/err"
    (trap '' $sig; exec "$XRUN" -n 2 sh -c 'echo "pid=$$"; sleep 2') >"$TMP/out" 2>"$TMP/err" &
    lpid=$!
    wait_lines 2 'pid=' "$TMP/out" || fail "ranks did not start: $(cat "$TMP/out" "$TMP/err")"
    kill -$sig $lpid
    pgid=$(sed -n 's/^\[0\] pid=//p' "$TMP/out") # the ranks' group: rank 0's pid
    kill -$sig -"$pgid"
    wait $lpid
    expect_eq "SIG$sig ignored at start: launcher exit code" 0 $?
    expect_count "SIG$sig ignored at start: nothing caught or forwarded" 0 'caught|killed' "$TMP/err"
    expect_gone "SIG$sig ignored at start: no orphans" "$TMP/out"
done

# The signal reaches the processes the ranks started (one process group).
start_job 2 sh -c '"$0" sleep 60 & echo "pid=$$"; wait' "$CTL"
wait_lines 4 'pid=' "$TMP/out" || fail "grandchildren did not start: $(cat "$TMP/out")"
kill -TERM $lpid
wait $lpid
expect_eq "SIGTERM, ranks with children: launcher exit code" 143 $?
expect_count "SIGTERM, ranks with children: pids of ranks and children" 4 'pid=' "$TMP/out"
expect_gone "SIGTERM, ranks with children: no orphans" "$TMP/out"

# Ranks that ignore SIGTERM are SIGKILLed after the grace period.
start_job 2 --grace-ms 300 "$CTL" stubborn 9 0 60
kill -TERM $lpid
wait $lpid
expect_eq "SIGTERM, stubborn ranks: launcher exit code" 143 $?
expect_gone "SIGTERM, stubborn ranks: no orphans" "$TMP/out"

# The launcher killed outright: its ranks die with it (parent-death signal).
start_job 3 "$CTL" sleep 60
kill -KILL $lpid
wait $lpid
expect_eq "SIGKILL to launcher: its exit code" 137 $?
expect_gone "SIGKILL to launcher: no orphans" "$TMP/out"

# --timeout.
t0=$(now)
"$XRUN" -n 2 --timeout 1 "$CTL" sleep 60 >"$TMP/out" 2>"$TMP/err"
rc=$? t=$(($(now) - t0))
expect_eq "--timeout 1: exit code" 124 $rc
expect_le "--timeout 1: seconds taken" 6 $t
expect_grep "--timeout 1: message" '^xcoll-run: timeout: the job ran for 1 s' "$TMP/err"
expect_gone "--timeout 1: no orphans" "$TMP/out"

# A job that ends in time is not affected by --timeout.
"$XRUN" -n 2 --timeout 30 "$CTL" exit 0 >"$TMP/out" 2>&1
expect_eq "--timeout 30, quick job: exit code" 0 $?

finish
