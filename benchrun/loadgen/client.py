"""The asyncio HTTP/1.1 streaming client and Server-Sent-Events parser of the load generator.

Why a client written on asyncio sockets rather than a library: the modules that run inside
benchmark pods may import only the standard library and numpy, and the standard library
has no asynchronous HTTP client (``http.client`` and ``urllib`` block a thread per
request). Owning the socket also gives exact timestamps, all on the monotonic clock
(``time.perf_counter_ns``, CLOCK_MONOTONIC on Linux, shared by every process of a host):

- plain ``http``: each connection is a non-blocking socket read with ``recvmsg`` and
  ``SO_TIMESTAMPNS`` (:class:`KernelStampedConn`), so every delivery carries the time the
  kernel received the packet, converted from CLOCK_REALTIME to the monotonic clock; a busy
  or descheduled client does not delay its own timestamps. (Limit: when the client has
  not read a socket for longer than one token interval, the kernel coalesces queued
  segments and keeps the later stamp, so a first token can be stamped late; the verdict's
  event-loop-lag and CPU checks flag such points.)
- ``https`` (or where the kernel gives no stamp): asyncio streams
  (``asyncio.open_connection``'s machinery) with a StreamReader that stamps bytes in
  ``data_received``, before any parsing coroutine runs (:class:`TimedReader`).

Every SSE event takes the stamp of the delivery that carried its last byte. The send time
is read just before the connection is taken from the pool and the request written; TTFT and
E2E are measured from it, so a connection opened inside a request (TCP, TLS: what a user
waits for too) counts in them, and is also recorded on its own (``connect_ms``). The host is
looked up once, before the sweep's first point, not per connection (:mod:`benchrun.loadgen.conn`).

Supported: ``Content-Length``, ``Transfer-Encoding: chunked`` and close-delimited bodies,
keep-alive connection reuse (one pool per worker), SSE ``data:`` events with LF or CRLF
line ends, comments, multi-line data, a stream's end on ``[DONE]`` or on a ``finish_reason``
chunk and the end of the body or connection, OpenAI ``usage`` (final, on the last chunk or
continuous, which gives tokens per chunk), and error objects inside the stream. Every failure
ends the request as an error with a kind (``connect``, ``http_<status>`` (naming a rejected
field and the flag that removes it), ``closed``, ``malformed_sse``, ``no_done``,
``oversized_line``, ``server_error``, ``timeout``, ``empty``, ``bad_response``) and a
one-line detail.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from typing import Any

from benchrun.loadgen.conn import (  # noqa: F401  (re-exported: the client's public names)
    SO_TIMESTAMPNS,
    ConnectionPool,
    KernelStampedConn,
    Resolved,
    TimedReader,
    _Conn,
    enable_kernel_timestamps,
    realtime_offset_ns,
    resolve,
)
from benchrun.loadgen.endpoint import APIS, USER_AGENT, Endpoint, EndpointError, build_body, build_head  # noqa: F401
from benchrun.loadgen.sse import (  # noqa: F401
    MAX_TOKENS,
    ImplausibleNumber,
    Outcome,
    _consume_stream,
    _parse_head,
    _read_error_body,
    token_count,
    unknown_field_hint,
)

CLOCK = time.perf_counter_ns


async def stream_request(
    pool: ConnectionPool,
    head: bytes,
    body: bytes,
    out: Outcome,
    *,
    timeout_s: float,
) -> bool:
    """Send one request and consume its SSE stream into ``out``; True when the request succeeded.

    ``out.send_ns`` is taken before a connection is acquired and ``out.write_ns`` just before
    the request is written on it; when a new connection had to be opened, its set-up time is
    ``out.connect_ns`` (None for a reused connection). The runner measures TTFT and E2E from
    ``send_ns`` (CONTRACT.md §5: first chunk − request send), set-up included: a server that
    accepts connections slowly (or closes them after each response) makes its users wait for
    that too. Nothing between ``send_ns`` and the connect waits on the client itself: the pool
    has no limit, so :meth:`ConnectionPool.acquire` takes an idle connection at once or opens
    one (client-side waiting, a late schedule, is ``schedule_lag_ms`` before ``send_ns``).
    """
    endpoint_chat = pool.endpoint.api == "chat"
    conn: _Conn | None = None
    reusable = False
    out.send_ns = CLOCK()
    try:
        async with asyncio.timeout(timeout_s):
            try:
                conn, out.reused_connection = await pool.acquire()
            except (OSError, ConnectionError) as exc:
                out.fail("connect", f"{type(exc).__name__}: {exc}")
                return False
            out.write_ns = CLOCK()
            if not out.reused_connection:
                out.connect_ns = out.write_ns - out.send_ns
            w = conn.writer
            w.write(head + body)
            reader = conn.reader
            try:
                raw_head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                out.fail("closed", "connection closed before the response headers")
                return False
            except asyncio.LimitOverrunError:
                out.fail("oversized_line", "response headers longer than 1 MiB")
                return False
            reader.skip(len(raw_head))
            try:
                status, headers = _parse_head(raw_head)
            except ValueError as exc:
                out.fail("bad_response", str(exc))
                return False
            out.status = status
            if status != 200:
                out.fail(f"http_{status}", "no message")
                msg = await _read_error_body(reader, headers)
                if msg:
                    hint = unknown_field_hint(msg) if 400 <= status < 500 else None
                    out.error = f"http_{status}: {msg}" + (f" ({hint})" if hint else "")
                return False
            reusable = await _consume_stream(reader, headers, out, endpoint_chat)
    except TimeoutError:
        out.fail("timeout", f"no complete response within {timeout_s:g} s (stalled after {len(out.chunk_ns)} chunks)")
        reusable = False
    except (OSError, ConnectionError) as exc:
        out.fail("closed", f"{type(exc).__name__}: {exc}")
        reusable = False
    finally:
        if conn is not None:
            pool.release(conn, reusable and out.error_kind is None)
    return out.error_kind is None


MAX_JSON_BODY = 8 << 20  # get_json: the server's /v1/models and metadata probes


async def get_json(endpoint: Endpoint, path: str, timeout_s: float = 5.0) -> Any:
    """GET ``path`` on the endpoint's host and decode the JSON body (Connection: close)."""
    ssl_ctx = ssl.create_default_context() if endpoint.scheme == "https" else None
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_connection(
            endpoint.host, endpoint.port, ssl=ssl_ctx, server_hostname=endpoint.host if ssl_ctx else None, limit=1 << 24
        )
        try:
            head = build_head(endpoint, "GET", path, 0, {"Connection": "close"}).replace(
                b"Connection: keep-alive\r\n", b""
            )
            writer.write(head)
            status, headers = _parse_head(await reader.readuntil(b"\r\n\r\n"))
            data = bytearray()
            while chunk := await reader.read(1 << 16):
                data += chunk
                if len(data) > MAX_JSON_BODY:  # a /models listing is kilobytes: never buffer without bound
                    raise OSError(f"GET {path}: body longer than {MAX_JSON_BODY >> 20} MiB")
            data = bytes(data)
        finally:
            writer.close()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        data = dechunk(data, f"GET {path}")
    if status != 200:
        raise OSError(f"GET {path}: HTTP {status}")
    try:
        return json.loads(data)
    except RecursionError:  # nested past Python's stack: a hostile server's, never a traceback
        raise ValueError(f"GET {path}: JSON nested too deeply") from None


