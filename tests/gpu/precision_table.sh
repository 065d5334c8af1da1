#!/usr/bin/env bash
# bf16 against the fp8 KV cache at the reference profiler's settings, in one call on the GPU
# machine: alternating runs of each (frames/s, per-frame times, peak memory), the frame sizes
# 294x518, 378x504, 378x518 and 518x518 (per-frame time against tokens), 2000 frames with the
# reference's growing special stream (medians of 100-frame stretches, peak memory), and the
# synchronized stages at full window (frames 100-200). Logs under $OUT.
# Usage, from the repository root: [OUT=...] tests/gpu/precision_table.sh
set -u
OUT=${OUT:-/tmp/lingbot-precision}
mkdir -p "$OUT"
t0=$(date +%s)
{ cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=OFF &&
  ninja -C build lingbot-map; } >"$OUT/build.log" 2>&1 ||
  { grep -E "error" -A3 "$OUT/build.log" | head -20; exit 1; }
echo "built in $(($(date +%s) - t0)) s"
# One bench run as one line: per-frame times at 10/50/90 % of the run, frames/s, peak memory.
b() {
  timeout 200 build/lingbot-map bench --device cuda "$@" 2>&1 |
    sed -nE 's/.*per frame at 10\/50\/90%: ([0-9. \/]+) ms.*/\1 ms/p; s/^streaming ([0-9.]+) frames\/s.*peak device memory ([0-9.]+) GB/\1 frames\/s, \2 GB/p' |
    paste -sd' '
}
for round in 1 2; do
  for p in bf16 fp8; do echo "378x504 $p, run $round: $(b --precision $p)"; done
done
for size in 294x518 378x518 518x518; do
  for p in bf16 fp8; do
    echo "$size $p: $(b --precision $p --height ${size%x*} --width ${size#*x} --frames 200)"
  done
done
timeout 200 build/lingbot-map bench --device cuda --precision fp8 --frames 2000 --warmup 0 \
  --json "$OUT/long_fp8.json" | grep -E "per frame|streaming"
python3 - "$OUT/long_fp8.json" <<'PY'
import json, statistics, sys
ms = json.load(open(sys.argv[1]))["frame_ms"]
print("fp8, 2000 frames, 100-frame medians (ms) from frame 0:",
      " ".join(f"{statistics.median(ms[a:a + 100]):.1f}" for a in range(0, len(ms), 100)))
PY
for p in bf16 fp8; do
  echo "stages, $p (LINGBOT_PROFILE=1):"
  LINGBOT_PROFILE=1 timeout 120 build/lingbot-map bench --device cuda --precision $p \
    --frames 200 --warmup 0 --profile-every 100 2>&1 | grep -E "^frames|^  [a-z]" | tail -12
done
echo "total $(($(date +%s) - t0)) s"
