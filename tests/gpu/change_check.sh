#!/usr/bin/env bash
# A kernel change checked and measured against the tree it started from, in one call on the GPU
# machine: the build with its tests, the op tests named by TESTS and GPU parity, memcheck over
# the tests named by MEMCHECK, then tests/gpu/before_after.sh (both builds' benchmark at the
# reference profiler's settings and their synchronized stage profiles at full window), and with
# KERNELS=1 the per-kernel profile of the new build (tests/gpu/kernel_profile.sh).
# Usage, from the repository root: BASE=<source tree of the earlier commit> [TESTS=<gtest filter>]
#   [MEMCHECK=<gtest filter>] [KERNELS=1] [OUT=...] [LINGBOT_FIXTURES=...] tests/gpu/change_check.sh
set -u
: "${BASE:?BASE must name the source tree to compare with}"
export LINGBOT_FIXTURES=${LINGBOT_FIXTURES:-$PWD/../shared/fixtures}
OUT=${OUT:-/tmp/lingbot-change-check}
TESTS=${TESTS:-GpuOps.*}
MEMCHECK=${MEMCHECK:-$TESTS}
mkdir -p "$OUT"
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=ON &&
  ninja -C build lingbot-map lingbot_tests && { ninja -C build lingbot_kernel_trace || true; }; } \
  >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -30; exit 1; }
# The earlier tree builds on the CPUs while the tests hold the GPU; before_after.sh finds it built.
(cmake -S "$BASE" -B "$BASE/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=OFF &&
  ninja -C "$BASE/build" lingbot-map) >"$OUT/build_base.log" 2>&1 &
base_build=$!
timeout 300 build/tests/lingbot_tests --gtest_filter="$TESTS:GpuParity*" >"$OUT/tests.log" 2>&1
echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|parity \]|rel_err|seed" "$OUT/tests.log" | head -40
timeout 200 compute-sanitizer --tool memcheck build/tests/lingbot_tests \
  --gtest_filter="$MEMCHECK" >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"
grep -E "ERROR SUMMARY|Invalid|PASSED|FAILED" "$OUT/memcheck.log" | head -8
wait $base_build
BASE="$BASE" OUT="$OUT" tests/gpu/before_after.sh 2>&1 | tee "$OUT/before_after.txt"
if [ "${KERNELS:-0}" = 1 ]; then OUT="$OUT/kernels" tests/gpu/kernel_profile.sh; fi
