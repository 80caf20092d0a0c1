"""A synthetic OpenAI-compatible streaming server that behaves like a continuously batched engine.

Standard library only (asyncio). It serves ``POST /v1/completions``,
``POST /v1/chat/completions`` (streaming SSE and non-streaming), ``GET /v1/models``,
``GET /health``, ``GET /metrics`` (vLLM's metric names, :mod:`benchrun.loadgen.refmetrics`) and ``GET /debug/requests`` (ground truth), with HTTP/1.1 keep-alive and
chunked transfer encoding, like vLLM behind uvicorn. Everything it returns is labelled
synthetic: ``system_fingerprint: "benchrun-refserver-synthetic"``, the header
``X-Benchrun-Synthetic: true``, ``owned_by: "benchrun-refserver (synthetic)"``, and every
generated token is the text ``" syn"``.

Performance model (one engine loop, iteration-level scheduling as in vLLM/Orca):

- Requests wait in a FIFO queue (at most ``max_queue``; beyond that HTTP 429).
- Each engine step admits waiting requests while the batch holds fewer than ``max_batch``
  sequences and the step's token budget ``max_batched_tokens`` (prefill tokens of the
  admitted prompts + one decode token per running sequence) is not exceeded; a prompt
  larger than the budget runs alone (chunked prefill is not modelled).
- A step lasts ``decode_base_ms + decode_ms_per_seq * batch + prefill_ms_per_token *
  prefill_tokens``. At its end every sequence in the batch emits one token; a newly admitted
  sequence emits its first token (prefill produces it). A sequence finishes after exactly
  ``max_tokens`` tokens (there is no EOS: ``ignore_eos`` is always in effect).
- Steps are timed against a deadline clock, so the mean step time follows the model even
  though asyncio sleeps with about 1 ms granularity; the engine never bursts to catch up
  more than 5 ms.

Ground truth: per ``X-Request-Id`` the server records ``arrival_ns`` (the kernel's receive
stamp of the request head's last byte, ``SO_TIMESTAMPNS``, so a busy engine loop does not
delay it), ``admitted_ns``, ``first_token_ns`` and ``last_token_ns`` (just after the
socket write of the first / last content chunk returned), on ``time.perf_counter_ns``
(CLOCK_MONOTONIC on Linux, the clock the client uses in another process on the same
host). It serves them at ``GET /debug/requests`` and appends them to a JSONL file
(``--record``). Connections are non-blocking sockets driven by asyncio
(:class:`benchrun.loadgen.client.KernelStampedConn`), standard library only.

Dialects (:class:`benchrun.loadgen.refengine.Dialect`, ``--stream-end done|finish|close``,
``--usage-in-last-chunk``, ``--reject-unknown-fields``, ``--chat-template-tokens``,
``--stream-interval``) emulate the servers the load generator meets: vLLM's ``[DONE]``,
``transformers serve``'s finish_reason chunk with usage and no ``[DONE]``, a close-delimited
body, a 422 for an unknown field, a chat template's fixed prompt tokens, several tokens a chunk. Request bodies are validated strictly
(:mod:`benchrun.loadgen.refrequest`); ``max_tokens`` is capped (``--max-tokens-limit``).

Fault modes (server-wide ``--fault`` applied to every ``--fault-every``-th completion
request, or per request with the header ``X-Benchrun-Fault``): ``refuse`` (the connection
is reset without a response), ``http500``, ``http429``, ``close_midstream`` (closed after
half the tokens), ``malformed_sse`` (a non-JSON event after half the tokens),
``no_done`` (the stream ends without ``data: [DONE]`` and without a ``finish_reason``), ``stall`` (no more bytes after
half the tokens; the connection stays open until the client gives up).
"""


from __future__ import annotations

import argparse
import asyncio
import collections
import errno
import json
import logging
import signal
import socket
import sys
import time
from dataclasses import asdict
from typing import Any

