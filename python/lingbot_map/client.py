"""A client for `lingbot-map serve`: standard library + numpy, no compiled module needed.

    from lingbot_map.client import Client
    client = Client("http://127.0.0.1:8080", token=None)
    with client.start(width=640, height=480, frames=len(images)) as stream:
        for image in images:              # uint8 [H, W, 3] arrays, or JPEG/PNG bytes or paths
            stream.send(image)
            for r in stream.poll():       # results ready so far, in frame order
                print(r.index, r.c2w)
        for r in stream.finish():         # the rest
            print(r.index, r.c2w)

Flow control: a thread of the stream reads every message from the server as it comes and
queues the results here. So the server never waits on this client to read, and send() only
waits on the server's own back-pressure (it reads a few frames ahead of its model steps): sending
all frames before reading any result cannot deadlock. The price is that results nobody takes
stay in memory here (about 300 bytes each, plus 8 bytes per pixel with maps=True); take them as
they come (poll(), or iterate the stream in another thread) for long streams with maps.

Every wait has a timeout (`timeout`, seconds): a server that stops answering raises
TimeoutError, never hangs. Errors are exceptions of ClientError's family: Refused (admission
control said no: need_bytes, free_bytes), ServerError (the server sent an error), and
websocket.WebSocketError for the connection itself.
"""

from __future__ import annotations

import json
import os
import re
import socket
import struct
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from dataclasses import dataclass
from typing import Iterator, List, Optional, Union

import numpy as np

from .websocket import (BINARY, GOING_AWAY, NORMAL, POLICY, TEXT, TRY_AGAIN, ConnectionClosed,
                        WebSocket, WebSocketError)

__all__ = ["Client", "Stream", "Result", "Metrics", "metrics", "ClientError", "Refused",
           "ServerError", "encode_frame", "image_size"]

JPEG_MAGIC = b"\xff\xd8\xff"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class ClientError(Exception):
    """A stream could not go on; the message is one line."""


class Refused(ClientError):
    """Admission control refused the stream: it would need `need_bytes`, `free_bytes` are free."""

    def __init__(self, reason: str, need_bytes: int, free_bytes: int):
        super().__init__(f"refused: {reason} (needs {need_bytes} bytes, {free_bytes} free)")
        self.reason, self.need_bytes, self.free_bytes = reason, need_bytes, free_bytes


class ServerError(ClientError):
    """The server reported an error ({"type": "error"}) and closed the stream."""

    def __init__(self, reason: str):
        super().__init__(f"server error: {reason}")
        self.reason = reason


@dataclass
class Result:
    """One frame's predictions, as lingbot_map.FrameResult (float32 arrays; a non-finite value
    of a degenerate prediction arrives as NaN)."""
    index: int
    keyframe: bool
    scale_frame: bool
    pose_enc: np.ndarray  # [9]: translation, quaternion (x, y, z, w), field of view y and x
    c2w: np.ndarray  # [3, 4] camera-to-world
    w2c: np.ndarray  # [3, 4] world-to-camera
    intrinsics: np.ndarray  # [3, 3] in pixels of the model input (height x width)
    height: int
    width: int
    depth: Optional[np.ndarray] = None  # [height, width] with maps=True
    confidence: Optional[np.ndarray] = None  # [height, width] with maps=True


def encode_frame(frame: Union[np.ndarray, bytes, bytearray, memoryview, str, os.PathLike]
                 ) -> bytes:
    """The binary message of one frame: raw RGB (LBR1) for an array, a file's bytes as they are.

    frame: uint8 [H, W, 3] RGB array; JPEG or PNG file contents; or the path of such a file.
    """
    if isinstance(frame, (str, os.PathLike)):
        with open(frame, "rb") as f:
            frame = f.read()
    if isinstance(frame, (bytes, bytearray, memoryview)):
        data = bytes(frame)
        if not data.startswith((JPEG_MAGIC, PNG_MAGIC)):
            raise ValueError("frame bytes are neither a JPEG nor a PNG file")
        return data
    a = np.asarray(frame)
    if a.dtype != np.uint8 or a.ndim != 3 or a.shape[2] != 3:
        raise ValueError(f"a frame array must be uint8 [H, W, 3], got {a.dtype} {list(a.shape)}")
    return b"LBR1" + struct.pack("<III", a.shape[0], a.shape[1], 3) + a.tobytes()


