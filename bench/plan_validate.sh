#!/bin/sh
# plan_validate.sh -- xcoll-plan's predictions against xcoll's own tensor-,
# pipeline- and expert-parallel examples, measured on the namespace test
# bed (bench/netbed.sh: 2 hosts, a shaped link between them).
#
#   bench/plan_validate.sh [-B build] [-r 1gbit] [-p profile.json] [-s steps] [-R reps]
#
# One calibrated profile (xcoll-perf --calibrate on the bed, 1 rank per
# host; on one host, 2 ranks, for the shared-memory run) is given to both
# the ranks (XCOLL_PROFILE: the runtime selector prices with it) and the
# planner (--profile), so the two use one model and one set of figures.  Each example is described to the planner with
# the flags that make its volumes the example's own (docs/plan.md), then:
#   tp-wire   tp_mlp, tensor parallel across the two hosts (1 MiB
#             all-reduces over the link): time in the TP all-reduces;
#   tp-shm    the same on one host over shared memory;
#   tp-shm-malloc  the same with calloc'd buffers (tp_mlp --buffers malloc;
#             the examples' all-reduced buffers come from xc_mem_alloc,
#             huge pages, and the plans of the tp and dp rows say so with
#             --buffers xcoll: the one-host profile prices cold calls on
#             each kind; the bed's two-host profile has no cold-call term,
#             so there the flag changes nothing);
#   dp-wire   tp_mlp data parallel across the hosts: the gradient all-reduce;
#   pp        pp_mlp, 2 stages, one per host: the step, with the planner's
#             compute rate set from the example's measured compute (so
#             the test is the bubble and the sends);
#   zero-1..3 zero_mlp across the hosts, ZeRO stage 1, 2, 3: the time its
#             reduce-scatters and all-gathers are in flight per step (the
#             trace summary's communication, XCOLL_TRACE_SUMMARY=1);
#   moe       moe_mlp, 2 expert-parallel ranks: the four all-to-alls.
# The timed examples run with --sync (a barrier before each timed call):
# the planner predicts the transfer, and without the barrier the time in a
# blocking call also holds the wait for a slower rank.  Prints predicted,
# measured and the error of each.
#
# -R reps repeats the whole set (calibrations included; -p replaces only
# the bed's) reps times, the rows interleaved in time; each rep prints its table, and a
# last table gives each row's median prediction against its median
# measurement with every rep's error beside it.  One calibration and one
# run are one sample of this VM's minute-to-minute noise (the cold-call
# term moves by 1.6x between calibrations: bench/RESULTS.md); a median of
# three is steadier than one sample.
set -eu
B=build RATE=1gbit PROF= STEPS=20 REPS=1
while getopts B:r:p:s:R: opt; do
    case $opt in
    B) B=$OPTARG ;; r) RATE=$OPTARG ;; p) PROF=$OPTARG ;; s) STEPS=$OPTARG ;; R) REPS=$OPTARG ;;
    *) sed -n '2,41p' "$0"; exit 2 ;;
    esac
done
case $REPS in '' | *[!0-9]* | 0) echo "plan_validate.sh: -R wants a positive count, not '$REPS'" >&2; exit 2 ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
B=$(cd "$B" && pwd)
TOP=$(mktemp -d /tmp/xcoll-planval.XXXXXX)
GIVEN=$PROF
bed() { k=$1; shift; "$HERE/netbed.sh" -q -H 2 -k "$k" --rate "$RATE" --xcoll-run "$B/xcoll-run" \
        --env XCOLL_ALGO= -- "$@"; }
