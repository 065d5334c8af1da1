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
rm -rf "$stubs"  # stand-ins of an earlier run must not hide a module installed since
mkdir -p "$stubs"
python3 -c "import einops" 2>/dev/null || cat >"$stubs/einops.py" <<'PY'
"""Stand-in for einops: the reference's profiled path imports it and never calls it."""


def rearrange(*args, **kwargs):
    raise NotImplementedError("einops is not installed on this machine")
PY
python3 -c "import tqdm.auto" 2>/dev/null || {
  # The reference imports tqdm.auto's tqdm, iterates over it and calls tqdm.write.
  mkdir -p "$stubs/tqdm"
  cat >"$stubs/tqdm/__init__.py" <<'PY'
"""Stand-in for tqdm: iterates and writes without drawing a progress bar."""


class tqdm:
    def __init__(self, iterable=None, *args, **kwargs):
        self.iterable = iterable if iterable is not None else []

    def __iter__(self):
        return iter(self.iterable)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n=1):
        pass

    def set_postfix(self, *args, **kwargs):
        pass

    def set_description(self, *args, **kwargs):
        pass

    def close(self):
        pass

    @staticmethod
    def write(text, *args, **kwargs):
        print(text)


def trange(*args, **kwargs):
    return tqdm(range(*args), **kwargs)
PY
  echo "from tqdm import tqdm, trange" >"$stubs/tqdm/auto.py"
}
(cd "$REF" && PYTHONPATH="$stubs${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 timeout 300 \
  python3 gct_profile.py --num_frames 300 --backend sdpa --dtype bf16 "$@" >"$OUT/ref.txt" 2>&1
  echo "reference rc=$?")
grep -E "Phase 1|per frame|FPS" "$OUT/ref.txt" | head -12
