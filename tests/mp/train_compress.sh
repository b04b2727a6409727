#!/bin/sh
# train_compress.sh XCOLL_RUN TRAIN_MLP N -- issue 8's training target as a
# test: the data-parallel example trained on N ranks with fp32 gradients,
# with INT8- and INT4-compressed gradients with and without error feedback
# (same seed, steps and layout; every bucket compressed after the warm-up).
# The final model's loss on its fixed sample of training rows must be
# within 1 % of fp32's for INT8 and INT4 with feedback; the compressed runs
# must differ from fp32 somewhere on their curves (else nothing was
# compressed), and the no-feedback run is printed beside them.
#
# The model is shallow on purpose: a deep one at a large learning rate is
# chaotic (two fp32 runs that differ in one rounding end several per cent
# apart; bench/RESULTS.md), which would measure the model, not the codec.
set -u
run=$1 prog=$2 n=$3
args="--steps 100 --warmup 0 --overlap bucketed --bucket-mb 1 --layers 2 --hidden 128
      --input 64 --batch 120 --lr 0.05 --seed 3 --eval-every 20"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

train() { # name, then environment assignments
    name=$1
    shift
    # shellcheck disable=SC2086
    if ! env "$@" "$run" -n "$n" --timeout 60 "$prog" $args >"$tmp/$name" 2>&1; then
        echo "FAIL: the $name run failed:"
        cat "$tmp/$name"
        exit 1
    fi
    # "final model: X on R training rows" and the curve line.
    final=$(sed -n 's/.*final model: \([0-9.]*\) on [0-9]* training rows.*/\1/p' "$tmp/$name")
    curve=$(sed -n 's/.*training rows every 20 steps, [^:]*: //p' "$tmp/$name")
    if [ -z "$final" ] || [ -z "$curve" ]; then
        echo "FAIL: no final loss or curve in the $name run's output:"
        cat "$tmp/$name"
        exit 1
    fi
    eval "final_$name=\$final curve_$name=\$curve"
    printf '%-12s final %s  curve %s\n' "$name" "$final" "$curve"
}

c="XCOLL_COMPRESS_WHEN=always XCOLL_COMPRESS_WARMUP=10"
train fp32 XCOLL_COMPRESS=none
# shellcheck disable=SC2086
train int8 XCOLL_COMPRESS=int8 $c
# shellcheck disable=SC2086
train int8_nofb XCOLL_COMPRESS=int8 XCOLL_COMPRESS_FEEDBACK=0 $c
# shellcheck disable=SC2086
train int4 XCOLL_COMPRESS=int4 $c
# shellcheck disable=SC2086
train int4_nofb XCOLL_COMPRESS=int4 XCOLL_COMPRESS_FEEDBACK=0 $c

status=0
for v in int8 int8_nofb int4 int4_nofb; do
    eval "cv=\$curve_$v fv=\$final_$v"
    if [ "$cv" = "$curve_fp32" ]; then
        echo "FAIL: $v's curve equals fp32's bit for bit: nothing was compressed"
        status=1
    fi
    rel=$(awk -v a="$fv" -v b="$final_fp32" 'BEGIN { printf "%+.3f", (a / b - 1) * 100 }')
    echo "$v: final loss $fv vs fp32 $final_fp32: $rel %"
done
for v in int8 int4; do
    eval "fv=\$final_$v"
    if ! awk -v a="$fv" -v b="$final_fp32" 'BEGIN { d = a / b - 1; exit !(d <= 0.01 && d >= -0.01) }'; then
        echo "FAIL: $v with error feedback ends more than 1 % from fp32"
        status=1
    fi
done
# At 4 bits the feedback is what keeps training on course (fixed seed:
# deterministic): without it INT4 strays further (+1.3..1.8 % here).
if ! awk -v a="$final_int4" -v n="$final_int4_nofb" -v b="$final_fp32" \
    'BEGIN { d = a - b; e = n - b; exit !((d < 0 ? -d : d) < (e < 0 ? -e : e)) }'; then
    echo "FAIL: INT4 with feedback is not closer to fp32 than INT4 without"
    status=1
fi
[ $status = 0 ] && echo "PASS: INT8 and INT4 with feedback within 1 % of fp32's final loss; INT4's feedback matters"
exit $status
