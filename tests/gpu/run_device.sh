#!/usr/bin/env bash
# Checks the CUDA backend on a GPU machine in one go: Release build with benchmarks, the GpuOps
# tests, the GPU benchmarks, a SASS check that attention uses tensor cores, and a memcheck pass
# over the small cases. Full logs go to $OUT (default /tmp/lingbot-gpu-out); the summary is
# printed. Usage, from the repository root: OUT=/tmp/out tests/gpu/run_device.sh
set -u
OUT=${OUT:-/tmp/lingbot-gpu-out}
mkdir -p "$OUT"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
head -12 "$OUT/nvidia-smi.txt"

start=$(date +%s)
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=ON &&
  ninja -C build lingbot_tests && { ninja -C build lingbot_bench || true; }; } >"$OUT/build.log" 2>&1
rc=$?
echo "build rc=$rc in $(($(date +%s) - start)) s"
if [ $rc -ne 0 ]; then
  grep -E "error|Error" "$OUT/build.log" | head -40
  tail -20 "$OUT/build.log"
  exit 1
fi

obj=$(find build -name attention.cu.o | head -1)
echo "HMMA instructions per attention kernel (sm_90a):"
cuobjdump --dump-sass "$obj" 2>/dev/null |
  awk '/Function :/{fn=$3} /HMMA/{c[fn]++} END{for (k in c) print "  " c[k], k}'

LINGBOT_CUDA_VERBOSE=2 timeout 300 build/tests/lingbot_tests --gtest_filter='GpuOps*' \
  >"$OUT/tests.log" 2>&1
echo "tests rc=$?"
grep -E "^\[  +(FAILED|PASSED|SKIPPED|OK) +\]|Failure|rng seed|Expected|Which is|max\|ref|error|what\(\)" \
  "$OUT/tests.log" | head -90
grep -E "lingbot cuda\] (gemm|attention)" "$OUT/tests.log" | sort | uniq -c | sort -rn | head -30

if [ -x build/bench/lingbot_bench ]; then
  timeout 200 build/bench/lingbot_bench --benchmark_filter='PagedAttention|LinearBF16' \
    --benchmark_counters_tabular=true >"$OUT/bench.txt" 2>&1
  echo "bench rc=$?"
  grep -vE "^\*\*\*|^Run on|^CPU Caches|^  L[0-9]|^Load Average" "$OUT/bench.txt"
else
  echo "no benchmark binary (Google Benchmark missing?)"
fi

timeout 150 compute-sanitizer --tool memcheck build/tests/lingbot_tests \
  --gtest_filter='GpuOps.AttentionBF16TinyAndOdd:GpuOps.AttentionF32SmallAndOdd:GpuOps.AttentionBF16GenericHeadDim128:GpuOps.SplitQkv*:GpuOps.Conv*:GpuOps.LayerNorm*:GpuOps.Store*' \
  >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"
grep -E "ERROR SUMMARY|Invalid|PASSED|FAILED" "$OUT/memcheck.log" | head -20
