#!/usr/bin/env bash
# Long runs, in two parts, picked by the first argument.
#  device (the default): 2,000 streamed frames on the GPU, with the reference's growing
#    special-token stream (cap 0) and with it capped at 256. Prints the benchmark's summary and
#    the medians of 100-frame stretches.
#  host: the host memory of a long `run` on the CPU. N frames made of the tiny fixture's 16,
#    repeated as links, go through the tiny synthetic model with EXPORTS. Prints the peak
#    resident set for each --voxel setting and the files it wrote.
# Needs a built tree. Usage, from the repository root:
#   [OUT=...] tests/gpu/long_run.sh
#   [N=3008] [BIN=build/lingbot-map] [EXPORTS=ply,glb] [LINGBOT_FIXTURES=...] [OUT=...] \
#     tests/gpu/long_run.sh host
set -u
part=${1:-device}
case "$part" in
device)
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
  ;;
host)
  set -e
  N=${N:-3008}
  BIN=${BIN:-build/lingbot-map}
  EXPORTS=${EXPORTS:-ply,glb}
  FIXTURES=${LINGBOT_FIXTURES:-../shared/fixtures}
  OUT=${OUT:-/tmp/lingbot-long-run}
  rm -rf "$OUT" && mkdir -p "$OUT/frames"
  src=("$(cd "$FIXTURES/tiny/frames" && pwd)"/*.png)
  for ((i = 0; i < N; ++i)); do
    ln -s "${src[i % ${#src[@]}]}" "$OUT/frames/$(printf 'f%06d.png' "$i")"
  done
  for voxel in 0 0.01; do
    /usr/bin/time -f "%M" -o "$OUT/rss_$voxel" "$BIN" run --model synthetic:1 --arch tiny \
      --input "$OUT/frames" --preprocess none --quiet --out "$OUT/run_$voxel" \
      --export "$EXPORTS" --voxel "$voxel" >/dev/null
    echo "$N frames, --export $EXPORTS --voxel $voxel:" \
      "peak resident set $(($(cat "$OUT/rss_$voxel") / 1024)) MB"
    find "$OUT/run_$voxel" -maxdepth 1 -type f -printf '%f %s\n' | sort |
      awk '{ printf "  %-26s %6.1f MB\n", $1, $2 / 1e6 }'
  done
  ;;
*)
  echo "usage: tests/gpu/long_run.sh [device|host]"
  exit 2
  ;;
esac
