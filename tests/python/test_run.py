"""lm.run: the CLI's run from Python writes the same files and returns the demo's dict."""

import json
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


LOOP_KNOBS = dict(min_gap=12, top_k=64, min_similarity=-1)


def test_run_closes_loops_as_the_cli(tiny_engine, fixtures, cli, tmp_path):
    # real/loop: frames 0-11 and 225-236 of one office walk, a revisit between the two groups.
    folder = os.path.join(fixtures, "real", "loop")
    if not os.path.isdir(folder):
        pytest.skip("no real/loop fixture")
    try:
        p = lm.run(folder, out=tmp_path / "python", export="tum", engine=tiny_engine,
                   scale_frames=4, window=8, loop_closure=True, loop_options=LOOP_KNOBS)
    except ValueError as e:
        if "no loop detection" in str(e):
            pytest.skip(str(e))
        raise
    report = tmp_path / "report.json"
    flags = [] if tiny_engine.device == "cpu" else ["--device", tiny_engine.device,
                                                    "--precision", "f32"]
    subprocess.run([cli, "run", "--input", folder, "--out", str(tmp_path / "cli"), "--model",
                    "synthetic:1", "--arch", "tiny", "--scale-frames", "4", "--window", "8",
                    "--quiet", "--loop-closure", "--loop-min-gap", "12", "--loop-top-k", "64",
                    "--loop-min-similarity", "-1", "--export", "tum", "--json", str(report),
                    *flags], check=True, stdout=subprocess.DEVNULL)
    with open(report) as f:
        want = json.load(f)
    assert p["loops"], "the revisit was not found"
    assert [(l["query"], l["match"], l["inliers"]) for l in p["loops"]] == \
        [(l["query"], l["match"], l["inliers"]) for l in want["loops"]]
    for l in p["loops"]:
        assert l["query"] >= 12 and l["match"] <= 11
    if "loop_closure" not in want:  # built without Ceres: detected and reported only
        assert "extrinsic_optimized" not in p
        return
    saved = read_safetensors(os.path.join(tmp_path / "python", "predictions.safetensors"))
    assert p["extrinsic_optimized"].shape == (24, 3, 4)
    assert p["scale_optimized"].shape == (24,)
    np.testing.assert_allclose(p["extrinsic_optimized"], saved["w2c_optimized"], atol=1e-5)
    np.testing.assert_array_equal(p["scale_optimized"], saved["scale_optimized"])


def test_run_saves_and_resumes_a_session(fixtures, tmp_path):
    # Bit for bit on the CPU: the second half resumed from the first's snapshot is the whole run.
    frames = sorted(os.listdir(os.path.join(fixtures, "tiny", "frames")))
    first, rest = tmp_path / "first", tmp_path / "rest"
    for folder, names in ((first, frames[:9]), (rest, frames[9:])):
        folder.mkdir()
        for n in names:
            os.symlink(os.path.join(fixtures, "tiny", "frames", n), folder / n)
    engine = lm.Engine("synthetic:1", arch="tiny", precision="f32")
    whole = lm.run(os.path.join(fixtures, "tiny", "frames"), engine=engine, **SETTINGS)
    lm.run(first, engine=engine, save_session=tmp_path / "s.lbs", **SETTINGS)
    p = lm.run(rest, engine=engine, resume=tmp_path / "s.lbs", **SETTINGS)
    np.testing.assert_array_equal(p["pose_enc"], whole["pose_enc"][9:])
    np.testing.assert_array_equal(p["depth"], whole["depth"][9:])
    with pytest.raises(ValueError, match="resume_mode"):
        lm.run(rest, engine=engine, resume=tmp_path / "s.lbs", resume_mode="sideways",
               **SETTINGS)
    with pytest.raises(ValueError, match="loop_options without loop_closure"):
        lm.run(rest, engine=engine, loop_options=dict(min_gap=3), **SETTINGS)


def test_windowed_runs_refuse_loops_and_sessions(tiny_engine, fixtures, tmp_path):
    # lingbot::run's own checks, as one-line ValueErrors.
    frames = os.path.join(fixtures, "tiny", "frames")
    for extra in (dict(save_session=tmp_path / "s.lbs"), dict(resume=tmp_path / "s.lbs")):
        with pytest.raises(ValueError, match="windowed|streaming mode"):
            lm.run(frames, mode="windowed", engine=tiny_engine, window_size=8, overlap=4,
                   **SETTINGS, **extra)
