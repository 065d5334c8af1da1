#!/usr/bin/env bash
# The fp8 KV cache on a GPU machine, in one call: the build, the fp8 and attention op tests,
# memcheck over the fp8 ones, the attention kernel alone (bf16 against e4m3 K/V), the full
# fixtures' parity in bf16 and fp8, and `bench` at the reference profiler's settings in both
# precisions (frames/s, per-frame times, peak memory). Logs under $OUT.
# Usage, from the repository root: [LINGBOT_FIXTURES=...] [OUT=...] [FRAMES=300] tests/gpu/fp8_check.sh
set -u
export LINGBOT_FIXTURES=${LINGBOT_FIXTURES:-$PWD/../shared/fixtures}
OUT=${OUT:-/tmp/lingbot-fp8}
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=ON &&
  ninja -C build lingbot-map lingbot_tests lingbot_bench; } >"$OUT/build.log" 2>&1 ||
  { grep -E "error|Error" -A3 "$OUT/build.log" | head -40; exit 1; }
stamp "built"
ops='GpuOps.Fp8*:GpuOps.AttentionFp8*:GpuOps.Attention*:GpuOps.StoreKv*'
timeout 150 build/tests/lingbot_tests --gtest_filter="$ops" >"$OUT/ops.log" 2>&1
echo "op tests rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|rng seed|nq=" "$OUT/ops.log" | head -30
stamp "op tests done"
timeout 150 build/bench/lingbot_bench \
  --benchmark_filter='BM_PagedAttention(FP8/keys:(10000|72000)|BF16/keys:(10000|72000)/kernel:2/splits:0)' \
  --benchmark_counters_tabular=true >"$OUT/attention.txt" 2>&1
grep -E "PagedAttention" "$OUT/attention.txt"
stamp "attention alone done"
for p in bf16 fp8; do
  timeout 150 build/lingbot-map bench --device cuda --precision $p --frames "${FRAMES:-300}" \
    --json "$OUT/bench_$p.json" >"$OUT/bench_$p.txt" 2>&1
  echo "bench $p rc=$?"
  grep -E "streaming|per frame|memory|phase" "$OUT/bench_$p.txt" | sed "s/^/  $p: /"
done
stamp "bench done"
timeout 200 build/tests/lingbot_tests \
  --gtest_filter='GpuParity.FullModelBF16KeyframeInterval1:GpuParity.FullModelFP8*' \
  >"$OUT/parity.log" 2>&1
echo "parity rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure|parity \]" "$OUT/parity.log" | head
stamp "parity done"
timeout 150 compute-sanitizer --tool memcheck --report-api-errors no build/tests/lingbot_tests \
  --gtest_filter='GpuOps.Fp8*:GpuOps.AttentionFp8*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"
tail -2 "$OUT/memcheck.log"
stamp "done"
