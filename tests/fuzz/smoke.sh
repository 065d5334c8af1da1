#!/usr/bin/env bash
# Runs each libFuzzer target for a while on seeds taken from the fixtures; fails on any crash.
# Builds nothing: configure and build the fuzz targets first (see tests/fuzz/CMakeLists.txt).
#
#   tests/fuzz/smoke.sh BUILD_DIR SECONDS
#
# BUILD_DIR is the fuzz build folder (standalone or the main build with -DLINGBOT_FUZZ=ON).
# LINGBOT_FIXTURES overrides the fixture folder. Crash inputs are kept in BUILD_DIR/fuzz-crashes.
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build=$(cd "$1" 2>/dev/null && pwd) || { echo "smoke.sh: no build folder $1" >&2; exit 2; }
seconds=$2
here=$(cd "$(dirname "$0")" && pwd)
fixtures=${LINGBOT_FIXTURES:-$here/../../../shared/fixtures}
[[ -d $fixtures/ptcases ]] || { echo "smoke.sh: no fixtures at $fixtures" >&2; exit 2; }

target_path() {
  local dir
  for dir in "$build" "$build/tests/fuzz"; do
    if [[ -x $dir/$1 ]]; then
      echo "$dir/$1"
      return
    fi
  done
  echo "smoke.sh: $1 is not built under $build" >&2
  exit 2
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/safetensors" "$work/torch_pt" "$work/pickle" "$work/viewer_control" \
  "$work/serve_protocol" "$work/eval_parsers"
printf '{"op":"ping","id":7}' >"$work/viewer_control/ping.json"
printf '{"op":"images","on":false}' >"$work/viewer_control/images.json"
printf '{"type":"start","width":640,"height":480,"frames":10,"maps":true,"stream":{"window":16}}' \
  >"$work/serve_protocol/start.json"
printf '{"type":"finish"}' >"$work/serve_protocol/finish.json"
printf 'LBR1\x02\x00\x00\x00\x01\x00\x00\x00\x03\x00\x00\x00abcdef' >"$work/serve_protocol/raw.bin"
# The eval readers: the first byte picks TUM (0), KITTI (1), PLY (2) or .npy (3).
printf '\x00# t x y z qx qy qz qw\n1.5 1 2 3 0 0 0 1\n1.6,1,2,3,0,0,0.7,0.7\n' >"$work/eval_parsers/tum"
printf '\x011 0 0 1 0 1 0 2 0 0 1 3\n' >"$work/eval_parsers/kitti"
printf '\x02ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\nproperty float y\nproperty double z\nelement face 1\nproperty list uchar int vertex_indices\nend_header\n1 2 3\n4 5 6\n3 0 1 1\n' \
  >"$work/eval_parsers/ply_ascii"
printf '\x02ply\nformat binary_little_endian 1.0\nelement vertex 1\nproperty float x\nproperty float y\nproperty float z\nend_header\n\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40' \
  >"$work/eval_parsers/ply_binary"
printf "\\x03\\x93NUMPY\\x01\\x00\\x3c\\x00{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }\\n\\x00\\x00\\x80\\x3f\\x00\\x00\\x00\\x40" \
  >"$work/eval_parsers/npy"

cp "$fixtures/ptcases/expected.safetensors" "$work/safetensors/"
cp "$fixtures"/ptcases/*.pt "$work/torch_pt/"
# The pickles inside the zip checkpoints seed the unpickler; the legacy file is pickles too.
cp "$fixtures/ptcases/legacy.pt" "$work/pickle/"
if command -v python3 >/dev/null; then
  python3 - "$fixtures/ptcases" "$work/pickle" <<'PY'
import pathlib, sys, zipfile
src, dst = map(pathlib.Path, sys.argv[1:])
for pt in sorted(src.glob("*.pt")):
    if zipfile.is_zipfile(pt):
        with zipfile.ZipFile(pt) as z:
            name = next(n for n in z.namelist() if n.endswith("/data.pkl"))
            (dst / (pt.stem + ".pkl")).write_bytes(z.read(name))
PY
fi
printf '\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01K\x01u.' >"$work/pickle/dict.pkl"

failed=0
for name in safetensors torch_pt pickle viewer_control serve_protocol eval_parsers; do
  bin=$(target_path "fuzz_$name")
  dict="$here/pickle.dict"
  [[ $name == safetensors ]] && dict="$here/safetensors.dict"
  [[ $name == viewer_control ]] && dict="$here/viewer_control.dict"
  [[ $name == serve_protocol ]] && dict="$here/serve_protocol.dict"
  [[ $name == eval_parsers ]] && dict="$here/eval_parsers.dict"
  log="$work/fuzz_$name.log"
  mkdir -p "$build/fuzz-crashes"
  set +e
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -dict="$dict" -artifact_prefix="$build/fuzz-crashes/$name-" \
    "$work/$name" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [[ $rc -ne 0 ]]; then
    failed=1
    echo "fuzz_$name: FAILED (exit $rc) after ${execs:-?} runs; log tail:"
    tail -40 "$log"
  else
    echo "fuzz_$name: ok, ${execs:-?} runs in ${seconds}s"
  fi
done
exit $failed
