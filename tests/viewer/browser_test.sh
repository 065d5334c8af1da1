#!/usr/bin/env bash
# The viewer in headless Chromium (web/viewer/test/browser.mjs) on a run of the tiny model over
# the fixture frames. Exits 77 (skipped) without chromium, node's packages or the fixtures.
#   browser_test.sh view|live CLI WEB_DIR DEFAULT_FIXTURES
# LINGBOT_VIEWER_SCREENSHOT=PATH (view): also writes the page's screenshot there (the README's).
set -euo pipefail
mode=$1 cli=$2 web=$3
fixtures=${LINGBOT_FIXTURES:-$4}
frames=$fixtures/tiny/frames
[[ -x /usr/bin/chromium || -n "${CHROMIUM:-}" ]] || { echo "skipped: no chromium"; exit 77; }
[[ -d $web/node_modules/puppeteer-core ]] || { echo "skipped: no npm packages in $web"; exit 77; }
[[ -d $frames ]] || { echo "skipped: no fixtures at $frames"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One thread: OpenMP workers on a shared machine slow a run by several times, unpredictably.
run=("$cli" run --model synthetic:1 --arch tiny --preprocess none --scale-frames 4 --window 6
     --threads 1 --quiet)
if [[ $mode == view ]]; then
  # The PLY at the viewer's stride and lowest threshold holds exactly the points it sends.
  "${run[@]}" --input "$frames" --out "$tmp/result" --export colmap,ply --conf-threshold 1.0 --point-stride 2 \
    >/dev/null
  points=$(grep -a -m1 '^element vertex' "$tmp/result/points.ply" | awk '{print $3 + 0}')
  exec node "$web/test/browser.mjs" view "$cli" "$tmp/result" "$points" \
    ${LINGBOT_VIEWER_SCREENSHOT:+"$LINGBOT_VIEWER_SCREENSHOT"}
else
  # 128 frames (the fixtures' 16 eight times over): a few seconds of streaming to watch.
  mkdir "$tmp/frames"
  originals=("$frames"/*.png)
  for i in $(seq 0 127); do
    ln -s "${originals[i % ${#originals[@]}]}" "$(printf '%s/frames/%03d.png' "$tmp" "$i")"
  done
  node "$web/test/browser.mjs" live "$cli" "$tmp/frames" "$tmp/live"
fi
