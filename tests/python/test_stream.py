"""Streaming through the Python API against the reference on the tiny fixture model."""

import os

import numpy as np
import pytest

import lingbot_map as lm
from conftest import TOL
from reference import read_safetensors, relative

SCALE, WINDOW = 4, 6  # the fixture's streaming settings


def expected(fixtures, k):
    return read_safetensors(os.path.join(fixtures, "tiny", f"stream_kf{k}.safetensors"))


def push_all(session, frames):
    results = []
    for f in frames:
        results += session.push(f)
    return results + session.finish()


def test_flush_returns_each_pushed_frame_and_the_sequence_goes_on(tiny_engine, tiny_frames):
    session = tiny_engine.start(scale_frames=SCALE, window=WINDOW)
    want = push_all(session, tiny_frames)
    session.reset()
    got = []
    for i, f in enumerate(tiny_frames):
        got += session.push(f) + session.flush()
        assert len(got) == (0 if i + 1 < SCALE else i + 1)
    assert session.finish() == []
    assert [r.index for r in got] == list(range(16))
    assert relative(np.stack([r.depth for r in got]), np.stack([r.depth for r in want])) == 0


@pytest.mark.parametrize("k", [1, 3])
def test_session_matches_reference(tiny_engine, tiny_frames, fixtures, k):
    want = expected(fixtures, k)
    session = tiny_engine.start(scale_frames=SCALE, window=WINDOW, keyframe_interval=k)
    results = push_all(session, tiny_frames)
    assert [r.index for r in results] == list(range(16))
    assert [r.keyframe for r in results] == [i < SCALE or (i - SCALE) % k == 0 for i in range(16)]
    assert relative(np.stack([r.pose_enc for r in results]), want["pose_enc"]) <= TOL
    assert relative(np.stack([r.depth for r in results]), want["depth"]) <= TOL
    assert relative(np.stack([r.confidence for r in results]), want["depth_conf"]) <= TOL
    r = results[9]
    assert r.depth.shape == (56, 70) and r.depth.dtype == np.float32
    assert r.c2w.shape == (3, 4) and r.w2c.shape == (3, 4) and r.intrinsics.shape == (3, 3)
    # w2c is the inverse of c2w.
    c2w = np.vstack([r.c2w, [0, 0, 0, 1]])
    w2c = np.vstack([r.w2c, [0, 0, 0, 1]])
    np.testing.assert_allclose(c2w @ w2c, np.eye(4), atol=1e-4)


def test_fp8_kv_cache_stays_within_the_bf16_tolerances(tiny_frames, fixtures):
    # precision "fp8": the KV cache in e4m3 with per-head scales (on the CPU, the rest f32).
    want = expected(fixtures, 1)
    engine = lm.Engine("synthetic:1", arch="tiny", device="cpu", precision="fp8")
    assert (engine.info["compute"], engine.info["kv_cache"]) == ("F32", "F8_E4M3")
    session = engine.start(scale_frames=SCALE, window=WINDOW)
    results = push_all(session, tiny_frames)
    pose = relative(np.stack([r.pose_enc for r in results]), want["pose_enc"])
    assert 0 < pose <= 3e-2
    assert relative(np.stack([r.depth for r in results]), want["depth"]) <= 2e-2


@pytest.mark.parametrize("k", [1, 3])
def test_inference_streaming_matches_reference(tiny_engine, tiny_frames, fixtures, k):
    want = expected(fixtures, k)
    calls = []
    out = tiny_engine.inference_streaming(tiny_frames, num_scale_frames=SCALE, keyframe_interval=k,
                                          window=WINDOW, progress=lambda d, t: calls.append((d, t)))
    assert out["pose_enc"].shape == (1, 16, 9)
    assert out["depth"].shape == (1, 16, 56, 70, 1)
    assert out["depth_conf"].shape == (1, 16, 56, 70)
    assert out["images"] is tiny_frames
    assert relative(out["pose_enc"][0], want["pose_enc"]) <= TOL
    assert relative(out["depth"][0, ..., 0], want["depth"]) <= TOL
    assert relative(out["depth_conf"][0], want["depth_conf"]) <= TOL
    assert calls == [(i, 16) for i in range(1, 17)]
    # A batch dimension of 1 is accepted, as by the reference; a shorter run gives the same
    # first frames (streaming is causal).
    again = tiny_engine.inference_streaming(tiny_frames[None, :6], num_scale_frames=SCALE,
                                            keyframe_interval=k, window=WINDOW)
    np.testing.assert_array_equal(again["pose_enc"][0], out["pose_enc"][0, :6])


def test_cache_stats_and_reset(tiny_engine, tiny_frames):
    session = tiny_engine.start(scale_frames=SCALE, window=WINDOW, keyframe_interval=3)
    first = push_all(session, tiny_frames[:9])
    stats = session.cache_stats()
    for key in ("live_pages", "scale_pages", "free_pages", "stored_frames", "special_tokens"):
        assert isinstance(stats[key], int)
    assert stats["stored_frames"] == SCALE + 2  # keyframes 4 and 7
    session.reset()  # the reference's clean_kv_cache: a new sequence gives the same results
    assert session.cache_stats()["stored_frames"] == 0
    second = push_all(session, tiny_frames[:9])
    assert len(first) == len(second) == 9
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a.pose_enc, b.pose_enc)
        np.testing.assert_array_equal(a.depth, b.depth)


