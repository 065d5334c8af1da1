#!/usr/bin/env bash
# 2,000 streamed frames on the GPU, with the reference's growing special-token stream (cap 0)
# and with it capped at 256: the benchmark's summary and the medians of 100-frame stretches.
# Needs a built tree. Usage, from the repository root: [OUT=...] tests/gpu/long_run.sh
set -u
OUT=${OUT:-/tmp/lingbot-long}
mkdir -p "$OUT"
for cap in 0 256; do
  timeout 200 build/lingbot-map bench --device cuda --frames 2000 --warmup 0 \
    --max-special-frames $cap --json "$OUT/long_cap$cap.json" | grep -E "per frame|streaming|peak"
  python3 - "$OUT/long_cap$cap.json" $cap <<'PY'
import json, statistics, sys
ms = json.load(open(sys.argv[1]))["frame_ms"]
print(f"cap {sys.argv[2]}, 100-frame medians (ms) from frame 0:",
      " ".join(f"{statistics.median(ms[a:a + 100]):.1f}" for a in range(0, len(ms), 100)))
PY
done
