#!/usr/bin/env python3
"""Streams a video (or a folder of images) to a `lingbot-map serve` server and prints the poses.

    lingbot-map serve --model lingbot-map.safetensors --device cuda &
    python3 examples/stream_video.py clip.mp4 --out poses.txt   # KITTI format: c2w, 12 a line
    python3 examples/stream_video.py frames/ --url http://gpu-box:8090 --token "$TOKEN"

Videos, cameras and stream URLs are decoded by the engine's own reader (lingbot_map.read_frames,
sampled at --fps as `lingbot-map run` does) and sent as raw RGB; that needs the compiled module
(PYTHONPATH=build/python). Without it, only a folder of JPEG/PNG files can be streamed: the
files are sent as they are and the server decodes them.
"""

import argparse
import os
import re
import sys

import numpy as np

from lingbot_map.client import Client, ClientError, image_size

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg")


def frames_of(source, fps):
    """(count, iterator of frames): arrays from the engine's reader, or a folder's files' bytes."""
    try:
        from lingbot_map import read_frames
        frames = read_frames(source, fps=fps)
        return len(frames), iter(frames)
    except ImportError:
        pass
    if not os.path.isdir(source):
        sys.exit(f"{source}: videos need the compiled module (PYTHONPATH=build/python); "
                 "without it give a folder of JPEG/PNG files")
    names = sorted((n for n in os.listdir(source) if n.lower().endswith(IMAGE_EXTENSIONS)),
                   key=lambda n: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", n)])
    if not names:
        sys.exit(f"{source}: no .png/.jpg files")

    def read():
        for name in names:
            with open(os.path.join(source, name), "rb") as f:
                yield f.read()
    return len(names), read()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", help="video file, folder of images, camera or stream URL")
    ap.add_argument("--url", default="http://127.0.0.1:8090", help="the server")
    ap.add_argument("--token", default=os.environ.get("LINGBOT_SERVE_TOKEN"))
    ap.add_argument("--fps", type=float, default=10, help="video sampling rate (0 = all)")
    ap.add_argument("--preprocess", default="crop", choices=["crop", "pad", "none"],
                    help="the server's resizing (none: sides must be multiples of 14)")
    ap.add_argument("--window", type=int, default=None, help="the server's default if not set")
    ap.add_argument("--out", help="write the camera-to-world poses here (KITTI format)")
    a = ap.parse_args()

    count, frames = frames_of(a.input, a.fps)
    first = next(frames, None)
    if first is None:
        sys.exit(f"{a.input}: no frames")
    h, w = first.shape[:2] if isinstance(first, np.ndarray) else image_size(first)
    options = {"window": a.window} if a.window else {}
    poses = []

    def show(results):
        for r in results:
            t = r.c2w[:, 3]
            print(f"{r.index:6d} {'K' if r.keyframe else ' '} "
                  f"t = ({t[0]: .4f}, {t[1]: .4f}, {t[2]: .4f})")
            poses.append(r.c2w)

    try:
        with Client(a.url, token=a.token).start(width=w, height=h, frames=count,
                                                 preprocess=a.preprocess,
                                                 stream=options) as stream:
            print(f"session {stream.session} on {stream.device}: {w}x{h} frames, model input "
                  f"{stream.model_width}x{stream.model_height}", file=sys.stderr)
            stream.send(first)
            for frame in frames:
                stream.send(frame)
                show(stream.poll())
            show(stream.finish())
    except (ClientError, TimeoutError, ValueError) as e:
        sys.exit(f"stream_video: {e}")
    if a.out:
        np.savetxt(a.out, np.array(poses).reshape(len(poses), 12), fmt="%.7g")
        print(f"{len(poses)} poses written to {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