def test_uint8_frames_equal_their_float_conversion(tiny_engine, tiny_frames):
    u8 = np.round(tiny_frames * 255).astype(np.uint8).transpose(0, 2, 3, 1)  # [S, H, W, 3]
    a = push_all(tiny_engine.start(scale_frames=SCALE, window=WINDOW), tiny_frames[:6])
    b = push_all(tiny_engine.start(scale_frames=SCALE, window=WINDOW), list(u8[:6]))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.pose_enc, y.pose_enc)
        np.testing.assert_array_equal(x.depth, y.depth)


def test_results_keep_their_arrays_alive(tiny_engine, tiny_frames):
    session = tiny_engine.start(scale_frames=SCALE, window=WINDOW)
    results = push_all(session, tiny_frames[:5])
    depth = results[4].depth
    copy = depth.copy()
    del results, session
    np.testing.assert_array_equal(depth, copy)


def test_windowed_matches_reference(tiny_engine, tiny_frames, fixtures):
    want = read_safetensors(os.path.join(fixtures, "tiny", "windowed.safetensors"))
    lines = []
    out = tiny_engine.inference_windowed(tiny_frames, window_size=8, overlap_size=4,
                                         num_scale_frames=SCALE, sliding_window=WINDOW,
                                         log=lines.append)
    assert len(lines) == 3
    assert out["pose_enc"].shape == (1, 16, 9)
    assert out["depth"].shape == (1, 16, 56, 70, 1)
    assert relative(out["pose_enc"][0], want["pose_enc"]) <= TOL
    assert relative(out["depth"][0], want["depth"]) <= TOL
    assert relative(out["depth_conf"][0], want["depth_conf"]) <= TOL
    assert np.abs(out["chunk_scales"][0] - want["chunk_scales"]).max() <= TOL
    assert np.abs(out["chunk_transforms"][0] - want["chunk_transforms"]).max() <= TOL
    np.testing.assert_array_equal(out["frame_type"][0], want["frame_type"].astype(np.uint8))
    np.testing.assert_array_equal(out["is_keyframe"][0], want["is_keyframe"].astype(bool))
    assert out["alignment_mode"] == "scaled"


def test_to_predictions_is_the_demo_dict(tiny_engine, tiny_frames):
    session = tiny_engine.start(scale_frames=SCALE, window=WINDOW)
    results = push_all(session, tiny_frames[:6])
    p = lm.to_predictions(reversed(results), images=tiny_frames[:6])
    assert p["extrinsic"].shape == (6, 3, 4) and p["intrinsic"].shape == (6, 3, 3)
    assert p["depth"].shape == (6, 56, 70, 1) and p["depth_conf"].shape == (6, 56, 70)
    assert p["world_points_from_depth"].shape == (6, 56, 70, 3)
    assert p["images"].shape == (6, 3, 56, 70)
    np.testing.assert_array_equal(p["extrinsic"][5], results[5].w2c)
    np.testing.assert_array_equal(p["pose_enc"][2], results[2].pose_enc)
    np.testing.assert_array_equal(p["depth"][3, ..., 0], results[3].depth)


def test_world_points_project_back_onto_their_pixels():
    # A camera turned about y and moved; every point lands on its own pixel at its own depth.
    a = 0.3
    r = np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]], np.float32)
    c2w = np.hstack([r, [[1.0], [2.0], [-0.5]]]).astype(np.float32)[None]
    k = np.array([[[50, 0, 35], [0, 60, 28], [0, 0, 1]]], np.float32)
    depth = np.random.default_rng(1).uniform(1, 5, (1, 56, 70)).astype(np.float32)
    points = lm.world_points_from_depth(depth, c2w, k)
    cam = (points[0] - c2w[0, :, 3]) @ r  # world -> camera: R^T (x - t)
    pix = cam @ k[0].T
    v, u = np.mgrid[0:56, 0:70]
    np.testing.assert_allclose(pix[..., 0] / pix[..., 2], u, atol=1e-3)
    np.testing.assert_allclose(pix[..., 1] / pix[..., 2], v, atol=1e-3)
    np.testing.assert_allclose(cam[..., 2], depth[0], rtol=1e-5)


def test_the_gil_is_released_while_the_engine_computes(tiny_engine, tiny_frames):
    import threading
    import time

    session = tiny_engine.start(scale_frames=SCALE, window=WINDOW)
    in_push, done = threading.Event(), threading.Event()

    def stream():
        for f in tiny_frames:
            in_push.set()
            session.push(f)
            in_push.clear()
        session.finish()
        done.set()

    worker = threading.Thread(target=stream)
    ticks = 0
    worker.start()
    while not done.is_set():  # counts only while push runs without the GIL
        if in_push.is_set():
            ticks += 1
        time.sleep(0.0005)
    worker.join()
    assert ticks >= 16
