#!/usr/bin/env bash
# A change measured against the tree it started from, in one call on the GPU machine: builds
# both from source, runs the benchmark at the reference profiler's settings (378x504, and 378x518
# where the patch grid is not a tile multiple) for each, then synchronized stage profiles at full
# window (frames 96-192) for each, and the reference profiler when REF names its checkout.
# Usage, from the repository root: BASE=<source tree of the earlier commit> [REF=...] [OUT=...]
#   tests/gpu/before_after.sh
# (`git archive <commit> | tar -x -C <dir>` makes BASE; the GPU machine's copy has no .git.)
set -u
: "${BASE:?BASE must name the source tree to compare with}"
OUT=${OUT:-/tmp/lingbot-before-after}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo "[$(($(date +%s) - t0)) s]"; }
cfg() { cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINGBOT_BENCH=OFF >/dev/null; }
(cfg . build && ninja -C build lingbot-map) >"$OUT/build.log" 2>&1 &
after=$!
(cfg "$BASE" "$BASE/build" && ninja -C "$BASE/build" -j4 lingbot-map) >>"$OUT/build.log" 2>&1 &
before=$!
wait $after && wait $before || { grep -E "error" "$OUT/build.log" | head; exit 1; }
echo "built both $(el)"
bench() { timeout 120 "$@" 2>&1 | grep -E "streaming|per frame" | tr '\n' ' '; echo; }
for w in 504 518; do
  echo "before, 378x$w: $(bench "$BASE/build/lingbot-map" bench --device cuda --width $w)"
  echo "after,  378x$w: $(bench build/lingbot-map bench --device cuda --width $w)"
done
profile() {
  LINGBOT_PROFILE=1 timeout 90 "$1" bench --device cuda --frames 200 --warmup 0 \
    --profile-every 96 2>&1 | sed -n '/frames 96-/,$p'
}
echo "before, synchronized stages:"; profile "$BASE/build/lingbot-map"
echo "after, synchronized stages:"; profile build/lingbot-map
if [ -n "${REF:-}" ]; then
  tests/gpu/reference_profile.sh "$REF" "$OUT"
fi
echo "total $(el)"
