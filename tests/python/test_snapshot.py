"""Session.save and Engine.resume: a resumed session continues bit for bit, and a bad file is a
Python exception."""

import numpy as np
import pytest

import lingbot_map as lm

SCALE, WINDOW = 4, 6


def run(session, frames):
    out = []
    for f in frames:
        out += session.push(f)
    return out + session.finish()


def test_resume_continues_exactly(tiny_frames, tmp_path):
    # Bit for bit on the CPU (this test's engines are CPU ones whatever LINGBOT_DEVICE says).
    engine = lm.Engine("synthetic:1", arch="tiny", precision="f32")
    want = run(engine.start(scale_frames=SCALE, window=WINDOW, keyframe_interval=3),
               tiny_frames)
    session = engine.start(scale_frames=SCALE, window=WINDOW, keyframe_interval=3)
    got = []
    for f in tiny_frames[:11]:
        got += session.push(f)
    path = tmp_path / "s.lbs"
    session.save(path)
    assert [c.index for c in session.trajectory()] == list(range(11))

    other = lm.Engine("synthetic:1", arch="tiny", precision="f32")
    resumed = other.resume(str(path))
    got += run(resumed, tiny_frames[11:])
    assert [r.index for r in got] == [r.index for r in want]
    for g, w in zip(got, want):
        assert g.keyframe == w.keyframe
        np.testing.assert_array_equal(g.pose_enc, w.pose_enc)
        np.testing.assert_array_equal(g.depth, w.depth)
        np.testing.assert_array_equal(g.confidence, w.confidence)
    cams = resumed.trajectory()
    assert len(cams) == len(want)
    np.testing.assert_array_equal(np.stack([c.c2w for c in cams]), np.stack([w.c2w for w in want]))


def test_bad_snapshots_raise(tiny_engine, tiny_frames, tmp_path):
    with pytest.raises(FileNotFoundError):
        tiny_engine.resume(tmp_path / "missing.lbs")
    session = tiny_engine.start(scale_frames=SCALE, window=WINDOW)
    for f in tiny_frames[:6]:
        session.push(f)
    path = tmp_path / "s.lbs"
    session.save(path)
    data = path.read_bytes()
    cut = tmp_path / "cut.lbs"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(RuntimeError, match="not a usable session snapshot"):
        tiny_engine.resume(cut)
    other = lm.Engine("synthetic:2", arch="tiny", device=tiny_engine.device, precision="f32")
    with pytest.raises(RuntimeError, match="saved by tiny"):
        other.resume(path)
    with pytest.raises(TypeError):
        session.save(3)
