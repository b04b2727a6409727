#!/bin/sh
# model_fidelity.sh -- the cost model's fidelity over the xcoll-perf grid:
# calibrate a profile, run every algorithm of every collective forced
# (XCOLL_ALGO via --algo) over sizes 8 B .. 64 MiB with that profile, and
# compare with the model's predictions and choices (bench_model_fidelity).
#
#   bench/model_fidelity.sh [options]
#     -B DIR     build directory (default: build)
#     -n N       ranks (default 2)
#     -m MODE    shm (default: one node, shared memory), tcp (one node,
#                XCOLL_SHM=0: loopback TCP) or net (two namespace hosts of
#                bench/netbed.sh, N/2 ranks each: TCP across, shared memory
#                within, the hierarchical algorithms in play)
#     -r RATE    net mode: shape the link with tbf at RATE (e.g. 1gbit)
#     -f F       size step factor (default 2; 4 for a quicker run)
#     -i ITERS   timed iterations per size (default 20)
#     -T MS      and at least MS milliseconds of them per size and algorithm
#                (xcoll-perf -T; default 0: exactly ITERS).  Small sizes
#                then run thousands of calls, not 10-20 that land in one of
#                the VM's latency modes (~1.3x apart, switching every
#                ~100 ms): structurally equal algorithms then measure equal
#     -R ROUNDS  run the whole set of algorithms this many times, one after
#                the other, and score each point by the median of its rounds
#                (default 1; small sizes move by up to 1.6x between
#                invocations, so one round measures the invocation as much
#                as the algorithm)
#     -e MAX     largest size (default 64M)
#     -p FILE    use this profile instead of calibrating one
#     -o DIR     keep the records here (default: a temporary directory)
#     -1         one invocation per algorithm (the old way) instead of all
#                algorithms of a collective side by side in one (their
#                iterations interleaved in blocks, see xcoll-perf --algo):
#                small-message times here switch between modes ~1.3x apart
#                every ~100 ms, so algorithms run at different moments are
#                compared across modes
#     -F         fresh inputs (xcoll-perf --fresh): every rank rewrites its
#                input before each call, as a training step leaves a
#                gradient or an activation, instead of reusing one whose
#                lines the peers still hold from the last call
#     -A         calibrate a second profile after the measurements and
#                print the median error with it too: the host switches
#                between states (small-message latency ~2.5x apart) on a
#                scale of minutes, and a profile taken in the other state
#                than the records reads 50-60 % off everywhere; the two
#                medians side by side show whether that happened
#     -U         do not pin ranks (default: rank r on core r mod cores, with
#                taskset; unpinned ranks of a 2-core VM often share one core,
#                which turns every wait into a context switch, ~6 us)
#
# Prints the per-point table, the median |predicted - measured| / measured
# and the regret table.  Ranks <= cores for meaningful numbers; runs with
# more ranks than cores are oversubscribed (see docs/cost-model.md).
set -eu
B=build N=2 MODE=shm F=2 ITERS=20 MINT=0 MAX=64M PROF= OUT= PIN=1 RATE= ROUNDS=1 SIDE=1 FRESH= AFTER=
while getopts B:n:m:f:i:T:e:p:o:r:R:FAU1 opt; do
    case $opt in
    B) B=$OPTARG ;; n) N=$OPTARG ;; m) MODE=$OPTARG ;; f) F=$OPTARG ;;
    i) ITERS=$OPTARG ;; T) MINT=$OPTARG ;; e) MAX=$OPTARG ;; p) PROF=$OPTARG ;; o) OUT=$OPTARG ;;
    r) RATE=$OPTARG ;;
    R) ROUNDS=$OPTARG ;;
    F) FRESH=--fresh ;;
    A) AFTER=1 ;;
    U) PIN=0 ;;
    1) SIDE=0 ;;
    *) sed -n '2,52p' "$0"; exit 2 ;;
    esac
done
case $MODE in
shm) ;;
tcp) XCOLL_SHM=0; export XCOLL_SHM ;;
net) ;;
*) echo "model_fidelity: -m shm, tcp or net" >&2; exit 2 ;;
esac
NODES=1
if [ "$MODE" = net ]; then
    NODES=2
    [ $((N % 2)) = 0 ] || { echo "model_fidelity: net mode wants an even -n" >&2; exit 2; }
fi
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/xcoll-fidelity.XXXXXX)
mkdir -p "$OUT"
RUN="$B/xcoll-run -n $N --no-prefix"
if [ "$MODE" = net ]; then
    HERE=$(cd "$(dirname "$0")" && pwd)
    RUN="$HERE/netbed.sh -q -H 2 -k $((N / 2)) ${RATE:+--rate $RATE} --xcoll-run $B/xcoll-run --"
fi
PERF="$B/xcoll-perf"
if [ "$PIN" = 1 ] && command -v taskset >/dev/null 2>&1; then
    CORES=$(getconf _NPROCESSORS_ONLN)
    # xcoll-run gives each rank XCOLL_RANK: pin it before exec'ing the tool.
    PERF="sh -c 'exec taskset -c \$((XCOLL_RANK % $CORES)) \"\$0\" \"\$@\"' $B/xcoll-perf"
fi
if [ -z "$PROF" ]; then
    PROF=$OUT/profile.json
    eval "$RUN $PERF --calibrate=\"$PROF\"" >/dev/null
fi
XCOLL_PROFILE=$PROF
export XCOLL_PROFILE
round=1
while [ $round -le "$ROUNDS" ]; do
    for c in allreduce reducescatter allgather broadcast reduce alltoall; do
        algos=$("$B/bench_model_fidelity" --list $c --nranks "$N" --nodes $NODES | tr ' \n' ',,')
        if [ "$SIDE" = 1 ]; then
            # Every algorithm of the collective in one run, side by side
            # (interleaved blocks): the regret compares them under the same
            # machine state.
            eval "$RUN $PERF -C $c --algo ${algos%,} -b 8 -e $MAX -f $F -n $ITERS -T $MINT -w 3 -c 0 $FRESH \
                --csv=\"$OUT/$c.r$round.csv\"" >/dev/null
            continue
        fi
        for a in $(echo "$algos" | tr ',' ' '); do
            eval "$RUN $PERF -C $c --algo $a -b 8 -e $MAX -f $F -n $ITERS -T $MINT -w 3 -c 0 $FRESH \
                --csv=\"$OUT/$c.$a.r$round.csv\"" >/dev/null
        done
    done
    round=$((round + 1))
done
echo "# records and profile in $OUT ($MODE${RATE:+ at $RATE}${FRESH:+, fresh inputs}, $N ranks$( [ "$PIN" = 1 ] && echo ', pinned'), $ROUNDS round(s))"
"$B/bench_model_fidelity" --profile "$PROF" --nodes $NODES "$OUT"/*.csv
if [ -n "$AFTER" ]; then
    eval "$RUN $PERF --calibrate=\"$OUT/profile-after.json\"" >/dev/null
    echo
    echo "# the same records scored with a profile calibrated after them ($OUT/profile-after.json):"
    "$B/bench_model_fidelity" --profile "$OUT/profile-after.json" --nodes $NODES "$OUT"/*.csv |
        sed -n '/^# fidelity/,/^$/p'
fi
