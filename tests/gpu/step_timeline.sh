#!/usr/bin/env bash
# Per-step device timeline at two points of a long run (growing special stream): the CUPTI
# tracer's timeline (bench/kernel_trace.cc, LINGBOT_TRACE_TIMELINE) of the last steps of a SHORT
# and a LONG run; a step runs from one frame's upload to the next. Prints each point's median
# step period, device busy time (union of kernels, copies and fills) and idle time, where the
# side queue (the camera head) starts and ends against the main queue's last kernel (the depth
# head), so which head ends a step, then the kernels whose time per step changed most between
# the two points.
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
    ev, streams = [], {}
    for line in open(path):
        s, e, stream, kind, name = line.rstrip("\n").split("\t", 4)
        ev.append((int(s), int(e), kind, name))
        streams[(int(s), int(e), kind, name)] = stream
    ev.sort()
    # The main queue runs the global attention; the side queue the camera head's GEMVs.
    main_q = next(streams[x] for x in ev if x[2] == "k" and "attention_wgmma" in x[3])
    side_q = next((streams[x] for x in ev if x[2] == "k" and "gemv_kernel" in x[3]
                   and streams[x] != main_q), None)
    # The frame's upload is the largest host-to-device copy of a step and opens it.
    uploads = [x for x in ev if x[2] == "c" and x[3].startswith("copy kind 1 ")]
    size = max(int(x[3].split()[3]) for x in uploads)
    marks = [x[0] for x in uploads if int(x[3].split()[3]) == size]
    rows, per_kernel, heads = [], collections.Counter(), []
    for a, b in zip(marks, marks[1:]):
        busy, open_s, open_e = 0, None, None
        main_end = side_start = side_end = None
        for s, e, kind, name in ev:
            if not a <= s < b:
                continue
            if kind == "k" and streams[(s, e, kind, name)] == main_q:
                main_end = e
            if kind == "k" and streams[(s, e, kind, name)] == side_q:
                side_start = s if side_start is None else side_start
                side_end = e
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
        if side_start is not None and main_end is not None:
            heads.append(((side_start - a) / 1e6, (side_end - side_start) / 1e6,
                          (main_end - side_start) / 1e6, (side_end - main_end) / 1e6))
    return rows, per_kernel, heads

(sa, ka, ha), (sb, kb, hb) = steps(sys.argv[1]), steps(sys.argv[2])
for name, rows, heads in (("short", sa, ha), ("long", sb, hb)):
    period = statistics.median(r[0] for r in rows)
    busy = statistics.median(r[1] for r in rows)
    print(f"{name} run, {len(rows)} steps: period {period:.2f} ms, busy {busy:.2f}, idle {period - busy:.2f}")
    # Which head ends a step: the side queue (camera head) against the main queue's last kernel
    # (depth head), both from the fork.
    if heads:
        m = [statistics.median(h[i] for h in heads) for i in range(4)]
        print(f"  heads: side queue from {m[0]:.2f} ms into the step for {m[1]:.2f} ms; main queue"
              f" ends {m[2]:.2f} ms after the fork; side ends {m[3]:+.2f} ms after the main queue"
              f" ({sum(h[3] > 0 for h in heads)} of {len(heads)} steps end on the side queue)")
print("kernel time per step, short -> long run (ms), largest changes:")
for k in sorted(set(ka) | set(kb), key=lambda k: -abs(kb[k] - ka[k]))[:6]:
    print(f"  {ka[k]:7.2f} -> {kb[k]:7.2f} ({kb[k] - ka[k]:+.2f})  {k}")
PY
