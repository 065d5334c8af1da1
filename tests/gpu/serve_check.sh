#!/usr/bin/env bash
# The stream server measured on the GPU machine, in one call. That machine has no Boost, so
# BOOST_HEADERS names a tarball of the headers `serve` needs (scripts/boost_headers.sh makes it
# where libboost-dev is installed; carry it along). Builds `lingbot-map` with `serve`, then runs
# tests/serve/load_test.py, which starts `serve` on a free loopback port and streams raw frames
# from N clients at once: 1, 2 and 4 clients at the reference profiler's settings (378x504 frames,
# window 64), then 8 clients at window 16. Per round it reports aggregate and per-client frames/s,
# latency p50/p99 and memory; it fails if a client misses or reorders a result, if a session is
# left after the clients go, or if the server's heap at rest grows from round to round.
# Usage, from the repository root: BOOST_HEADERS=<tarball> [OUT=...] [FRAMES=200] \
#   [SERVER_ARGS="--model synthetic:3 --device cuda"] [WIDTH=504 HEIGHT=378] tests/gpu/serve_check.sh
set -u
OUT=${OUT:-/tmp/lingbot-serve}
FRAMES=${FRAMES:-200}
SERVER_ARGS=${SERVER_ARGS:---model synthetic:3 --device cuda}
WIDTH=${WIDTH:-504}
HEIGHT=${HEIGHT:-378}
mkdir -p "$OUT"
boost=()
if [ -n "${BOOST_HEADERS:-}" ]; then
  rm -rf "$OUT/boost" && mkdir -p "$OUT/boost" && tar -xJf "$BOOST_HEADERS" -C "$OUT/boost" || exit 1
  boost=("-DLINGBOT_BEAST_INCLUDE=$OUT/boost")
fi
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_SERVER=ON "${boost[@]}" &&
  ninja -C build lingbot-map; } >"$OUT/build.log" 2>&1 ||
  { grep -E "error|Error" -A3 "$OUT/build.log" | head -30; exit 1; }
rc=0
load() {  # clients, window
  echo "--- clients $1, window $2"
  timeout 900 python3 tests/serve/load_test.py --server build/lingbot-map \
    --server-args="$SERVER_ARGS" --clients "$1" --frames "$FRAMES" --width "$WIDTH" \
    --height "$HEIGHT" --preprocess none --stream window="$2" --rounds 2 \
    --json "$OUT/load_$1_window_$2.json" || rc=1
}
load 1,2,4 64
load 8 16
exit $rc
