#!/usr/bin/env bash
# The camera trunk in int8 rows (`--precision fp8`) against the bf16 trunk ("auto"), one binary,
# in one call on the GPU machine: `bench` alternating the two precisions (tests/gpu/switch_bench.sh)
# and at eight streams of window 16 (their camera head has eight rows: the widened path), the
# int8 op and parity tests, and memcheck over the new kernels. Usage, from the repository root:
#   [OUT=...] [LINGBOT_FIXTURES=...] tests/gpu/int8_trunk_check.sh
set -u
export LINGBOT_FIXTURES=${LINGBOT_FIXTURES:-$PWD/../shared/fixtures}
OUT=${OUT:-/tmp/lingbot-int8-trunk}
VALUES="auto fp8" tests/gpu/switch_bench.sh --precision "$OUT" || exit 1
for p in auto fp8; do
  printf "8 streams, window 16, %s: " "$p"
  timeout 100 build/lingbot-map bench --device cuda --precision $p --streams 8 --window 16 \
    --frames 150 2>&1 | grep -E "aggregate" | cut -c1-120
done
timeout 150 build/tests/lingbot_tests \
  --gtest_filter='GpuOps.Int8*:GpuOps.LayerNormLinear*:GpuOps.FewRow*:GpuParity.FullModelFP8*' \
  >"$OUT/tests.log" 2>&1
echo "tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure|parity \]|seed" "$OUT/tests.log" | head -20
timeout 120 compute-sanitizer --tool memcheck build/tests/lingbot_tests \
  --gtest_filter='GpuOps.Int8*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"; grep -E "ERROR SUMMARY" "$OUT/memcheck.log" | head -1