from benchrun.loadgen import refmetrics
from benchrun.loadgen.conn import KernelStampedConn, enable_kernel_timestamps, realtime_offset_ns
from benchrun.loadgen.refengine import FINGERPRINT, TOKEN_TEXT, Engine, PerfModel, _Seq  # noqa: F401
from benchrun.loadgen.refprocess import ServerProcess  # noqa: F401  (re-exported)
from benchrun.loadgen.refengine import STREAM_ENDS, Dialect, PrefixCache
from benchrun.loadgen.refrequest import MAX_TOKENS_LIMIT, BadRequest, parse_completion

log = logging.getLogger(__name__)

CLOCK = time.perf_counter_ns
FAULTS = ("none", "refuse", "http500", "http429", "close_midstream", "malformed_sse", "no_done", "stall")
_MAX_RECORDS = 200_000
# accept() errors that mean "not now" (descriptors or memory exhausted, the peer gave up)
_ACCEPT_RETRY = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED,
                           errno.EPROTO, errno.EPERM})
_MAX_BODY = 16 << 20  # a request body larger than this is refused (the longest prompts are far smaller)



class RefServer:
    """The HTTP front of the reference server; ``await start()`` then ``await close()``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        model_name: str = "benchrun-synthetic",
        perf: PerfModel | None = None,
        fault: str = "none",
        fault_every: int = 1,
        record_path: str | None = None,
        dialect: Dialect | None = None,
        max_tokens_limit: int = MAX_TOKENS_LIMIT,
        record_bodies: bool = False,
    ) -> None:
        if fault not in FAULTS:
            raise ValueError(f"fault {fault!r} is not one of {FAULTS}")
        if fault_every < 1:
            raise ValueError("fault_every must be >= 1")
        self.host = host
        self.port = port
        self.model_name = model_name
        self.perf = perf or PerfModel()
        self.fault = fault
        self.fault_every = fault_every
        self.dialect = dialect or Dialect()
        self.max_tokens_limit = max_tokens_limit
        # what each request carried (prompt text or chat messages) joins its record: tests read
        # session order and content from the server's own log
        self.record_bodies = record_bodies
        self.prefix_cache = PrefixCache(self.dialect.prefix_cache_block) if self.dialect.prefix_cache_block else None
        self.records: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self._record_fh = open(record_path, "a", encoding="utf-8", buffering=1) if record_path else None
        self._n = 0
        self._lsock: socket.socket | None = None
        self._engine_task: asyncio.Task[None] | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._conns: set[KernelStampedConn] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.engine: Engine | None = None
        self.accept_errors = 0
        self.counters: dict[str, float] = {"prompt_tokens": 0, "prefix_cache_hits": 0}  # served at /metrics (refmetrics)

    async def start(self) -> int:
        """Start listening; returns the bound port."""
        self.engine = Engine(self.perf)
        self._engine_task = asyncio.create_task(self.engine.run())
        self._lsock = socket.create_server((self.host, self.port), backlog=2048)
        self._lsock.setblocking(False)
        self.port = self._lsock.getsockname()[1]
        self._offset_ns = realtime_offset_ns()
        self._accept_task = asyncio.create_task(self._accept_loop())
        return self.port

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._lsock is not None
        last_logged = 0.0
        while True:
            try:
                sock, _ = await loop.sock_accept(self._lsock)
            except OSError as exc:
                # Out of descriptors (EMFILE/ENFILE) or buffers: the pending connection stays in
                # the backlog; say so (at most once a second), back off, and keep accepting once
                # descriptors free up, instead of the accept task dying with the port still open.
                if exc.errno not in _ACCEPT_RETRY:
                    raise
                self.accept_errors += 1
                now = time.monotonic()
                if now - last_logged >= 1.0:
                    last_logged = now
                    log.warning("accept failed (%s, %d so far): %d connections open; backing off 50 ms",
                                errno.errorcode.get(exc.errno, exc.errno), self.accept_errors, len(self._conns))
                await asyncio.sleep(0.05)
                continue
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # kernel receive stamps make the recorded arrival independent of how busy this
            # event loop is (see the client's KernelStampedConn)
            enable_kernel_timestamps(sock)
            conn = KernelStampedConn(sock, loop, self._offset_ns)
            task = asyncio.create_task(self._handle(conn, conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        """Stop accepting, drop open connections and stop the engine."""
        for t in (self._accept_task, self._engine_task):
            if t is not None:
                t.cancel()
                try:
                    await t
                except asyncio.CancelledError:
                    pass
        if self._lsock is not None:
            self._lsock.close()
        for w in list(self._conns):
            w.close()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=2.0)
        if self._record_fh is not None:
            self._record_fh.close()

    def _store(self, rid: str, rec: dict[str, Any]) -> None:
        self.records[rid] = rec
        while len(self.records) > _MAX_RECORDS:
            self.records.popitem(last=False)

    def _finish_record(self, rec: dict[str, Any]) -> None:
        if self._record_fh is not None:
            self._record_fh.write(json.dumps(rec, sort_keys=True) + "\n")

    async def _respond(
        self, w: KernelStampedConn, status: int, obj: Any, keep: bool, extra: dict[str, str] | None = None
    ) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 422: "Unprocessable Entity", 429: "Too Many Requests", 500: "Internal Server Error"}
        body = json.dumps(obj).encode()
        head = [
            f"HTTP/1.1 {status} {reason.get(status, 'Error')}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
            "X-Benchrun-Synthetic: true",
            f"Connection: {'keep-alive' if keep else 'close'}",
        ]
        for k, v in (extra or {}).items():
            head.append(f"{k}: {v}")
        w.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await w.drain()

    async def _respond_metrics(self, w: KernelStampedConn, keep: bool) -> None:
        assert self.engine is not None
        body = refmetrics.render(self.engine, self.counters, self.model_name)
        w.write((f"HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {len(body)}\r\n"
                 f"X-Benchrun-Synthetic: true\r\nConnection: {'keep-alive' if keep else 'close'}\r\n\r\n").encode() + body)
        await w.drain()

    async def _handle(self, reader: KernelStampedConn, writer: KernelStampedConn) -> None:
        self._conns.add(writer)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError):
                    break
                arrival = reader.consume_stamp(len(head))
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                if len(parts) != 3:
                    await self._respond(writer, 400, {"error": {"message": "bad request line"}}, False)
                    break
                method, target, version = parts
                headers = {}
                for ln in lines[1:]:
                    if ln:
                        k, _, v = ln.partition(":")
                        headers[k.strip().lower()] = v.strip()
                keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
                length = headers.get("content-length", "0") or "0"
                if not length.isdigit() or int(length) > _MAX_BODY:
                    await self._respond(writer, 400, {"error": {"message": f"Content-Length must be 0..{_MAX_BODY}"}}, False)
                    break
                n = int(length)
                try:
                    raw = await reader.readexactly(n) if n else b""
                except (asyncio.IncompleteReadError, ConnectionError, OSError):
                    break
                reader.consume_stamp(n)
                path = target.split("?", 1)[0]
                if method == "GET" and path == "/health":
                    await self._respond(writer, 200, {"status": "ok", "synthetic": True}, keep)
                elif method == "GET" and path == "/v1/models":
                    data = [{"id": self.model_name, "object": "model", "created": 0, "owned_by": "benchrun-refserver (synthetic)"}]
                    await self._respond(writer, 200, {"object": "list", "data": data}, keep)
                elif method == "GET" and path == "/metrics":
                    await self._respond_metrics(writer, keep)
                elif method == "GET" and path == "/debug/requests":
                    await self._respond(
                        writer,
                        200,
                        {"clock": "CLOCK_MONOTONIC (time.perf_counter_ns)", "synthetic": True, "perf_model": asdict(self.perf), "requests": list(self.records.values())},
                        keep,
                    )
                elif path in ("/v1/completions", "/v1/chat/completions"):
                    if method != "POST":
                        await self._respond(writer, 405, {"error": {"message": "use POST"}}, keep)
                    else:
                        keep = await self._completion(writer, reader, headers, raw, path.endswith("chat/completions"), arrival, keep)
                else:
                    await self._respond(writer, 404, {"error": {"message": f"no route {path}"}}, keep)
                if not keep:
                    break
        finally:
            self._conns.discard(writer)
            writer.close()

    async def _completion(
        self,
        writer: KernelStampedConn,
        reader: KernelStampedConn,
        headers: dict[str, str],
        raw: bytes,
        chat: bool,
        arrival: int,
        keep: bool,
    ) -> bool:
        self._n += 1
        rid = headers.get("x-request-id") or f"srv-{self._n}"
        tp = headers.get("traceparent", "")
        trace_id = tp.split("-")[1] if tp.count("-") == 3 else None
        fault = headers.get("x-benchrun-fault") or (self.fault if self._n % self.fault_every == 0 else "none")
        if fault not in FAULTS:
            fault = "none"
        rec: dict[str, Any] = {
            "request_id": rid,
            "trace_id": trace_id,
            "arrival_ns": arrival,
            "admitted_ns": None,
            "first_token_ns": None,
            "last_token_ns": None,
            "prompt_tokens": None,
            "completion_tokens": 0,
            "status": "running",
            "fault": fault,
            "synthetic": True,
        }
        self._store(rid, rec)
        try:
            req = parse_completion(raw, chat, max_tokens_limit=self.max_tokens_limit,
                                   reject_unknown_fields=self.dialect.reject_unknown_fields,
                                   chat_template_tokens=self.dialect.chat_template_tokens)
        except BadRequest as exc:
            rec["status"] = "bad_request"
            msg = str(exc) if exc.status == 422 else f"bad request body: {exc}"
            await self._respond(writer, exc.status, {"error": {"message": msg}} if exc.status != 422 else {"detail": msg}, keep)
            self._finish_record(rec)
            return keep
        body, max_tokens = req.body, req.max_tokens
        rec["max_tokens"] = max_tokens
        if chat:
            rec["messages_n"] = len(body["messages"])
        if self.record_bodies:
            rec["received"] = {"messages": body["messages"]} if chat else {"prompt": body["prompt"]}
        rid_hdr = {"X-Request-Id": rid}
        if fault == "refuse":
            rec["status"] = "fault:refuse"
            self._finish_record(rec)
            writer.abort()
            return False
        if fault in ("http500", "http429"):
            code = 500 if fault == "http500" else 429
            rec["status"] = f"fault:{fault}"
            await self._respond(writer, code, {"error": {"message": f"synthetic fault {fault}", "code": code}}, keep, rid_hdr)
            self._finish_record(rec)
            return keep
        s = _Seq()
        s.rid = rid
        s.prompt_tokens = req.prompt_tokens
        rec["prompt_tokens"] = s.prompt_tokens
        if self.prefix_cache is not None:
            s.cached = self.prefix_cache.lookup_and_add(req.text.split())
            rec["cached_tokens"] = s.cached
        s.max_tokens = max_tokens
        s.chat = chat
        s.stream = req.stream
        s.include_usage = req.include_usage or self.dialect.usage_in_last_chunk
        s.dialect = self.dialect
        s.fault = fault
        s.mid = max_tokens // 2
        s.record = rec
        s.model = str(body.get("model") or self.model_name)
        created = int(time.time())
        if chat:
            s.prefix = (
                '{"id":"chatcmpl-%s","object":"chat.completion.chunk","created":%d,"model":%s,"system_fingerprint":"%s",'
                % (self._n, created, json.dumps(s.model), FINGERPRINT)
            ).encode()
        else:
            s.prefix = (
                '{"id":"cmpl-%s","object":"text_completion","created":%d,"model":%s,"system_fingerprint":"%s",'
                % (self._n, created, json.dumps(s.model), FINGERPRINT)
            ).encode()
        s.done = asyncio.get_running_loop().create_future()
        # a non-streaming request's connection too: when its client leaves, its slot is freed
        s.writer = writer
        assert self.engine is not None
        if self.engine.submit(s):
            self.counters["prompt_tokens"] += s.prompt_tokens
            if self.prefix_cache is not None:  # looked up above; counted, like the queries, once admitted
                self.counters["prefix_cache_hits"] += s.cached
        else:
            rec["status"] = "queue_full"
            await self._respond(writer, 429, {"error": {"message": "queue full"}}, keep, rid_hdr)
            self._finish_record(rec)
            return keep
        if s.stream:
            if self.dialect.stream_end == "close":
                keep = False  # a close-delimited body: no framing, the connection's end ends it
            framing = "" if self.dialect.stream_end == "close" else "Transfer-Encoding: chunked\r\n"
            writer.write(
                (
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                    f"{framing}X-Request-Id: {rid}\r\nX-Benchrun-Synthetic: true\r\n"
                    f"Connection: {'keep-alive' if keep else 'close'}\r\n\r\n"
                ).encode("latin-1")
            )
        try:
            await s.done
        finally:
            if not s.done.done():
                s.cancelled = True
        if s.stream:
            if s.fault == "stall" or s.cancelled:
                # keep the connection open and silent until the client gives up
                if s.fault == "stall":
                    try:
                        while await reader.read():
                            pass
                    except (ConnectionError, OSError):
                        pass
                self._finish_record(rec)
                return False
            self._finish_record(rec)
            if s.fault == "close_midstream":
                return False
            try:
                await writer.drain()
            except (ConnectionError, OSError):
                return False
            return keep and s.fault not in ("malformed_sse",)
        # non-streaming: one JSON body once generation is done
        if s.cancelled:
            self._finish_record(rec)
            return False
        rec["status"] = "ok"
        text = TOKEN_TEXT * s.max_tokens
        usage: dict[str, Any] = {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.max_tokens, "total_tokens": s.prompt_tokens + s.max_tokens}
        if s.cached is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": s.cached}
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
            obj = {"id": f"chatcmpl-{self._n}", "object": "chat.completion", "model": s.model, "choices": [choice], "usage": usage}
        else:
            choice = {"index": 0, "text": text, "finish_reason": "length", "logprobs": None}
            obj = {"id": f"cmpl-{self._n}", "object": "text_completion", "model": s.model, "choices": [choice], "usage": usage}
        obj["system_fingerprint"] = FINGERPRINT
        await self._respond(writer, 200, obj, keep, rid_hdr)
        self._finish_record(rec)
        return keep


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The reference server's command-line options for ``python -m benchrun.loadgen.refserver``
    (``benchrun refserver`` declares the same ones with typer, in :mod:`benchrun.loadgen.commands`)."""
    d = PerfModel()
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    p.add_argument("--port", type=int, default=8000, help="port (0 = any free port; the chosen one is printed)")
    p.add_argument("--model", default="benchrun-synthetic", help="model id listed by /v1/models")
    p.add_argument("--prefill-ms-per-token", type=float, default=d.prefill_ms_per_token)
    p.add_argument("--decode-base-ms", type=float, default=d.decode_base_ms)
    p.add_argument("--decode-ms-per-seq", type=float, default=d.decode_ms_per_seq)
    p.add_argument("--max-batch", type=int, default=d.max_batch)
    p.add_argument("--max-batched-tokens", type=int, default=d.max_batched_tokens)
    p.add_argument("--max-queue", type=int, default=d.max_queue)
    p.add_argument("--fault", choices=FAULTS, default="none")
    p.add_argument("--fault-every", type=int, default=1, help="apply --fault to every N-th completion request")
    p.add_argument("--record", default=None, help="append ground-truth JSONL records to this file")
    p.add_argument("--stream-end", choices=STREAM_ENDS, default="done",
                   help="done: data: [DONE] (vLLM); finish: a finish_reason chunk, then the chunked body ends; "
                        "close: the same, close-delimited (transformers serve and others)")
    p.add_argument("--usage-in-last-chunk", action="store_true", help="usage rides on the finish_reason chunk, always")
    p.add_argument("--reject-unknown-fields", action="store_true",
                   help="a field outside the OpenAI API (e.g. ignore_eos) is a 422 naming it")
    p.add_argument("--chat-template-tokens", type=int, default=0, help="prompt tokens a chat template adds")
    p.add_argument("--max-tokens-limit", type=int, default=MAX_TOKENS_LIMIT, help="max_tokens above this is a 400")
    p.add_argument("--prefix-cache-block", type=int, default=0,
                   help="a prefix cache of blocks of N words, reported as usage.prompt_tokens_details.cached_tokens (0: none)")
    p.add_argument("--record-bodies", action="store_true", help="keep each request's prompt or messages in its record")
    p.add_argument("--stream-interval", type=int, default=1, help="tokens a content chunk carries (the first alone, as vLLM's)")


