#!/usr/bin/env bash
# Configures and builds into build/.
#   scripts/build.sh          everything: library, program, tests, benchmarks, Python module, and
#                             the CUDA backend when nvcc is found (compiled even without a GPU)
#   scripts/build.sh --demo   what the demo needs: the library and the program (without the
#                             stream server), with CUDA only where a GPU answers (or
#                             LINGBOT_CUDA=ON)
# Further arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
if [[ ${1:-} == --demo ]]; then
  shift
  cuda=${LINGBOT_CUDA:-OFF}
  command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && cuda=${LINGBOT_CUDA:-AUTO}
  args=(-DLINGBOT_TESTS=OFF -DLINGBOT_BENCH=OFF -DLINGBOT_PYTHON=OFF -DLINGBOT_SERVER=OFF
        -DLINGBOT_CUDA="$cuda")
  targets=(lingbot-map)
else
  args=(-DLINGBOT_TESTS=ON -DLINGBOT_BENCH=ON -DLINGBOT_PYTHON=AUTO -DLINGBOT_SERVER=AUTO
        -DLINGBOT_CUDA="${LINGBOT_CUDA:-AUTO}")
  targets=()
fi
[[ -x /usr/local/cuda/bin/nvcc ]] && args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${args[@]}" "$@" >/dev/null
ninja -C build "${targets[@]}"
