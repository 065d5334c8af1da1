#!/usr/bin/env bash
# Configures and builds into build/ (CUDA backend too when nvcc is found).
set -euo pipefail
cd "$(dirname "$0")/.."
cuda_args=()
[[ -x /usr/local/cuda/bin/nvcc ]] && cuda_args=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" "$@" >/dev/null
ninja -C build
