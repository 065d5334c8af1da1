#!/usr/bin/env bash
# The camera head on the side queue, in one call on the GPU machine: build, the GPU op, session
# and parity tests, memcheck over the side-queue and session tests, the benchmark with the side
# queue off (LINGBOT_SIDE_QUEUE=0) and on, alternating, at the reference profiler's settings, and
# the 2000-frame runs (growing special stream, and capped at 256) with 100-frame medians.
# Usage, from the repository root: [LINGBOT_FIXTURES=...] [OUT=...] tests/gpu/side_queue_check.sh
set -u
export LINGBOT_FIXTURES=${LINGBOT_FIXTURES:-$PWD/../shared/fixtures}
OUT=${OUT:-/tmp/lingbot-side-queue}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(($(date +%s) - t0)) s]"; }
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=OFF &&
  ninja -C build lingbot-map lingbot_tests; } >"$OUT/build.log" 2>&1 ||
  { grep -E "error" -A3 "$OUT/build.log" | head -30; exit 1; }
echo "built $(el)"
timeout 240 build/tests/lingbot_tests \
  --gtest_filter='GpuOps.SideQueue*:GpuOps.Conv*:GpuSessions*:GpuUpload*:GpuParity*' \
  >"$OUT/tests.log" 2>&1
echo "tests rc=$? $(el)"
grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|parity \]|seed" "$OUT/tests.log" | head -30
timeout 150 compute-sanitizer --tool memcheck --report-api-errors no build/tests/lingbot_tests \
  --gtest_filter='GpuOps.SideQueue*:GpuSessions*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(el)"
grep -E "ERROR SUMMARY|Invalid|PASSED|FAILED" "$OUT/memcheck.log" | head -8
bench() { timeout 60 "$@" 2>&1 | grep -E "streaming|per frame" | tr '\n' ' '; echo; }
for round in 1 2; do
  for w in 504 518; do
    echo "side queue off, 378x$w: $(LINGBOT_SIDE_QUEUE=0 bench build/lingbot-map bench --device cuda --width $w)"
    echo "side queue on,  378x$w: $(bench build/lingbot-map bench --device cuda --width $w)"
  done
done
echo "benchmarks $(el)"
OUT="$OUT" tests/gpu/long_run.sh
echo "total $(el)"
