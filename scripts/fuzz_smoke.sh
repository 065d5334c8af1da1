#!/usr/bin/env bash
# Builds the libFuzzer targets (checkpoint readers, image decoders) with clang and runs each for
# a few seconds on its seed corpus; fails on any crash or sanitizer report.
#   scripts/fuzz_smoke.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-15}
export CC=clang CXX=clang++
cmake -S tests/fuzz -B build-fuzz -G Ninja >/dev/null
ninja -C build-fuzz
cmake -S tests/fuzz_images -B build-fuzzimg -G Ninja >/dev/null
ninja -C build-fuzzimg
tests/fuzz/smoke.sh build-fuzz "$seconds"
tests/fuzz_images/smoke.sh build-fuzzimg "$seconds"
echo "fuzz smoke: no crashes"
