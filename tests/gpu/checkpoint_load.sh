#!/usr/bin/env bash
# Checkpoint loading on the GPU: synthetic weights of the released architecture (seed 3) written
# as a torch.save .pt and as safetensors (4.6 GB each, fp32), then the time to a ready engine
# (bench's "load": CUDA start, parse, read, convert to bf16 and upload) with the page cache
# dropped (where permitted) and warm, and from synthetic:3 generated in memory; then torch.load
# reading our .pt, checked tensor by tensor against the safetensors copy, where torch is
# installed. The pinned-upload test runs first when the tests are built.
# Usage: [BUILD=build] [DIR=/tmp/lingbot-ckpt] [EXTS="pt safetensors"] tests/gpu/checkpoint_load.sh
set -u
BUILD=${BUILD:-build}
DIR=${DIR:-/tmp/lingbot-ckpt}
EXTS=${EXTS:-pt safetensors}
cli=$BUILD/lingbot-map
mkdir -p "$DIR"
[ -x "$BUILD/tests/lingbot_tests" ] &&
  "$BUILD/tests/lingbot_tests" --gtest_filter='GpuUpload*' 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED)"
now() { date +%s.%N; }
for ext in $EXTS; do
  t=$(now)
  $cli convert synthetic:3 "$DIR/ckpt.$ext" || exit 1
  echo "convert synthetic:3 -> .$ext: $(awk "BEGIN { printf \"%.2f\", $(now) - $t }") s"
done
ls -l "$DIR"
load() {
  $cli bench --device cuda --model "$1" --frames 8 --scale-frames 8 --warmup 0 |
    grep -o "load [0-9.]* s"
}
echo "synthetic:3 (generated in memory, no file): $(load synthetic:3)"
for ext in $EXTS; do
  if sync && echo 3 2>/dev/null >/proc/sys/vm/drop_caches; then
    state="cold (page cache dropped)"
  else
    state="page cache NOT dropped (no permission): file just written, likely cached"
  fi
  echo ".$ext $state: $(load "$DIR/ckpt.$ext")"
  echo ".$ext warm: $(load "$DIR/ckpt.$ext")"
  echo ".$ext warm: $(load "$DIR/ckpt.$ext")"
done
python3 - "$DIR/ckpt.pt" "$DIR/ckpt.safetensors" <<'EOF' || echo "torch check failed"
import json, struct, sys, time
import torch
t = time.time()
try:
    sd = torch.load(sys.argv[1], weights_only=True, mmap=True)
except TypeError:  # torch before 2.1 has no mmap
    sd = torch.load(sys.argv[1], weights_only=True)
print(f"torch.load: {len(sd)} tensors in {time.time() - t:.2f} s")
print("tensors:", len(sd), "elements:", sum(t.numel() for t in sd.values()),
      "dtypes:", sorted({str(t.dtype) for t in sd.values()}))
try:
    b = open(sys.argv[2], "rb").read()
except OSError:  # no safetensors copy to compare with
    sys.exit(0)
n = struct.unpack("<Q", b[:8])[0]
head = json.loads(b[8:8 + n]); head.pop("__metadata__", None)
bad = [k for k, v in head.items()
       if not torch.equal(sd[k], torch.frombuffer(bytearray(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]),
                                                  dtype=torch.float32).reshape(v["shape"]))]
print("torch reads our .pt:", "same keys" if set(sd) == set(head) else "KEYS DIFFER",
      f"{len(bad)} tensors differ from the safetensors copy", bad[:3])
EOF
