#!/usr/bin/env bash
# Host memory of a long run ("Host memory of long runs" in docs/PERFORMANCE.md): N frames made
# of the tiny fixture's 16, repeated (links), through `run` on the CPU with the tiny synthetic
# model; prints the peak resident set every VOXEL setting reaches and the files it wrote.
#
#   N=3008 tests/perf/long_run_memory.sh            (BIN=build/lingbot-map, EXPORTS=ply,glb)
set -eu
N=${N:-3008}
BIN=${BIN:-build/lingbot-map}
EXPORTS=${EXPORTS:-ply,glb}
FIXTURES=${LINGBOT_FIXTURES:-../shared/fixtures}
OUT=${OUT:-/tmp/lingbot-long-run}
rm -rf "$OUT" && mkdir -p "$OUT/frames"
src=("$(cd "$FIXTURES/tiny/frames" && pwd)"/*.png)
for ((i = 0; i < N; ++i)); do ln -s "${src[i % ${#src[@]}]}" "$OUT/frames/$(printf 'f%06d.png' "$i")"; done
for voxel in 0 0.01; do
  /usr/bin/time -f "%M" -o "$OUT/rss_$voxel" "$BIN" run --model synthetic:1 --arch tiny \
    --input "$OUT/frames" --preprocess none --quiet --out "$OUT/run_$voxel" --export "$EXPORTS" \
    --voxel "$voxel" >/dev/null
  echo "$N frames, --export $EXPORTS --voxel $voxel: peak resident set $(($(cat "$OUT/rss_$voxel") / 1024)) MB"
  (cd "$OUT/run_$voxel" && ls -l | awk 'NR > 1 { printf "  %-26s %6.1f MB\n", $9, $5 / 1e6 }')
done
