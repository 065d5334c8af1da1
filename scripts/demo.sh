#!/usr/bin/env bash
# Sets up, builds and runs the demo (synthetic weights, rendered video; nothing to download).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build/lingbot-map demo "$@"