def image_size(data: bytes) -> tuple:
    """(height, width) of a PNG or JPEG file's contents, read from its header.

    As stored: a JPEG whose EXIF orientation turns it by 90 degrees is decoded (by the server,
    as by Pillow) with the two swapped."""
    if data.startswith(PNG_MAGIC) and len(data) >= 24:
        w, h = struct.unpack_from(">II", data, 16)
        return h, w
    if data.startswith(JPEG_MAGIC):
        at = 2
        while at + 9 <= len(data) and data[at] == 0xFF:
            marker, length = data[at + 1], struct.unpack_from(">H", data, at + 2)[0]
            # Start of frame: SOF0..SOF15 but DHT (C4), JPG (C8) and DAC (CC).
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
                return struct.unpack_from(">HH", data, at + 5)
            at += 2 + length
    raise ValueError("not a PNG or JPEG file, or its header is damaged")


def _frame_size(data: bytes):
    """(height, width) of an LBR1 message or a PNG; None for a JPEG (see image_size)."""
    if data.startswith(b"LBR1"):
        return struct.unpack_from("<II", data, 4)
    if data.startswith(PNG_MAGIC):
        return image_size(data)
    return None


def _array(values, shape, what):
    # JSON has no infinity or NaN: the server writes a non-finite number as null.
    a = np.asarray([np.nan if v is None else v for v in values], dtype=np.float32)
    if a.size != int(np.prod(shape)):
        raise ClientError(f"result {what} has {a.size} values, expected {int(np.prod(shape))}")
    return a.reshape(shape)


