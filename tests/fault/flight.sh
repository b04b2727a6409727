#!/bin/sh
# flight.sh XRUN PROG DOCTOR -- the flight recorder and xcoll-doctor.
# (Collective numbers count the ones of communicator creation too.)
#  1. rank 1 of 3 arrives 3 s late at the 10th all-reduce, the deadline is
#     2 s (1 s once timed out an init barrier on a loaded host): every
#     rank fails, every rank dumps, and the doctor names rank 1
#     as LATE at allreduce #10 (exit 1);
#  2. rank 2 of 4 stalls for 60 s before the 10th all-reduce, no deadline
#     fires: SIGUSR1 to every rank makes them dump, the doctor names rank 2
#     as BEHIND (it never issued #10) and the others as waiting in it;
#  3. a healthy job leaves no dump and the doctor finds nothing (exit 2).
XRUN=$1 PROG=$2 DOCTOR=$3
fail=0
dir=$(mktemp -d "${TMPDIR:-/tmp}/xcoll-flight.XXXXXX") || exit 1
trap 'rm -rf "$dir"; [ -n "${job:-}" ] && kill -9 $job 2>/dev/null' EXIT
export XCOLL_FLIGHT_DIR="$dir"
check() { # check WHAT FILE ERE
    if grep -Eq -- "$3" "$2"; then echo "ok: $1"
    else echo "FAIL: $1: no line matches /$3/ in:"; sed 's/^/    | /' "$2"; fail=1; fi
}

# 1. Late rank, deadline.
XCOLL_TIMEOUT_MS=2000 "$XRUN" -n 3 --timeout 60 "$PROG" 1 3000 >"$dir/out1" 2>&1
check "late: the late rank fails too" "$dir/out1" '^\[1\] rank 1: XC_ERR_(TIMEOUT|PEER_LOST)'
n=$(ls "$dir" | grep -c '^xcoll-flight-.*\.txt$')
[ "$n" -eq 3 ] && echo "ok: late: 3 dumps" || { echo "FAIL: late: $n dumps, expected 3"; fail=1; }
"$DOCTOR" "$dir" >"$dir/doc1" 2>&1
rc=$?
[ $rc -eq 1 ] && echo "ok: late: doctor exit 1" || { echo "FAIL: late: doctor exit $rc"; fail=1; }
check "late: doctor names rank 1" "$dir/doc1" 'LATE: rank 1 issued #[0-9]+ 3\.[0-9] s after'
check "late: doctor names the operation" "$dir/doc1" 'furthest collective: allreduce #[0-9]+ \(fp32 sum, 1000 elements'
rm -f "$dir"/xcoll-flight-*.txt

# 2. Stalled rank, SIGUSR1.
XCOLL_TIMEOUT_MS=120000 "$XRUN" -n 4 --timeout 90 "$PROG" 2 60000 >"$dir/out2" 2>&1 &
job=$!
# Wait until the 4 ranks (the launcher's children) catch SIGUSR1: before
# the recorder's handler is installed the signal would end a rank.
catches() { # catches PID: SIGUSR1 (10) is in the caught mask
    m=$(awk '/^SigCgt:/ {print $2}' /proc/$1/status 2>/dev/null)
    [ -n "$m" ] && [ $(( 0x$m >> 9 & 1 )) -eq 1 ]
}
for i in $(seq 100); do
    pids=$(pgrep -P $job); np=0
    for p in $pids; do catches "$p" && np=$((np + 1)); done
    [ "$np" -eq 4 ] && break
    sleep 0.2
done
[ "$np" -eq 4 ] || echo "note: $np of 4 ranks ready: $pids"
# The others reach the 10th all-reduce: every rank has said it finished
# the 9th (communicator creation may take seconds on a loaded machine, so
# no fixed sleep), then a moment for them to enter the 10th.
for i in $(seq 150); do
    [ "$(grep -c ': 9 done' "$dir/out2" 2>/dev/null)" -ge 4 ] && break
    sleep 0.2
done
[ "$(grep -c ': 9 done' "$dir/out2")" -ge 4 ] ||
    echo "note: not every rank finished the 9th all-reduce"
sleep 0.5
for p in $pids; do kill -USR1 "$p"; done
sleep 1
n=$(ls "$dir" | grep -c '^xcoll-flight-.*\.txt$')
[ "$n" -eq 4 ] && echo "ok: SIGUSR1: 4 dumps" || { echo "FAIL: SIGUSR1: $n dumps, expected 4"; fail=1; }
"$DOCTOR" "$dir" >"$dir/doc2" 2>&1
check "SIGUSR1: doctor names rank 2" "$dir/doc2" 'BEHIND: rank 2 never issued #[0-9]+; its last collective is allreduce #[0-9]+ \(fp32 sum, 1000 elements, allreduce\.[a-z_]+\), done'
check "SIGUSR1: the others wait in #10" "$dir/doc2" 'rank 0: waiting in #[0-9]+ for [0-9.]+ s'
kill -9 $job 2>/dev/null
pkill -9 -f "$PROG 2 60000" 2>/dev/null
wait $job 2>/dev/null
job=
rm -f "$dir"/xcoll-flight-*.txt

# 3. Healthy.
"$XRUN" -n 2 --timeout 60 "$PROG" 0 0 >"$dir/out3" 2>&1
check "healthy: job succeeds" "$dir/out3" '^\[1\] rank 1: XC_OK'
"$DOCTOR" "$dir" >"$dir/doc3" 2>&1
rc=$?
[ $rc -eq 2 ] && echo "ok: healthy: no dumps (doctor exit 2)" || { echo "FAIL: healthy: doctor exit $rc"; fail=1; }

[ $fail -eq 0 ] && echo PASS || echo FAILED
exit $fail