# pick FILE WHAT: a row's s_per_step from a plan's JSON ("step" for the step)
pick() {
    python3 -c 'import json,sys
p=json.load(open(sys.argv[1]))
if sys.argv[2]=="step": print(p["step_s"]*1e3)
else: print(sum(r["s_per_step"] for r in p["primitives"] if r["what"].startswith(sys.argv[2]))*1e3)' "$1" "$2"
}
row() { # NAME PREDICTED_MS MEASURED_MS (also kept in $TOP/rows for the summary)
    if [ -z "$3" ]; then
        echo "| $1 | (no measurement: see $OUT) | | |"
        return 0
    fi
    python3 -c 'import sys
n,p,m=sys.argv[1],float(sys.argv[2]),float(sys.argv[3])
print("| %-28s | %10.2f | %10.2f | %+6.1f %% |" % (n,p,m,100*(p-m)/m))' "$@"
    printf '%s|%s|%s\n' "$@" >>"$TOP/rows"
}
# one_rep: every row once, records in $OUT
one_rep() {
    PROF=$GIVEN
    if [ -z "$GIVEN" ]; then
        PROF=$OUT/profile.json
        bed 1 "$B/xcoll-perf" --calibrate="$PROF" >/dev/null 2>"$OUT/calibrate.err"
    fi
    XCOLL_PROFILE=$PROF
    export XCOLL_PROFILE
    PLAN="$B/xcoll-plan --profile $PROF --act-bytes 4 --grad-bytes 4 --seq 1 --block mlp --json"
    echo "# $(date -u +%F) $(uname -n), link $RATE, profile $PROF, $STEPS steps; records in $OUT"

    echo "| what | predicted ms | measured ms | error |"
    echo "|---|---|---|---|"

    # Every run has as many ranks as the machine has cores (2): one rank per
    # host on the bed, or 2 ranks on one host (shared memory).  (Runs with more
    # ranks than cores time the scheduler more than the transfers: see
    # bench/RESULTS.md for the 2 x 2 runs, reported separately.)

    # tp-wire: 2 hosts x 1 rank, TP 2 over the link; 512 x 512 fp32 = 1 MiB.
    # (--lr 0.01: at these sizes the examples' element-wise check against one
    # process can trip on a ReLU input that rounds to the other side of zero;
    # a failed check is reported, the timing kept.)
    bed 1 "$B/tp_mlp" --tp 2 --batch 512 --hidden 512 --ffn 1024 --lr 0.01 --sync --steps "$STEPS" \
        >"$OUT/tp-wire.txt" 2>"$OUT/tp-wire.err" || echo "# tp-wire: the example's check failed (see $OUT)"
    $PLAN --layers 1 --hidden 512 --ffn 1024 --global-batch 512 --micro-batch 512 --dp 1 --tp 2 \
          --nodes 2 --rpn 1 --buffers xcoll >"$OUT/tp-wire.json"
    m=$(sed -n 's/.*tensor parallel \([0-9.]*\) ms.*/\1/p' "$OUT/tp-wire.txt")
    row "tp-wire: TP all-reduces" "$(pick "$OUT/tp-wire.json" "tp activation")" "$m"

    # tp-shm: 2 ranks on one host, TP 2 over shared memory (the host's own
    # profile, calibrated with 2 ranks there)
    NPROF=$OUT/node-profile.json
    "$B/xcoll-run" -n 2 "$B/xcoll-perf" --calibrate="$NPROF" >/dev/null 2>"$OUT/calibrate-node.err"
    # tp-shm (xc_mem_alloc's buffers) and tp-shm-malloc (calloc'd ones)
    for kind in xcoll malloc; do
        name=tp-shm
        [ "$kind" = malloc ] && name=tp-shm-malloc
        XCOLL_ALGO= XCOLL_PROFILE=$NPROF "$B/xcoll-run" -n 2 --no-prefix "$B/tp_mlp" --tp 2 --sync --batch 512 \
            --hidden 512 --ffn 1024 --lr 0.01 --steps "$STEPS" --buffers "$kind" \
            >"$OUT/$name.txt" 2>"$OUT/$name.err" || echo "# $name: the example's check failed (see $OUT)"
        $PLAN --profile "$NPROF" --layers 1 --hidden 512 --ffn 1024 --global-batch 512 --micro-batch 512 \
              --dp 1 --tp 2 --nodes 1 --rpn 2 --buffers "$kind" >"$OUT/$name.json"
        m=$(sed -n 's/.*tensor parallel \([0-9.]*\) ms.*/\1/p' "$OUT/$name.txt")
        row "$name: TP all-reduces" "$(pick "$OUT/$name.json" "tp activation")" "$m"
    done

    # dp-wire: the same MLP data parallel over the link (2 MiB of gradients)
    bed 1 "$B/tp_mlp" --tp 1 --batch 1024 --hidden 512 --ffn 1024 --lr 0.01 --sync --steps "$STEPS" \
        >"$OUT/dp-wire.txt" 2>"$OUT/dp-wire.err" || echo "# dp-wire: the example's check failed (see $OUT)"
    $PLAN --layers 1 --hidden 512 --ffn 1024 --global-batch 1024 --micro-batch 512 --dp 2 --tp 1 \
          --nodes 2 --rpn 1 --bucket-mb 0 --buffers xcoll >"$OUT/dp-wire.json"
    m=$(sed -n 's/.*data parallel \([0-9.]*\) ms.*/\1/p' "$OUT/dp-wire.txt")
    row "dp-wire: DP all-reduce" "$(pick "$OUT/dp-wire.json" "dp gradient")" "$m"

    # pp: 2 stages (one per host) of 4 square 512 layers (2 h f = h^2 with
    # f = h/2), 8 micro-batches of 32 rows (64 KiB sends); the planner's
    # compute rate from the run's measured compute
    # ZeRO: the time its collectives are in flight per step (the trace
    # summary's "communication" of rank 0, on stderr, median over the steps
    # after two of warm-up; stages 2 and 3 overlap part of it with compute, which the
    # plan's total communication does not subtract either).
    for z in 1 2 3; do
        # 10 steps: the example compares its training with one process's,
        # and over 20 the two drift apart by 1.2e-3 (summation order), past
        # its tolerance.
        bed 1 env XCOLL_TRACE_SUMMARY=1 "$B/zero_mlp" --stage "$z" --layers 8 --hidden 512 --batch 128 \
            --steps 10 >"$OUT/zero$z.txt" 2>"$OUT/zero$z.err" ||
            echo "# zero-$z: the example's check failed (see $OUT)"
        $PLAN --params 2101248 --layers 8 --hidden 512 --global-batch 128 --micro-batch 64 --dp 2 \
              --zero "$z" --nodes 2 --rpn 1 >"$OUT/zero$z.json"
        m=$(python3 -c 'import re, statistics, sys
v = [float(m.group(2)) for m in re.finditer(r"step (\d+) \(rank 0\): .*communication ([0-9.]+) ms", open(sys.argv[1]).read()) if int(m.group(1)) > 2]
print(statistics.median(v) if v else "")' "$OUT/zero$z.err")
        row "zero-$z: ZeRO collectives" "$(pick "$OUT/zero$z.json" "zero")" "$m"
    done

    bed 1 "$B/pp_mlp" --layers 8 --hidden 512 --batch 256 --micro 8 --lr 0.01 --steps "$STEPS" \
        >"$OUT/pp.txt" 2>"$OUT/pp.err" || echo "# pp: the example's check failed (see $OUT)"
    for sched in gpipe 1f1b; do
        set -- $(awk -v s="$sched" '{ for (i = 1; i <= NF; i++) if ($i == s) { print $(i+1), $(i+2); exit } }' "$OUT/pp.txt")
        step=$1 comp=$2
        # 6 P tokens / ranks / rate = the measured compute: rate in TFLOP/s
        tf=$(python3 -c "print(6 * 8 * 512 * 512 * 256 / 2 / ($comp * 1e-3) / 1e12)")
        $PLAN --layers 8 --hidden 512 --ffn 256 --global-batch 256 --micro-batch 32 --dp 1 --pp 2 \
              --nodes 2 --rpn 1 --flops "$tf" >"$OUT/pp-$sched.json"
        row "pp $sched: step" "$(pick "$OUT/pp-$sched.json" step)" "$step"
    done

    # moe: 2 ranks, 8 experts, top-2, 1024 tokens of 256 per rank (2 MiB per
    # all-to-all per rank, half of it to the other host on average); no
    # one-process twin (timing only)
    bed 1 "$B/moe_mlp" --experts 8 --topk 2 --tokens 1024 --hidden 256 --ffn 256 --steps "$STEPS" --sync \
        --no-twin >"$OUT/moe.txt" 2>"$OUT/moe.err"
    $PLAN --layers 1 --hidden 256 --ffn 256 --global-batch 2048 --micro-batch 1024 --dp 2 --ep 2 \
          --experts 8 --topk 2 --moe-every 1 --nodes 2 --rpn 1 >"$OUT/moe.json"
    m=$(sed -n 's/.*exchanges (4 per step, counts and rows): \([0-9.]*\) ms.*/\1/p' "$OUT/moe.txt")
    row "moe: 4 all-to-alls" "$(pick "$OUT/moe.json" "moe token")" "$m"
}

rep=1
while [ "$rep" -le "$REPS" ]; do
    OUT=$TOP
    [ "$REPS" -gt 1 ] && { OUT=$TOP/rep$rep; mkdir -p "$OUT"; echo "## rep $rep of $REPS"; }
    one_rep
    rep=$((rep + 1))
done
[ "$REPS" -gt 1 ] || exit 0
echo "## medians of $REPS reps"
python3 - "$TOP/rows" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    n, p, m = line.rstrip("\n").split("|")
    rows.setdefault(n, []).append((float(p), float(m)))
print("| what | median predicted ms | median measured ms | error | each rep's error |")
print("|---|---|---|---|---|")
for n, v in rows.items():
    p = statistics.median(x for x, _ in v)
    m = statistics.median(y for _, y in v)
    each = ", ".join("%+.1f" % (100 * (x - y) / y) for x, y in v)
    print("| %-28s | %10.2f | %10.2f | %+6.1f %% | %s |" % (n, p, m, 100 * (p - m) / m, each))
PY
