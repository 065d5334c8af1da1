#!/usr/bin/env bash
# The depth head's convolutions checked and measured against the tree they started from, in one
# call on the GPU machine: the build with its tests, the convolution op tests and GPU parity,
# memcheck over the convolution tests, then tests/gpu/before_after.sh (both builds' benchmark at
# the reference profiler's settings and their synchronized stage profiles at full window).
# Usage, from the repository root: BASE=<source tree of the earlier commit> [OUT=...]
#   [LINGBOT_FIXTURES=...] tests/gpu/depth_head_check.sh
set -u
: "${BASE:?BASE must name the source tree to compare with}"
export LINGBOT_FIXTURES=${LINGBOT_FIXTURES:-$PWD/../shared/fixtures}
OUT=${OUT:-/tmp/lingbot-depth-check}
mkdir -p "$OUT"
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=OFF &&
  ninja -C build lingbot-map lingbot_tests; } >"$OUT/build.log" 2>&1 ||
  { grep -E "error" -A3 "$OUT/build.log" | head -30; exit 1; }
timeout 240 build/tests/lingbot_tests --gtest_filter='GpuOps.Conv*:GpuOps.Upsample*:GpuParity*' \
  >"$OUT/tests.log" 2>&1
echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|parity \]|rel_err|seed" "$OUT/tests.log" | head -40
timeout 150 compute-sanitizer --tool memcheck build/tests/lingbot_tests \
  --gtest_filter='GpuOps.Conv*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"
grep -E "ERROR SUMMARY|Invalid|PASSED|FAILED" "$OUT/memcheck.log" | head -8
BASE="$BASE" OUT="$OUT" tests/gpu/before_after.sh
