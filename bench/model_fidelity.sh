#!/bin/sh
# model_fidelity.sh -- the cost model's fidelity over the xcoll-perf grid:
# calibrate a profile, run every algorithm of every collective forced
# (XCOLL_ALGO via --algo) over sizes 8 B .. 64 MiB with that profile, and
# compare with the model's predictions and choices (bench_model_fidelity).
#
#   bench/model_fidelity.sh [options]
#     -B DIR     build directory (default: build)
#     -n N       ranks (default 2)
#     -m MODE    shm (default: one node, shared memory) or tcp (XCOLL_SHM=0)
#     -f F       size step factor (default 2; 4 for a quicker run)
#     -i ITERS   timed iterations per size (default 20)
#     -e MAX     largest size (default 64M)
#     -p FILE    use this profile instead of calibrating one
#     -o DIR     keep the records here (default: a temporary directory)
#     -U         do not pin ranks (default: rank r on core r mod cores, with
#                taskset; unpinned ranks of a 2-core VM often share one core,
#                which turns every wait into a context switch, ~6 us)
#
# Prints the per-point table, the median |predicted - measured| / measured
# and the regret table.  Ranks <= cores for meaningful numbers; runs with
# more ranks than cores are oversubscribed (see docs/cost-model.md).
set -eu
B=build N=2 MODE=shm F=2 ITERS=20 MAX=64M PROF= OUT= PIN=1
while getopts B:n:m:f:i:e:p:o:U opt; do
    case $opt in
    B) B=$OPTARG ;; n) N=$OPTARG ;; m) MODE=$OPTARG ;; f) F=$OPTARG ;;
    i) ITERS=$OPTARG ;; e) MAX=$OPTARG ;; p) PROF=$OPTARG ;; o) OUT=$OPTARG ;;
    U) PIN=0 ;;
    *) sed -n '2,24p' "$0"; exit 2 ;;
    esac
done
case $MODE in
shm) ;;
tcp) XCOLL_SHM=0; export XCOLL_SHM ;;
*) echo "model_fidelity: -m shm or tcp" >&2; exit 2 ;;
esac
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/xcoll-fidelity.XXXXXX)
mkdir -p "$OUT"
RUN="$B/xcoll-run -n $N"
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
for c in allreduce reducescatter allgather broadcast reduce alltoall; do
    for a in $("$B/bench_model_fidelity" --list $c --nranks "$N"); do
        eval "$RUN --no-prefix $PERF -C $c --algo $a -b 8 -e $MAX -f $F -n $ITERS -w 3 -c 0 \
            --csv=\"$OUT/$c.$a.csv\"" >/dev/null
    done
done
echo "# records and profile in $OUT ($MODE, $N ranks$( [ "$PIN" = 1 ] && echo ', pinned'))"
"$B/bench_model_fidelity" --profile "$PROF" "$OUT"/*.csv
