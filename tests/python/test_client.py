"""lingbot_map.client against a scripted fake server: the WebSocket framing and the protocol."""

import struct
import threading
import time

import numpy as np
import pytest

from fake_server import fake_server
from lingbot_map import client as lc
from lingbot_map import websocket as ws

W, H = 8, 6


def frame(i):
    return np.full((H, W, 3), i % 256, np.uint8)


def result(i, h=2, w=3):
    return {"type": "result", "index": i, "keyframe": i % 2 == 0, "scale_frame": i < 2,
            "pose_enc": [float(i)] * 9, "c2w": list(range(12)), "w2c": [0.5] * 12,
            "intrinsics": [1, 0, 2, 0, 1, 3, 0, 0, 1], "height": h, "width": w}


def start_session(peer, answer=None):
    peer.accept()
    start = peer.recv_json()
    assert start["type"] == "start" and (start["width"], start["height"]) == (W, H)
    peer.send_json(answer or {"type": "ready", "session": "s1", "device": "cpu",
                              "model_width": 3, "model_height": 2, "estimate_bytes": 1000})
    return start


def read_frame(peer, i):
    opcode, data = peer.recv_message()
    assert opcode == 0x2
    assert data[:4] == b"LBR1" and struct.unpack("<III", data[4:16]) == (H, W, 3)
    assert data[16:] == frame(i).tobytes()


def end_session(peer, frames):
    assert peer.recv_json() == {"type": "finish"}
    peer.send_json({"type": "finished", "frames": frames})
    peer.close(1000)
    assert peer.expect_close() == 1000


def test_stream_in_order_with_fragments_and_pings():
    pongs = []

    def script(peer):
        assert peer.headers["authorization"] == "Bearer secret"
        assert peer.path == "/v1/stream"
        start = start_session(peer)
        assert start["frames"] == 5 and start["stream"] == {"window": 16}
        for i in range(5):
            read_frame(peer, i)
            # Fragmented text with a ping inside the message: the pong must come back.
            peer.send_json(result(i), pieces=3, ping_between=b"p%d" % i)
        end_session(peer, 5)
        pongs.extend(peer.pongs)

    with fake_server(script) as (url, _):
        stream = lc.Client(url, token="secret", timeout=5).start(
            width=W, height=H, frames=5, stream={"window": 16})
        assert stream.session == "s1" and stream.model_width == 3
        got = []
        for i in range(5):
            stream.send(frame(i))
            got += stream.poll()
        got += stream.finish()
    assert [r.index for r in got] == list(range(5))
    r = got[3]
    assert r.pose_enc.shape == (9,) and r.c2w.shape == (3, 4) and r.w2c.shape == (3, 4)
    assert r.intrinsics.shape == (3, 3) and r.intrinsics[1, 2] == 3 and not r.keyframe
    assert r.c2w[2, 3] == 11 and r.depth is None and stream.finished
    assert pongs == [b"p%d" % i for i in range(5) for _ in range(2)]


def test_maps_arrive_as_arrays_and_images_as_their_bytes(tmp_path):
    depth = np.arange(6, dtype="<f4")
    conf = depth + 1
    png = b"\x89PNG\r\n\x1a\n" + b"\0\0\0\rIHDR" + struct.pack(">II", W, H) + b"rest"
    (tmp_path / "f.png").write_bytes(png)

    def script(peer):
        assert start_session(peer)["maps"] is True
        for i in range(2):
            assert peer.recv_message() == (0x2, png)
            peer.send_json(result(i))
            peer.send_message(0x2, depth.tobytes() + conf.tobytes(), pieces=4)
        end_session(peer, 2)

    with fake_server(script) as (url, _):
        with lc.Client(url, timeout=5).start(width=W, height=H, maps=True) as stream:
            stream.send(png)
            stream.send(tmp_path / "f.png")
            got = stream.finish()
    assert [r.index for r in got] == [0, 1]
    np.testing.assert_array_equal(got[1].depth, depth.reshape(2, 3))
    np.testing.assert_array_equal(got[1].confidence, conf.reshape(2, 3))


def test_refused_raises_with_the_numbers():
    def script(peer):
        start_session(peer, {"type": "refused", "reason": "does not fit", "need_bytes": 900,
                             "free_bytes": 100})
        peer.close(1013)
        assert peer.expect_close() == 1013

    with fake_server(script) as (url, _):
        with pytest.raises(lc.Refused, match="needs 900 bytes, 100 free") as e:
            lc.Client(url, timeout=5).start(width=W, height=H)
    assert (e.value.need_bytes, e.value.free_bytes) == (900, 100)


def test_error_message_is_raised_after_the_results_before_it():
    def script(peer):
        start_session(peer)
        read_frame(peer, 0)
        peer.send_json(result(0))
        peer.send_json({"type": "error", "reason": "undecodable image"})
        peer.close(1008)
        peer.expect_close()

    with fake_server(script) as (url, _):
        stream = lc.Client(url, timeout=5).start(width=W, height=H)
        stream.send(frame(0))
        it = iter(stream)
        assert next(it).index == 0
        with pytest.raises(lc.ServerError, match="undecodable image"):
            next(it)
        with pytest.raises(lc.ServerError):  # and on any later call
            stream.send(frame(1))


