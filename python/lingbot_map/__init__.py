"""LingBot-Map from Python: streaming 3D reconstruction, numpy in and out.

    import lingbot_map as lm
    engine = lm.Engine("lingbot-map.pt", device="cuda")
    session = engine.start(scale_frames=8, window=64)
    for image in lm.load_images("frames/"):
        for r in session.push(image):
            print(r.index, r.c2w, r.depth.shape)
    rest = session.finish()

The reference's drivers work too: engine.inference_streaming(images, ...) and
engine.inference_windowed(images, ...) return its dicts; to_predictions(results) builds the
reference demo's prediction dict from FrameResults.
"""

from __future__ import annotations

import os
from typing import Iterable, Sequence, Union

import numpy as np

from ._core import (Engine, FrameResult, Session, has_cuda, list_images, load_image,
                    preprocess)

__all__ = ["Engine", "Session", "FrameResult", "load_image", "load_images", "preprocess",
           "list_images", "to_predictions", "world_points_from_depth", "has_cuda"]
__version__ = "0.1.0"

PathLike = Union[str, "os.PathLike[str]"]


def load_images(paths: Union[PathLike, Sequence[PathLike]], mode: str = "crop",
                size: int = 518) -> np.ndarray:
    """The reference's load_and_preprocess_images: float32 [S, 3, H, W] in [0, 1].

    `paths` is a folder (its images in natural order), one image file or a list of files.
    Each image is preprocessed as lm.preprocess does (bit for bit the reference's); images that
    end up different sizes are centred on white at the largest size, as the reference does.
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = list_images(paths) if os.path.isdir(paths) else [paths]
    frames = [preprocess(load_image(p), mode, size) for p in paths]
    if not frames:
        raise ValueError("no images to load")
    height = max(f.shape[1] for f in frames)
    width = max(f.shape[2] for f in frames)
    out = np.full((len(frames), 3, height, width), 255, dtype=np.uint8)
    for i, f in enumerate(frames):
        top, left = (height - f.shape[1]) // 2, (width - f.shape[2]) // 2
        out[i, :, top:top + f.shape[1], left:left + f.shape[2]] = f
    return out.astype(np.float32) / np.float32(255)


def world_points_from_depth(depth: np.ndarray, c2w: np.ndarray,
                            intrinsics: np.ndarray) -> np.ndarray:
    """World points [S, H, W, 3] of depth maps [S, H, W] (or [S, H, W, 1]).

    Pixel (u, v) sits at integer coordinates, as in the reference viewer's unprojection;
    c2w is [S, 3, 4], intrinsics [S, 3, 3].
    """
    depth = np.asarray(depth, dtype=np.float32)
    if depth.ndim == 4:
        depth = depth[..., 0]
    _, h, w = depth.shape
    k = np.asarray(intrinsics, dtype=np.float32)
    u = np.arange(w, dtype=np.float32)[None, None, :]
    v = np.arange(h, dtype=np.float32)[None, :, None]
    x = (u - k[:, 0, 2, None, None]) / k[:, 0, 0, None, None] * depth
    y = (v - k[:, 1, 2, None, None]) / k[:, 1, 1, None, None] * depth
    cam = np.stack([x, y, depth], axis=-1)  # [S, H, W, 3]
    c2w = np.asarray(c2w, dtype=np.float32)
    return (np.einsum("sij,shwj->shwi", c2w[:, :, :3], cam) +
            c2w[:, None, None, :, 3]).astype(np.float32)


def to_predictions(results: Iterable[FrameResult], images: np.ndarray | None = None) -> dict:
    """The reference demo's prediction dict from FrameResults (in frame order).

    Keys: pose_enc [S, 9], extrinsic (world-to-camera) [S, 3, 4], intrinsic [S, 3, 3],
    depth [S, H, W, 1], depth_conf [S, H, W], world_points_from_depth [S, H, W, 3], and
    images [S, 3, H, W] when given.
    """
    results = sorted(results, key=lambda r: r.index)
    if not results:
        raise ValueError("no results")
    c2w = np.stack([r.c2w for r in results])
    intrinsic = np.stack([r.intrinsics for r in results])
    depth = np.stack([r.depth for r in results])
    out = {
        "pose_enc": np.stack([r.pose_enc for r in results]),
        "extrinsic": np.stack([r.w2c for r in results]),
        "intrinsic": intrinsic,
        "depth": depth[..., None],
        "depth_conf": np.stack([r.confidence for r in results]),
        "world_points_from_depth": world_points_from_depth(depth, c2w, intrinsic),
    }
    if images is not None:
        out["images"] = np.asarray(images)
    return out
