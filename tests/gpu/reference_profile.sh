#!/usr/bin/env bash
# Runs the reference's own profiler at the settings every comparison in docs/PERFORMANCE.md uses
# (300 frames, compiled SDPA, bf16) and prints its summary lines. Modules the profiled path imports
# without needing them for the timing get stand-ins when the machine lacks them: `einops` (imported
# at module level by the attention layer, not called on this path) and `tqdm` (progress bars).
# Usage: tests/gpu/reference_profile.sh <reference checkout> <output folder> [profiler options]
set -u
REF=${1:?the reference checkout}
OUT=${2:?an output folder}
shift 2
stubs="$OUT/reference_stubs"
mkdir -p "$stubs"
python3 -c "import einops" 2>/dev/null || cat >"$stubs/einops.py" <<'PY'
"""Stand-in for einops: the reference's profiled path imports it and never calls it."""


def rearrange(*args, **kwargs):
    raise NotImplementedError("einops is not installed on this machine")
PY
python3 -c "import tqdm" 2>/dev/null || {
  mkdir -p "$stubs/tqdm"
  cat >"$stubs/tqdm/__init__.py" <<'PY'
"""Stand-in for tqdm: iterates without drawing a progress bar."""


def tqdm(iterable=None, *args, **kwargs):
    return iterable if iterable is not None else []


def trange(*args, **kwargs):
    return range(*args)
PY
}
(cd "$REF" && PYTHONPATH="$stubs${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 timeout 300 \
  python3 gct_profile.py --num_frames 300 --backend sdpa --dtype bf16 "$@" >"$OUT/ref.txt" 2>&1
  echo "reference rc=$?")
grep -E "Phase 1|per frame|FPS" "$OUT/ref.txt" | head -12
