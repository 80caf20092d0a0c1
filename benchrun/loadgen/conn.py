"""Connections of the load generator: kernel-stamped sockets, stamped stream readers and the keep-alive pool.

Every delivery of bytes carries its arrival time on the monotonic clock: the kernel's
receive stamp (``SO_TIMESTAMPNS``) on plain HTTP, the event-loop delivery time otherwise
(see :mod:`benchrun.loadgen.client` for why).

The endpoint's host is looked up once (:func:`resolve`, before a sweep's first point; a pool
given none looks it up at its first connection) and every connection of the pool connects to
those addresses, in turn when there are several (a headless Service's pods); the Host header and TLS SNI keep the name. A lookup per
connection ran in asyncio's default thread pool, so a connection opened inside a request had
it (and any wait behind other work in that pool) inside the request's TTFT and E2E.
"""

from __future__ import annotations

import asyncio
import collections
import os
import socket
import ssl
import struct
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchrun.loadgen.endpoint import Endpoint

CLOCK = time.perf_counter_ns


class TimedReader(asyncio.StreamReader):
    """A StreamReader that stamps every delivery of bytes with the monotonic clock.

    ``feed_data`` runs in the protocol's ``data_received``, i.e. in the event-loop iteration
    in which the kernel handed the bytes over, before any coroutine resumes. Each event
    parsed later takes the stamp of the delivery that carried its last byte, so parsing
    other streams first (32 sockets ready in one iteration) does not delay timestamps.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fed = 0  # bytes delivered so far
        self.consumed = 0  # bytes handed to the parser so far
        self.marks: collections.deque[tuple[int, int]] = collections.deque()  # (end offset, t_ns)

    def feed_data(self, data: bytes) -> None:
        if data:
            self.fed += len(data)
            self.marks.append((self.fed, CLOCK()))
        super().feed_data(data)

    def skip(self, n: int) -> None:
        """Account for ``n`` bytes consumed without timestamps (headers)."""
        self.consumed += n
        while self.marks and self.marks[0][0] <= self.consumed:
            self.marks.popleft()

    def segments(self, data: bytes) -> list[tuple[bytes, int]]:
        """Split ``data`` (the next bytes read) into (piece, delivery time) pairs."""
        start = self.consumed
        end = start + len(data)
        self.consumed = end
        out: list[tuple[bytes, int]] = []
        cut = start
        marks = self.marks
        while marks and marks[0][0] <= end:
            m_end, t = marks.popleft()
            if m_end > cut:
                out.append((data[cut - start : m_end - start], t))
                cut = m_end
        if cut < end:
            out.append((data[cut - start :], marks[0][1] if marks else CLOCK()))
        return out


# Linux: SO_TIMESTAMPNS == SCM_TIMESTAMPNS == 35 (not exported by Python's socket module);
# elsewhere no kernel stamps are asked for and event-loop delivery times are used.
SO_TIMESTAMPNS: int | None = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None)


def enable_kernel_timestamps(sock: socket.socket) -> bool:
    """Ask the kernel to stamp received data on ``sock``; False where it cannot."""
    if SO_TIMESTAMPNS is None:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def realtime_offset_ns() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC (perf_counter), from the tightest of 9 brackets."""
    best: tuple[int, int] | None = None
    for _ in range(9):
        a = CLOCK()
        r = time.clock_gettime_ns(time.CLOCK_REALTIME)
        b = CLOCK()
        if best is None or b - a < best[0]:
            best = (b - a, r - (a + b) // 2)
    assert best is not None
    return best[1]


@dataclass(frozen=True)
class Resolved:
    """A host looked up once: the addresses to connect to, in the resolver's order, and the lookup's time."""

    host: str
    port: int
    addrs: tuple[tuple[int, int, int, Any], ...]  # (family, type, proto, sockaddr)
    lookup_ms: float

    def info(self) -> dict[str, Any]:
        """What a result's context says of it."""
        return {"host": self.host, "addresses": [a[3][0] for a in self.addrs], "lookup_ms": round(self.lookup_ms, 3)}


def _resolved(host: str, port: int, infos: list[Any], t0: int) -> Resolved:
    return Resolved(host, port, tuple((fam, typ, proto, addr) for fam, typ, proto, _, addr in infos), (CLOCK() - t0) / 1e6)


def resolve(host: str, port: int) -> Resolved:
    """Look ``host`` up now (blocking: before any load is sent); socket.gaierror when it does not resolve."""
    t0 = CLOCK()
    return _resolved(host, port, socket.getaddrinfo(host, port, type=socket.SOCK_STREAM), t0)


async def resolve_async(host: str, port: int) -> Resolved:
    """:func:`resolve` on the running loop (the lookup in its default thread pool)."""
    t0 = CLOCK()
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return _resolved(host, port, infos, t0)


class KernelStampedConn:
    """A plain-TCP connection read with ``recvmsg`` so each delivery carries the kernel's
    receive timestamp (``SO_TIMESTAMPNS``), converted to the monotonic clock.

    Why: a single-threaded client stamps bytes only when its event loop gets to them; with
    32 streams bursting at once, or a busy shared host, that lags the arrival by
    milliseconds. The kernel stamps the packet when it arrives, independent of when this
    process runs. Where the kernel gives no stamp, the delivery time in the event loop is
    used (``kernel_stamps`` counts the kernel ones). It offers the subset of the
    StreamReader/StreamWriter interface the client uses, with the same
    ``skip``/``segments`` accounting as :class:`TimedReader`.
    """

    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop, offset_ns: int) -> None:
        self.sock = sock
        self.loop = loop
        self.offset_ns = offset_ns
        self.buf = bytearray()
        self.fed = 0
        self.consumed = 0
        self.marks: collections.deque[tuple[int, int]] = collections.deque()
        self.kernel_stamps = 0
        self._eof = False
        self._closed = False
        self._error: OSError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self._wbuf = bytearray()
        self._last_t = CLOCK()
        self._fd = sock.fileno()
        loop.add_reader(self._fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            data, anc, _, _ = self.sock.recvmsg(262144, 64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._error = exc
            data, anc = b"", []
        if not data:
            self._eof = True
            self.loop.remove_reader(self._fd)
        else:
            t = None
            for level, kind, cdata in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(cdata) >= 16:
                    sec, nsec = struct.unpack("qq", cdata[:16])
                    t = sec * 1_000_000_000 + nsec - self.offset_ns
                    self.kernel_stamps += 1
            self.buf += data
            self.fed += len(data)
            self.marks.append((self.fed, t if t is not None else CLOCK()))
            self._last_t = self.marks[-1][1]
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def _wait(self) -> None:
        self._waiter = self.loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` buffered bytes (all when -1); b"" at end of stream."""
        while not self.buf and not self._eof and not self._closed:
            await self._wait()
        if not self.buf:
            if self._error is not None:
                raise self._error
            return b""
        if n < 0 or n >= len(self.buf):
            data = bytes(self.buf)
            self.buf.clear()
        else:
            data = bytes(self.buf[:n])
            del self.buf[:n]
        return data

    async def readuntil(self, sep: bytes) -> bytes:
        """Bytes up to and including ``sep``; IncompleteReadError at end of stream."""
        start = 0
        while True:
            i = self.buf.find(sep, start)
            if i >= 0:
                data = bytes(self.buf[: i + len(sep)])
                del self.buf[: i + len(sep)]
                return data
            if len(self.buf) > (1 << 20):
                raise asyncio.LimitOverrunError(f"no {sep!r} within 1 MiB", len(self.buf))
            if self._eof or self._closed:
                if self._error is not None and not self.buf:
                    raise self._error
                raise asyncio.IncompleteReadError(bytes(self.buf), None)
            start = max(0, len(self.buf) - len(sep) + 1)
            await self._wait()

    async def readexactly(self, n: int) -> bytes:
        """Exactly ``n`` bytes; IncompleteReadError at end of stream."""
        while len(self.buf) < n:
            if self._eof or self._closed:
                raise asyncio.IncompleteReadError(bytes(self.buf), n)
            await self._wait()
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data

    skip = TimedReader.skip
    segments = TimedReader.segments

    def at_eof(self) -> bool:
        return self._eof and not self.buf

    def consume_stamp(self, n: int) -> int:
        """Account for ``n`` bytes taken by readuntil/readexactly; the arrival time of the last one."""
        self.consumed += n
        marks = self.marks
        while marks and marks[0][0] < self.consumed:
            self._last_t = marks.popleft()[1]
        if marks:
            t = marks[0][1]
            if marks[0][0] == self.consumed:
                self._last_t = marks.popleft()[1]
            return t
        return self._last_t

    def write(self, data: bytes) -> None:
        """Send now; what the socket does not take is buffered and sent when writable.
        Writing to a closed connection drops the data (the reader sees the close)."""
        if self._closed:
            return
        if self._wbuf:
            self._wbuf += data
            return
        try:
            sent = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._error = self._error or exc
            self._eof = True
            return
        if sent < len(data):
            self._wbuf += data[sent:]
            self.loop.add_writer(self._fd, self._on_writable)

    def _on_writable(self) -> None:
        try:
            sent = self.sock.send(self._wbuf)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._error = self._error or exc
            self._wbuf.clear()
            sent = 0
        del self._wbuf[:sent]
        if not self._wbuf:
            self.loop.remove_writer(self._fd)
            self._wake_drain()

    def _wake_drain(self) -> None:
        w = self._drain_waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def drain(self) -> None:
        """Wait until buffered output has been handed to the kernel (or the connection closed)."""
        while self._wbuf and not self._closed:
            self._drain_waiter = self.loop.create_future()
            try:
                await self._drain_waiter
            finally:
                self._drain_waiter = None

    def is_closing(self) -> bool:
        return self._closed or self._eof

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.loop.remove_reader(self._fd)
            if self._wbuf:
                self.loop.remove_writer(self._fd)
                self._wbuf.clear()
            self.sock.close()
            w = self._waiter
            if w is not None and not w.done():
                w.set_result(None)
            self._wake_drain()

    def abort(self) -> None:
        """Close with a TCP reset (no graceful FIN)."""
        if not self._closed:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            self.close()

    async def wait_closed(self) -> None:
        return None


def peer_closed(c: "_Conn") -> bool:
    """Whether the server has closed (FIN or RST) an idle connection, asked of the kernel: a
    non-blocking ``MSG_PEEK``, as urllib3 checks a pooled connection before reuse. A server that
    closes after each response without ``Connection: close`` sends its FIN right behind the
    response; a closed-loop stream took the connection back before the event loop had read it,
    and its next request failed as ``closed`` (4 of 10 in review). Bytes waiting (a TLS 1.3
    session ticket the SSL layer has not read) mean the connection is alive."""
    sock = getattr(c.reader, "sock", None)
    if sock is None:
        sock = c.writer.get_extra_info("socket")
    if sock is None:
        return False
    try:
        if isinstance(sock, socket.socket):
            data = sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        else:  # asyncio's TransportSocket offers no recv: peek through a duplicate of the descriptor
            with socket.socket(fileno=os.dup(sock.fileno())) as dup:
                data = dup.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except (BlockingIOError, InterruptedError):
        return False  # nothing waiting: alive
    except OSError:
        return True  # reset, or not a connection any more
    return data == b""


class _Conn:
    __slots__ = ("reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer


class ConnectionPool:
    """Keep-alive connections to one endpoint (one pool per worker event loop).

    ``resolved``: the endpoint's host looked up beforehand (:func:`resolve`); without it the pool
    looks it up once, at its first connection. Either way no later connection looks it up again.
    ``peers`` counts the connections opened to each address."""

    def __init__(self, endpoint: Endpoint, connect_timeout_s: float = 10.0, kernel_timestamps: bool = True,
                 resolved: Resolved | None = None) -> None:
        self.endpoint = endpoint
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[_Conn] = []
        self._ssl = ssl.create_default_context() if endpoint.scheme == "https" else None
        self.opened = 0
        self.kernel_timestamps = kernel_timestamps and endpoint.scheme == "http" and SO_TIMESTAMPNS is not None
        self._offset_ns = realtime_offset_ns()
        self.resolved = resolved
        self._resolving: asyncio.Future[Resolved] | None = None
        self.peers: collections.Counter[str] = collections.Counter()
        self._turn = 0  # which resolved address the next connection tries first
        self._refused: set[Any] = set()  # addresses whose last connect failed
        self.stale_dropped = 0  # idle connections found closed by the server when about to be reused

    async def acquire(self) -> tuple[_Conn, bool]:
        """An idle live connection (reused=True) or a new one. An idle connection whose peer has
        closed it is dropped even when the event loop has not read the close yet (:func:`peer_closed`)."""
        while self._idle:
            c = self._idle.pop()
            if c.writer.is_closing() or c.reader.at_eof() or peer_closed(c):
                c.writer.close()
                self.stale_dropped += 1
                continue
            return c, True
        return await self._open(), False

    async def fill(self, n: int, parallel: int = 8) -> int:
        """Open connections until ``n`` live ones are idle, ``parallel`` at a time (a ramp, not
        one burst the server accepts one after another); returns how many were opened. A
        connection that fails to open stops the ramp: requests then open their own."""
        live = []
        for c in self._idle:
            if c.writer.is_closing() or c.reader.at_eof():
                c.writer.close()
            else:
                live.append(c)
        self._idle = live
        opened = 0
        while len(self._idle) < n:
            k = min(parallel, n - len(self._idle))
            got = await asyncio.gather(*(self._open() for _ in range(k)), return_exceptions=True)
            ok = [c for c in got if isinstance(c, _Conn)]
            self._idle.extend(ok)
            opened += len(ok)
            if len(ok) < k:
                break
        return opened

    async def _addresses(self) -> Resolved:
        """The resolution every connection uses; the first connection looks the host up (once,
        however many connections are opened at that moment) when none was given."""
        if self.resolved is not None:
            return self.resolved
        task = self._resolving
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            # the first lookup, or again after a failed one
            task = self._resolving = asyncio.ensure_future(resolve_async(self.endpoint.host, self.endpoint.port))
        self.resolved = await asyncio.shield(task)  # a caller's timeout does not cancel the others' lookup
        return self.resolved

    async def _connect(self) -> socket.socket:
        """A connected non-blocking TCP socket to one of the resolved addresses.

        Several addresses (a headless Service's pods, DNS round-robin) take new connections in
        turn, as a lookup per connection would have spread them; an address that refused is
        tried last from then on (``localhost``'s ``::1`` when the server listens on IPv4 only)."""
        res = await self._addresses()
        loop = asyncio.get_running_loop()
        live = [a for a in res.addrs if a[3] not in self._refused]
        k = self._turn % len(live) if live else 0
        self._turn += 1
        order = live[k:] + live[:k] + [a for a in res.addrs if a[3] in self._refused]
        last: OSError | None = None
        for fam, typ, proto, addr in order:
            sock = socket.socket(fam, typ, proto)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, addr)
            except OSError as exc:
                sock.close()
                last = exc
                self._refused.add(addr)
                continue
            except BaseException:
                sock.close()
                raise
            self._refused.discard(addr)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.peers[str(addr[0])] += 1
            return sock
        raise last or OSError(f"no address for {self.endpoint.host}:{self.endpoint.port}")

    async def _open(self) -> _Conn:
        loop = asyncio.get_running_loop()
        if self.kernel_timestamps:
            async with asyncio.timeout(self.connect_timeout_s):
                sock = await self._connect()
            enable_kernel_timestamps(sock)
            kc = KernelStampedConn(sock, loop, self._offset_ns)
            self.opened += 1
            return _Conn(kc, kc)  # type: ignore[arg-type]
        reader = TimedReader(limit=1 << 20, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        async with asyncio.timeout(self.connect_timeout_s):
            sock = await self._connect()
            # the TLS handshake names the host (SNI, certificate check), not the address
            transport, _ = await loop.create_connection(
                lambda: protocol,
                sock=sock,
                ssl=self._ssl,
                server_hostname=self.endpoint.host if self._ssl else None,
            )
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        self.opened += 1
        return _Conn(reader, writer)

    def release(self, conn: _Conn, reusable: bool) -> None:
        """Return a connection after a cleanly finished response, else close it."""
        if reusable and not conn.writer.is_closing():
            self._idle.append(conn)
        else:
            conn.writer.close()

    async def close(self) -> None:
        """Close every idle connection."""
        idle, self._idle = self._idle, []
        for c in idle:
            c.writer.close()
        for c in idle:
            try:
                await c.writer.wait_closed()
            except (OSError, ConnectionError):
                pass