class Stream:
    """One session on the server (Client.start). Not for sending from several threads at once."""

    def __init__(self, ws: WebSocket, ready: dict, width: int, height: int, maps: bool,
                 timeout: float):
        self.session = ready.get("session", "")
        self.device = ready.get("device", "")
        self.model_width = ready.get("model_width", 0)
        self.model_height = ready.get("model_height", 0)
        self.estimate_bytes = ready.get("estimate_bytes", 0)
        self.width, self.height, self.maps, self.timeout = width, height, maps, timeout
        self.sent = 0  # frames sent
        self._ws = ws
        self._cond = threading.Condition()
        self._results: deque = deque()  # received, not yet taken
        self._received = 0
        self._pending: Optional[Result] = None  # a result whose maps are still to come
        self._end = None  # None while open; then the frame count of "finished" or an exception
        self._violation = False  # the end is a message the server should not have sent
        self._reader = threading.Thread(target=self._read_loop, daemon=True,
                                        name=f"lingbot-stream-{self.session}")
        self._reader.start()

    # -- receiving (the reader thread) --

    def _read_loop(self) -> None:
        end = None
        try:
            while end is None:
                try:
                    end = self._on_message(*self._ws.recv())
                except socket.timeout:
                    continue  # idle is fine; whoever waits for a result has its own timeout
            # "finished" or an error message: the server closes next; answer it.
            self._ws.close()
        except ConnectionClosed as e:  # the socket is closed already
            end = ClientError(f"the server closed the stream: {e}") if e.code != NORMAL else \
                ClientError("the server closed the stream before it finished")
        except WebSocketError as e:  # closed already, with the code that says why
            end = e
        except (ClientError, ValueError) as e:  # ValueError: not JSON
            end = e if isinstance(e, ClientError) else ClientError(f"malformed message: {e}")
            self._violation = True
            self._ws.close(POLICY, str(end)[:100], wait=False)
        except OSError as e:
            end = ClientError(f"stream connection failed: {e}")
            self._ws.abort()
        with self._cond:
            self._end = end
            self._cond.notify_all()

    def _on_message(self, opcode: int, data):
        """Queues a result; returns the end of the stream (frames or an exception) or None."""
        if opcode == BINARY:
            r, self._pending = self._pending, None
            if r is None:
                raise ClientError("a binary message the stream did not expect")
            n = r.height * r.width
            if len(data) != 8 * n:
                raise ClientError(f"result {r.index}: maps of {len(data)} bytes, expected {8 * n}")
            maps = np.frombuffer(data, "<f4").reshape(2, r.height, r.width)
            r.depth, r.confidence = maps[0], maps[1]
            self._queue(r)
            return None
        if self._pending is not None:
            raise ClientError(f"result {self._pending.index} came without its maps")
        msg = json.loads(data)
        kind = msg.get("type")
        if kind == "error":
            return ServerError(msg.get("reason", "(no reason)"))
        if kind == "finished":
            if msg.get("frames") != self._received:
                return ClientError(f"the server finished after {msg.get('frames')} frames, "
                                   f"{self._received} results came")
            return int(msg["frames"])
        if kind != "result":
            raise ClientError(f"unexpected message type {kind!r}")
        r = self._result(msg)
        if self.maps:
            self._pending = r  # the binary message of its maps comes next
        else:
            self._queue(r)
        return None

    def _queue(self, r: Result) -> None:
        with self._cond:
            self._results.append(r)
            self._received += 1
            self._cond.notify_all()

    def _result(self, m: dict) -> Result:
        try:
            index, h, w = int(m["index"]), int(m["height"]), int(m["width"])
            # Results come in frame order, none lost.
            if index != self._received:
                raise ClientError(f"result {index} came where {self._received} was due")
            return Result(index=index, keyframe=bool(m["keyframe"]),
                          scale_frame=bool(m.get("scale_frame", False)),
                          pose_enc=_array(m["pose_enc"], (9,), "pose_enc"),
                          c2w=_array(m["c2w"], (3, 4), "c2w"), w2c=_array(m["w2c"], (3, 4), "w2c"),
                          intrinsics=_array(m["intrinsics"], (3, 3), "intrinsics"),
                          height=h, width=w)
        except (KeyError, TypeError, ValueError) as e:
            raise ClientError(f"malformed result message: {e!r}") from None

    # -- the caller's side --

    def _next(self, block: bool = True) -> Optional[Result]:
        """The next result; None at the end (or, without `block`, when none is ready)."""
        with self._cond:
            ready = lambda: self._results or self._end is not None  # noqa: E731
            if block and not self._cond.wait_for(ready, self.timeout):
                raise TimeoutError(f"no result from the server within {self.timeout} s "
                                   f"({self.sent} frames sent, {self._received} results)")
            if self._results:
                return self._results.popleft()
            if isinstance(self._end, Exception):
                raise self._end
            return None

    def _check_open(self) -> None:
        with self._cond:
            if isinstance(self._end, Exception):
                raise self._end
            if self._end is not None:
                raise ClientError("the stream has finished")

    def _broken(self, error: Exception, doing: str):
        """Raises for a failed send: the server's own reason when it sent one (it may have
        closed for a bad frame), or what was wrong with a message of the server's when the
        reader closed the stream for it (a send racing that close fails as a consequence), else
        the send's error. The stream is unusable either way."""
        self._reader.join(1.0)
        if self._reader.is_alive():  # e.g. a timeout with half a frame sent: end it here
            self._ws.abort()
            self._reader.join(self.timeout)
        with self._cond:
            if isinstance(self._end, ServerError) or self._violation:
                raise self._end
        raise ClientError(f"{doing} failed: {error}") from error

    def send(self, frame) -> None:
        """Sends one frame: uint8 [H, W, 3] RGB (raw), JPEG/PNG bytes, or a JPEG/PNG path.

        Blocks while the server holds back (it reads a few frames ahead of its model). Raises
        ValueError for a frame of another size than started with, the server's error if it has
        ended the stream, ClientError when the send fails or waits past `timeout` (the stream
        is over then).
        """
        self._check_open()
        data = encode_frame(frame)
        size = _frame_size(data)
        if size is not None and tuple(size) != (self.height, self.width):
            raise ValueError(f"frame of {size[1]}x{size[0]}, the stream was started with "
                             f"{self.width}x{self.height}")
        try:
            self._ws.send_binary(data)
        except (OSError, WebSocketError) as e:
            self._broken(e, f"sending frame {self.sent}")
        self.sent += 1

    def poll(self) -> List[Result]:
        """The results that have arrived and were not taken yet (does not wait)."""
        out = []
        while (r := self._next(block=False)) is not None:
            out.append(r)
        return out

    def results(self) -> Iterator[Result]:
        """Yields results in frame order as they arrive, until the stream has finished.

        Waits at most `timeout` seconds for each; meant for a thread beside the sender, or
        after finish() was sent (see finish)."""
        while (r := self._next()) is not None:
            yield r

    __iter__ = results

    def finish(self, take: bool = True) -> List[Result]:
        """Asks for the outstanding results, waits for them and for the server's close.

        Returns the results not taken yet (all of them when nothing was read before). With
        take=False they are left to a thread that iterates the stream, and [] is returned."""
        self._check_open()
        try:
            self._ws.send_text(json.dumps({"type": "finish"}))
        except (OSError, WebSocketError) as e:
            self._broken(e, "sending finish")
        out = list(self.results()) if take else self._wait_end()
        self._reader.join(self.timeout)
        if self._end != self.sent:
            raise ClientError(f"the server finished {self._end} frames, {self.sent} were sent")
        return out

    def _wait_end(self) -> list:
        """Waits for the end of the stream, at most `timeout` between two results."""
        with self._cond:
            while self._end is None:
                seen = self._received
                if not self._cond.wait_for(lambda: self._end is not None or
                                           self._received != seen, self.timeout):
                    raise TimeoutError(f"no result from the server within {self.timeout} s "
                                       f"({self.sent} frames sent, {self._received} results)")
            if isinstance(self._end, Exception):
                raise self._end
        return []

    @property
    def finished(self) -> bool:
        return isinstance(self._end, int)

    def close(self) -> None:
        """Ends the stream at once (the server frees the session); idempotent."""
        if self._reader.is_alive():
            self._ws.close(GOING_AWAY, "client closed the stream", wait=False)
            self._ws.abort()  # wakes the reader
            self._reader.join(self.timeout)

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Client:
    """A `lingbot-map serve` server at `url` (http://host:port, or ws://, https://, wss://).

    token: the server's client token, sent as "Authorization: Bearer". timeout: seconds any
    single wait may take (connecting, a send held back, the next result). max_message: the
    largest message accepted from the server, in bytes.
    """

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = 60.0,
                 max_message: int = 64 << 20):
        u = urllib.parse.urlsplit(url)
        scheme = {"ws": "http", "wss": "https"}.get(u.scheme, u.scheme)
        if scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"{url}: expected http://host:port (or ws://, https://, wss://)")
        self.base = f"{scheme}://{u.netloc}"
        self.token, self.timeout, self.max_message = token, timeout, max_message

    def _headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def get(self, path: str) -> bytes:
        """The body of GET `path` (e.g. /healthz); ClientError for any status but 200."""
        req = urllib.request.Request(self.base + path, headers=self._headers())
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.read(16 << 20)
        except urllib.error.HTTPError as e:
            raise ClientError(f"GET {path}: HTTP {e.code} {e.reason}") from None
        except (OSError, ValueError) as e:
            raise ClientError(f"GET {path}: {e}") from None

    def info(self) -> dict:
        """GET /v1/info: version, model, devices (free/reserved bytes), live sessions."""
        return json.loads(self.get("/v1/info"))

    def metrics(self) -> "Metrics":
        return Metrics(self.get("/metrics").decode("utf-8"))

    def start(self, width: int, height: int, maps: bool = False, frames: int = 0,
              stream: Optional[dict] = None, preprocess: Optional[str] = None,
              target: Optional[int] = None) -> Stream:
        """Opens a session for frames of width x height pixels.

        frames: how many frames will come (0 = open-ended), for admission control. stream:
        StreamOptions fields (scale_frames, window, keyframe_interval, camera_iterations,
        max_special_frames, ...); missing ones take the server's defaults. preprocess and target:
        as the CLI's ("crop" to 518 by default). Raises Refused when the server cannot fit the
        stream, ServerError for options it rejects.
        """
        start = {"type": "start", "width": int(width), "height": int(height),
                 "maps": bool(maps), "frames": int(frames)}
        if stream:
            start["stream"] = dict(stream)
        if preprocess is not None:
            start["preprocess"] = preprocess
        if target is not None:
            start["target"] = int(target)
        ws_url = self.base.replace("http", "ws", 1) + "/v1/stream"
        try:
            ws = WebSocket(ws_url, self._headers(), self.timeout, self.max_message)
        except WebSocketError as e:  # an HTTP error status, a bad handshake
            raise ClientError(f"{ws_url}: {e}") from None
        except OSError as e:
            raise ClientError(f"{ws_url}: cannot connect: {e}") from None
        try:
            ws.send_text(json.dumps(start))
            opcode, data = ws.recv()  # the answer to "start"; nothing else may come first
            if opcode != TEXT:
                raise ValueError("a binary message before the answer to start")
            msg = json.loads(data)
        except ConnectionClosed as e:
            ws.abort()
            raise ClientError(f"the server closed the stream at its start: {e}") from None
        except (OSError, ValueError, WebSocketError) as e:
            ws.abort()
            raise ClientError(f"starting the stream failed: {e}") from None
        kind = msg.get("type")
        if kind == "ready":
            return Stream(ws, msg, int(width), int(height), bool(maps), self.timeout)
        ws.close(TRY_AGAIN if kind == "refused" else NORMAL)
        if kind == "refused":
            raise Refused(msg.get("reason", ""), int(msg.get("need_bytes", 0)),
                          int(msg.get("free_bytes", 0)))
        if kind == "error":
            raise ServerError(msg.get("reason", "(no reason)"))
        raise ClientError(f"unexpected answer to start: {data[:200]}")


