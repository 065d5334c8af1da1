#!/usr/bin/env bash
# The end-to-end table ("Real time end to end", docs/perf-log/end-to-end.md): `bench` at the frames'
# size, then `run` on the same frames with each export, every run reporting its timing as JSON,
# summarised as one table (frames/s, the share of `--export none`, latency, the slowest stage).
#
#   GPU: FRAMES=<folder> tests/gpu/realtime_table.sh
#   CPU: FRAMES=<folder> DEVICE=cpu ARCH=tiny PREPROCESS=none tests/gpu/realtime_table.sh
set -u
FRAMES=${FRAMES:?FRAMES must name a folder of frames}
OUT=${OUT:-/tmp/lingbot-realtime}
BIN=${BIN:-build/lingbot-map}
DEVICE=${DEVICE:-cuda}
ARCH=${ARCH:-lingbot-map}
PREPROCESS=${PREPROCESS:-crop}
EXPORTS=${EXPORTS:-none tum depth depth_f32 ply glb colmap all}
mkdir -p "$OUT"
common=(--device "$DEVICE" --model synthetic:3 --arch "$ARCH")
# The model input size, as `run` will preprocess the frames.
size=$("$BIN" run "${common[@]}" --input "$FRAMES" --preprocess "$PREPROCESS" --out "$OUT/dry" \
  --dry-run | sed -n 's/.* at \([0-9]*\)x\([0-9]*\).*/\1 \2/p' | head -1)
read -r width height <<<"$size"
frames=$(find "$FRAMES" -maxdepth 1 -type f \( -name '*.png' -o -name '*.jpg' \) | wc -l)
echo "$frames frames of $FRAMES at ${width}x${height} on $DEVICE ($ARCH)"
timeout 300 "$BIN" bench "${common[@]}" --height "$height" --width "$width" --frames "$frames" \
  --json "$OUT/bench.json" >"$OUT/bench.txt" 2>&1 || { cat "$OUT/bench.txt"; exit 1; }
for e in $EXPORTS; do
  # LINGBOT_CUDA_VERBOSE=1: the step recorder's counters (graphs updated in place against
  # instantiated afresh, the slow kind of step) at the end of a GPU run, and a line for each slow
  # step; level 1 has no per-call lines, so the timed run is not perturbed.
  LINGBOT_CUDA_VERBOSE=1 /usr/bin/time -f "%e s wall, %P CPU, %M KB max resident" \
    -o "$OUT/run_$e.time" \
    timeout 600 "$BIN" run "${common[@]}" --input "$FRAMES" --preprocess "$PREPROCESS" \
    --out "$OUT/run_$e" --export "$e" --quiet --json "$OUT/run_$e.json" >"$OUT/run_$e.txt" 2>&1 ||
    { echo "run --export $e failed:"; tail -3 "$OUT/run_$e.txt"; }
  grep -h "steps recorded" "$OUT/run_$e.txt" | sed "s/^/--export $e: /"
done
python3 - "$OUT" $EXPORTS <<'PY'
import json, os, sys
out, exports = sys.argv[1], sys.argv[2:]
bench = json.load(open(os.path.join(out, "bench.json")))
bench_fps = bench.get("streaming_fps") or bench.get("fps") or 0
print(f"bench: {bench_fps:.2f} frames/s")
rows, none_fps = [], None
for e in exports:
    try:
        r = json.load(open(os.path.join(out, f"run_{e}.json")))
    except OSError:
        continue
    wall = open(os.path.join(out, f"run_{e}.time")).read().strip()
    if e == "none":
        none_fps = r["streaming_fps"] or r["fps"]
    outputs = r["outputs_s"]
    slowest = max(outputs.items(), key=lambda kv: kv[1]) if outputs else ("-", 0)
    rows.append((e, r, wall, slowest))
print("| --export | frames/s (all) | after the scale block | of none | latency p50 / p99 ms | p99 in frame times (window full) | device ms/frame | slowest output ms/frame | process |")
print("|---|---|---|---|---|---|---|---|---|")
for e, r, wall, (name, secs) in rows:
    n = max(r["frames"], 1)
    share = f"{100 * (r['streaming_fps'] or r['fps']) / none_fps:.0f} %" if none_fps else "-"
    frames_p99 = r['latency_p99_ms'] / r['frame_ms'] if r.get('frame_ms') else 0
    print(f"| {e} | {r['fps']:.2f} | {r['streaming_fps']:.2f} | {share} | {r['latency_p50_ms']:.1f} / {r['latency_p99_ms']:.1f} "
          f"| {frames_p99:.2f} | {1e3 * r['device_s'] / n:.1f} | {name} {1e3 * secs / n:.1f} | {wall} |")
if none_fps and bench_fps:
    print(f"run --export none after the scale block / bench: {100 * none_fps / bench_fps:.0f} %")
PY
