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
reference demo's prediction dict from FrameResults; run(input, out=..., export=[...]) does what
`lingbot-map run` does and returns that dict.

lingbot_map.eval measures results against ground truth (ATE/RPE as evo, depth, point clouds).

lingbot_map.client streams frames to a `lingbot-map serve` server (standard library + numpy; it
imports without the compiled module).
"""

from __future__ import annotations

import functools
import os
import re
from typing import Callable, Iterable, Sequence, Union

import numpy as np

try:
    from ._core import (Engine, FrameResult, Frames, ImageError, Session, _run, built_with_cuda,
                        cuda_devices, has_cuda, list_images, load_image, parse_export_list,
                        preprocess, read_frames)
except ImportError as e:
    # lingbot_map.client (a server's client) works without the compiled module; the rest does
    # not, and says so when first used.
    _core_error = str(e)

    def __getattr__(name):
        if name in ("Engine", "FrameResult", "Frames", "ImageError", "Session", "built_with_cuda",
                    "cuda_devices", "has_cuda", "list_images", "load_image", "parse_export_list",
                    "preprocess", "read_frames"):
            raise ImportError(f"lingbot_map.{name} needs the compiled module lingbot_map._core "
                              f"({_core_error})")
        raise AttributeError(f"module 'lingbot_map' has no attribute {name!r}")

__all__ = ["Engine", "Session", "FrameResult", "Frames", "ImageError", "load_image", "load_images",
           "preprocess", "list_images", "read_frames", "to_predictions", "world_points_from_depth",
           "run", "has_cuda", "cuda_devices", "built_with_cuda"]
__version__ = "0.1.0"

PathLike = Union[str, "os.PathLike[str]"]


def _describe(value) -> str:
    """An argument as an error message shows it: an array by dtype and shape, never its values."""
    if isinstance(value, np.ndarray):
        return f"{value.dtype} {list(value.shape)}"
    if isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 40):
        return f"{type(value).__name__} {value!r}"
    return type(value).__name__


def _explain(name: str, message: str, args: tuple, kwargs: dict) -> str:
    """pybind11's message for arguments no overload takes, without the arguments' values (its
    "Invoked with" part prints whole arrays: hundreds of lines for an image)."""
    signature = ""
    for line in message.splitlines():
        match = re.match(r"\s*\d+\.\s*[\w.]*\((.*)\)( -> .*)?$", line)
        if match:
            signature = re.sub(r"^self: [\w.]+(, )?", "", match.group(1))
            break
    names = re.findall(r"(?:^|, )\*?(\w+): ", signature)
    unknown = [k for k in kwargs if k not in names]
    if unknown:
        return (f"{name}: unexpected keyword argument {unknown[0]!r} "
                f"(it takes: {', '.join(names)})")
    given = [_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in kwargs.items()]
    return f"{name}: arguments of the wrong type ({', '.join(given)}); it takes ({signature})"


def _short_type_errors(function, name: str, method: bool = False):
    """`function` raising a short TypeError where pybind11's would print the arguments."""
    @functools.wraps(function)
    def call(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except TypeError as e:
            text = str(e)
            if "incompatible function arguments" not in text and \
                    "incompatible constructor arguments" not in text:
                raise
            shown = args[1:] if method else args  # not `self`
            raise TypeError(_explain(name, text, shown, kwargs)) from None
    return call


if "_core_error" not in globals():
    for _cls in (Engine, Session, Frames, FrameResult):
        for _name, _attr in list(vars(_cls).items()):
            if (_name.startswith("_") and _name != "__init__") or isinstance(_attr, property) or \
                    not callable(getattr(_cls, _name)):
                continue
            _shown = _cls.__name__ if _name == "__init__" else f"{_cls.__name__}.{_name}"
            setattr(_cls, _name, _short_type_errors(getattr(_cls, _name), _shown, method=True))
    del _cls, _name, _attr, _shown
    load_image = _short_type_errors(load_image, "load_image")
    preprocess = _short_type_errors(preprocess, "preprocess")
    read_frames = _short_type_errors(read_frames, "read_frames")
    list_images = _short_type_errors(list_images, "list_images")


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


def run(input: PathLike, out: PathLike | None = None, export: Union[str, Sequence[str]] = (),
        mode: str = "streaming", *, engine: Engine | None = None, model: PathLike | None = None,
        arch: str | None = None, device: str = "cpu", precision: str = "auto", threads: int = 0,
        preprocess: str = "crop", size: int = 518, fps: float = 10, stride: int = 1,
        first_k: int = 0, scale_frames: int = 8, window: int = 64, keyframe_interval: int = 0,
        camera_iterations: int = 4, flow_threshold: float = 0.0, max_non_keyframe_gap: int = 30,
        max_special_frames: int = 0, window_size: int = 64, overlap: int = 16,
        overlap_keyframes: int | None = None, conf_threshold: float = 1.5, point_stride: int = 4,
        voxel: float = 0.0, depth_scale: float = 1000, cache_stats: PathLike | None = None, preflight: bool = True,
        rotate_clockwise_90: bool = False, mask_sky: PathLike | None = None,
        sky_mask_dir: PathLike | None = None, sky_mask_visualization_dir: PathLike | None = None,
        loop_closure: bool = False, loop_options: dict | None = None,
        save_session: PathLike | None = None,
        resume: PathLike | None = None, resume_mode: str = "continue",
        progress: Callable[[int, int], None] | None = None,
        log: Callable[[str], None] | None = None) -> dict:
    """What `lingbot-map run` does, from Python: returns the reference demo's prediction dict.

    input: a folder of images, a video file, a capture device or a stream URL, sampled as the
    CLI does (fps, first_k, stride). out: the folder for predictions.safetensors and the exports
    (the same files as the CLI writes; None writes nothing). export: "tum,ply" or ["tum", "ply"]
    (tum, kitti, json, depth, depth_f32, ply, glb, images, colmap, nerfstudio, mcap; all: all
    but mcap). mode:
    "streaming" or "windowed" (window_size, overlap, overlap_keyframes). The model comes from `engine`, or is
    loaded from `model` (arch, device, precision, threads). keyframe_interval 0 = the demo's
    rule (about 320 keyframes per video). The other arguments are the CLI's options of the same
    names; rotate_clockwise_90, mask_sky (an ONNX sky segmentation model), sky_mask_dir and
    sky_mask_visualization_dir are --rotate-clockwise-90, --mask-sky, --sky-mask-dir and
    --sky-mask-visualization-dir; loop_closure, save_session, resume and resume_mode are
    --loop-closure, --save-session, --resume and --resume-mode, and loop_options the --loop-*
    knobs by name (min_gap, top_k, min_similarity, min_inliers, min_inlier_ratio,
    max_rotation, max_epipolar). progress(done, total) is called per result (total 0 = unknown); Ctrl-C ends the input
    and raises KeyboardInterrupt once the frames before it are written. Raises MemoryError
    (unless preflight=False) when the run cannot fit.

    Returns pose_enc, extrinsic (world-to-camera), intrinsic, depth, depth_conf,
    world_points_from_depth and images (the frames the model saw), one entry per frame. With
    loop_closure also loops (each accepted loop: query, match, similarity, matches, inliers)
    and, where the pose graph is built in, extrinsic_optimized [S, 3, 4] and scale_optimized
    [S]: each frame's pose after the loops' correction (the streamed one where none was made).
    """
    if engine is None:
        if model is None:
            raise ValueError("run needs an engine or a model")
        engine = Engine(model, arch=arch, device=device, precision=precision, threads=threads)
    if isinstance(export, str):
        export = [export]
    exports = parse_export_list(",".join(export))
    if exports and out is None:
        raise ValueError("exports need an output folder (out=...)")
    options = dict(preprocess=preprocess, size=size, fps=fps, stride=stride, first_k=first_k,
                   scale_frames=scale_frames, window=window,
                   keyframe_interval=keyframe_interval, camera_iterations=camera_iterations,
                   flow_threshold=flow_threshold, max_non_keyframe_gap=max_non_keyframe_gap,
                   max_special_frames=max_special_frames, window_size=window_size,
                   overlap=overlap, overlap_keyframes=overlap_keyframes,
                   conf_threshold=conf_threshold, point_stride=point_stride, voxel=voxel,
                   depth_scale=depth_scale, cache_stats=cache_stats, preflight=preflight,
                   rotate_clockwise_90=rotate_clockwise_90,
                   mask_sky=None if mask_sky is None else os.fspath(mask_sky),
                   sky_mask_dir=None if sky_mask_dir is None else os.fspath(sky_mask_dir),
                   sky_mask_visualization_dir=None if sky_mask_visualization_dir is None
                   else os.fspath(sky_mask_visualization_dir),
                   loop_closure=loop_closure, loop_options=loop_options,
                   save_session=None if save_session is None else os.fspath(save_session),
                   resume=None if resume is None else os.fspath(resume), resume_mode=resume_mode)
    if keyframe_interval < 0:
        raise ValueError(f"keyframe_interval must be >= 0 (0 = auto), got {keyframe_interval}")
    results, images, loops = _run(engine, os.fspath(input), "" if out is None else os.fspath(out),
                                  exports, mode, options, progress, log)
    if not results:
        raise RuntimeError(f"{os.fspath(input)}: no frames were processed")
    predictions = to_predictions(results, images)
    if "loops" in loops:
        predictions["loops"] = loops["loops"]
    if "c2w_optimized" in loops:
        c2w = loops["c2w_optimized"]
        rotation_t = np.transpose(c2w[:, :, :3], (0, 2, 1))
        translation = -rotation_t @ c2w[:, :, 3:]
        predictions["extrinsic_optimized"] = np.concatenate([rotation_t, translation], axis=2)
        predictions["scale_optimized"] = loops["scale_optimized"]
    return predictions
