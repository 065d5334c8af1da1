#!/usr/bin/env bash
# The many-cameras table on a GPU: `bench --streams N` (N sessions of one engine, each pushed
# from its own thread, batched by the engine) at the reference profiler's settings for 1, 2, 4
# and 8 streams, and 8 streams at window 16; then the same engine fed by live cameras
# (`--rate`, capture times staggered; each result delivered as soon as it is computed): 4 at 10
# and at 12 frames/s, and 8 at 9 frames/s (window 16). JSON per row under $OUT. Needs a built tree.
# Usage, from the repository root: [OUT=...] [FRAMES_PER_STREAM=300] [DEVICE=cuda] \
#   tests/gpu/streams_table.sh
set -u
OUT=${OUT:-/tmp/lingbot-streams}
FRAMES=${FRAMES_PER_STREAM:-300}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
row() {  # streams, window[, frames/s of each live camera]
  local n=$1 w=$2 rate=${3:-0}
  local name="streams_${n}_window_${w}_rate_${rate}"
  timeout 240 build/lingbot-map bench --device "$DEVICE" --streams "$n" --window "$w" \
    --frames "$FRAMES" --rate "$rate" $([ "$rate" != 0 ] && echo --stagger) \
    --json "$OUT/$name.json" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "--- $n streams, window $w$([ "$rate" != 0 ] && echo ", live cameras at $rate frames/s") (rc=$rc)"
  grep -E "live|aggregate|once|streaming|per frame|peak|preflight" "$OUT/$name.log"
}
row 1 64
row 2 64
row 4 64
row 8 64
row 8 16
row 4 64 10
row 4 64 12
row 8 16 9
