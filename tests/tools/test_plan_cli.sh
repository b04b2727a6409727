#!/bin/sh
# test_plan_cli.sh PLAN CONFIG -- xcoll-plan as a user drives it: a JSON
# config gives exactly what the same flags give, flags after it override
# it, and a bad file or flag exits 2 with a message naming the cause.
PLAN=$1 CONFIG=$2
. "$(dirname "$0")/../launch/lib.sh"

FLAGS="--layers 32 --hidden 4096 --seq 2048 --vocab 32000 --act-bytes 2 --grad-bytes 2
       --global-batch 512 --micro-batch 2 --dp 8 --tp 8 --pp 2 --vpp 2 --zero 1 --seq-parallel
       --nodes 16 --rpn 8 --cluster h100-ib400 --bucket-mb 25 --compress none"

# shellcheck disable=SC2086
"$PLAN" $FLAGS --json >"$TMP/flags.json" 2>"$TMP/err"
expect_eq "flags: exit code" 0 $?
"$PLAN" --config "$CONFIG" --json >"$TMP/config.json" 2>"$TMP/err"
expect_eq "config: exit code" 0 $?
if cmp -s "$TMP/flags.json" "$TMP/config.json"; then pass "config = flags (byte for byte)"
else fail "config and flags differ"; show "$TMP/config.json"; fi
expect_grep "sequence parallel rows" '"what": "tp sequence all-gather"' "$TMP/config.json"
expect_grep "virtual stages" '"vpp": 2' "$TMP/config.json"

# a flag after the config overrides it
"$PLAN" --config "$CONFIG" --zero 3 --json >"$TMP/z3.json" 2>"$TMP/err"
expect_eq "override: exit code" 0 $?
expect_grep "override: zero 3" '"zero": 3' "$TMP/z3.json"
expect_grep "override: stage-3 gathers" 'zero-3 parameter all-gathers' "$TMP/z3.json"

# the cache state the collectives are priced in: cold by default, hot on request
expect_grep "cache: cold by default" '"cache": "cold"' "$TMP/config.json"
"$PLAN" --config "$CONFIG" --cache hot --json >"$TMP/hot.json" 2>"$TMP/err"
expect_eq "cache hot: exit code" 0 $?
expect_grep "cache hot" '"cache": "hot"' "$TMP/hot.json"
# whose buffers: malloc'd by default, xc_mem_alloc's on request
expect_grep "buffers: malloc by default" '"buffers": "malloc"' "$TMP/config.json"
"$PLAN" --config "$CONFIG" --buffers xcoll --json >"$TMP/xcmem.json" 2>"$TMP/err"
expect_eq "buffers xcoll: exit code" 0 $?
expect_grep "buffers xcoll" '"buffers": "xcoll"' "$TMP/xcmem.json"

# overlap off: nothing hidden, and the advice to turn it on
"$PLAN" --config "$CONFIG" --zero 0 --overlap off >"$TMP/noov" 2>"$TMP/err"
expect_eq "overlap off: exit code" 0 $?
expect_grep "overlap off: said" 'overlap off' "$TMP/noov"
expect_grep "overlap off: advice" '^- overlap the gradient traffic with backward' "$TMP/noov"
"$PLAN" --config "$CONFIG" --overlap off --json >"$TMP/noov.json" 2>"$TMP/err"
expect_grep "overlap off: json" '"overlap": false' "$TMP/noov.json"

# the table, the advice and the picture
"$PLAN" --config "$CONFIG" --svg "$TMP/step.svg" >"$TMP/table" 2>"$TMP/err"
expect_eq "table: exit code" 0 $?
expect_grep "table: header" '^primitive +group +nodes +link' "$TMP/table"
expect_grep "table: link of the ZeRO rows" '^zero gradient reduce-scatter +8 +8 +inter' "$TMP/table"
expect_grep "json: link" '"what": "tp sequence all-gather", "group": 8, "nodes": 1, "link": "intra"' \
    "$TMP/config.json"

# gradient accumulation for the global batch: the same plan
"$PLAN" --config "$CONFIG" --global-batch 0 --grad-accum 32 --json >"$TMP/accum.json" 2>"$TMP/err"
expect_eq "grad accum: exit code" 0 $?
if cmp -s "$TMP/accum.json" "$TMP/config.json"; then pass "grad accum 32 = global batch 512"
else fail "grad accum 32 and global batch 512 differ"; show "$TMP/accum.json"; fi
expect_grep "table: step line" 'bubble [0-9.]+ % \(P-1\)/\(v m\+P-1\); step [0-9.]+ ms' "$TMP/table"
expect_grep "table: advice" '^advice:' "$TMP/table"
expect_grep "svg written" '^<svg ' "$TMP/step.svg"

# bad input: exit 2, a message naming the cause, nothing on stdout
bad() {
    what=$1 want=$2; shift 2
    "$PLAN" "$@" >"$TMP/out" 2>"$TMP/err"
    expect_eq "$what: exit code" 2 $?
    expect_grep "$what: message" "$want" "$TMP/err"
    expect_count "$what: no plan printed" 0 'primitive' "$TMP/out"
}
printf '{"model": {"layerz": 32}}\n' >"$TMP/unknown.json"
bad "unknown key" 'unknown.json: line 1, column [0-9]+: unknown key or bad value "layerz"' \
    --config "$TMP/unknown.json"
printf '{"model": {"layers": 32,\n  "hidden" 4096}}\n' >"$TMP/syntax.json"
bad "syntax error" 'syntax.json: line 2, column' --config "$TMP/syntax.json"
printf '[1, 2]\n' >"$TMP/array.json"
bad "not an object" 'not a JSON object' --config "$TMP/array.json"
bad "missing file" 'cannot open it' --config "$TMP/nonexistent.json"
bad "bad value" 'not a number' --config "$CONFIG" --dp x
bad "ranks mismatch" 'ranks, but the cluster' --config "$CONFIG" --dp 4
bad "vpp without layers" 'virtual stages' --config "$CONFIG" --vpp 5
bad "cache neither hot nor cold" '^usage: xcoll-plan' --config "$CONFIG" --cache warm
bad "buffers neither malloc nor xcoll" '^usage: xcoll-plan' --config "$CONFIG" --buffers huge
"$PLAN" --config "$CONFIG" --heads 32 --json >"$TMP/heads.json" 2>"$TMP/err"
expect_eq "32 heads over tp 8: exit code" 0 $?
bad "heads tp does not divide" 'tp 8 must divide them' --config "$CONFIG" --heads 12
bad "accumulation against the batch" 'gradient accumulation 3' --config "$CONFIG" --grad-accum 3
bad "overlap neither on nor off" '^usage: xcoll-plan' --config "$CONFIG" --overlap maybe
bad "unknown flag" '^usage: xcoll-plan' --config "$CONFIG" --frobnicate

[ "$FAILS" -eq 0 ] || { echo "$FAILS failure(s)" >&2; exit 1; }
echo "test_plan_cli: ok"