def test_http_errors_and_wrong_accept_raise():
    def script(peer):
        if "token=good" in peer.path:
            peer.accept(accept="AAAAAAAAAAAAAAAAAAAAAAAAAAA=")
        else:
            peer.http(401, b"unauthorized\n")

    with fake_server(script) as (url, _):
        with pytest.raises(lc.ClientError, match="HTTP 401: unauthorized"):
            lc.Client(url, timeout=5).start(width=W, height=H)
        with pytest.raises(ws.HandshakeError, match="Sec-WebSocket-Accept"):
            ws.WebSocket(url + "/v1/stream?token=good", timeout=5)


@pytest.mark.parametrize("bad, why", [
    (lambda p: p.send_frame(0x1, b"{}", rsv=0x40), "reserved bits"),
    (lambda p: p.send_frame(0x1, b"{}", mask=b"abcd"), "masked frame"),
    (lambda p: p.send_frame(0x0, b"{}"), "continuation frame outside"),
    (lambda p: p.send_frame(0x3, b""), "unknown opcode"),
    (lambda p: p.send_frame(0x9, b"x" * 126), "long control frame"),
    (lambda p: p.send_frame(0x1, b"\xff\xfe"), "not UTF-8"),
    (lambda p: (p.send_frame(0x1, b"{", fin=False), p.send_frame(0x1, b"}")), "new message"),
])
def test_protocol_violations_close_the_connection(bad, why):
    codes = []

    def script(peer):
        peer.accept()
        bad(peer)
        codes.append(peer.expect_close())

    with fake_server(script) as (url, _):
        sock = ws.WebSocket(url, timeout=5)
        with pytest.raises(ws.WebSocketError, match=why):
            sock.recv()
    assert codes == [1007 if why == "not UTF-8" else 1002]


def test_garbage_from_the_server_is_an_error_never_a_hang():
    rng = np.random.default_rng(7)
    blobs = [rng.integers(0, 256, int(rng.integers(1, 400)), np.uint8).tobytes()
             for _ in range(25)]

    def script(peer):
        peer.accept()
        peer.sock.sendall(blobs[int(peer.path.strip("/"))])
        peer.sock.close()

    with fake_server(script) as (url, _):
        for i in range(len(blobs)):
            sock = ws.WebSocket(f"{url}/{i}", timeout=2, max_message=1 << 16)
            # A pong answered to a closed socket may fail first (ConnectionError), but a
            # timeout (a hang) or anything else fails the test.
            with pytest.raises((ws.WebSocketError, ConnectionError)):
                while True:
                    sock.recv()


def test_oversized_messages_are_refused_before_reading_them():
    codes = []

    def script(peer):
        peer.accept()
        peer.send_frame(0x2, b"x" * 70000)  # one frame over the limit
        codes.append(peer.expect_close())

    def script_fragments(peer):
        peer.accept()
        peer.send_message(0x2, b"x" * 70000, pieces=7)  # each piece fits, the whole does not
        codes.append(peer.expect_close())

    for s in (script, script_fragments):
        with fake_server(s) as (url, _):
            sock = ws.WebSocket(url, timeout=5, max_message=65536)
            with pytest.raises(ws.WebSocketError, match="65536"):
                sock.recv()
    assert codes == [1009, 1009]


def test_a_silent_server_times_out_instead_of_hanging():
    release = threading.Event()

    def script(peer):
        start_session(peer)
        release.wait(10)

    with fake_server(script) as (url, _):
        stream = lc.Client(url, timeout=0.5).start(width=W, height=H)
        stream.send(frame(0))
        t = time.monotonic()
        with pytest.raises(TimeoutError, match="no result from the server within 0.5 s"):
            stream.finish()
        assert time.monotonic() - t < 3
        stream.close()
        release.set()

    def mute(peer):  # not even the handshake's answer
        release.wait(10)

    release.clear()
    with fake_server(mute) as (url, _):
        with pytest.raises(lc.ClientError, match="timed out"):
            lc.Client(url, timeout=0.5).start(width=W, height=H)
        release.set()


def test_a_server_that_stops_reading_fails_the_send_instead_of_hanging():
    release = threading.Event()

    def script(peer):
        peer.accept()
        peer.recv_json()
        peer.send_json({"type": "ready", "session": "s"})
        release.wait(10)  # reads nothing more

    big = np.zeros((H, W * 2000, 3), np.uint8)  # ~290 KB: the socket buffers fill quickly
    with fake_server(script) as (url, _):
        stream = lc.Client(url, timeout=0.5).start(width=W * 2000, height=H)
        t = time.monotonic()
        with pytest.raises(lc.ClientError, match="sending frame .* failed: timed out"):
            for _ in range(200):
                stream.send(big)
        assert time.monotonic() - t < 5
        with pytest.raises(lc.ClientError):  # the stream is over
            stream.send(big)
        release.set()


