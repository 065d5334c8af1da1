#!/usr/bin/env bash
# The every-GPU table in one call: the Hopper path against the portable path (what sm_80/86/89
# GPUs run, forced on an H100/H200 by --gpu-path portable) x the KV cache in bf16 and in e4m3.
# Builds lingbot-map and the tests, then, measurements first so that a call cut short still
# brings them back: the fp8 attention op tests on both paths, `bench` (378x504, scale 8, window
# 64) for each cell with its peak device memory, the preflight's estimate (`run --dry-run`),
# GpuParity (bf16, fp8) and the whole GpuOps suite on both paths, memcheck over the fp8 attention tests.
# Logs under $OUT; the table is printed last.
# Usage, from the repository root on a GPU machine:
#   [LINGBOT_FIXTURES=...] [OUT=...] [FRAMES=300] [COMMIT=...] tests/gpu/every_gpu_table.sh
set -u
export LINGBOT_FIXTURES=${LINGBOT_FIXTURES:-$PWD/../shared/fixtures}
OUT=${OUT:-/tmp/lingbot-every-gpu}
FRAMES=${FRAMES:-300}
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
echo "commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}, $(date -u +%Y-%m-%dT%H:%MZ)"
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=OFF &&
  ninja -C build -j"$(nproc)" lingbot-map lingbot_tests; } >"$OUT/build.log" 2>&1 ||
  { grep -E "error|Error" -A3 "$OUT/build.log" | head -40; exit 1; }
stamp "built"
T=build/tests/lingbot_tests
FP8_OPS='GpuOps.AttentionFp8*:GpuOps.Fp8*'
for path in auto portable; do
  LINGBOT_TEST_GPU_PATH=$path timeout 120 $T --gtest_filter="$FP8_OPS" >"$OUT/fp8_ops_$path.log" 2>&1
  echo "fp8 attention ops, $path path: rc=$? $(grep -cE '^\[       OK' "$OUT/fp8_ops_$path.log") ok"
  grep -E "Failure|FAILED" "$OUT/fp8_ops_$path.log" | head -5
done
stamp "fp8 op tests done"
row() {  # path precision -> one table row from a bench run
  local f="$OUT/bench_$1_$2.txt"
  timeout 150 build/lingbot-map bench --device cuda --gpu-path "$1" --precision "$2" \
    --frames "$FRAMES" --json "$OUT/bench_$1_$2.json" >"$f" 2>&1
  local rc=$?
  local fps peak kv
  fps=$(grep -oE "^streaming [0-9.]+" "$f" | cut -d' ' -f2)
  peak=$(grep -oE "peak device memory [0-9.]+" "$f" | tail -1 | awk '{print $4}')
  kv=$(grep -oE "KV cache [A-Z0-9_]+" "$f" | head -1 | cut -d' ' -f3)
  printf "| %-8s | %-4s | %-7s | %6s | %5s | rc=%s\n" "$1" "$2" "$kv" "$fps" "$peak" "$rc" |
    tee -a "$OUT/table.txt"
}
: >"$OUT/table.txt"
for round in 1 2; do
  for path in hopper portable; do
    for p in bf16 fp8; do row $path $p; done
  done
  stamp "bench round $round done"
  [ $(($(date +%s) - t0)) -gt 330 ] && break  # a second round only where the call has time
done
for path in hopper portable; do
  timeout 60 build/lingbot-map run --model synthetic:3 --arch lingbot-map --device cuda \
    --gpu-path $path --input "$LINGBOT_FIXTURES/full/frames" --preprocess none --window 64 \
    --dry-run --out "$OUT/dry" 2>&1 | sed "s/^/  dry-run $path: /" | head -12
done
for path in auto portable; do
  # float32 runs the same kernels on both paths (generic attention, im2col convolutions).
  LINGBOT_TEST_GPU_PATH=$path timeout 200 $T --gtest_filter='GpuParity.*BF16*:GpuParity.*FP8*' \
    >"$OUT/parity_$path.log" 2>&1
  echo "GpuParity, $path path: rc=$?"
  grep -E "^\[ parity \]|Failure|FAILED" "$OUT/parity_$path.log" | head -12
done
stamp "parity done"
for path in auto portable; do
  LINGBOT_TEST_GPU_PATH=$path timeout 150 $T --gtest_filter='GpuOps.*' >"$OUT/ops_$path.log" 2>&1
  echo "GpuOps, $path path: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/ops_$path.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED" "$OUT/ops_$path.log" | head -8
done
stamp "op suites done"
LINGBOT_TEST_GPU_PATH=portable timeout 150 compute-sanitizer --tool memcheck \
  --report-api-errors no $T --gtest_filter='GpuOps.AttentionFp8MmaOddShapes' \
  >"$OUT/memcheck.log" 2>&1
echo "memcheck (fp8 mma odd shapes): rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log")"
stamp "memcheck done"
echo "| path     | KV   | cache   | fps    | peak GB |"
cat "$OUT/table.txt"
