"""A scripted stand-in for `lingbot-map serve`, for testing the client's WebSocket framing alone.

Standard library only, and none of the client's code: its framing is written again here from
RFC 6455, so that a mistake in the client is not mirrored by the server that tests it. A test
gives a script, script(peer), run on the server's thread of each connection.
"""

import base64
import hashlib
import json
import socketserver
import struct
import threading
import traceback
from contextlib import contextmanager

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Peer:
    """The server's end of one connection: the HTTP request, then frames."""

    def __init__(self, sock):
        self.sock = sock
        sock.settimeout(10)
        self.buf = b""
        self.pongs = []
        head = self.read_until(b"\r\n\r\n").decode("latin-1")
        self.request_line, *lines = head.split("\r\n")
        self.headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        self.path = self.request_line.split(" ")[1]

    def read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the client closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_until(self, marker):
        while marker not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise EOFError("the client closed the connection")
            self.buf += chunk
        out, _, self.buf = self.buf.partition(marker)
        return out

    def http(self, status, body=b"", content_type="text/plain"):
        reason = {200: "OK", 401: "Unauthorized", 404: "Not Found"}.get(status, "X")
        self.sock.sendall(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                          f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() +
                          body)

    def accept(self, accept=None):
        key = self.headers["sec-websocket-key"].encode()
        accept = accept or base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
        self.sock.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
                           ).encode())

    # -- frames --

    def send_frame(self, opcode, payload, fin=True, rsv=0, mask=None):
        n = len(payload)
        b0 = (0x80 if fin else 0) | rsv | opcode
        mbit = 0x80 if mask else 0
        if n < 126:
            head = struct.pack("!BB", b0, mbit | n)
        elif n < 65536:
            head = struct.pack("!BBH", b0, mbit | 126, n)
        else:
            head = struct.pack("!BBQ", b0, mbit | 127, n)
        if mask:
            payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            head += mask
        self.sock.sendall(head + payload)

    def send_message(self, opcode, payload, pieces=1, ping_between=None):
        """One message in `pieces` fragments, with a ping (payload `ping_between`) in between."""
        step = max(1, -(-len(payload) // pieces))
        chunks = [payload[i:i + step] for i in range(0, len(payload), step)] or [b""]
        for i, chunk in enumerate(chunks):
            self.send_frame(opcode if i == 0 else 0, chunk, fin=i == len(chunks) - 1)
            if ping_between is not None and i < len(chunks) - 1:
                self.send_frame(0x9, ping_between)

    def send_json(self, obj, pieces=1, ping_between=None):
        self.send_message(0x1, json.dumps(obj).encode(), pieces, ping_between)

    def recv_frame(self):
        """(fin, opcode, payload) of a client frame, which must be masked."""
        b0, b1 = self.read(2)
        assert b1 & 0x80, "a client frame without a mask"
        n = b1 & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self.read(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self.read(8))
        key = self.read(4)
        data = self.read(n)
        payload = bytes(b ^ key[i % 4] for i, b in enumerate(data)) if n < 4096 else \
            _unmask_big(data, key)
        return bool(b0 & 0x80), b0 & 0x0F, payload

    def recv_message(self):
        """(opcode, payload) of the next data message; (8, close payload) for a close.
        Pongs on the way are kept in self.pongs."""
        fin, opcode, payload = self.recv_frame()
        while opcode == 0xA:
            self.pongs.append(payload)
            fin, opcode, payload = self.recv_frame()
        while not fin:
            fin, _, more = self.recv_frame()
            payload += more
        return opcode, payload

    def recv_json(self):
        opcode, payload = self.recv_message()
        assert opcode == 0x1, f"expected text, got opcode {opcode}"
        return json.loads(payload)

    def close(self, code=1000, reason=b""):
        self.send_frame(0x8, struct.pack("!H", code) + reason)

    def expect_close(self):
        """The client's close frame's code (it must answer or send one)."""
        while True:
            opcode, payload = self.recv_message()
            if opcode == 0x8:
                return struct.unpack("!H", payload[:2])[0] if payload else 1005


def _unmask_big(data, key):
    import numpy as np  # large frames only: bytewise Python would take seconds
    k = np.frombuffer((key * (len(data) // 4 + 1))[:len(data)], np.uint8)
    return (np.frombuffer(data, np.uint8) ^ k).tobytes()


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        try:
            self.server.script(Peer(self.request))
        except Exception as e:  # noqa: BLE001 - raised in the test by fake_server
            traceback.print_exc()  # shown by pytest when the client failed first
            self.server.errors.append(e)


@contextmanager
def fake_server(script):
    """Yields (url, server); every connection runs script(peer). Raises the scripts' errors."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Handler)
    server.block_on_close = True  # server_close() waits for the scripts, to report them
    server.script, server.errors = script, []
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server
    finally:
        server.shutdown()
        server.server_close()
    if server.errors:
        raise server.errors[0]
