"""The Python module on a GPU, without pytest: parity with device="cuda" (float32, 1e-3 relative,
as the fixtures README allows a float32 GPU mode) on the tiny fixture at keyframe intervals 1
and 3, and the frames/s of a Python push loop against `lingbot-map bench` with the same settings
(it must be within 5 %). Exits 1 when either fails.

    PYTHONPATH=build/python python3 tests/python/gpu_check.py [--cli build/lingbot-map]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import lingbot_map as lm
from reference import fixtures_dir, read_safetensors, relative


def parity(fixtures, device):
    frames = lm.load_images(os.path.join(fixtures, "tiny", "frames"), mode="none")
    engine = lm.Engine("synthetic:1", arch="tiny", device=device, precision="f32")
    ok = True
    for k in (1, 3):
        want = read_safetensors(os.path.join(fixtures, "tiny", f"stream_kf{k}.safetensors"))
        session = engine.start(scale_frames=4, window=6, keyframe_interval=k)
        results = [r for f in frames for r in session.push(f)] + session.finish()
        errs = {"pose_enc": relative(np.stack([r.pose_enc for r in results]), want["pose_enc"]),
                "depth": relative(np.stack([r.depth for r in results]), want["depth"]),
                "depth_conf": relative(np.stack([r.confidence for r in results]),
                                       want["depth_conf"])}
        ok &= all(e <= 1e-3 for e in errs.values())
        print(f"parity {device} f32 kf{k}: " + ", ".join(f"{n} {e:.2e}" for n, e in errs.items()))
    return ok


def python_loop_fps(device, arch, frames, height, width, warmup):
    # bench's settings: synthetic:3, precision auto, scale 8, window 64, k 1, 4 iterations.
    engine = lm.Engine("synthetic:3", arch=arch, device=device)
    session = engine.start()
    rng = np.random.default_rng(0)
    images = rng.random((4, 3, height, width), dtype=np.float32)
    for i in range(8 + warmup):
        session.push(images[i % 4])
    session.reset()
    times = []
    for i in range(frames):
        t = time.perf_counter()
        session.push(images[i % 4])
        if i >= 8:
            times.append(time.perf_counter() - t)
    t = time.perf_counter()
    session.finish()
    times[-1] += time.perf_counter() - t
    return len(times) / sum(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", help="the lingbot-map program (default: build/lingbot-map)",
                    default=os.path.join(os.path.dirname(__file__), "..", "..", "build",
                                         "lingbot-map"))
    ap.add_argument("--frames", type=int, default=200)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--arch", default="lingbot-map")
    a = ap.parse_args()
    fixtures = fixtures_dir() or os.path.join(os.path.dirname(__file__), "../../../shared/fixtures")
    ok = parity(fixtures, a.device)
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "bench.json")
        subprocess.run([a.cli, "bench", "--device", a.device, "--arch", a.arch, "--frames",
                        str(a.frames), "--json", out], check=True, stdout=subprocess.DEVNULL)
        with open(out) as f:
            bench = json.load(f)
    fps = python_loop_fps(a.device, a.arch, a.frames, bench["height"], bench["width"], 10)
    ratio = fps / bench["fps"]
    print(f"python loop {fps:.2f} frames/s, bench {bench['fps']:.2f} frames/s: {ratio:.3f}")
    ok &= ratio >= 0.95
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
