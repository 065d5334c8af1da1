#!/usr/bin/env bash
# Runs the image-decoder fuzzer for a while on seeds taken from the preprocessing fixtures and
# fails if it finds a crash, leak, sanitizer report or timeout.
#   tests/fuzz_images/smoke.sh BUILD_DIR SECONDS
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
seconds=$2
here=$(cd "$(dirname "$0")" && pwd)
fixtures=${LINGBOT_FIXTURES:-$here/../../../shared/fixtures}
fuzzer=$build/fuzz_image_decode
[[ -x $fuzzer ]] || { echo "no fuzzer at $fuzzer (build it first)" >&2; exit 2; }
[[ -d $fixtures/preproc ]] || { echo "no fixtures at $fixtures/preproc" >&2; exit 2; }

# Seeds: the small fixture images (big ones only slow every execution down). The corpus grows
# in the build folder, so later runs pick up where this one stopped.
corpus=$build/corpus
mkdir -p "$corpus" "$build/artifacts"
find "$fixtures/preproc" -maxdepth 1 -type f \( -name '*.png' -o -name '*.jpg' \) -size -64k \
  -exec cp -f {} "$corpus/" \;
[[ -n $(ls -A "$corpus") ]] || { echo "no seed images found" >&2; exit 2; }

echo "fuzzing for ${seconds}s with $(ls "$corpus" | wc -l) corpus files"
set +e
"$fuzzer" "$corpus" -dict="$here/image.dict" -max_total_time="$seconds" -timeout=30 \
  -rss_limit_mb=2048 -max_len=131072 -print_final_stats=1 \
  -artifact_prefix="$build/artifacts/" 2>&1 | tail -n 40
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -ne 0 ]]; then
  echo "FAIL: the fuzzer stopped with status $rc; reproducers in $build/artifacts/" >&2
  exit 1
fi
echo "OK: no crashes in ${seconds}s"
