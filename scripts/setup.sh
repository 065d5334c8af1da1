#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages the build and the tests need (skips what is present).
#   scripts/setup.sh        everything (tests, benchmarks, Python, video, browser tests)
#   scripts/setup.sh demo   what `scripts/demo.sh` needs: the compiler and the libraries the
#                           program links (no FFmpeg, no node: the fewest packages to the demo)
set -euo pipefail
# The program and the viewer (`lingbot-map view`): 176 packages on a minimal Debian 12.
packages=(build-essential cmake ninja-build pkg-config libopenblas-dev nlohmann-json3-dev
          libcli11-dev libpng-dev zlib1g-dev libjpeg-dev libboost-dev libzstd-dev)
if [[ ${1:-all} != demo ]]; then
  # FFmpeg (video files and cameras, render's videos) is ~200 packages more: the demo renders
  # PNG frames without it.
  packages+=(libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libavdevice-dev)
  packages+=(libgtest-dev libbenchmark-dev clang pybind11-dev python3-dev python3-numpy
             python3-pytest python3-skbuild chromium python3-yaml libopencv-dev python3-onnx
             libceres-dev libeigen3-dev libnanoflann-dev)
fi
# The tests' node clients (the browser tests, the MCAP readers) and the viewer's bundle, made
# afresh and checked against the committed web/viewer/dist/viewer.js: Debian's nodejs and npm
# unless a node is already installed (e.g. a newer one from elsewhere). The demo needs neither.
[[ ${1:-all} == demo ]] || command -v node >/dev/null || packages+=(nodejs npm)
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

[[ ${1:-all} == demo ]] && exit 0
# The viewer's npm packages (three.js, esbuild, puppeteer-core and the MCAP readers for the
# tests), pinned by package-lock.json; again only when the lock file changed. Without them
# (offline, no npm) the build serves the committed bundle and those tests skip.
web=$(cd "$(dirname "$0")/../web/viewer" && pwd)
if [[ ! -f $web/node_modules/.package-lock.json || $web/package-lock.json -nt $web/node_modules/.package-lock.json ]]; then
  echo "setup: npm ci in web/viewer"
  (cd "$web" && npm ci --no-audit --no-fund --loglevel=error) ||
    echo "setup: npm ci failed; the viewer will not be built" >&2
fi
