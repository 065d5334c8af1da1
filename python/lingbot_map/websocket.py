"""A minimal RFC 6455 WebSocket client: standard library + numpy (for masking), nothing else.

What `lingbot-map serve` needs and no more: the opening handshake with its Sec-WebSocket-Accept
check, masked client frames (never fragmented), fragmented messages on receive, ping -> pong,
the close handshake, a limit on message size, and a timeout on every socket operation. No
extensions (compression) and no subprotocols are negotiated. ws:// and wss:// (TLS by the
standard ssl module) are both supported.

One thread may receive while another sends: sends hold a lock, so that a pong written by the
receiving thread never lands inside a frame being sent.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
import struct
import threading
import urllib.parse
from typing import Optional, Tuple

import numpy as np

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, section 1.3
MAX_HEADER_BYTES = 16 * 1024

# Opcodes
CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

# Close codes
NORMAL, GOING_AWAY, PROTOCOL_ERROR, INVALID_DATA, POLICY, TOO_BIG, TRY_AGAIN = (
    1000, 1001, 1002, 1007, 1008, 1009, 1013)


class WebSocketError(Exception):
    """The connection failed or the peer broke the protocol."""


class HandshakeError(WebSocketError):
    """The server answered the upgrade with something other than 101; `status` is its code."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status


class ConnectionClosed(WebSocketError):
    """The peer closed the connection; `code` is its close code (1006 when no close frame)."""

    def __init__(self, code: int, reason: str = ""):
        super().__init__(f"connection closed ({code}{': ' + reason if reason else ''})")
        self.code = code
        self.reason = reason


def accept_key(key: str) -> str:
    """The Sec-WebSocket-Accept value a server must answer to Sec-WebSocket-Key `key`."""
    return base64.b64encode(hashlib.sha1(key.encode() + GUID).digest()).decode()


def mask(payload: bytes, key: bytes) -> bytes:
    """XORs `payload` with the 4-byte `key` repeated (vectorised: frames can be megabytes)."""
    n = len(payload)
    data = np.frombuffer(payload, np.uint8)
    out = np.empty(n, np.uint8)
    words = n // 4
    out[:words * 4].view(np.uint32)[:] = (np.frombuffer(payload, np.uint32, count=words) ^
                                          np.frombuffer(key, np.uint32)[0])
    for i in range(words * 4, n):
        out[i] = data[i] ^ key[i % 4]
    return out.tobytes()


def encode_frame(opcode: int, payload: bytes, key: Optional[bytes] = None) -> bytes:
    """One final (FIN) frame; masked with `key` (random when None), as a client must."""
    key = os.urandom(4) if key is None else key
    n = len(payload)
    if n < 126:
        header = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 1 << 16:
        header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return header + key + mask(payload, key)


def parse_url(url: str, default_path: str = "/") -> Tuple[bool, str, int, str]:
    """(tls, host, port, path with query) of a ws://, wss://, http:// or https:// URL."""
    u = urllib.parse.urlsplit(url)
    if u.scheme not in ("ws", "wss", "http", "https"):
        raise ValueError(f"{url}: not a ws://, wss://, http:// or https:// URL")
    if not u.hostname:
        raise ValueError(f"{url}: no host")
    tls = u.scheme in ("wss", "https")
    path = u.path or default_path
    if u.query:
        path += "?" + u.query
    return tls, u.hostname, u.port or (443 if tls else 80), path


