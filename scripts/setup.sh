#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages the build and the tests need (skips what is present).
#   scripts/setup.sh        everything (tests, benchmarks, Python, video, browser tests)
#   scripts/setup.sh demo   what `scripts/demo.sh` needs: the compiler, the libraries the program
#                           links, FFmpeg for the rendered video, and the viewer's
set -euo pipefail
# The program and the viewer (`lingbot-map view`); FFmpeg writes the demo's fly.mp4.
packages=(build-essential cmake ninja-build pkg-config libopenblas-dev nlohmann-json3-dev
          libcli11-dev libpng-dev zlib1g-dev libjpeg-dev libboost-dev libzstd-dev
          libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libavdevice-dev)
if [[ ${1:-all} != demo ]]; then
  packages+=(libgtest-dev libbenchmark-dev clang pybind11-dev python3-dev python3-numpy
             python3-pytest python3-skbuild chromium python3-yaml libopencv-dev python3-onnx
             libceres-dev libeigen3-dev libnanoflann-dev)
fi
# The viewer's page is bundled with node's esbuild: Debian's nodejs and npm unless a node is
# already installed (e.g. a newer one from elsewhere).
command -v node >/dev/null || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The viewer's npm packages (three.js, esbuild, puppeteer-core for the browser tests), pinned by
# package-lock.json; again only when the lock file changed. Without them (offline, no npm) the
# build leaves the viewer out.
web=$(cd "$(dirname "$0")/../web/viewer" && pwd)
if [[ ! -f $web/node_modules/.package-lock.json || $web/package-lock.json -nt $web/node_modules/.package-lock.json ]]; then
  echo "setup: npm ci in web/viewer"
  (cd "$web" && npm ci --no-audit --no-fund --loglevel=error) ||
    echo "setup: npm ci failed; the viewer will not be built" >&2
fi