def dechunk(data: bytes, what: str) -> bytes:
    """The body of a whole ``Transfer-Encoding: chunked`` response; OSError naming ``what`` when it is cut
    short or malformed. A body without a chunk-size line's end (``1\\r\\nA\\r\\n3x``) looped forever and grew
    without bound, outside every timeout (review 2026-12-08)."""
    body = bytearray()
    pos = 0
    while True:
        j = data.find(b"\r\n", pos)
        if j < 0:
            raise OSError(f"{what}: chunked body cut short (no end of a chunk-size line)")
        try:
            size = int(data[pos:j].split(b";")[0], 16)
        except ValueError:
            raise OSError(f"{what}: chunked body has a bad chunk size {bytes(data[pos:j][:20])!r}") from None
        if size < 0 or j + 2 + size > len(data):
            raise OSError(f"{what}: chunked body cut short (a chunk of {size} bytes)")
        if size == 0:
            return bytes(body)
        body += data[j + 2 : j + 2 + size]
        pos = j + 2 + size + 2


async def probe(endpoint: Endpoint, timeout_s: float = 5.0) -> None:
    """Open and close one TCP connection; raises OSError/TimeoutError when unreachable."""
    ssl_ctx = ssl.create_default_context() if endpoint.scheme == "https" else None
    async with asyncio.timeout(timeout_s):
        _, writer = await asyncio.open_connection(
            endpoint.host, endpoint.port, ssl=ssl_ctx, server_hostname=endpoint.host if ssl_ctx else None
        )
    writer.close()
    try:
        await writer.wait_closed()
    except (OSError, ConnectionError):
        pass
