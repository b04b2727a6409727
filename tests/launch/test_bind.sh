#!/bin/sh
# test_bind.sh XRUN CTL -- --bind: `cpu` puts rank i on the (i mod C)-th of
# the launcher's C CPUs, `none` leaves every rank on all of them, `auto`
# binds only when the invocation starts at least as many ranks as it has
# CPUs; the binding holds across --max-restarts.
XRUN=$1 CTL=$2
. "$(dirname "$0")/lib.sh"

# The launcher's CPUs, one per line, from this shell's allowed list
# ("0-3,6" -> 0 1 2 3 6): the launcher inherits the same set.
grep '^Cpus_allowed_list:' /proc/self/status | sed 's/.*:[[:space:]]*//' |
    tr ',' '\n' | awk -F- '{ hi = NF > 1 ? $2 : $1; for (c = $1; c <= hi; c++) print c }' \
    >"$TMP/cpus"
C=$(wc -l <"$TMP/cpus")
all=$(grep '^Cpus_allowed_list:' /proc/self/status | sed 's/.*:[[:space:]]*//')
[ "$C" -ge 1 ] || { echo "SKIP: cannot read this process's CPUs" >&2; exit 77; }

# rank i's expected CPU list: the (i mod C)-th CPU
cpu_of() { sed -n "$(( $1 % C + 1 ))p" "$TMP/cpus"; }

# Every rank prints its allowed list (set before exec: the threads it
# starts inherit it).
prog='printf "cpus=%s\n" "$(grep ^Cpus_allowed_list: /proc/self/status | sed "s/.*:[[:space:]]*//")"'

check_bound() { # WHAT N FILE
    r=0
    while [ $r -lt $2 ]; do
        expect_grep "$1: rank $r on CPU $(cpu_of $r)" "^\[$r\] cpus=$(cpu_of $r)\$" "$3"
        r=$((r + 1))
    done
}
check_free() { # WHAT N FILE
    expect_count "$1: every rank on all CPUs" $2 "^\[[0-9]+\] cpus=$all\$" "$3"
}

n=$((C + 1))
"$XRUN" -n $n --bind cpu sh -c "$prog" >"$TMP/out" 2>&1
expect_eq "--bind cpu: exit code" 0 $?
check_bound "--bind cpu, $n ranks" $n "$TMP/out"

"$XRUN" -n $n --bind none sh -c "$prog" >"$TMP/out" 2>&1
expect_eq "--bind none: exit code" 0 $?
check_free "--bind none, $n ranks" $n "$TMP/out"

"$XRUN" -n $n sh -c "$prog" >"$TMP/out" 2>&1
expect_eq "auto, oversubscribed: exit code" 0 $?
check_bound "auto, $n ranks on $C CPUs" $n "$TMP/out"

"$XRUN" -n $C sh -c "$prog" >"$TMP/out" 2>&1
expect_eq "auto, as many ranks as CPUs: exit code" 0 $?
check_bound "auto, $C ranks on $C CPUs" $C "$TMP/out"

if [ "$C" -ge 2 ]; then
    "$XRUN" -n $((C - 1)) sh -c "$prog" >"$TMP/out" 2>&1
    expect_eq "auto, fewer ranks than CPUs: exit code" 0 $?
    check_free "auto, $((C - 1)) ranks on $C CPUs" $((C - 1)) "$TMP/out"
fi

# A restarted job is bound as the first: rank 1 fails the first attempt
# after printing (the others may be stopped before they print).
"$XRUN" -n $n --bind cpu --max-restarts 1 sh -c \
    "$prog; [ \"\$XCOLL_RANK\" != 1 ] || [ \"\$XCOLL_RESTART_COUNT\" = 1 ] || exit 3" \
    >"$TMP/out" 2>&1
expect_eq "--bind cpu with a restart: exit code" 0 $?
expect_count "--bind cpu with a restart: rank 1 bound at both starts" 2 "^\[1\] cpus=$(cpu_of 1)\$" "$TMP/out"
sed -n '/restart 1 of 1/,$p' "$TMP/out" >"$TMP/second"
check_bound "--bind cpu, the restarted job" $n "$TMP/second"

finish
