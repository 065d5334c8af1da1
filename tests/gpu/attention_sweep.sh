#!/usr/bin/env bash
# The wgmma attention kernel's variants timed alone, in one call on the GPU machine: builds the
# micro-benchmarks, then runs the paged attention benchmark (978 queries x 16 heads x 64, bf16,
# 10k and 72k keys) once per kernel shape and variant, including the diagnostic variants that
# compute wrong results on purpose to time the kernel with one part removed (enum Mode in
# src/backend/cuda/attention_wgmma.cu). NCU=1 adds an Nsight Compute profile of the default at
# 72k keys. PART=bf16 or PART=fp8 runs only the bf16 K/V variants or only the e4m3 ones (the fp8
# KV cache: the default and its diagnoses without the producer's copies, without the softmax, and
# without both). Usage, from the repository root: [OUT=...] [NCU=1] [PART=...]
# tests/gpu/attention_sweep.sh
set -u
OUT=${OUT:-/tmp/lingbot-attention-sweep}
mkdir -p "$OUT"
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=ON >/dev/null &&
  ninja -C build lingbot_bench; } >"$OUT/build.log" 2>&1 || { grep -E "error" -A3 "$OUT/build.log" | head -30; exit 1; }
PART=${PART:-all}
alone() {  # mode, benchmark filter: one line per key count with µs per call and TFLOP/s
  LINGBOT_ATTN_MODE=$1 timeout 60 build/bench/lingbot_bench --benchmark_filter="$2" 2>/dev/null |
    awk '/BM_Paged/ { split($1, f, "/"); printf "  %s", f[2]; for (i = 2; i <= NF; i++) if ($i ~ /^(us_per_call|TFLOPs)=/) printf " %s", $i; print "" }'
}
# shape:mode:what
[ "$PART" = fp8 ] || for v in 4x64:68:"default: no tile maximum unless a probability could overflow" \
         4x64:84:"diagnosis: producer copies nothing" 4x64:100:"diagnosis: no softmax" \
         4x64:116:"diagnosis: neither" 2x128:68:"two consumers, 128-key tiles"; do
  shape=${v%%:*}; rest=${v#*:}; mode=${rest%%:*}; what=${rest#*:}
  kernel=2  # the benchmark's kernel argument sets the shape: 2 is 4x64, 4 is 2x128
  [ "$shape" = 2x128 ] && kernel=4
  echo "$shape mode $mode ($what):"
  alone "$mode" "BM_PagedAttentionBF16/keys:(10000|72000)/kernel:$kernel/splits:0"
done
# e4m3 K/V: LINGBOT_ATTN_MODE as for bf16, the fp8 bit added by the dispatch.
[ "$PART" = bf16 ] || for v in 68:"default (e4m3 S, fp16 P.V)" 84:"diagnosis: producer copies nothing" \
         100:"diagnosis: no softmax" 116:"diagnosis: neither"; do
  mode=${v%%:*}; what=${v#*:}
  echo "e4m3 mode $mode ($what):"
  alone "$mode" "BM_PagedAttentionFP8/keys:(10000|72000)"
done
if [ "${NCU:-0}" = 1 ]; then
  timeout 120 ncu --kernel-name regex:attention_wgmma --launch-skip 5 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
    --section InstructionStats build/bench/lingbot_bench \
    --benchmark_filter='BM_PagedAttentionBF16/keys:72000/kernel:2/splits:0' >"$OUT/ncu.txt" 2>&1
  grep -E "SM Frequency|Duration|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|Issued Instructions" "$OUT/ncu.txt"
fi
