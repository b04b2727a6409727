# lib.sh -- assertions shared by the launcher test drivers (POSIX sh).
# Source it after setting XRUN (the launcher) and CTL (launch_ctl); every
# assertion prints what it expected and what it got.  TMP is a scratch
# directory removed at exit.

TMP=$(mktemp -d "${TMPDIR:-/tmp}/xcoll-launch.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
FAILS=0

# show FILE: its first 40 lines, each cut to 160 characters, on stderr
show() { head -n 40 "$1" | cut -c 1-160 | sed 's/^/    | /' >&2; }

fail() { echo "FAIL: $*" >&2; FAILS=$((FAILS + 1)); }
pass() { echo "ok: $*"; }

# expect_eq WHAT EXPECTED ACTUAL
expect_eq() {
    if [ "$2" = "$3" ]; then pass "$1 = '$3'"
    else fail "$1: expected '$2', got '$3'"; fi
}

# expect_le WHAT LIMIT ACTUAL   (integers)
expect_le() {
    if [ "$3" -le "$2" ]; then pass "$1 = $3 <= $2"
    else fail "$1: expected <= $2, got $3"; fi
}

# expect_grep WHAT ERE FILE: at least one line of FILE matches
expect_grep() {
    if grep -Eq -- "$2" "$3"; then pass "$1"
    else fail "$1: no line matches /$2/ in:"; show "$3"; fi
}

# expect_count WHAT N ERE FILE: exactly N lines of FILE match
expect_count() {
    got=$(grep -Ec -- "$3" "$4")
    if [ "$got" = "$2" ]; then pass "$1 ($got lines)"
    else fail "$1: expected $2 lines matching /$3/, got $got in:"
         show "$4"; fi
}

# running PID: true if PID exists and is not a zombie (an orphan that died
# stays a zombie when PID 1 of a container does not reap; it is gone all
# the same).
running() {
    st=$(sed -n 's/^[0-9]* (.*) \([A-Za-z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null)
    [ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# expect_gone WHAT FILE: no pid printed as "pid=N" in FILE is still running
# (waits up to 5 s: a process killed a moment ago may still be dying).
expect_gone() {
    pids=$(sed -n 's/.*pid=\([0-9][0-9]*\).*/\1/p' "$2")
    if [ -z "$pids" ]; then fail "$1: no pids were printed"; return; fi
    tries=0
    while :; do
        alive=""
        for p in $pids; do running "$p" && alive="$alive $p"; done
        [ -z "$alive" ] && break
        tries=$((tries + 1))
        [ $tries -ge 50 ] && break
        sleep 0.1
    done
    if [ -z "$alive" ]; then pass "$1: pids$(echo $pids | tr '\n' ' ' | sed 's/^/ /') are gone"
    else fail "$1: still alive:$alive"; for p in $alive; do kill -9 "$p" 2>/dev/null; done; fi
}

# wait_lines N ERE FILE: wait up to 10 s until FILE has N lines matching
wait_lines() {
    tries=0
    # A file not created yet counts as 0 lines (not as a shell error).
    while n_=$(grep -Ec -- "$2" "$3" 2>/dev/null); [ "${n_:-0}" -lt "$1" ]; do
        tries=$((tries + 1))
        [ $tries -ge 100 ] && return 1
        sleep 0.1
    done
    return 0
}

now() { date +%s; }

finish() {
    if [ "$FAILS" -ne 0 ]; then echo "$FAILS assertion(s) failed" >&2; exit 1; fi
    echo "all passed"; exit 0
}
