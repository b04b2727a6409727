#!/bin/sh
# Build the libFuzzer harnesses with clang (ASan) in their own build
# directory and run each for a bounded time.  Not part of ctest: run by hand
# or by CI as a separate step.
#   tests/fuzz/run.sh [seconds per harness, default 20] [build dir]
# Exit 0 if no harness found a crash; a crash leaves its input as
# <build dir>/crash-* (re-run: <build dir>/tests/fuzz/fuzz_store crash-...).
set -eu
secs=${1:-20}
src=$(cd "$(dirname "$0")/../.." && pwd)
dir=${2:-$src/build-fuzz}
command -v clang >/dev/null 2>&1 || { echo "run.sh: clang is needed (apt-get install clang)"; exit 77; }
CC=clang cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXCOLL_FUZZ=ON \
    -DXCOLL_BUILD_TESTS=OFF >/dev/null
cmake --build "$dir" -j2 --target fuzz_frame fuzz_store >/dev/null
cd "$dir"
for f in fuzz_frame fuzz_store; do
    mkdir -p "corpus-$f"
    echo "== $f: $secs s"
    rc=0
    "$dir/tests/fuzz/$f" -max_total_time="$secs" -max_len=4096 -print_final_stats=1 \
        "corpus-$f" >"$f.log" 2>&1 || rc=$?
    grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|SUMMARY)|ERROR" "$f.log" || true
    if [ $rc -ne 0 ]; then
        tail -40 "$f.log"
        echo "run.sh: $f failed (exit $rc); the input is in $dir/crash-* (or leak-*, timeout-*)"
        exit 1
    fi
done
echo "run.sh: no crash"
