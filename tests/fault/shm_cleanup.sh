#!/bin/sh
# shm_cleanup.sh XRUN DEMO -- xcoll's shared-memory segments never outlive
# the communicator's creation: none is visible in /dev/shm while a job runs,
# after it exits normally, or after one of its ranks is SIGKILLed.
XRUN=$1 DEMO=$2
fail=0
segs() { ls /dev/shm 2>/dev/null | grep -c '^xcoll-' ; }
check() { # check WHAT: no xcoll segment now
    n=$(segs)
    if [ "$n" -eq 0 ]; then echo "ok: $1: no xcoll segment in /dev/shm"
    else echo "FAIL: $1: $n xcoll segment(s) in /dev/shm: $(ls /dev/shm | grep '^xcoll-')"; fail=1; fi
}
[ -d /dev/shm ] || { echo "SKIP: no /dev/shm"; exit 77; }
before=$(segs)
[ "$before" -eq 0 ] || { echo "SKIP: $before stale xcoll segment(s) from elsewhere in /dev/shm"; exit 77; }

# Normal exit.
"$XRUN" -n 4 "$DEMO" 1000 >/dev/null 2>&1 || { echo "FAIL: demo failed"; fail=1; }
check "after a normal exit"

# While running (the segment is unlinked once every rank has mapped it),
# then after one rank is SIGKILLed mid-run.
"$XRUN" -n 4 "$DEMO" 8000000 >/dev/null 2>&1 &
job=$!
sleep 1
check "while the job runs"
victim=$(pgrep -f "$DEMO 8000000" | tail -n 1)
[ -n "$victim" ] && kill -9 "$victim"
wait $job
echo "job ended with $? after a rank was killed"
check "after a rank was SIGKILLed"
[ $fail -eq 0 ] && echo "PASS" || echo "FAILED"
exit $fail