def test_connection_lost_mid_stream_raises():
    def script(peer):
        start_session(peer)
        read_frame(peer, 0)
        peer.sock.close()  # no close frame

    with fake_server(script) as (url, _):
        stream = lc.Client(url, timeout=5).start(width=W, height=H)
        stream.send(frame(0))
        with pytest.raises(lc.ClientError, match="1006"):
            list(stream)


def test_lost_or_reordered_results_are_detected():
    def script(peer):
        start_session(peer)
        read_frame(peer, 0)
        peer.send_json(result(1))
        peer.expect_close()

    with fake_server(script) as (url, _):
        stream = lc.Client(url, timeout=5).start(width=W, height=H)
        stream.send(frame(0))
        with pytest.raises(lc.ClientError, match="result 1 came where 0 was due"):
            stream.finish()


def test_sending_everything_first_does_not_deadlock_under_back_pressure():
    # The server reads slowly and answers every frame with a large message: if the client
    # read nothing while sending, both sides' buffers would fill and each would wait forever.
    n, big = 40, np.zeros((480, 640, 3), np.uint8)
    maps = b"\0" * (8 * 200 * 300)

    def script(peer):
        peer.accept()
        peer.recv_json()
        peer.send_json({"type": "ready", "session": "s"})
        for i in range(n):
            opcode, data = peer.recv_message()
            assert len(data) == 16 + big.nbytes
            peer.send_json(result(i, 200, 300))
            peer.send_message(0x2, maps)
        end_session(peer, n)

    with fake_server(script) as (url, _):
        stream = lc.Client(url, timeout=10).start(width=640, height=480, maps=True)
        for _ in range(n):
            stream.send(big)
        got = stream.finish()
    assert [r.index for r in got] == list(range(n))


def test_a_reading_thread_gets_every_result_when_finish_leaves_them():
    def script(peer):
        start_session(peer)
        for i in range(20):
            read_frame(peer, i)
            peer.send_json(result(i))
        end_session(peer, 20)

    with fake_server(script) as (url, _):
        stream = lc.Client(url, timeout=5).start(width=W, height=H)
        got = []
        reader = threading.Thread(target=lambda: got.extend(r.index for r in stream))
        reader.start()
        for i in range(20):
            stream.send(frame(i))
        assert stream.finish(take=False) == []
        reader.join(5)
    assert got == list(range(20))


def test_bad_input_is_a_clear_exception():
    with pytest.raises(ValueError, match="uint8 \\[H, W, 3\\]"):
        lc.encode_frame(np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match="neither a JPEG nor a PNG"):
        lc.encode_frame(b"GIF89a")
    with pytest.raises(ValueError, match="expected http://host:port"):
        lc.Client("ftp://example.org")
    with pytest.raises(lc.ClientError, match="cannot connect"):
        lc.Client("http://127.0.0.1:1", timeout=2).start(width=W, height=H)

    def script(peer):
        start_session(peer)
        peer.expect_close()

    with fake_server(script) as (url, _):
        with lc.Client(url, timeout=5).start(width=W, height=H) as stream:
            with pytest.raises(ValueError, match="frame of 4x4, the stream was started with 8x6"):
                stream.send(np.zeros((4, 4, 3), np.uint8))


def test_metrics_are_parsed():
    text = ('# HELP lingbot_sessions_active Sessions.\n# TYPE lingbot_sessions_active gauge\n'
            'lingbot_sessions_active 2\n'
            'lingbot_sessions_total{outcome="finished"} 7\n'
            'lingbot_sessions_total{outcome="refused"} 1\n'
            'lingbot_frame_latency_seconds{quantile="0.99"} 0.031 1700000000000\n'
            'lingbot_session_fps{session="a\\"b"} NaN\n')

    def script(peer):
        assert peer.path == "/metrics"
        peer.http(200, text.encode())

    with fake_server(script) as (url, _):
        m = lc.metrics(url)
    assert m.get("lingbot_sessions_active") == 2
    assert m.get("lingbot_sessions_total", outcome="refused") == 1
    assert m.get("lingbot_frame_latency_seconds", quantile=0.99) == 0.031
    assert len(m.all("lingbot_sessions_total")) == 2
    assert np.isnan(m.get("lingbot_session_fps", session='a"b'))
    with pytest.raises(ValueError, match="line 1"):
        lc.Metrics("not a metric line at all")


def test_client_module_needs_no_compiled_module():
    import subprocess
    import sys
    import os
    import lingbot_map
    package_dir = os.path.dirname(os.path.dirname(lingbot_map.__file__))
    code = ("import sys; sys.modules['lingbot_map._core'] = None\n"  # import fails as if absent
            "from lingbot_map.client import Client\nimport lingbot_map\n"
            "try:\n    lingbot_map.Engine\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": package_dir}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "needs the compiled module" in out.stdout