class WebSocket:
    """One client connection. Messages are (opcode, payload): TEXT with str, BINARY with bytes."""

    def __init__(self, url: str, headers: Optional[dict] = None, timeout: float = 30.0,
                 max_message: int = 64 << 20):
        self.max_message = max_message
        self._send_lock = threading.Lock()
        self._buf = bytearray()  # bytes received but not yet parsed
        self._close_sent = False
        self._opcode, self._parts, self._size = 0, None, 0  # the message being received
        tls, host, port, path = parse_url(url)
        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            if tls:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
            sock.settimeout(timeout)  # every later send and receive
            self.sock = sock
            self._handshake(host, port, path, headers or {})
        except BaseException:
            sock.close()
            raise

    # -- opening handshake (RFC 6455 section 4) --

    def _handshake(self, host: str, port: int, path: str, headers: dict) -> None:
        key = base64.b64encode(os.urandom(16)).decode()
        if any(c in str(v) for v in headers.values() for c in "\r\n"):
            raise ValueError("a header value with a line break")
        host = f"[{host}]" if ":" in host else host  # IPv6 literal
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        while b"\r\n\r\n" not in self._buf:
            if len(self._buf) > MAX_HEADER_BYTES:
                raise HandshakeError("the server's response headers are too long")
            self._fill()
        head, _, rest = bytes(self._buf).partition(b"\r\n\r\n")
        self._buf = bytearray(rest)  # frames may follow the headers at once
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        fields = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise HandshakeError(f"not an HTTP response: {status_line[:80]!r}")
        status = int(parts[1])
        if status != 101:
            body = self._http_body(fields)
            raise HandshakeError(f"HTTP {status}{': ' + body if body else ''}", status)
        if fields.get("upgrade", "").lower() != "websocket" or "upgrade" not in [
                t.strip().lower() for t in fields.get("connection", "").split(",")]:
            raise HandshakeError("the server did not upgrade to a WebSocket")
        if fields.get("sec-websocket-accept") != accept_key(key):
            raise HandshakeError("wrong Sec-WebSocket-Accept from the server")
        if fields.get("sec-websocket-extensions") or fields.get("sec-websocket-protocol"):
            raise HandshakeError("the server chose an extension or subprotocol not asked for")

    def _http_body(self, fields: dict) -> str:
        """The start of a refusal's body (e.g. "unauthorized"), for the error message."""
        try:
            n = min(int(fields.get("content-length", "0")), 1024)
            while len(self._buf) < n:
                self._fill()
            return bytes(self._buf[:n]).decode("utf-8", "replace").strip()
        except (OSError, ValueError, WebSocketError):
            return ""

    # -- reading --

    def _fill(self) -> None:
        chunk = self.sock.recv(1 << 16)  # socket.timeout (TimeoutError) after `timeout`
        if not chunk:
            raise ConnectionClosed(1006, "the connection ended without a close frame")
        self._buf += chunk

    def _need(self, n: int) -> None:
        while len(self._buf) < n:
            self._fill()

    def _read_frame(self) -> Tuple[bool, int, bytes]:
        # Nothing is consumed until the whole frame is here, so a timeout loses nothing.
        self._need(2)
        b0, b1 = self._buf[0], self._buf[1]
        fin, opcode, n, at = bool(b0 & 0x80), b0 & 0x0F, b1 & 0x7F, 2
        if b0 & 0x70:
            self._fail(PROTOCOL_ERROR, "reserved bits set (no extension was negotiated)")
        if b1 & 0x80:
            self._fail(PROTOCOL_ERROR, "a masked frame from the server")
        if n == 126:
            self._need(4)
            (n,), at = struct.unpack_from("!H", self._buf, 2), 4
        elif n == 127:
            self._need(10)
            (n,), at = struct.unpack_from("!Q", self._buf, 2), 10
            if n >> 63:
                self._fail(PROTOCOL_ERROR, "frame length with the top bit set")
        if opcode >= CLOSE and (not fin or n > 125):
            self._fail(PROTOCOL_ERROR, "a fragmented or long control frame")
        if n > self.max_message:  # refused before anything that large is read
            self._fail(TOO_BIG, f"a frame of {n} bytes (limit {self.max_message})")
        self._need(at + n)
        payload = bytes(self._buf[at:at + n])
        del self._buf[:at + n]
        return fin, opcode, payload

    def recv(self):
        """The next message as (TEXT, str) or (BINARY, bytes); answers pings on the way.

        Raises ConnectionClosed when the server closes (after answering its close frame),
        WebSocketError for a protocol violation (after closing), ConnectionError when the
        connection breaks, socket.timeout when nothing arrives for `timeout` seconds; recv()
        may be called again after a timeout (a message being received is kept, whole frames
        and fragments alike).
        """
        while True:
            fin, op, payload = self._read_frame()
            if op == PING:
                self._send(PONG, payload)
                continue
            if op == PONG:
                continue
            if op == CLOSE:
                self._on_close(payload)
            if op in (TEXT, BINARY):
                if self._parts is not None:
                    self._fail(PROTOCOL_ERROR, "a new message inside a fragmented one")
                self._opcode, self._parts, self._size = op, [], 0
            elif op != CONT:
                self._fail(PROTOCOL_ERROR, f"unknown opcode {op}")
            elif self._parts is None:
                self._fail(PROTOCOL_ERROR, "a continuation frame outside a message")
            self._size += len(payload)
            if self._size > self.max_message:
                self._fail(TOO_BIG, f"a message over {self.max_message} bytes")
            self._parts.append(payload)
            if fin:
                data, self._parts = b"".join(self._parts), None
                if self._opcode == BINARY:
                    return BINARY, data
                try:
                    return TEXT, data.decode("utf-8")
                except UnicodeDecodeError:
                    self._fail(INVALID_DATA, "a text message that is not UTF-8")

    def _on_close(self, payload: bytes):
        if len(payload) == 1:
            self._fail(PROTOCOL_ERROR, "a close frame of one byte")
        code = struct.unpack("!H", payload[:2])[0] if payload else 1005
        reason = payload[2:].decode("utf-8", "replace")
        if not self._close_sent:  # echo it, then the server closes the TCP connection
            try:
                self._send(CLOSE, payload[:2])
            except OSError:
                pass
        self.sock.close()
        raise ConnectionClosed(code, reason)

    def _fail(self, code: int, why: str):
        self.close(code, why[:100], wait=False)
        raise WebSocketError(why)

    # -- writing --

    def _send(self, opcode: int, payload: bytes) -> None:
        frame = encode_frame(opcode, payload)
        with self._send_lock:
            if self._close_sent and opcode != CLOSE:
                raise WebSocketError("the connection is closing")
            if opcode == CLOSE:
                self._close_sent = True
            self.sock.sendall(frame)  # socket.timeout when the peer stops reading that long

    def send_text(self, text: str) -> None:
        self._send(TEXT, text.encode("utf-8"))

    def send_binary(self, data: bytes) -> None:
        self._send(BINARY, bytes(data))

    def close(self, code: int = NORMAL, reason: str = "", wait: bool = True) -> None:
        """Sends a close frame and, with `wait`, reads until the server's answer (or a timeout);
        then closes the socket. Safe to call more than once."""
        try:
            if not self._close_sent:
                self._send(CLOSE, struct.pack("!H", code) + reason.encode("utf-8"))
            while wait and self._read_frame()[1] != CLOSE:
                pass  # data still in flight is dropped
        except (OSError, WebSocketError, struct.error, ValueError):
            pass
        finally:
            self.sock.close()

    def abort(self) -> None:
        """Ends the connection at once, without a close handshake: wakes a blocked recv()."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
