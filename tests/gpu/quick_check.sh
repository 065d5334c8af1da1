#!/usr/bin/env bash
# A short GPU check in one call: CUDA build, GPU op/parity/session tests, memcheck over the
# interleaved sessions (graph-update fallbacks are expected API errors, not reported), the
# install test with CUDA, and the benchmark. Usage: [LINGBOT_FIXTURES=...] [OUT=...] tests/gpu/quick_check.sh
set -u
export LINGBOT_FIXTURES=${LINGBOT_FIXTURES:-$PWD/../shared/fixtures}
OUT=${OUT:-/tmp/lingbot-check}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
t0=$(date +%s)
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=OFF &&
  ninja -C build lingbot lingbot-map lingbot_tests; } >"$OUT/build.log" 2>&1 ||
  { grep -E "error|Error" -A3 "$OUT/build.log" | head -40; exit 1; }
echo "build $(($(date +%s) - t0)) s"
timeout 300 build/tests/lingbot_tests --gtest_filter='GpuOps*:GpuParity*:GpuSessions*' >"$OUT/gpu.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|parity \]" "$OUT/gpu.log" | head -30
timeout 120 build/lingbot-map bench --device cuda --json "$OUT/bench.json" 2>&1 | tail -6
timeout 200 compute-sanitizer --tool memcheck --report-api-errors no build/tests/lingbot_tests --gtest_filter='GpuSessions*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -4 "$OUT/memcheck.log"
timeout 200 ctest --test-dir build -R Install --output-on-failure >"$OUT/install.log" 2>&1; echo "install test rc=$?"; tail -3 "$OUT/install.log"
