#!/usr/bin/env bash
# Programmatic dependent launch against plain launches, one binary: `bench` with LINGBOT_PDL=0 /
# default alternating (378x504 twice, 378x518 once), the step graphs' instantiations under each
# (LINGBOT_CUDA_VERBOSE=1: updated in place, not instantiated afresh), the GPU op, session, batch
# and parity tests, and memcheck over the dependent-launch and recorded-step tests. Usage, from the
# repository root on a GPU machine with the fixtures:
#   [LINGBOT_FIXTURES=...] [OUT=...] tests/gpu/pdl_check.sh
set -u
export LINGBOT_FIXTURES=${LINGBOT_FIXTURES:-$PWD/../shared/fixtures}
OUT=${OUT:-/tmp/lingbot-pdl}
tests/gpu/switch_bench.sh LINGBOT_PDL "$OUT" || exit 1
for p in 0 1; do  # a line for every step that instantiated its graph
  printf "pdl %s, 60 frames: step graphs instantiated %s times\n" "$p" \
    "$(LINGBOT_PDL=$p LINGBOT_CUDA_VERBOSE=1 timeout 120 build/lingbot-map bench --device cuda \
      --frames 60 2>&1 | tee "$OUT/verbose$p.log" | grep -c 'graph instantiated')"
done
timeout 400 build/tests/lingbot_tests --gtest_filter='GpuOps*:GpuSessions*:GpuBatched*:GpuParity*' >"$OUT/gpu.log" 2>&1
echo "gpu tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED)|Failure|tests ran" "$OUT/gpu.log" | head -20
grep -E "parity \]" "$OUT/gpu.log" | head -12
timeout 200 compute-sanitizer --tool memcheck --report-api-errors no build/tests/lingbot_tests \
  --gtest_filter='GpuOps.Dependent*:GpuOps.RecordedSteps*:GpuOps.LayerNorm*:GpuOps.Conv2d*' >"$OUT/memcheck.log" 2>&1
echo "memcheck rc=$?"; tail -1 "$OUT/memcheck.log"
