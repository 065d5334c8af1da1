#!/usr/bin/env bash
# The GPU measurement behind docs/PERFORMANCE.md, in one call on the GPU machine: Release build,
# GPU tests (GpuOps, GpuParity on LINGBOT_FIXTURES), our benchmark at the reference profiler's
# settings, the reference profiler itself (when REF names a checkout of the reference; it needs
# torch, and the imports it does not use get stand-ins: tests/gpu/reference_profile.sh),
# 2000-frame runs (special stream growing as in the reference, and capped), and the GPU preflight.
# Usage, from the repository root: [REF=/path/to/reference] OUT=/tmp/out tests/gpu/compare_reference.sh
# PART=tests (build, op and parity tests) and PART=speed (build, which the first part left done,
# then every timing) split it into two calls where one call may not run that long.
set -u
OUT=${OUT:-/tmp/lingbot-compare}
PART=${PART:-all}
case "$PART" in all | tests | speed) ;; *) echo "PART must be all, tests or speed"; exit 2 ;; esac
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
t0=$(date +%s)
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=OFF &&
  ninja -C build lingbot-map lingbot_tests; } >"$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head; exit 1; }
echo "build $(($(date +%s) - t0)) s"
if [ "$PART" != speed ]; then
  timeout 200 build/tests/lingbot_tests --gtest_filter='GpuOps*' >"$OUT/ops.log" 2>&1
  echo "GpuOps rc=$?"; grep -E "^\[  FAILED|Failure" "$OUT/ops.log" | head -20
  timeout 300 build/tests/lingbot_tests --gtest_filter='GpuParity*' >"$OUT/parity.log" 2>&1
  echo "GpuParity rc=$?"; grep -E "parity \]|FAILED|Failure" "$OUT/parity.log" | head -20
fi
[ "$PART" = tests ] && { echo "total $(($(date +%s) - t0)) s"; exit 0; }
timeout 150 build/lingbot-map bench --device cuda --json "$OUT/ours.json" | tee "$OUT/bench.txt"
# The same without recording steps as CUDA graphs, for what the graphs bring.
LINGBOT_CUDA_GRAPH=0 timeout 150 build/lingbot-map bench --device cuda --json "$OUT/nograph.json" |
  grep -E "per frame|streaming" | sed 's/^/without graphs: /'
if [ -n "${REF:-}" ]; then
  tests/gpu/reference_profile.sh "$REF" "$OUT"
fi
# 2000 frames, with the reference's growing special stream and with it capped.
OUT="$OUT" tests/gpu/long_run.sh
if [ -d "${LINGBOT_FIXTURES:-}/full/frames" ]; then
  build/lingbot-map run --device cuda --model synthetic:3 --input "$LINGBOT_FIXTURES/full/frames" \
    --out "$OUT/dry" --dry-run
fi
echo "total $(($(date +%s) - t0)) s"
