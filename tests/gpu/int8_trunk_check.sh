#!/usr/bin/env bash
# The camera trunk in int8 rows (`--precision fp8`) against the bf16 trunk ("auto"), one binary,
# in one call on the GPU machine: the build, the int8 op and parity tests, memcheck over the new
# kernels, then `bench` alternating the two precisions at 378x504 and 378x518 and eight streams
# at window 16 (their camera head has eight rows: the widened path). Usage, from the repository
# root: [OUT=...] [LINGBOT_FIXTURES=...] tests/gpu/int8_trunk_check.sh
set -u
export LINGBOT_FIXTURES=${LINGBOT_FIXTURES:-$PWD/../shared/fixtures}
OUT=${OUT:-/tmp/lingbot-int8-trunk}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(($(date +%s) - t0)) s]"; }
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=OFF &&
  ninja -C build lingbot-map lingbot_tests; } >"$OUT/build.log" 2>&1 ||
  { grep -E "error" -A3 "$OUT/build.log" | head -30; exit 1; }
echo "built $(el)"
timeout 150 build/tests/lingbot_tests \
  --gtest_filter='GpuOps.Int8*:GpuOps.LayerNormLinear*:GpuOps.FewRow*:GpuParity.FullModelFP8*' \
  >"$OUT/tests.log" 2>&1
echo "tests rc=$? $(el)"
grep -E "^\[  (PASSED|FAILED)|Failure|parity \]|seed" "$OUT/tests.log" | head -20
timeout 120 compute-sanitizer --tool memcheck build/tests/lingbot_tests \
  --gtest_filter='GpuOps.Int8*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | head -1)"
bench() { timeout 100 build/lingbot-map bench --device cuda "$@" 2>&1 | grep -E "streaming|aggregate" |
  cut -c1-170; }
for round in 1 2; do
  for p in auto fp8; do echo "378x504 $p: $(bench --precision $p)"; done
done
for p in auto fp8; do echo "378x518 $p: $(bench --precision $p --width 518)"; done
for p in auto fp8; do
  echo "8 streams, window 16, $p: $(bench --precision $p --streams 8 --window 16 --frames 150)"
done
echo "total $(el)"
