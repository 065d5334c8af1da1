#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite: unit, parity (needs ../shared/fixtures or
# LINGBOT_FIXTURES), end-to-end, GPU tests (skipped without a GPU) and short fuzz runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
# The 10,000-frame soak (label `soak`) takes far longer than the rest: `ctest -L soak` runs it.
ctest --test-dir build --output-on-failure -j2 -LE soak
if [[ "${LINGBOT_SKIP_FUZZ:-0}" != 1 ]]; then
  scripts/fuzz_smoke.sh "${LINGBOT_FUZZ_SECONDS:-15}"
fi
