#!/bin/sh
# test_output.sh XRUN CTL -- every line of each rank's stdout and stderr is
# prefixed with "[rank] " and written whole to the same stream, even when
# the rank writes it in pieces; a partial last line is flushed at exit;
# --no-prefix writes the bytes unchanged.
XRUN=$1 CTL=$2
. "$(dirname "$0")/lib.sh"

n=4 lines=200
"$XRUN" -n $n "$CTL" lines $lines >"$TMP/out" 2>"$TMP/err"
expect_eq "lines: exit code" 0 $?
expect_count "stdout: all lines well formed" $((n * (lines + 1))) '^\[([0-9])\] (out \1 [0-9]+|tail \1)$' "$TMP/out"
expect_count "stdout: nothing else" $((n * (lines + 1))) '' "$TMP/out"
expect_count "stderr: all lines well formed" $((n * lines)) '^\[([0-9])\] err \1 [0-9]+$' "$TMP/err"
expect_count "stderr: nothing else" $((n * lines)) '' "$TMP/err"
r=0
while [ $r -lt $n ]; do
    expect_count "rank $r: $lines stdout lines" $lines "^\[$r\] out $r [0-9]+\$" "$TMP/out"
    expect_count "rank $r: partial last line flushed" 1 "^\[$r\] tail $r\$" "$TMP/out"
    expect_eq "rank $r: stdout lines in order" "$(seq 0 $((lines - 1)) | tr '\n' ' ')" \
        "$(sed -n "s/^\[$r\] out $r //p" "$TMP/out" | tr '\n' ' ')"
    r=$((r + 1))
done

# --no-prefix: the exact bytes (no newline added to the partial line).
"$XRUN" -n 1 --no-prefix "$CTL" lines 3 >"$TMP/out" 2>"$TMP/err"
expect_eq "--no-prefix: exit code" 0 $?
expect_eq "--no-prefix: stdout bytes" "$(printf 'out 0 0\nout 0 1\nout 0 2\ntail 0')" "$(cat "$TMP/out")"
expect_eq "--no-prefix: stdout size" 30 "$(wc -c <"$TMP/out" | tr -d ' ')"
expect_eq "--no-prefix: stderr bytes" "$(printf 'err 0 0\nerr 0 1\nerr 0 2')" "$(cat "$TMP/err")"

# A line longer than the launcher's buffer keeps a single prefix.
"$XRUN" -n 1 "$CTL" longline 50000 >"$TMP/out" 2>&1
expect_eq "long line: exit code" 0 $?
expect_eq "long line: line count" 2 "$(wc -l <"$TMP/out" | tr -d ' ')"
head -n 1 "$TMP/out" >"$TMP/line1"
expect_eq "long line: length of line 1 (with prefix and newline)" 50005 "$(wc -c <"$TMP/line1" | tr -d ' ')"
expect_eq "long line: prefixed once, then only x" "" "$(sed 's/^\[0\] //' "$TMP/line1" | tr -d 'x\n')"
expect_count "long line: next line" 1 '^\[0\] end$' "$TMP/out"

finish
