#!/bin/sh
# The main job: build xcoll, verify every collective on 4 local ranks
# (xcoll_demo), then train a small MLP data-parallel on 4 local ranks with
# and without gradient bucketing (examples/train_mlp.c): loss, step time and
# how much communication was hidden.  Extra arguments go to train_mlp.
set -eu
cd "$(dirname "$0")/.."
sh scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target xcoll-run xcoll_demo train_mlp >/dev/null
build/xcoll-run -n 4 build/xcoll_demo
echo
exec build/xcoll-run -n 4 build/train_mlp "$@"
