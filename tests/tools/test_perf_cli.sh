#!/bin/sh
# test_perf_cli.sh XRUN PERF -- xcoll-perf as a user drives it, on 2 real
# ranks: the sweep's sizes and records, every element checked; several
# algorithms of one collective measured side by side (a row each, each
# with the algorithm it names, all correct); bad options exit 2 with a
# message naming the cause.
XRUN=$1 PERF=$2
. "$(dirname "$0")/../launch/lib.sh"

run() { "$XRUN" -n 2 --no-prefix "$PERF" "$@"; }

# sweep 8 B .. 4 KiB x8: four sizes, one record each, no wrong element
run -C allreduce -b 8 -e 4K -f 8 -n 5 -w 1 --csv="$TMP/sweep.csv" >"$TMP/out" 2>"$TMP/err"
expect_eq "sweep: exit code" 0 $?
expect_count "sweep: a record per size" 4 '^allreduce,(8|64|512|4096),' "$TMP/sweep.csv"
expect_count "sweep: nothing wrong" 4 '^allreduce,[0-9]+,[0-9]+,float,sum,[^,]+,[0-9.]+,[0-9.]+,[0-9.]+,0,' \
    "$TMP/sweep.csv"
expect_grep "sweep: the table" 'Out of bounds values : 0 OK' "$TMP/out"
expect_count "sweep: -n 5 timed iterations each" 4 '^allreduce,.*,5,[0-9.]+$' "$TMP/sweep.csv"
expect_grep "sweep: the mean time column" ',iters,mean_us$' "$TMP/sweep.csv"

# -T: at least 50 ms of iterations per size, where -n 2 takes microseconds
run -C allreduce -b 8 -e 64 -f 8 -n 2 -w 2 -T 50 --csv="$TMP/mint.csv" >"$TMP/out" 2>"$TMP/err"
expect_eq "min-time: exit code" 0 $?
expect_count "min-time: more than -n iterations" 2 '^allreduce,(8|64),.*,([3-9]|[1-9][0-9]+),[0-9.]+$' \
    "$TMP/mint.csv"

# side by side: three all-reduce algorithms, one run, a row each per size
run -C allreduce --algo ring,rhd,allreduce.rd -b 8 -e 64K -f 16 -n 10 -w 1 \
    --csv="$TMP/side.csv" >"$TMP/out" 2>"$TMP/err"
expect_eq "side by side: exit code" 0 $?
for a in ring rhd rd; do
    expect_count "side by side: allreduce.$a, a row per size" 4 \
        "^allreduce,(8|128|2048|32768),[0-9]+,float,sum,allreduce\\.$a,[0-9.]+,[0-9.]+,[0-9.]+,0," \
        "$TMP/side.csv"
done
expect_count "side by side: no other rows" 12 '^allreduce,' "$TMP/side.csv"

# side by side for a rooted collective with another root, checked
run -C broadcast -r 1 --algo binomial,chain -b 1K -e 1M -f 32 -n 6 -w 1 \
    --csv="$TMP/bcast.csv" >"$TMP/out" 2>"$TMP/err"
expect_eq "rooted side by side: exit code" 0 $?
expect_count "rooted side by side: rows" 6 '^broadcast,[0-9]+,[0-9]+,float,none,bcast\.(binomial|chain),[0-9.]+,[0-9.]+,[0-9.]+,0,' \
    "$TMP/bcast.csv"

# a bare name applies to every selected collective that has it; one
# algorithm per collective is an ordinary run
run -C allreduce,allgather --algo ring -b 64 -e 64 -n 3 -w 1 --csv="$TMP/bare.csv" \
    >"$TMP/out" 2>"$TMP/err"
expect_eq "bare name: exit code" 0 $?
expect_grep "bare name: allreduce.ring" '^allreduce,64,.*,allreduce\.ring,' "$TMP/bare.csv"
expect_grep "bare name: allgather.ring" '^allgather,64,.*,allgather\.ring,' "$TMP/bare.csv"

# --fresh: every collective, in place and not, inputs rewritten before
# each call; the values stay, so the checked results are right
for ip in 0 1; do
    run -C all -b 4 -e 256K -f 64 -n 3 -w 1 -i $ip --fresh --csv="$TMP/fresh$ip.csv" \
        >"$TMP/out$ip" 2>"$TMP/err"
    expect_eq "fresh, in place $ip: exit code" 0 $?
    expect_grep "fresh, in place $ip: header" 'fresh: 1' "$TMP/out$ip"
    # 7 collectives at 4 B, 256 B, 16 KiB (4 B has no block per rank for
    # reduce-scatter, all-gather, all-to-all): 18 rows, none wrong
    expect_count "fresh, in place $ip: every row checked and right" 18 \
        '^[a-z]+,[0-9]+,[0-9]+,float,[a-z]+,[^,]+,[0-9.]+,[0-9.]+,[0-9.]+,0,[0-9.]+,2,[01],3,[0-9.]+$' \
        "$TMP/fresh$ip.csv"
done

# --calibrate: the thorough profile, written and used by a run (every
# figure the calibration measures present; the shared-memory sync and the
# schedule call of a plausible size)
run --calibrate="$TMP/prof.json" >"$TMP/out" 2>"$TMP/err"
expect_eq "calibrate: exit code" 0 $?
for key in round_us per_rank_us stage_us lines_us rooted_us take_ps take_big_ps take_big_bytes \
    take_pipe_ps call_us gamma_ps; do
    expect_grep "calibrate: $key" "\"$key\"" "$TMP/prof.json"
done
expect_grep "calibrate: the sync within 0.01-50 us" \
    '"per_rank_us": (0\.0[1-9]|0\.[1-9]|[1-9]|[1-4][0-9])[0-9]*\.?[0-9]*,' "$TMP/prof.json"
XCOLL_PROFILE="$TMP/prof.json" run -C allreduce,broadcast -b 8 -e 64K -f 64 -n 3 -w 1 \
    --csv="$TMP/prof.csv" >"$TMP/out" 2>"$TMP/err"
expect_eq "run with the profile: exit code" 0 $?
expect_count "run with the profile: every row right" 6 \
    '^(allreduce|broadcast),[0-9]+,[0-9]+,float,[a-z]+,[^,]+,[0-9.]+,[0-9.]+,[0-9.]+,0,' "$TMP/prof.csv"

# bad input: exit 2 and a message that names the cause
bad() {
    what=$1 want=$2; shift 2
    run "$@" >"$TMP/out" 2>"$TMP/err"
    expect_eq "$what: exit code" 2 $?
    expect_grep "$what: message" "$want" "$TMP/err"
}
bad "unknown algorithm" 'no algorithm "nosuch"' --algo nosuch
bad "sizes reversed" '-b 4096 is larger than -e 8' -b 4K -e 8
bad "-T without warm-up" 'needs -w 1 or more' -T 10 -w 0
bad "unknown collective" 'nosuchcoll' -C nosuchcoll
bad "--fresh=2" '--fresh' --fresh=2

[ "$FAILS" = 0 ] || { echo "$FAILS check(s) failed" >&2; exit 1; }
echo "all checks passed"
