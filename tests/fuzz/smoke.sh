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
  "$work/serve_protocol" "$work/eval_parsers" "$work/snapshot"
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
# Session snapshots: one of a sequence that has run (a made-up model of 1 layer, 1 head of 2)
# and one buffering its scale block; parse_snapshot checks the format, not a model.
mkdir -p "$work/snapshot"
if command -v python3 >/dev/null; then
  python3 - "$work/snapshot" <<'PY'
import json, pathlib, struct, sys
out = pathlib.Path(sys.argv[1])
def write(name, state, tensors):
    header, body = {}, b""
    header["__metadata__"] = {"format": "lingbot-session", "version": "1",
                              "state": json.dumps(state)}
    for key, (dtype, shape, size) in tensors.items():
        header[key] = {"dtype": dtype, "shape": shape, "data_offsets": [len(body), len(body) + size]}
        if key == "trajectory.index":  # increasing, below next_index
            body += struct.pack("<%dq" % shape[0], *range(shape[0]))
        else:
            body += bytes(range(size % 251)) + bytes(size - size % 251)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    (out / name).write_bytes(struct.pack("<Q", len(h)) + h + body)
opts = {"scale_frames": 2, "window": 2, "keyframe_interval": 1, "camera_iterations": 1,
        "cross_frame_special": True, "camera_only": False, "include_scale_frames": True,
        "flow_threshold": 0.0, "max_non_keyframe_gap": 30, "max_special_frames": 0,
        "descriptors": False}
model = {"arch": "tiny", "dim": 2, "depth": 1, "heads": 1, "compute": "F32",
         "kv_cache": "F32", "weights": "0123456789abcdef"}
host = {"keyframe.c2w": ("F32", [12], 48), "keyframe.K": ("F32", [9], 36),
        "trajectory.pose_enc": ("F32", [5, 9], 180), "trajectory.index": ("I64", [5], 40),
        "trajectory.flags": ("U8", [5], 5)}
state = {"model": model, "options": opts, "height": 14, "width": 14, "next_index": 5,
         "pending": 0, "started": True, "keyframe_last": 4, "trajectory": 5,
         "sequence": {"scale_frames": 2, "pages": {"scale": [0, 1], "live": [3, 2], "free": [4]},
                      "stored_frames": 5, "calibrated": [], "stream_head": 0, "stream_rows": 6,
                      "camera_rows": 5, "camera_pinned": 0, "camera_head": 0}}
t = dict(host)
t["pending"] = ("F32", [0, 3, 14, 14], 0)
for kv in ("k", "v"):
    t["kv." + kv] = ("F32", [1, 4, 7, 1, 2], 224)
    t["kv.stream." + kv] = ("F32", [1, 6, 1, 2], 48)
    t["camera." + kv] = ("F32", [2, 5, 1, 2], 80)
write("started.lbs", state, t)
state = {"model": model, "options": opts, "height": 14, "width": 14, "next_index": 0,
         "pending": 1, "started": False, "keyframe_last": -1, "trajectory": 0}
t = {k: (d, [0] + s[1:] if k.startswith("trajectory") else s, 0 if k.startswith("trajectory") else n)
     for k, (d, s, n) in host.items()}
t["pending"] = ("F32", [1, 3, 14, 14], 2352)
write("buffering.lbs", state, t)
PY
fi

failed=0
for name in safetensors torch_pt pickle viewer_control serve_protocol eval_parsers snapshot; do
  bin=$(target_path "fuzz_$name")
  dict="$here/pickle.dict"
  [[ $name == safetensors ]] && dict="$here/safetensors.dict"
  [[ $name == viewer_control ]] && dict="$here/viewer_control.dict"
  [[ $name == serve_protocol ]] && dict="$here/serve_protocol.dict"
  [[ $name == eval_parsers ]] && dict="$here/eval_parsers.dict"
  [[ $name == snapshot ]] && dict="$here/snapshot.dict"
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