def dialect_from_args(a: argparse.Namespace) -> Dialect:
    """The :class:`Dialect` named by parsed arguments."""
    return Dialect(a.stream_end, a.usage_in_last_chunk, a.reject_unknown_fields, a.chat_template_tokens, a.prefix_cache_block,
                   a.stream_interval)


def perf_from_args(a: argparse.Namespace) -> PerfModel:
    """The :class:`PerfModel` named by parsed arguments."""
    return PerfModel.from_dict(
        {
            "prefill_ms_per_token": a.prefill_ms_per_token,
            "decode_base_ms": a.decode_base_ms,
            "decode_ms_per_seq": a.decode_ms_per_seq,
            "max_batch": a.max_batch,
            "max_batched_tokens": a.max_batched_tokens,
            "max_queue": a.max_queue,
        }
    )


async def serve(
    host: str,
    port: int,
    *,
    model_name: str,
    perf: PerfModel,
    fault: str = "none",
    fault_every: int = 1,
    record_path: str | None = None,
    announce: Any = None,
    dialect: Dialect | None = None,
    max_tokens_limit: int = MAX_TOKENS_LIMIT,
    record_bodies: bool = False,
) -> None:
    """Run a server until SIGINT/SIGTERM; ``announce(dict)`` is called once it listens."""
    srv = RefServer(host, port, model_name=model_name, perf=perf, fault=fault, fault_every=fault_every,
                    record_path=record_path, dialect=dialect, max_tokens_limit=max_tokens_limit,
                    record_bodies=record_bodies)
    bound = await srv.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    if announce is not None:
        announce(
            {
                "listening": f"http://{host}:{bound}",
                "port": bound,
                "synthetic": True,
                "model": model_name,
                "perf_model": asdict(perf),
                "fault": fault,
                "fault_every": fault_every,
                "dialect": asdict(srv.dialect),
                "max_tokens_limit": srv.max_tokens_limit,
            }
        )
    try:
        await stop.wait()
    finally:
        await srv.close()


def main(argv: list[str] | None = None) -> None:
    """``python -m benchrun.loadgen.refserver``: prints one JSON line when listening."""
    p = argparse.ArgumentParser(prog="refserver", description=__doc__.splitlines()[0])
    add_arguments(p)
    a = p.parse_args(argv)
    try:
        perf = perf_from_args(a)
        dialect = dialect_from_args(a)
    except ValueError as exc:
        p.error(str(exc))
    if a.max_tokens_limit < 1:
        p.error("--max-tokens-limit must be >= 1")

    def announce(info: dict[str, Any]) -> None:
        print(json.dumps(info), flush=True)

    # Warnings (e.g. accept failing on descriptor exhaustion) go to stderr with a time.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s refserver %(levelname)s %(message)s")
    asyncio.run(
        serve(a.host, a.port, model_name=a.model, perf=perf, fault=a.fault, fault_every=a.fault_every, record_path=a.record, announce=announce,
              dialect=dialect, max_tokens_limit=a.max_tokens_limit, record_bodies=a.record_bodies)
    )


if __name__ == "__main__":
    main()
