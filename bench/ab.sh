#!/bin/sh
# ab.sh -- one xcoll-perf binary against two builds of the library,
# alternating, so that a change is measured before/after in one run (the
# host's state drifts between runs; compare within a round).
#
#   sh bench/ab.sh OLD_BUILD NEW_BUILD RANKS ROUNDS [xcoll-perf options...]
#
# OLD_BUILD / NEW_BUILD: build directories holding libxcoll.so.0 (e.g. a
# worktree of the old commit built with cmake -DCMAKE_BUILD_TYPE=Release);
# xcoll-perf and xcoll-run come from NEW_BUILD (their RUNPATH gives way to
# LD_LIBRARY_PATH).  Prints per round and build "size median_us ...".
set -eu
[ $# -ge 4 ] || { sed -n 2,13p "$0"; exit 2; }
old=$1 new=$2 nr=$3 rounds=$4
shift 4
for b in "$old" "$new"; do
    [ -e "$b/libxcoll.so.0" ] || { echo "ab.sh: no $b/libxcoll.so.0" >&2; exit 2; }
done
run=$new/xcoll-run perf=$new/xcoll-perf
r=1
while [ "$r" -le "$rounds" ]; do
    for which in old new; do
        if [ $which = old ]; then lib=$old; else lib=$new; fi
        printf '%s %d: ' $which $r
        LD_LIBRARY_PATH=$lib "$run" -n "$nr" --no-prefix "$perf" "$@" -c 0 --csv |
            awk -F, '$1 != "collective" {printf "%s %s ", $2, $7} END {print ""}'
    done
    r=$((r + 1))
done
