"""The warm orchestrator's wire format: a 4-byte length, then JSON, with file descriptors
passed alongside (SCM_RIGHTS)."""

from __future__ import annotations

import json
import os
import socket
import struct
import time
from typing import Any

FRAME = struct.Struct(">I")
MAX_FRAME = 16 << 20


# --- framing: a 4-byte length, then JSON ---------------------------------------------------

def send_frame(sock: socket.socket, doc: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(doc).encode()
    payload = FRAME.pack(len(data)) + data
    if fds:
        sent = socket.send_fds(sock, [payload], fds)
        payload = payload[sent:]
    if payload:
        sock.sendall(payload)


class FrameReader:
    """Frames from a stream socket, keeping what arrived beyond the current frame and any
    file descriptors that came with the bytes (close-on-exec; the caller owns them)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""
        self.fds: list[int] = []

    def _take(self) -> tuple[bool, Any]:
        """(True, frame) when a whole frame is buffered, else (False, None)."""
        if len(self.buf) >= FRAME.size:
            (n,) = FRAME.unpack_from(self.buf)
            if n > MAX_FRAME:
                raise ValueError(f"a frame of {n} bytes: not a benchrun peer")
            if len(self.buf) >= FRAME.size + n:
                data, self.buf = self.buf[FRAME.size:FRAME.size + n], self.buf[FRAME.size + n:]
                return True, json.loads(data)
        return False, None

    def _recv(self) -> bool:
        """Read what the socket has; False when the peer closed the connection."""
        chunk, fds, _flags, _addr = socket.recv_fds(self.sock, 65536, 8, socket.MSG_CMSG_CLOEXEC)
        self.fds.extend(fds)
        self.buf += chunk
        return bool(chunk)

    def read(self, timeout_s: float | None = None) -> Any:
        """The next frame, or None when the peer closed the connection first; with
        ``timeout_s`` the whole frame must arrive within it (socket.timeout)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            done, frame = self._take()
            if done:
                return frame
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise socket.timeout("the request did not arrive in time")
                self.sock.settimeout(left)
            if not self._recv():
                return None

    def poll(self) -> tuple[bool, Any]:
        """For a non-blocking socket that select() found readable: (True, frame) once a whole
        frame arrived, (True, None) when the peer closed first, (False, None) when more must come."""
        done, frame = self._take()
        if done:
            return done, frame
        try:
            if not self._recv():
                return True, None
        except (BlockingIOError, InterruptedError):
            return False, None
        return self._take()

    def close_fds(self) -> None:
        _close_all(self.fds)
        self.fds = []

def _close_all(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
