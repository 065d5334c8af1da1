#!/usr/bin/env bash
# `--export mcap` read by real clients (web/viewer/test/mcap.mjs: @mcap/core,
# @foxglove/rosmsg2-serialization) on a run of the tiny model over the fixture frames.
# Exits 77 (skipped) without node, the npm packages or the fixtures.
#   mcap_test.sh CLI WEB_DIR DEFAULT_FIXTURES
set -euo pipefail
cli=$1 web=$2
fixtures=${LINGBOT_FIXTURES:-$3}
frames=$fixtures/tiny/frames
[[ -d $frames ]] && frames=$(cd "$frames" && pwd)  # the links below name it from elsewhere
command -v node >/dev/null || { echo "skipped: no node"; exit 77; }
for p in @mcap/core @foxglove/rosmsg2-serialization @foxglove/rosmsg @foxglove/wasm-zstd; do
  [[ -d $web/node_modules/$p ]] || { echo "skipped: no $p in $web/node_modules (npm ci)"; exit 77; }
done
[[ -d $frames ]] || { echo "skipped: no fixtures at $frames"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Every frame a keyframe, so the clouds are the PLY's points; --fps 4: 16 frames over 4 s, so
# the file holds several one-second chunks.
run=("$cli" run --model synthetic:1 --arch tiny --preprocess none --scale-frames 4 --window 6
     --keyframe-interval 1 --threads 1 --quiet --export mcap,ply --fps 4)
"${run[@]}" --input "$frames" --out "$tmp/result" >/dev/null
node "$web/test/mcap.mjs" "$tmp/result" 4

# SIGTERM part way through 400 frames (the fixture's, linked over and over): the run ends its
# input and finishes the file, which then reads as a whole one.
mkdir "$tmp/frames"
originals=("$frames"/*.png)
for i in $(seq 0 399); do
  ln -s "${originals[i % ${#originals[@]}]}" "$(printf '%s/frames/%04d.png' "$tmp" "$i")"
done
"${run[@]}" --input "$tmp/frames" --out "$tmp/stopped" >"$tmp/log" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do  # until a few chunks are on disk (at most 120 s)
  size=$(stat -c %s "$tmp/stopped/result.mcap" 2>/dev/null || echo 0)
  ((size > 20000)) && break
  sleep 0.1
done
kill -TERM "$pid" 2>/dev/null || { echo "FAILED: the run ended before SIGTERM"; cat "$tmp/log"; exit 1; }
code=0
wait "$pid" || code=$?
[[ $code == 130 ]] || { echo "FAILED: exit $code after SIGTERM"; cat "$tmp/log"; exit 1; }
exec node "$web/test/mcap.mjs" "$tmp/stopped" 4
