#!/usr/bin/env bash
# Per-kernel device time of one streaming frame at full window, from the CUPTI tracer
# (bench/kernel_trace.cc, loaded through CUDA_INJECTION64_PATH; no Nsight needed). Two bench runs
# that differ only in their frame count are traced; the difference of each kernel's total over
# the difference of frames is its time per steady-state frame (load, warm-up, phase 1 and the
# filling window cancel). Usage, from the repository root, after a build:
#   [SHORT=150] [LONG=250] [ARGS="--width 518"] [OUT=...] tests/gpu/kernel_profile.sh
set -u
OUT=${OUT:-/tmp/lingbot-kernels}
SHORT=${SHORT:-150}
LONG=${LONG:-250}
mkdir -p "$OUT"
# A kernel launched early (programmatic dependent launch) is traced from its start, its wait for
# the kernel before it included: off unless asked for, so that each kernel's time is its own.
export LINGBOT_PDL=${LINGBOT_PDL:-0}
lib=build/bench/liblingbot_kernel_trace.so
[ -f "$lib" ] || { echo "no $lib (CUPTI not found at configure time)"; exit 0; }
for n in "$SHORT" "$LONG"; do
  # shellcheck disable=SC2086
  CUDA_INJECTION64_PATH=$PWD/$lib LINGBOT_TRACE_OUT="$OUT/kernels_$n.tsv" \
    timeout 300 build/lingbot-map bench --device cuda --frames "$n" ${ARGS:-} \
    >"$OUT/bench_$n.log" 2>&1 || { echo "bench --frames $n failed"; tail -5 "$OUT/bench_$n.log"; exit 1; }
done
python3 - "$OUT/kernels_$SHORT.tsv" "$OUT/kernels_$LONG.tsv" "$SHORT" "$LONG" <<'PY'
import re, sys
head = {}
def load(path):
    rows = {}
    for line in open(path):
        if line.startswith("#"):
            f = line[1:].split()
            head[path] = {f[i]: float(f[i + 1]) for i in range(0, len(f) - 1, 2)}
            continue
        if line.startswith("share"):
            continue
        share, ms, launches, avg, grid, block, name = line.rstrip("\n").split("\t", 6)
        rows[(name, grid, block)] = (float(ms), int(launches))
    return rows
a, b = load(sys.argv[1]), load(sys.argv[2])
frames = int(sys.argv[4]) - int(sys.argv[3])
per = []
for key in set(a) | set(b):
    ms = b.get(key, (0.0, 0))[0] - a.get(key, (0.0, 0))[0]
    n = b.get(key, (0.0, 0))[1] - a.get(key, (0.0, 0))[1]
    if n > 0:
        per.append((ms / frames, n / frames, key))
per.sort(reverse=True)
total = sum(p[0] for p in per)
print(f"device time per full-window frame, summed over kernels: {total:.3f} ms "
      f"({frames} frames differenced)")
ha, hb = head.get(sys.argv[1], {}), head.get(sys.argv[2], {})
if "busy_ms" in ha and "busy_ms" in hb:
    busy = (hb["busy_ms"] - ha["busy_ms"]) / frames
    span = (hb["span_ms"] - ha["span_ms"]) / frames
    print(f"per frame: device busy {busy:.3f} ms (kernels overlapping on the side queue counted "
          f"once), span {span:.3f} ms, idle {span - busy:.3f} ms")
def short(name):
    name = name.replace("(anonymous namespace)::", "").replace("lingbot::cuda::", "")
    name = re.sub(r"^void ", "", re.sub(r"\(.*", "", name))  # drop the argument list
    return name[:90]
print(f"{'ms/frame':>9} {'share':>6} {'calls':>6} {'us/call':>8}  {'grid':>12} {'block':>9}  kernel")
for ms, calls, (name, grid, block) in per[:45]:
    print(f"{ms:9.3f} {100 * ms / total:5.1f}% {calls:6.1f} {1000 * ms / calls:8.1f}  "
          f"{grid:>12} {block:>9}  {short(name)}")
# The same time grouped by kernel name alone (all shapes together).
groups = {}
for ms, calls, (name, grid, block) in per:
    g = groups.setdefault(short(name), [0.0, 0.0])
    g[0] += ms
    g[1] += calls
print("\nby kernel:")
for name, (ms, calls) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:25]:
    print(f"{ms:9.3f} {100 * ms / total:5.1f}% {calls:6.1f}  {name}")
PY
