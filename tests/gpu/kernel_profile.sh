#!/usr/bin/env bash
# Per-kernel device time of a streaming run, from Nsight Systems where the machine has it: the
# kernels inside the recorded steps are traced one by one, and the kernels that take most of the
# time are listed with their share. Usage, from the repository root, after a build:
#   [FRAMES_N=150] [OUT=...] tests/gpu/kernel_profile.sh
set -u
OUT=${OUT:-/tmp/lingbot-kernels}
mkdir -p "$OUT"
nsys=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
[ -n "$nsys" ] || { echo "no nsys on this machine"; exit 0; }
timeout 240 "$nsys" profile --trace=cuda --cuda-graph-trace=node --force-overwrite=true \
  -o "$OUT/run" build/lingbot-map bench --device cuda --frames "${FRAMES_N:-150}" \
  >"$OUT/nsys.log" 2>&1 || { echo "nsys profile failed"; tail -5 "$OUT/nsys.log"; exit 0; }
timeout 120 "$nsys" stats --report cuda_gpu_kern_sum --format csv --output "$OUT/kern" \
  "$OUT/run.nsys-rep" >/dev/null 2>&1
csv=$(ls "$OUT"/kern*.csv 2>/dev/null | head -1)
[ -n "$csv" ] || { echo "nsys stats gave no table"; exit 0; }
# Columns: Time (%), Total Time (ns), Instances, Avg, Med, Min, Max, StdDev, Name.
python3 - "$csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head, body = rows[0], rows[1:]
print(f"{'share':>6} {'total ms':>9} {'calls':>7} {'avg us':>8}  kernel")
for r in body[:30]:
    print(f"{float(r[0]):6.1f} {float(r[1]) / 1e6:9.1f} {int(r[2]):7d} {float(r[3]) / 1e3:8.1f}  {r[8][:110]}")
PY
