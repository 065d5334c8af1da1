#!/usr/bin/env bash
# The GEMM candidates timed once per problem, against the heuristic's first choice: `bench` with
# LINGBOT_GEMM_TUNE=0 / 1 alternating (378x504 twice, 378x518 once), the tuning's decisions
# (LINGBOT_CUDA_VERBOSE=1), the linear op tests and the full fixtures' parity, and memcheck over
# the tuning test. Usage, from the repository root on a GPU machine with the fixtures:
#   [LINGBOT_FIXTURES=...] [OUT=...] tests/gpu/gemm_tune_check.sh
set -u
export LINGBOT_FIXTURES=${LINGBOT_FIXTURES:-$PWD/../shared/fixtures}
OUT=${OUT:-/tmp/lingbot-tune}
tests/gpu/switch_bench.sh LINGBOT_GEMM_TUNE "$OUT" || exit 1
LINGBOT_CUDA_VERBOSE=1 timeout 120 build/lingbot-map bench --device cuda --frames 20 2>&1 | grep "bit-identical"
timeout 300 build/tests/lingbot_tests --gtest_filter='GpuOps.*Linear*:GpuParity*' >"$OUT/gpu.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|parity|tuned bits" "$OUT/gpu.log" | head -30
timeout 200 compute-sanitizer --tool memcheck build/tests/lingbot_tests --gtest_filter='GpuOps.TunedLinear*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -1 "$OUT/memcheck.log"
