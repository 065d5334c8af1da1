#!/usr/bin/env bash
# One call on the GPU machine that checks a change end to end: the CUDA build (with the Python
# module where pybind11 is found), the GPU op, parity and session tests, memcheck over the
# newest kernels, the benchmark, then the end-to-end table on real frames
# (tests/gpu/realtime_table.sh), checkpoint loading (tests/gpu/checkpoint_load.sh) and the
# Python module on the GPU (tests/python/gpu_check.py). Logs under $OUT.
# Usage, from the repository root: FRAMES=<folder of frames> [LINGBOT_FIXTURES=...] [OUT=...] \
#   [EXPORTS="none all"] [REF=<reference checkout>] [CKPT=0 (skip checkpoint loading)] \
#   [KERNELS=1 (per-kernel times, tests/gpu/kernel_profile.sh)] \
#   tests/gpu/full_check.sh
set -u
export LINGBOT_FIXTURES=${LINGBOT_FIXTURES:-$PWD/../shared/fixtures}
OUT=${OUT:-/tmp/lingbot-full}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0)) s] $*"; }
# pybind11 from pip keeps its CMake files inside the package.
pybind11_dir=$(python3 -m pybind11 --cmakedir 2>/dev/null)
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=OFF \
    ${pybind11_dir:+-Dpybind11_DIR=$pybind11_dir} &&
  ninja -C build; } >"$OUT/build.log" 2>&1 ||
  { grep -E "error|Error" -A3 "$OUT/build.log" | head -40; exit 1; }
stamp "built"
# Quick tests first, the long parity runs after the measurements, so that a call cut short at
# its limit still brings the numbers back.
timeout 120 build/tests/lingbot_tests --gtest_filter='GpuOps*:GpuSessions*:GpuUpload*' \
  >"$OUT/gpu_ops.log" 2>&1
echo "GpuOps/GpuSessions/GpuUpload rc=$?"
grep -E "^\[  (PASSED|FAILED)|Failure" "$OUT/gpu_ops.log" | head -20
stamp "op tests done"
if [ -n "${FRAMES:-}" ]; then
  FRAMES=$FRAMES OUT="$OUT/realtime" timeout 200 tests/gpu/realtime_table.sh
  stamp "end-to-end table done"
fi
# With REF naming a checkout of the reference: our benchmark at the reference profiler's
# settings (378x504, and 378x518) and the profiler itself, in the same call.
if [ -n "${REF:-}" ]; then
  for w in 504 518; do
    timeout 120 build/lingbot-map bench --device cuda --width $w --json "$OUT/bench_$w.json" |
      grep -E "streaming|per frame" | sed "s/^/ours 378x$w: /"
  done
  # The default (auto) keeps the KV cache in e4m3 on this GPU; bf16 for comparison.
  timeout 120 build/lingbot-map bench --device cuda --precision bf16 --json "$OUT/bench_bf16.json" |
    grep -E "streaming|per frame" | sed "s/^/ours 378x504, bf16 KV cache: /"
  tests/gpu/reference_profile.sh "$REF" "$OUT"
  stamp "reference done"
fi
timeout 200 build/tests/lingbot_tests --gtest_filter='GpuParity*' >"$OUT/gpu_parity.log" 2>&1
echo "GpuParity rc=$?"; grep -E "^\[  (PASSED|FAILED)|Failure|parity \]" "$OUT/gpu_parity.log" | head
stamp "parity done"
if [ -x tests/gpu/checkpoint_load.sh ] && [ "${CKPT:-1}" != 0 ]; then
  DIR=/tmp/lingbot-ckpt EXTS=pt timeout 150 tests/gpu/checkpoint_load.sh
  stamp "checkpoint done"
fi
if [ -f tests/python/gpu_check.py ] && ls build/python/lingbot_map/_core* >/dev/null 2>&1; then
  PYTHONPATH=build/python timeout 150 python3 tests/python/gpu_check.py
  stamp "python done"
else
  echo "python module not built here"
fi
timeout 120 compute-sanitizer --tool memcheck --report-api-errors no build/tests/lingbot_tests \
  --gtest_filter='GpuOps.AttentionBF16TinyAndOdd:GpuOps.AttentionBF16RaggedSegments:GpuOps.AttentionBF16ForcedSplits:GpuOps.AttentionBF16OneFrame:GpuOps.AttentionBF16ScoresJump*:GpuOps.LinearAdd*:GpuUpload*:GpuOps.Fp8*:GpuOps.AttentionFp8*:GpuOps.Conv*' \
  >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -2 "$OUT/memcheck.log"
if [ "${KERNELS:-0}" = 1 ]; then
  OUT="$OUT/kernels" tests/gpu/kernel_profile.sh
  stamp "kernel profile done"
fi
stamp "done"
