#!/bin/sh
# The main job: build xcoll and run the demo on 4 local ranks.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target xcoll-run xcoll_demo >/dev/null
exec build/xcoll-run -n 4 build/xcoll_demo "$@"
