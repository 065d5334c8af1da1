"""The client against a real `lingbot-map serve` (tiny synthetic model on loopback).

Skipped where the program has no serve command (built without Boost)."""

import os
import subprocess
import sys
import time

import numpy as np
import pytest

from lingbot_map import client as lc

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "serve"))
from serve_process import ServeProcess, has_serve  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
W, H = 70, 56  # multiples of the patch size: sent with preprocess "none"
OPTIONS = {"scale_frames": 4, "window": 16, "keyframe_interval": 2}


@pytest.fixture(scope="module")
def serve_cli(cli):
    if not has_serve(cli):
        pytest.skip("this lingbot-map has no serve command (built without Boost)")
    return cli


@pytest.fixture(scope="module")
def server(serve_cli):
    with ServeProcess(serve_cli, "--model", "synthetic:1", "--arch", "tiny") as s:
        yield s


def frames(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (H, W, 3), np.uint8) for _ in range(n)]


def start(server, **kw):
    kw = {"width": W, "height": H, "preprocess": "none", "stream": OPTIONS, **kw}
    return lc.Client(server.url, timeout=60).start(**kw)


def wait_idle(server):
    """lingbot_sessions_active back to 0 (the server sees a close a moment after it)."""
    deadline = time.monotonic() + 10
    while (m := lc.metrics(server.url)).get("lingbot_sessions_active") != 0:
        assert time.monotonic() < deadline, "a session outlived its connection"
        time.sleep(0.05)
    return m


def test_results_come_in_order_and_match_the_engine(server):
    images = frames(12)
    with start(server, frames=len(images)) as stream:
        assert (stream.model_width, stream.model_height) == (W, H)
        got = []
        for image in images:
            stream.send(image)
            got += stream.poll()
        got += stream.finish()
    assert [r.index for r in got] == list(range(12))
    assert all(r.c2w.shape == (3, 4) and r.depth is None for r in got)

    # The same frames through the library in this process give the same poses.
    lm = pytest.importorskip("lingbot_map._core", reason="the compiled module is not built")
    engine = lm.Engine("synthetic:1", arch="tiny", device="cpu", precision="f32")
    session = engine.start(**OPTIONS)
    want = []
    for image in images:
        want += session.push(image)
    want += session.finish()
    # (JSON carries a non-finite number as null, which the client reads as NaN.)
    finite = lambda a: np.where(np.isfinite(a), a, np.nan)  # noqa: E731
    for r, w in zip(got, want):
        for name in ("pose_enc", "c2w", "w2c", "intrinsics"):
            np.testing.assert_allclose(getattr(r, name), finite(getattr(w, name)), rtol=1e-4,
                                       atol=1e-5, err_msg=f"frame {r.index} {name}")
        assert r.keyframe == w.keyframe
    wait_idle(server)


def test_info_describes_the_server(server):
    info = lc.Client(server.url).info()
    assert info["model"]["arch"] == "tiny" and info["devices"][0]["device"] == "cpu"
    assert isinstance(info["sessions"], list)


def test_maps_and_encoded_frames(server, fixtures):
    folder = os.path.join(fixtures, "tiny", "frames")
    files = sorted(os.listdir(folder))[:6]
    with start(server, maps=True) as stream:
        for name in files:
            stream.send(os.path.join(folder, name))  # PNG files as they are
        got = stream.finish()
    assert [r.index for r in got] == list(range(6))
    for r in got:
        assert r.depth.shape == r.confidence.shape == (r.height, r.width) == (H, W)
        assert np.isfinite(r.depth).all() and (r.confidence >= 1).all()


def test_errors_refusals_and_disconnects_free_their_sessions(server):
    before = lc.metrics(server.url)
    with pytest.raises(lc.ServerError, match="[Uu]nknown|stream_options_that_do_not_exist"):
        start(server, stream={"stream_options_that_do_not_exist": 1})
    with pytest.raises(lc.Refused) as refused:  # far beyond any memory
        start(server, width=14 * 900, height=14 * 900, frames=100000)
    assert refused.value.need_bytes > refused.value.free_bytes

    with start(server) as stream:
        stream.send(frames(1)[0])
        # Past the client's own size check, to see the server's.
        stream._ws.send_binary(lc.encode_frame(np.zeros((H, W + 14, 3), np.uint8)))
        with pytest.raises(lc.ServerError):
            stream.finish()

    stream = start(server)  # a client that goes away mid-stream, saying so
    for image in frames(3):
        stream.send(image)
    stream.close()
    stream = start(server)  # one killed: its connection ends without a close frame
    for image in frames(3):
        stream.send(image)
    stream._ws.abort()

    after = wait_idle(server)
    outcome = lambda m, o: m.get("lingbot_sessions_total", 0, outcome=o)  # noqa: E731
    assert outcome(after, "refused") == outcome(before, "refused") + 1
    assert outcome(after, "disconnected") >= outcome(before, "disconnected") + 2
    assert outcome(after, "error") >= outcome(before, "error") + 1  # the wrong-size frame


def test_token_is_required_when_set(serve_cli, tmp_path):
    (tmp_path / "token").write_text("sesame\n")
    with ServeProcess(serve_cli, "--model", "synthetic:1", "--arch", "tiny", "--token-file",
                      tmp_path / "token") as s:
        with pytest.raises(lc.ClientError, match="401"):
            lc.Client(s.url, timeout=30).start(width=W, height=H)
        with pytest.raises(lc.ClientError, match="401"):
            lc.metrics(s.url)
        with lc.Client(s.url, token="sesame", timeout=60).start(
                width=W, height=H, preprocess="none", stream=OPTIONS) as stream:
            for image in frames(5):
                stream.send(image)
            assert len(stream.finish()) == 5


def test_examples_stream_a_folder(server, serve_cli, fixtures, tmp_path):
    folder = os.path.join(fixtures, "tiny", "frames")
    n = len([f for f in os.listdir(folder) if f.endswith(".png")])
    # With the compiled module (frames decoded here, sent raw), and without (PNG files as they
    # are, decoded by the server): the same poses.
    poses = []
    for pythonpath in (os.environ.get("PYTHONPATH", ""), os.path.join(ROOT, "python")):
        out = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "stream_video.py"),
                              folder, "--url", server.url, "--out", tmp_path / "poses.txt",
                              "--preprocess", "none"], capture_output=True, text=True,
                             timeout=300, env={**os.environ, "PYTHONPATH": pythonpath})
        assert out.returncode == 0, out.stderr
        poses.append(np.loadtxt(tmp_path / "poses.txt"))
    assert poses[0].shape == (n, 12)
    np.testing.assert_allclose(poses[0], poses[1], rtol=1e-5, atol=1e-6)

    program = os.path.join(os.path.dirname(serve_cli), "examples", "stream_client")
    if not os.path.exists(program):
        pytest.skip("examples/stream_client is not built")
    port = server.url.rsplit(":", 1)[1]
    out = subprocess.run([program, folder, "127.0.0.1", port, "none"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == n