# -- Prometheus text format 0.0.4 --

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


class Metrics:
    """Parsed /metrics: samples as (name, labels, value); get(name, **labels) looks one up."""

    def __init__(self, text: str):
        self.samples = []
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = _SAMPLE.match(line)
            if not m:
                raise ValueError(f"metrics line {number}: cannot parse {line[:80]!r}")
            name, labels_text, value = m.groups()
            labels, at = {}, 0
            while labels_text and at < len(labels_text):
                lm = _LABEL.match(labels_text, at)
                if not lm or lm.end() == at:
                    raise ValueError(f"metrics line {number}: bad labels {labels_text[:80]!r}")
                labels[lm.group(1)] = re.sub(r"\\(.)", lambda c: "\n" if c.group(1) == "n"
                                             else c.group(1), lm.group(2))
                at = lm.end()
            self.samples.append((name, labels, float(value)))  # float() reads NaN, +Inf, -Inf

    def get(self, name: str, default: Optional[float] = None, **labels) -> Optional[float]:
        """The value of the sample `name` whose labels include `labels`; `default` if none."""
        for n, ls, v in self.samples:
            if n == name and all(ls.get(k) == str(x) for k, x in labels.items()):
                return v
        return default

    def all(self, name: str) -> List[tuple]:
        """(labels, value) of every sample called `name`."""
        return [(ls, v) for n, ls, v in self.samples if n == name]


def metrics(url: str, token: Optional[str] = None, timeout: float = 10.0) -> Metrics:
    """GET url/metrics and parse it (url: the server's http://host:port)."""
    return Client(url, token=token, timeout=timeout).metrics()
