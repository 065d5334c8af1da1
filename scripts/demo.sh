#!/usr/bin/env bash
# Sets up, builds and runs the demo (synthetic weights, rendered fly-through; nothing to download).
# Builds only what the demo needs (the library and the program; CUDA where a GPU answers):
# scripts/test.sh builds the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh demo
scripts/build.sh --demo
build/lingbot-map demo "$@"
