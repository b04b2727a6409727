#!/usr/bin/env bash
# long.sh -- the full test matrix.  Configures and builds a Release tree in
# build-long at the top of the repository, runs every test labelled "long"
# one at a time (-j1: the multi-rank tests need the cores), then prints
# ctest's summary again so it is not lost in the output, and exits with
# ctest's status.  Extra arguments go to ctest (e.g. tests/long.sh -R mp/).
# XCOLL_BUILD_JOBS sets the build parallelism (default 2).
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-long"
jobs=${XCOLL_BUILD_JOBS:-2}

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release || exit $?
cmake --build "$build" -j"$jobs" || exit $?

log="$build/long-ctest.log"
cd "$build" || exit 1
mkdir -p "$build/flight"
XCOLL_FLIGHT_DIR="$build/flight" ctest -L long --output-on-failure -j1 "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

echo
echo "==================== long test summary ===================="
# ctest's own summary: from the "% tests passed" line to the end.
sed -n '/tests passed/,$p' "$log"
echo "ctest exit status: $status (full log: $log)"
exit "$status"
