#!/bin/sh
# The job token given by a file (XCOLL_TOKEN_FILE, mode 0600): xcoll-run and
# its ranks use it, and it appears on no command line (token_prog checks).
# Then a group-readable token file must be refused with a message naming
# XCOLL_TOKEN_FILE.  Usage: token_file.sh XCOLL_RUN TOKEN_PROG
set -u
run=$1
prog=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
f=$dir/token
(umask 077 && echo ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100 > "$f")
XCOLL_TOKEN_FILE=$f "$run" -n 2 --timeout 50 "$prog" || { echo "FAIL: job with a token file"; exit 1; }
chmod 640 "$f"
out=$(XCOLL_TOKEN_FILE=$f "$run" -n 2 --timeout 50 "$prog" 2>&1)
rc=$?
[ $rc -ne 0 ] || { echo "FAIL: a group-readable token file was accepted"; exit 1; }
echo "$out" | grep -q "XCOLL_TOKEN_FILE" || { echo "FAIL: message does not name XCOLL_TOKEN_FILE: $out"; exit 1; }
echo "passed"
