#!/bin/sh
# restart.sh XRUN TRAIN -- checkpoint/restart end to end (issue 7): a
# data-parallel training run whose last rank is SIGKILLed at step 10, with
# `xcoll-run --max-restarts 1`, must resume from its newest complete
# checkpoint and end with parameters bit-identical to an uninterrupted
# run's (XCOLL_DETERMINISTIC=1: the same sums in the same order).
XRUN=$1 TRAIN=$2
dir=$(mktemp -d "${TMPDIR:-/tmp}/xcoll-restart.XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
export XCOLL_DETERMINISTIC=1
args="--small --steps 20 --checkpoint-every 3 --resume"
"$XRUN" -n 3 --timeout 120 "$TRAIN" $args --checkpoint "$dir/a" >"$dir/a.out" 2>&1 || {
    echo "FAIL: the uninterrupted run failed:"; sed 's/^/    | /' "$dir/a.out"; exit 1; }
"$XRUN" -n 3 --timeout 120 --max-restarts 1 "$TRAIN" $args --checkpoint "$dir/b" --crash-at 10 \
    >"$dir/b.out" 2>&1 || {
    echo "FAIL: the restarted run failed:"; sed 's/^/    | /' "$dir/b.out"; exit 1; }
fail=0
grep -q "restart 1 of 1" "$dir/b.out" && echo "ok: the launcher restarted the job" ||
    { echo "FAIL: no restart"; fail=1; }
r=$(grep -o "resumed from .* at step [0-9]*" "$dir/b.out")
[ -n "$r" ] && echo "ok: $r" || { echo "FAIL: did not resume"; fail=1; }
fa=$(grep -o "fingerprint [0-9a-f]*" "$dir/a.out") fb=$(grep -o "fingerprint [0-9a-f]*" "$dir/b.out")
if [ -n "$fa" ] && [ "$fa" = "$fb" ]; then echo "ok: final parameters bit-identical ($fa)"
else echo "FAIL: final parameters differ: uninterrupted '$fa', restarted '$fb'"; fail=1; fi
la=$(grep "summary: loss" "$dir/a.out") lb=$(grep "summary: loss" "$dir/b.out")
[ "$la" = "$lb" ] && echo "ok: same loss curve summary" || { echo "FAIL: loss '$la' vs '$lb'"; fail=1; }
[ $fail -eq 0 ] && echo PASS || { sed 's/^/    b| /' "$dir/b.out"; echo FAILED; }
exit $fail
