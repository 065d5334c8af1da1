#!/usr/bin/env bash
# Per-step device timeline at two points of a long run (growing special stream): the CUPTI
# tracer's timeline (bench/kernel_trace.cc, LINGBOT_TRACE_TIMELINE) of the last steps of a SHORT
# and a LONG run; a step runs from one frame's first kernel (patchify) to the next (its upload
# crosses beforehand, beside the step before). Prints each point's median
# step period, device busy time (union of kernels, copies and fills) and idle time, where the
# two heads (depth and camera, each on its own queue after the aggregator) end after the fork,
# so which one ends a step, then the kernels whose time per step changed most between the two
# points.
# Needs a tree built with -DLINGBOT_BENCH=ON. Usage, from the repository root:
#   [SHORT=250] [LONG=1990] [ARGS="--width 518"] [OUT=...] tests/gpu/step_timeline.sh
set -u
OUT=${OUT:-/tmp/lingbot-timeline}
SHORT=${SHORT:-250}
LONG=${LONG:-1990}
mkdir -p "$OUT"
# A kernel launched early (programmatic dependent launch) is traced from its start, its wait for
# the kernel before it included: off unless asked for, so that each kernel's time is its own.
export LINGBOT_PDL=${LINGBOT_PDL:-0}
lib=build/bench/liblingbot_kernel_trace.so
[ -f "$lib" ] || { echo "no $lib (CUPTI not found at configure time)"; exit 0; }
for n in "$SHORT" "$LONG"; do
  # shellcheck disable=SC2086
  CUDA_INJECTION64_PATH=$PWD/$lib LINGBOT_TRACE_OUT="$OUT/kernels_$n.tsv" \
    LINGBOT_TRACE_TIMELINE="$OUT/timeline_$n.tsv" LINGBOT_TRACE_TIMELINE_RECORDS=25000 \
    timeout 300 build/lingbot-map bench --device cuda --frames "$n" --warmup 0 \
    --max-special-frames 0 ${ARGS:-} >"$OUT/bench_$n.log" 2>&1 ||
    { echo "bench --frames $n failed"; tail -5 "$OUT/bench_$n.log"; exit 1; }
done
python3 - "$OUT/timeline_$SHORT.tsv" "$OUT/timeline_$LONG.tsv" <<'PY'
import collections, statistics, sys

def short(name):  # "lingbot::cuda::(anonymous namespace)::gemv_kernel" -> "gemv_kernel"
    return name.split("::")[-1]


def steps(path):
    ev = []
    for line in open(path):
        s, e, stream, kind, name = line.rstrip("\n").split("\t", 4)
        ev.append((int(s), int(e), stream, kind, name))
    ev.sort()
    # The heads run on two queues after the aggregator, identified by their kernels: the depth
    # head's convolutions and the camera head's GEMVs (a replayed graph may put either branch on
    # the stream it was launched on).
    depth_q = {x[2] for x in ev if x[3] == "k" and "conv_wgmma" in x[4]}
    # A step's first kernel cuts the frame into patches.
    marks = [x[0] for x in ev if x[3] == "k" and "patchify" in x[4]]
    rows, per_kernel, heads = [], collections.Counter(), []
    for a, b in zip(marks, marks[1:]):
        busy, open_s, open_e = 0, None, None
        step = [x for x in ev if a <= x[0] < b]
        depth = [x for x in step if x[3] == "k" and x[2] in depth_q]
        cam_q = {x[2] for x in step if x[3] == "k" and "gemv_kernel" in x[4]} - depth_q
        cam = [x for x in step if x[2] in cam_q and depth and x[0] >= depth[0][0]]
        for s, e, _, kind, name in step:
            e = min(e, b)
            if kind == "k":
                per_kernel[short(name)] += (e - s) / 1e6 / (len(marks) - 1)
            if open_e is None or s > open_e:
                busy += 0 if open_e is None else open_e - open_s
                open_s, open_e = s, e
            else:
                open_e = max(open_e, e)
        busy += 0 if open_e is None else open_e - open_s
        rows.append(((b - a) / 1e6, busy / 1e6))
        if depth and cam:
            fork = depth[0][0]
            heads.append(((fork - a) / 1e6, (max(x[1] for x in depth) - fork) / 1e6,
                          (max(x[1] for x in cam) - fork) / 1e6, len(cam)))
    return rows, per_kernel, heads

(sa, ka, ha), (sb, kb, hb) = steps(sys.argv[1]), steps(sys.argv[2])
for name, rows, heads in (("short", sa, ha), ("long", sb, hb)):
    period = statistics.median(r[0] for r in rows)
    busy = statistics.median(r[1] for r in rows)
    print(f"{name} run, {len(rows)} steps: period {period:.2f} ms, busy {busy:.2f},"
          f" idle {period - busy:.2f}")
    # Which head ends a step: both from the fork (the depth head's first kernel).
    if heads:
        m = [statistics.median(h[i] for h in heads) for i in range(4)]
        print(f"  heads: fork {m[0]:.2f} ms into the step; depth head ends {m[1]:.2f} ms after"
              f" it, the camera head's queue ({m[3]:.0f} kernels and copies) {m[2]:.2f} ms after it"
              f" ({sum(h[2] > h[1] for h in heads)} of {len(heads)} steps end on that queue)")
print("kernel time per step, short -> long run (ms), largest changes:")
for k in sorted(set(ka) | set(kb), key=lambda k: -abs(kb[k] - ka[k]))[:6]:
    print(f"  {ka[k]:7.2f} -> {kb[k]:7.2f} ({kb[k] - ka[k]:+.2f})  {k}")
PY
