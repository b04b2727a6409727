#!/bin/sh
# The test suite, as CI runs it: the representative matrix (ctest label
# "ci") in a release build and in an ASan+UBSan build, and the threaded
# subset (label "tsan") under ThreadSanitizer, then the libFuzzer harnesses
# of the wire parsers for a bounded time (tests/fuzz/run.sh, clang + ASan).
# The ASan build leaves out the "heavy" tests unless XCOLL_TEST_FULL=1.
# XCOLL_TEST_JOBS sets ctest's parallel slots (default 3, see below).
# The full matrix is tests/long.sh.  Ends with one line "tests: N passed, M failed".
set -u
cd "$(dirname "$0")/.."
sh scripts/deps.sh || exit 1
# ctest's slots: a test of 2 or more ranks takes 2 (PROCESSORS), the fault
# and launch tests take 1 and mostly wait (deadlines, kills, restarts:
# about half a core each), so a third slot lets one of them run beside a
# multi-rank test instead of holding a core idle.
jobs=${XCOLL_TEST_JOBS:-3}
total_pass=0
total_fail=0
status=0

# run BUILD_DIR LABEL EXCLUDED_LABEL CMAKE_ARGS... (EXCLUDED_LABEL "": none)
run() {
    dir=$1 label=$2 excl=$3
    shift 3
    echo "=== $dir: ctest -L $label${excl:+ -LE $excl}"
    cmake -S . -B "$dir" "$@" >/dev/null || { status=1; total_fail=$((total_fail + 1)); return; }
    if ! cmake --build "$dir" -j2 >"$dir.build.log" 2>&1; then
        tail -40 "$dir.build.log"
        status=1
        total_fail=$((total_fail + 1))
        return
    fi
    # Test output may hold NUL bytes (a sanitizer's report): strip them so
    # the summary stays readable and greppable.
    # Flight-recorder dumps of the fault tests stay in the build tree.
    mkdir -p "$dir/flight"
    (cd "$dir" && XCOLL_FLIGHT_DIR="$PWD/flight" ctest -L "$label" ${excl:+-LE "$excl"} -j"$jobs" --output-on-failure --timeout 600 2>&1; echo "rc=$?") |
        tr -d '\000' >"$dir.ctest.log"
    rc=$(tail -n 1 "$dir.ctest.log" | sed 's/^rc=//')
    grep -a -E "\*\*\*|^[0-9]+% tests passed|^\s+[0-9]+ - " "$dir.ctest.log" | tail -n 40
    line=$(grep -a -E "tests passed, [0-9]+ tests failed out of" "$dir.ctest.log" | tail -1)
    failed=$(echo "$line" | sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/')
    all=$(echo "$line" | sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\2/')
    if [ -n "$line" ]; then
        total_pass=$((total_pass + all - failed))
        total_fail=$((total_fail + failed))
    else
        total_fail=$((total_fail + 1))
    fi
    if [ "$rc" -ne 0 ]; then
        status=1
        # Each failed test's own output (--output-on-failure puts it right
        # after its result line), at most 60 lines each, then the tail.
        echo "--- output of the failed tests in $dir.ctest.log ---"
        awk '/\*\*\*(Failed|Exception|Timeout)|Failed  *[0-9.]+ sec/ {on = 1; n = 0}
             on && /^ *Start +[0-9]+:|^[0-9]+\/[0-9]+ Test +#/ && !/\*\*\*/ {on = 0}
             on && n < 60 {print; n++}' "$dir.ctest.log" | head -n 400
        echo "--- last lines of $dir.ctest.log ---"
        tail -n 60 "$dir.ctest.log"
    fi
}

# The ASan build skips the "heavy" CI tests (tests/mp/CMakeLists.txt and
# tests/python/CMakeLists.txt say which and why: mostly the same code on
# more ranks, and the slow INT8 training runs) so that CI stays within 20
# minutes; XCOLL_TEST_FULL=1 runs them there too.
heavy=heavy
[ "${XCOLL_TEST_FULL:-0}" = 1 ] && heavy=""
run build ci "" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXCOLL_WERROR=ON
# ASan at -O1 (its documentation's advice): half the time of -O0, and
# LeakSanitizer then also sees leaks whose last pointer -O0 kept in a dead
# stack slot.
run build-asan ci "$heavy" -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-g -O1" \
    "-DCMAKE_CXX_FLAGS_DEBUG=-g -O1" -DXCOLL_SANITIZE=address,undefined
run build-tsan tsan "" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXCOLL_SANITIZE=thread
echo "=== build-fuzz: tests/fuzz/run.sh 15"
sh tests/fuzz/run.sh 15 "$PWD/build-fuzz" >build-fuzz.log 2>&1
frc=$?
tail -n 8 build-fuzz.log
if [ $frc -eq 0 ]; then
    total_pass=$((total_pass + 1))
elif [ $frc -ne 77 ]; then
    total_fail=$((total_fail + 1))
    status=1
fi
echo "tests: $total_pass passed, $total_fail failed"
exit $status
