#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages the build and the tests need (skips what is present).
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config libopenblas-dev nlohmann-json3-dev
          libcli11-dev libpng-dev zlib1g-dev libjpeg-dev libgtest-dev libbenchmark-dev clang
          libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libavdevice-dev
          pybind11-dev python3-dev python3-numpy python3-pytest python3-skbuild)
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
