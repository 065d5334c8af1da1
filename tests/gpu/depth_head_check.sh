#!/usr/bin/env bash
# The depth head's convolutions measured against the tree they started from, in one call on the
# GPU machine: builds both, runs the convolution op tests and GPU parity, memcheck over the
# convolution tests, the benchmark at the reference profiler's settings for both, and the
# synchronized stage profiles (frames 96-192) for both.
# Usage, from the repository root: BASE=<source tree of the earlier commit> [OUT=...]
#   [LINGBOT_FIXTURES=...] tests/gpu/depth_head_check.sh
set -u
: "${BASE:?BASE must name the source tree to compare with}"
export LINGBOT_FIXTURES=${LINGBOT_FIXTURES:-$PWD/../shared/fixtures}
OUT=${OUT:-/tmp/lingbot-depth-check}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(($(date +%s) - t0)) s]"; }
cfg() { cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=OFF >/dev/null; }
(cfg . build && ninja -C build lingbot-map lingbot_tests) >"$OUT/build.log" 2>&1 &
after=$!
(cfg "$BASE" "$BASE/build" && ninja -C "$BASE/build" -j4 lingbot-map) >"$OUT/build_base.log" 2>&1 &
before=$!
wait $after || { grep -E "error" -A3 "$OUT/build.log" | head -30; exit 1; }
echo "built $(el)"
timeout 240 build/tests/lingbot_tests --gtest_filter='GpuOps.Conv*:GpuOps.Upsample*:GpuParity*' \
  >"$OUT/tests.log" 2>&1
echo "tests rc=$? $(el)"
grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|parity \]|rel_err|seed" "$OUT/tests.log" | head -40
timeout 150 compute-sanitizer --tool memcheck build/tests/lingbot_tests \
  --gtest_filter='GpuOps.Conv*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(el)"
grep -E "ERROR SUMMARY|Invalid|PASSED|FAILED" "$OUT/memcheck.log" | head -8
wait $before || { grep -E "error" "$OUT/build_base.log" | head; }
echo "built base $(el)"
bench() { timeout 120 "$@" 2>&1 | grep -E "streaming|per frame|peak" | tr '\n' ' '; echo; }
for w in 504 518; do
  echo "before, 378x$w: $(bench "$BASE/build/lingbot-map" bench --device cuda --width $w)"
  echo "after,  378x$w: $(bench build/lingbot-map bench --device cuda --width $w)"
done
profile() {
  LINGBOT_PROFILE=1 timeout 90 "$1" bench --device cuda --frames 200 --warmup 0 \
    --profile-every 96 2>&1 | sed -n '/frames 96-/,$p' | grep -iE "depth|camera|total|global|frame|dino"
}
echo "before, synchronized stages:"; profile "$BASE/build/lingbot-map"
echo "after, synchronized stages:"; profile build/lingbot-map
echo "total $(el)"
