#!/usr/bin/env bash
# The many-cameras table on a GPU: `bench --streams N` (N sessions of one engine, each pushed
# from its own thread, batched by the engine) at the reference profiler's settings for 1, 2, 4
# and 8 streams, and 8 streams at window 16; JSON per row under $OUT. Needs a built tree.
# Usage, from the repository root: [OUT=...] [FRAMES_PER_STREAM=300] [DEVICE=cuda] \
#   tests/gpu/streams_table.sh
set -u
OUT=${OUT:-/tmp/lingbot-streams}
FRAMES=${FRAMES_PER_STREAM:-300}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
row() {  # streams, window, extra label
  local n=$1 w=$2
  timeout 240 build/lingbot-map bench --device "$DEVICE" --streams "$n" --window "$w" \
    --frames "$FRAMES" --json "$OUT/streams_${n}_window_${w}.json" >"$OUT/streams_${n}_window_${w}.log" 2>&1
  local rc=$?
  echo "--- $n streams, window $w (rc=$rc)"
  grep -E "aggregate|streaming|per frame|peak|preflight" "$OUT/streams_${n}_window_${w}.log"
}
row 1 64
row 2 64
row 4 64
row 8 64
row 8 16
