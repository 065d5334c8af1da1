"""lm.run: the CLI's run from Python writes the same files and returns the demo's dict."""

import os
import subprocess

import numpy as np
import pytest

import lingbot_map as lm
from conftest import TOL
from reference import read_safetensors, relative

SETTINGS = dict(preprocess="none", scale_frames=4, window=6)
FLAGS = ["--preprocess", "none", "--scale-frames", "4", "--window", "6"]


def files(folder):
    out = {}
    for root, _, names in os.walk(folder):
        for n in names:
            path = os.path.join(root, n)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = f.read()
    return out


@pytest.mark.parametrize("mode, extra, flags", [
    ("streaming", dict(keyframe_interval=3, voxel=0.1),
     ["--keyframe-interval", "3", "--voxel", "0.1"]),
    ("windowed", dict(window_size=8, overlap=4), ["--window-size", "8", "--overlap", "4"]),
])
def test_run_writes_the_files_the_cli_writes(tiny_engine, fixtures, cli, tmp_path, mode, extra,
                                             flags):
    frames = os.path.join(fixtures, "tiny", "frames")
    ours, theirs = tmp_path / "python", tmp_path / "cli"
    done = []
    p = lm.run(frames, out=ours, export="all", mode=mode, engine=tiny_engine,
               progress=lambda d, t: done.append((d, t)), **SETTINGS, **extra)
    if tiny_engine.device != "cpu":
        flags = flags + ["--device", tiny_engine.device, "--precision", "f32"]
    subprocess.run([cli, "run", "--input", frames, "--out", str(theirs), "--model", "synthetic:1",
                    "--arch", "tiny", "--export", "all", "--mode", mode, "--quiet", *FLAGS,
                    *flags], check=True, stdout=subprocess.DEVNULL)
    # The program also writes run.json (how it was called); the rest is the same.
    a = files(ours)
    b = {k: v for k, v in files(theirs).items() if k != "run.json"}
    assert sorted(a) == sorted(b)
    assert "predictions.safetensors" in a and "points.ply" in a and "trajectory_tum.txt" in a
    for name in a:
        assert a[name] == b[name], name
    assert done == [(i, 16) for i in range(1, 17)]
    # The demo's dict, against the reference.
    want = read_safetensors(os.path.join(
        fixtures, "tiny", "stream_kf3.safetensors" if mode == "streaming" else
        "windowed.safetensors"))
    assert p["pose_enc"].shape == (16, 9) and p["extrinsic"].shape == (16, 3, 4)
    assert p["images"].shape == (16, 3, 56, 70)
    assert relative(p["pose_enc"], want["pose_enc"]) <= TOL
    assert relative(p["depth"][..., 0], np.asarray(want["depth"]).reshape(16, 56, 70)) <= TOL
    np.testing.assert_array_equal(p["images"], lm.load_images(frames, mode="none"))


def test_run_without_files_returns_the_dict(tiny_engine, fixtures):
    p = lm.run(os.path.join(fixtures, "tiny", "frames"), engine=tiny_engine, first_k=6,
               **SETTINGS)
    assert p["depth"].shape == (6, 56, 70, 1)
    assert p["world_points_from_depth"].shape == (6, 56, 70, 3)


def test_bad_runs_raise(tiny_engine, fixtures, tmp_path):
    frames = os.path.join(fixtures, "tiny", "frames")
    with pytest.raises(FileNotFoundError):
        lm.run(tmp_path / "nope", engine=tiny_engine)
    with pytest.raises(ValueError, match="unknown export format"):
        lm.run(frames, out=tmp_path, export="tum,mesh", engine=tiny_engine)
    with pytest.raises(ValueError, match="output folder"):
        lm.run(frames, export="tum", engine=tiny_engine)
    with pytest.raises(ValueError, match="mode"):
        lm.run(frames, mode="offline", engine=tiny_engine)
    with pytest.raises(ValueError, match="engine or a model"):
        lm.run(frames)
    with pytest.raises(ValueError):
        lm.run(frames, engine=tiny_engine, preprocess="stretch")
    with pytest.raises(ValueError):  # 56x70 frames at 518 wide cannot be used as they are
        lm.run(frames, engine=tiny_engine, size=500)
