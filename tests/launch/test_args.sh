#!/bin/sh
# test_args.sh XRUN CTL -- -h prints usage and exits 0; bad arguments print
# a message and exit 2, without starting anything.
XRUN=$1 CTL=$2
. "$(dirname "$0")/lib.sh"

"$XRUN" -h >"$TMP/out" 2>&1
expect_eq "-h: exit code" 0 $?
expect_grep "-h: usage text" '^Usage: xcoll-run -n N' "$TMP/out"
"$XRUN" --help >"$TMP/out" 2>&1
expect_eq "--help: exit code" 0 $?

# bad ARGS...: exit code 2 and a message on stderr naming the problem.
bad() {
    what=$1; shift
    "$XRUN" "$@" >"$TMP/out" 2>"$TMP/err"
    expect_eq "$what: exit code" 2 $?
    expect_grep "$what: message" '^xcoll-run: ' "$TMP/err"
    expect_count "$what: nothing ran" 0 'pid=' "$TMP/out"
}
bad "no arguments"
bad "no program" -n 2
bad "no -n" "$CTL" sleep 0
bad "-n 0" -n 0 "$CTL" sleep 0
bad "-n abc" -n abc "$CTL" sleep 0
bad "-n 1025" -n 1025 "$CTL" sleep 0
bad "-n missing value" -n
bad "unknown option" -n 2 --frobnicate "$CTL" sleep 0
bad "offset beyond world" -n 2 --rank-offset 3 --world-size 4 --addr 127.0.0.1:1234 "$CTL" sleep 0
bad "split job without --addr" -n 2 --world-size 4 "$CTL" sleep 0
bad "bad --addr" -n 2 --addr nonsense "$CTL" sleep 0
bad "--addr with port 0" -n 2 --addr 127.0.0.1:0 "$CTL" sleep 0
bad "--addr and --host" -n 2 --addr 127.0.0.1:1234 --host 127.0.0.1 "$CTL" sleep 0
bad "bad --timeout" -n 2 --timeout -1 "$CTL" sleep 0
bad "bad --grace-ms" -n 2 --grace-ms x "$CTL" sleep 0
bad "--nodes above -n" -n 2 --nodes 3 "$CTL" sleep 0
bad "--nodes 0" -n 2 --nodes 0 "$CTL" sleep 0
bad "bad --bind" -n 2 --bind core "$CTL" sleep 0

# Options after the program belong to the program.
"$XRUN" -n 1 "$CTL" fail 0 5 0 --frobnicate >"$TMP/out" 2>&1
expect_eq "program's own options: its exit code" 5 $?

# The store's port is taken: a clear failure, exit 1.
port=$("$CTL" port)
"$XRUN" -n 1 --addr 127.0.0.1:$port "$CTL" env 3000 >"$TMP/hold" 2>&1 &
hold=$!
wait_lines 1 'store=ok' "$TMP/hold" || fail "the first launcher did not start: $(cat "$TMP/hold")"
"$XRUN" -n 1 --addr 127.0.0.1:$port "$CTL" env >"$TMP/out" 2>"$TMP/err"
expect_eq "port in use: exit code" 1 $?
expect_grep "port in use: message" "^xcoll-run: cannot host the rendezvous store on 127\.0\.0\.1:$port" "$TMP/err"
wait $hold

finish
