#!/bin/sh
# ckpt_kill.sh XRUN PROG TRIALS -- kill a rank while checkpoints are being
# written, TRIALS times, and load after each kill: the newest complete
# checkpoint must verify byte for byte (or there is none yet); a checkpoint
# that loads wrong, or a load that fails, is a failure.  Each trial starts
# `PROG loop` (2 ranks saving ~3 MiB per rank per step, sync and async
# alternately), SIGKILLs a random rank after a random 50-600 ms, then runs
# `PROG check` on the same directory.  Each `loop` resumes from the newest
# complete checkpoint (verified) and re-saves the steps after it.  Kills land in every phase: while
# shards are written, fsynced, renamed, and while the marker is.
XRUN=$1 PROG=$2 TRIALS=${3:-10}
dir=$(mktemp -d "${TMPDIR:-/tmp}/xcoll-ckpt.XXXXXX") || exit 1
trap 'rm -rf "$dir"; [ -n "${job:-}" ] && kill -9 $job 2>/dev/null' EXIT
fail=0 loaded=0 none=0
rnd() { od -An -N2 -tu2 /dev/urandom | tr -d ' '; }
i=0
while [ $i -lt "$TRIALS" ]; do
    i=$((i + 1))
    XCOLL_TIMEOUT_MS=20000 "$XRUN" -n 2 --timeout 60 "$PROG" loop "$dir/ck" >"$dir/loop.out" 2>&1 &
    job=$!
    ms=$(( $(rnd) % 550 + 50 ))
    sleep "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))"
    pids=$(pgrep -P $job)
    victim=$(echo $pids | tr ' ' '\n' | sed -n "$(( $(rnd) % 2 + 1 ))p")
    [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
    wait $job 2>/dev/null
    job=
    if grep -q FAIL "$dir/loop.out"; then
        echo "FAIL: trial $i: the resumed job:"; sed 's/^/    | /' "$dir/loop.out"; fail=1
    fi
    if "$XRUN" -n 2 --timeout 60 "$PROG" check "$dir/ck" >"$dir/check.out" 2>&1; then
        if grep -q verified "$dir/check.out"; then loaded=$((loaded + 1)); else none=$((none + 1)); fi
    else
        echo "FAIL: trial $i (killed pid ${victim:-none} after $ms ms):"
        sed 's/^/    | /' "$dir/check.out"
        fail=1
    fi
done
steps=$(ls "$dir/ck" 2>/dev/null | wc -l)
tmps=$(find "$dir/ck" -name '*.tmp.*' | wc -l)
echo "$TRIALS kills: $loaded loads verified, $none with nothing saved yet; $steps step directories, $tmps temporaries left by killed writers"
[ $fail -eq 0 ] && echo PASS || echo FAILED
exit $fail
