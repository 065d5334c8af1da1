"""Evaluation against ground truth, as `lingbot-map eval` does it; results are dicts.

    import lingbot_map.eval as ev
    r = ev.trajectory("result/", "groundtruth.txt")           # Sim(3), RPE over 1 frame
    r["ate"]["rmse"], r["rpe_translation"]["rmse"], r["rpe_rotation_deg"]["rmse"], r["scale"]
    d = ev.depth("result/", "gt_depth/", scaling="median")    # abs_rel, delta1, rmse, ...
    p = ev.point_cloud("result/points.ply", "gt.ply", threshold=0.05)  # accuracy, f1, ...

Definitions (the TUM benchmark's and evo's for trajectories; include/lingbot/eval.h states them
all): poses are matched by time as associate.py matches them (greedy nearest, each pose once,
closer than max_time_diff); ATE is the RMSE (and mean, median, std, min, max, sse) of the centre
distances after Umeyama's alignment (Sim(3) with scale, SE(3) or none); RPE compares relative
motions over `delta` frames (or metres of path) of the aligned estimate, as evo_rpe.
"""

from __future__ import annotations

import json
import os
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from . import _core

PathLike = Union[str, "os.PathLike[str]"]
# A trajectory: a file or run folder, poses [N, 3, 4] / [N, 4, 4] (camera to world, timed by
# index), or (times [N], poses).
TrajectoryLike = Union[PathLike, np.ndarray, Tuple[Sequence[float], np.ndarray]]

__all__ = ["trajectory", "depth", "point_cloud", "umeyama", "read_trajectory", "read_depth",
           "read_ply", "available"]


def available() -> bool:
    """Whether this build has the metrics (Eigen and nanoflann were found)."""
    return bool(_core._eval_available())


def read_trajectory(path: PathLike, format: str = "auto", key: str = "c2w",
                    times: Optional[PathLike] = None) -> Tuple[np.ndarray, np.ndarray, bool]:
    """(times [N], camera-to-world poses [N, 3, 4], indexed) of a TUM or KITTI file, or of a
    run's predictions.safetensors (its `key`: "c2w" or "c2w_optimized"); `times` replaces the
    times with a file's (one a line)."""
    return _core._eval_read_trajectory(os.fspath(path), format, key,
                                       None if times is None else os.fspath(times))


def _trajectory_arrays(t: TrajectoryLike, format: str, key: str,
                       times: Optional[PathLike]) -> Tuple[np.ndarray, np.ndarray, bool]:
    if isinstance(t, (str, os.PathLike)):
        return read_trajectory(t, format, key, times)
    if isinstance(t, tuple):
        stamps, poses = t
        return np.asarray(stamps, dtype=np.float64), np.asarray(poses, dtype=np.float64), False
    poses = np.asarray(t, dtype=np.float64)
    return np.arange(len(poses), dtype=np.float64), poses, True


def trajectory(estimate: TrajectoryLike, reference: TrajectoryLike, align: str = "sim3",
               max_time_diff: float = 0.02, time_offset: float = 0.0, delta: float = 1,
               delta_unit: str = "frames", all_pairs: bool = False,
               estimate_format: str = "auto", reference_format: str = "auto",
               estimate_key: str = "c2w", estimate_times: Optional[PathLike] = None) -> dict:
    """ATE and RPE of `estimate` against `reference`.

    Returns the fields of `lingbot-map eval --json`'s "trajectory" (ate, rpe_translation,
    rpe_rotation_deg as {rmse, mean, median, std, min, max, sse, count}; matched, scale,
    rotation, translation, ...) and the arrays "aligned" [K, 3] (the matched estimated centres
    after alignment), "reference_positions" [K, 3], "matches" [K, 2] (indices into each) and
    "ate_errors" [K]. align: "sim3", "se3" or "none"; delta_unit: "frames" or "m".
    """
    es, ep, ei = _trajectory_arrays(estimate, estimate_format, estimate_key, estimate_times)
    rs, rp, ri = _trajectory_arrays(reference, reference_format, "c2w", None)
    text, aligned, ref, matches, errors = _core._eval_trajectory(
        es, ep, ei, rs, rp, ri, align, float(max_time_diff), float(time_offset), float(delta),
        delta_unit, bool(all_pairs))
    out = json.loads(text)
    out["rotation"] = np.asarray(out["rotation"]).reshape(3, 3)
    out["translation"] = np.asarray(out["translation"])
    out.update(aligned=aligned, reference_positions=ref, matches=matches, ate_errors=errors)
    return out


def umeyama(x: np.ndarray, y: np.ndarray, with_scale: bool = True
            ) -> Tuple[float, np.ndarray, np.ndarray]:
    """(s, R, t) minimising sum |s R x_i + t - y_i|^2 for points x, y [N, 3] (Umeyama 1991)."""
    return _core._eval_umeyama(x, y, bool(with_scale))


def read_depth(path: PathLike, png_scale: float = 1000) -> np.ndarray:
    """Depth maps float32 [S, H, W] of a run (predictions.safetensors), a .npy, a 16-bit PNG
    (value / png_scale) or a folder of .png / .npy files."""
    return _core._eval_read_depth(os.fspath(path), float(png_scale))


def depth(predicted: Union[PathLike, np.ndarray], reference: Union[PathLike, np.ndarray],
          scaling: str = "median", per_frame: bool = False, min_depth: float = 0,
          max_depth: float = 0, png_scale: float = 1000) -> dict:
    """abs_rel, sq_rel, rmse, log_rmse, delta1..3 of predicted depth against the reference.

    Maps are [H, W] or [S, H, W] arrays or paths (read_depth). scaling: "median" (ratio of the
    medians), "lsq" (least squares) or "none"; one scale for the sequence, or per frame with the
    metrics averaged over frames. Valid pixels: both depths finite and > 0, the reference within
    [min_depth, max_depth] where those are > 0.
    """
    if isinstance(predicted, (str, os.PathLike)):
        predicted = read_depth(predicted, png_scale)
    if isinstance(reference, (str, os.PathLike)):
        reference = read_depth(reference, png_scale)
    return json.loads(_core._eval_depth(predicted, reference, scaling, bool(per_frame),
                                        float(min_depth), float(max_depth)))


def read_ply(path: PathLike) -> np.ndarray:
    """The vertex positions [N, 3] (float64) of a PLY file."""
    return _core._eval_read_ply(os.fspath(path))


def point_cloud(predicted: Union[PathLike, np.ndarray], reference: Union[PathLike, np.ndarray],
                threshold: float = 0.05) -> dict:
    """accuracy, completeness (means and medians of nearest-neighbour distances), chamfer,
    precision, recall and f1 at `threshold`, of points [N, 3] or PLY files."""
    if isinstance(predicted, (str, os.PathLike)):
        predicted = read_ply(predicted)
    if isinstance(reference, (str, os.PathLike)):
        reference = read_ply(reference)
    return json.loads(_core._eval_point_cloud(predicted, reference, float(threshold)))
