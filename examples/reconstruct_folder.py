#!/usr/bin/env python3
"""Reconstructs a folder of images with LingBot-Map and plots the camera trajectory and a depth map
(with matplotlib, when it is installed).

    python3 examples/reconstruct_folder.py frames/ --model lingbot-map.pt --device cuda
    python3 examples/reconstruct_folder.py frames/ --model synthetic:1 --arch tiny   # no weights

Run from a build: PYTHONPATH=build/python python3 examples/reconstruct_folder.py ...
"""

import argparse
import time

import numpy as np

import lingbot_map as lm


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="folder of .png/.jpg images")
    ap.add_argument("--model", required=True, help="checkpoint, or synthetic:SEED")
    ap.add_argument("--arch", default=None, help="lingbot-map or tiny (default: from the model)")
    ap.add_argument("--device", default="cuda" if lm.has_cuda else "cpu")
    ap.add_argument("--mode", default="crop", choices=["crop", "pad", "none"])
    ap.add_argument("--size", type=int, default=518)
    ap.add_argument("--scale-frames", type=int, default=8)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--plot", default="trajectory.png", help="figure to write (needs matplotlib)")
    a = ap.parse_args()

    images = lm.load_images(a.folder, mode=a.mode, size=a.size)
    engine = lm.Engine(a.model, arch=a.arch, device=a.device)
    session = engine.start(scale_frames=a.scale_frames, window=a.window,
                           keyframe_interval=lm_keyframe_interval(len(images)))
    results, start = [], time.perf_counter()
    for image in images:
        results += session.push(image)
        print(f"\r{len(results)}/{len(images)} frames", end="", flush=True)
    results += session.finish()
    seconds = time.perf_counter() - start
    print(f"\r{len(results)} frames in {seconds:.1f} s ({len(results) / seconds:.1f} frames/s)")

    predictions = lm.to_predictions(results, images)
    centres = np.stack([r.c2w[:, 3] for r in results])
    print("camera path length:", float(np.linalg.norm(np.diff(centres, axis=0), axis=1).sum()))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    fig = plt.figure(figsize=(10, 4))
    ax = fig.add_subplot(1, 2, 1, projection="3d")
    ax.plot(centres[:, 0], centres[:, 1], centres[:, 2], "-o", markersize=2)
    ax.set_title("camera centres")
    ax = fig.add_subplot(1, 2, 2)
    middle = len(results) // 2
    ax.imshow(predictions["depth"][middle, ..., 0], cmap="viridis")
    ax.set_title(f"depth, frame {middle}")
    fig.savefig(a.plot, dpi=120)
    print("wrote", a.plot)


def lm_keyframe_interval(frames):
    # The reference demo's rule: the model saw 320 views in training.
    return -(-frames // 320) if frames > 320 else 1


if __name__ == "__main__":
    main()
