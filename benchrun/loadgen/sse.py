"""Stream parsing of the load generator: the response head, error bodies and the SSE body of one request, into its :class:`Outcome`."""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchrun.loadgen.conn import TimedReader


class Outcome:
    """What happened to one request, with raw monotonic timestamps (ns)."""

    __slots__ = (
        "send_ns",
        "first_ns",
        "last_ns",
        "done_ns",
        "chunk_ns",
        "chunk_tokens",
        "usage_prompt",
        "usage_completion",
        "status",
        "error_kind",
        "error",
        "reused_connection",
        "write_ns",
        "connect_ns",
        "terminator",
        "text",
        "usage_cached",
        "chunk_token_method",
        "generated",
    )

    def __init__(self) -> None:
        self.send_ns = 0
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.done_ns: int | None = None
        self.chunk_ns: list[int] = []
        self.chunk_tokens: list[int] = []
        self.usage_prompt: int | None = None
        self.usage_completion: int | None = None
        self.status: int | None = None
        self.error_kind: str | None = None
        self.error: str | None = None
        self.reused_connection = False
        self.write_ns = 0  # when the request was written on an open connection (after any set-up)
        self.connect_ns: int | None = None  # time spent opening a new connection (None: reused)
        self.terminator: str | None = None  # "[DONE]", "finish_reason" or "finish_reason+close"
        self.text: list[str] | None = None  # the reply's text pieces, kept only when set to a list (sessions)
        self.usage_cached: int | None = None  # usage.prompt_tokens_details.cached_tokens (a prefix cache's hits)
        # how chunk_tokens were counted (see _consume_stream): usage_per_chunk, usage_deltas,
        # usage_total_spread or one_per_chunk
        self.chunk_token_method: str | None = None
        # every generated text piece (reasoning too), kept only when set to a list (a --tokenizer
        # counts it when the server sends no usage: benchrun.loadgen.records._row)
        self.generated: list[str] | None = None

    def fail(self, kind: str, detail: str) -> None:
        """Mark the request failed (the first failure wins)."""
        if self.error_kind is None:
            self.error_kind = kind
            self.error = f"{kind}: {printable(detail)}"


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """A server's text as benchrun prints and keeps it: control characters (C0, DEL, C1) written as
    ``\\xNN``. A server's error message reached the terminal as it came, escape sequences and all
    (a window title, colours, a hidden hyperlink: review 2026-12-08)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


# A server's numbers are untrusted: a token count outside 0..MAX_TOKENS (or not an integer) is
# an error of that request, never a crash or a negative rate. No single response comes near 10 M.
MAX_TOKENS = 10_000_000


class ImplausibleNumber(ValueError):
    """A number from the server that cannot be true (non-finite, negative, fractional, absurd)."""


def token_count(value: Any, field: str) -> int:
    """``value`` as a token count, or ImplausibleNumber naming ``field`` and the value."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{field} is not a number")  # the wrong shape: malformed, not implausible
    if isinstance(value, float) and (not math.isfinite(value) or not value.is_integer()):
        raise ImplausibleNumber(f"server {field}={value!r} is not a whole finite number")
    if not 0 <= value <= MAX_TOKENS:
        raise ImplausibleNumber(f"server {field}={value!r} is outside 0..{MAX_TOKENS}")
    return int(value)

def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise ValueError(f"bad status line {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    return int(parts[1]), headers


async def _read_error_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> str:
    try:
        async with asyncio.timeout(0.5):
            n = headers.get("content-length")
            if n is not None and n.isdigit():
                data = await reader.readexactly(min(int(n), 8192))
            else:
                data = await reader.read(8192)
    except (TimeoutError, asyncio.IncompleteReadError, OSError, ConnectionError):
        return ""
    text = data.decode("utf-8", "replace")
    if headers.get("transfer-encoding", "").lower() == "chunked":
        # drop chunk-size lines for the message
        text = "".join(line for line in text.split("\r\n") if line and not all(c in "0123456789abcdefABCDEF" for c in line))
    try:
        obj = json.loads(text)
        msg = obj.get("error", obj.get("detail", obj))  # OpenAI/vLLM: error.message; FastAPI: detail
        if isinstance(msg, dict):
            msg = msg.get("message", msg.get("detail", msg))
        return printable(str(msg)[:200])
    except (ValueError, AttributeError, RecursionError):  # RecursionError: JSON nested past Python's stack
        return printable(text.strip().replace("\n", " ")[:200])


# The most the client buffers of one SSE event (or chunk-size line) that has not ended yet: a
# stream without newlines would otherwise grow the client without bound (1 MiB chunks took it to
# 2.6 GB at 6 streams). No real event is near this: a token chunk is a few hundred bytes.
MAX_LINE = 1 << 20

# After ``data: [DONE]``, how long to wait for the rest of the body (the terminating chunk) before
# giving the connection up; the wait is after the request's last stamp, so not in its latency.
DRAIN_AFTER_DONE_S = 0.1


async def _consume_stream(reader: TimedReader, headers: dict[str, str], out: Outcome, chat: bool) -> bool:
    """Read the body, dechunk, parse SSE; returns whether the connection can be reused.

    A stream is complete when it ends on ``data: [DONE]``, or when a chunk carrying a
    ``finish_reason`` (then optionally a ``usage`` chunk) is followed by the end of the body or
    of the connection (servers differ: vLLM and OpenAI send ``[DONE]``, ``transformers serve``
    does not). Only a stream that ends with neither is ``no_done`` (or ``closed``). After
    ``[DONE]`` the end of the body is awaited up to ``DRAIN_AFTER_DONE_S`` (the connection is
    reused only when it came).
    """
    chunked = headers.get("transfer-encoding", "").lower() == "chunked"
    length = headers.get("content-length")
    remaining = int(length) if (length is not None and length.isdigit() and not chunked) else -1
    keep_alive = headers.get("connection", "").lower() != "close"
    raw = bytearray()  # undechunked bytes not yet consumed
    sse = bytearray()  # SSE text not yet parsed
    chunk_left = 0  # data bytes left in the current HTTP chunk
    expect_crlf = False
    body_done = False
    done = False
    finished_ns: int | None = None  # delivery time of the event with a finish_reason
    aborted: str | None = None  # that finish_reason when it says the server gave up (abort, error)
    prev_usage_tokens: int | None = None
    usage_chunks = 0  # content chunks that carried usage.completion_tokens
    usage_last = -1  # the index of the last of them
    crlf = False
    loads = json.loads
    chunk_ns = out.chunk_ns
    chunk_tokens = out.chunk_tokens
    drain_until: float | None = None
    while True:
        if not done:
            data = await reader.read(65536)
        elif body_done or not (chunked or remaining > 0):
            break
        else:
            # after [DONE] the body's end (a chunked body's 0-length chunk, often its own write:
            # uvicorn) may come in a later read: wait for it briefly so the connection is reused.
            # The request's stamps (last token, [DONE]) are already taken: not counted in its e2e.
            now = time.monotonic()
            drain_until = drain_until if drain_until is not None else now + DRAIN_AFTER_DONE_S
            if now >= drain_until:
                break
            try:
                async with asyncio.timeout(drain_until - now):
                    data = await reader.read(65536)
            except TimeoutError:
                break
        if not data:
            break
        for data, t in reader.segments(data):
            if chunked:
                raw += data
                pos = 0
                n = len(raw)
                while pos < n and not body_done:
                    if expect_crlf:
                        if n - pos < 2:
                            break
                        pos += 2
                        expect_crlf = False
                    elif chunk_left:
                        take = min(chunk_left, n - pos)
                        sse += raw[pos : pos + take]
                        pos += take
                        chunk_left -= take
                        if not chunk_left:
                            expect_crlf = True
                    else:
                        j = raw.find(b"\r\n", pos)
                        if j < 0:
                            if n - pos > 1024:
                                out.fail("oversized_line", f"chunk-size line longer than 1024 bytes after {len(chunk_ns)} chunks")
                                return False
                            break
                        size_txt = bytes(raw[pos:j]).split(b";", 1)[0].strip()
                        try:
                            size = int(size_txt, 16)
                        except ValueError:
                            out.fail("bad_response", f"bad chunk size {size_txt[:20]!r}")
                            return False
                        pos = j + 2
                        if size == 0:
                            body_done = True  # trailers (rare) are ignored; connection then not reused
                            if raw[pos : pos + 2] == b"\r\n":
                                pos += 2
                            else:
                                keep_alive = False
                        else:
                            chunk_left = size
                del raw[:pos]
            else:
                sse += data
                if remaining >= 0:
                    remaining -= len(data)
                    body_done = remaining <= 0
            if not crlf and b"\r" in data:
                crlf = True
            if crlf:
                sse[:] = sse.replace(b"\r\n", b"\n")
            # parse complete SSE events (after [DONE] only the body's end is awaited)
            pos = 0
            while not done:
                j = sse.find(b"\n\n", pos)
                if j < 0:
                    break
                event = bytes(sse[pos:j])
                pos = j + 2
                if event.startswith(b"data: ") and b"\n" not in event:
                    payload = event[6:]
                else:
                    datas = [ln[5:].removeprefix(b" ") for ln in event.split(b"\n") if ln.startswith(b"data:")]
                    if not datas:
                        continue  # comment / keep-alive / event: lines
                    payload = b"\n".join(datas)
                if payload == b"[DONE]":
                    done = True
                    out.done_ns = t
                    break
                try:
                    obj = loads(payload)
                except (ValueError, RecursionError):  # nested past Python's stack: it ended the whole sweep
                    out.fail("malformed_sse", f"event is not JSON: {payload[:60]!r}")
                    return False
                if not isinstance(obj, dict):
                    out.fail("malformed_sse", f"event is not a JSON object: {payload[:60]!r}")
                    return False
                err = obj.get("error")
                # a null error is no error: some servers send "error": null on every chunk
                if err is not None or obj.get("object") == "error":
                    err = obj if err is None else err
                    msg = err.get("message", err) if isinstance(err, dict) else err
                    out.fail("server_error", str(msg)[:200])
                    return False
                try:
                    usage = obj.get("usage")
                    text = content = None
                    choices = obj.get("choices")
                    if choices:
                        c0 = choices[0]
                        reason = c0.get("finish_reason")
                        if reason is not None and finished_ns is None:
                            finished_ns = t
                            aborted = _aborted(reason)
                        if chat:
                            delta = c0.get("delta") or {}
                            # reasoning is generated output (first token, token counts) but not the
                            # reply: a client drops it from the history it sends back
                            content = delta.get("content")
                            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
                            text = content or reasoning
                        else:
                            text = content = c0.get("text")
                            reasoning = None
                    if text:
                        if out.first_ns is None:
                            out.first_ns = t
                        out.last_ns = t
                        chunk_ns.append(t)
                        k = 1
                        if usage and usage.get("completion_tokens") is not None:
                            ct = token_count(usage["completion_tokens"], "usage.completion_tokens")
                            # usage on every chunk counts each chunk's tokens (none when the total
                            # did not grow: text held back from an earlier token); usage first seen on
                            # the last content chunk (a total) counts what the chunks before did not
                            base = prev_usage_tokens if prev_usage_tokens is not None else len(chunk_tokens)
                            k = max(0, ct - base)
                            prev_usage_tokens = ct
                            usage_chunks += 1
                            usage_last = len(chunk_tokens)
                        chunk_tokens.append(k)
                        if out.text is not None and content:
                            out.text.append(content)
                        if out.generated is not None:  # both, where one delta carries both (a tokenizer counts them)
                            out.generated.append("".join(p for p in (reasoning, content) if isinstance(p, str)))
                    if usage:
                        if usage.get("prompt_tokens") is not None:
                            out.usage_prompt = token_count(usage["prompt_tokens"], "usage.prompt_tokens")
                        if usage.get("completion_tokens") is not None:
                            out.usage_completion = token_count(usage["completion_tokens"], "usage.completion_tokens")
                        details = usage.get("prompt_tokens_details")
                        if details and details.get("cached_tokens") is not None:
                            out.usage_cached = token_count(details["cached_tokens"], "usage.prompt_tokens_details.cached_tokens")
                except ImplausibleNumber as exc:
                    out.fail("implausible_usage", str(exc))
                    return False
                except (AttributeError, TypeError, ValueError, LookupError) as exc:
                    # valid JSON of the wrong shape (choices not a list of objects, usage not a
                    # mapping of integers) is malformed too: this request fails, the sweep goes on
                    out.fail("malformed_sse", f"unexpected event shape ({type(exc).__name__}: {exc}): {payload[:60]!r}")
                    return False
            del sse[:pos]
            if len(sse) > MAX_LINE:
                out.fail("oversized_line", f"an SSE event longer than {MAX_LINE} bytes without an end (blank line) after {len(chunk_ns)} chunks")
                return False
        if body_done:
            break
    if done:
        out.terminator = "[DONE]"
    elif finished_ns is not None:
        # the finish_reason chunk was the last word: the body (or the connection) ended after it
        out.terminator = "finish_reason" if body_done else "finish_reason+close"
        out.done_ns = finished_ns
        if not body_done:
            keep_alive = False
    else:
        if body_done:
            out.fail("no_done", f"stream ended without data: [DONE] or a finish_reason after {len(chunk_ns)} chunks")
        else:
            out.fail("closed", f"connection closed mid-stream after {len(chunk_ns)} chunks")
        return False
    if aborted is not None:
        # vLLM's and SGLang's "abort" (a request the engine dropped: preempted past its limit, a
        # client-side cancel, an engine fault): the stream ends properly but the completion is cut
        out.fail("aborted", f"the server ended the stream with finish_reason {aborted!r} after {len(chunk_ns)} chunks")
        return False
    if out.first_ns is None:
        out.fail("empty", "stream finished without any content")
        return False
    _chunk_token_method(out, usage_chunks, usage_last)
    return body_done and keep_alive and not raw and not sse.strip()


ABORT_REASONS = frozenset({"abort", "aborted", "error", "cancelled", "canceled"})


def _aborted(reason: object) -> str | None:
    """The finish_reason when it says the completion was cut by the server, else None: a string such
    as vLLM's ``"abort"``, or SGLang's native ``{"type": "abort", "message": ...}``."""
    kind = reason.get("type") if isinstance(reason, dict) else reason
    return str(kind) if isinstance(kind, str) and kind.lower() in ABORT_REASONS else None


def spread_total(chunk_tokens: list[int], total: int) -> None:
    """Set ``chunk_tokens`` (in place) to ``total`` tokens over its chunks, ``total`` above their
    count: the first chunk one token, the rest as :func:`spread_after_first` spreads them (a usage
    total, or a tokenizer's count of the streamed text: :func:`benchrun.loadgen.records._row`)."""
    n = len(chunk_tokens)
    chunk_tokens[:] = [1, *spread_after_first(total - 1, n - 1)] if n > 1 else [total]


def _chunk_token_method(out: Outcome, usage_chunks: int, usage_last: int) -> None:
    """Settle ``out.chunk_tokens`` and say how (``out.chunk_token_method``):

    - ``usage_per_chunk``: every content chunk carried the running usage total: exact counts;
    - ``usage_deltas``: usage on some chunks: each such chunk counts the increase since the last;
    - ``usage_total_spread``: the total came only at the end, on the last content chunk or in a
      usage-only chunk after it (vLLM's and OpenAI's ``include_usage``), and is above the chunk
      count (several tokens per chunk): the first chunk holds one token (the prefill's: vLLM's and
      SGLang's ``--stream-interval`` send it alone, then k tokens a chunk and the remainder last),
      the rest over the other chunks as that pattern (k, …, k, r with 1 ≤ r ≤ k) when the counts
      fit one, else evenly (the larger shares first) — not all the surplus on the last chunk (which
      made every earlier gap a whole chunk's and the last chunk's tiny), nor a share of it on the
      first (a 1, 4, 4, … stream read 4, 4, …, 3, 3, 3: its last gaps a third long and a jitter of
      1.6 ms where it has none); where the server puts usage does not change the gaps of the same stream;
    - ``one_per_chunk``: no usage total above the chunk count (none at all, or fewer tokens than
      chunks): each chunk one token, gaps are per chunk (the total, if any, is output_tokens
      beside it, the difference output_token_discrepancy). Without usage and with a
      ``--tokenizer``, the request's row re-spreads the tokenizer's count of the streamed text
      as above (``tokenizer_total_spread``: :func:`benchrun.loadgen.records._row`).
    """
    ct = out.chunk_tokens
    n = len(ct)

    def spread(total: int) -> None:  # total > n: the first chunk one token, the rest as above
        spread_total(ct, total)
        out.chunk_token_method = "usage_total_spread"

    if usage_chunks == 0:
        total = out.usage_completion
        if total is not None and total > n:
            spread(total)
        else:
            out.chunk_token_method = "one_per_chunk"
    elif usage_chunks == n:
        out.chunk_token_method = "usage_per_chunk"
    elif usage_chunks == 1 and usage_last == n - 1 and out.usage_completion is not None:
        total = sum(ct)
        if total == out.usage_completion and total >= n:
            spread(total)
        else:
            ct[:] = [1] * n
            out.chunk_token_method = "one_per_chunk"
    else:
        out.chunk_token_method = "usage_deltas"


# Request fields that are not in the OpenAI API, and the option that stops benchrun sending each.
NONSTANDARD_FIELDS = {
    "ignore_eos": "--no-ignore-eos (or --server-kind openai)",
    "stream_options": "--no-include-usage",
}


def unknown_field_hint(message: str) -> str | None:
    """For a 4xx message naming a field benchrun sent that the server does not know: which field
    and the option that removes it; None when the message names none."""
    low = message.lower()
    for name, flag in NONSTANDARD_FIELDS.items():
        if name in low and any(w in low for w in ("unexpected", "unknown", "extra", "not permitted", "unrecognized", "not allowed", "forbidden", "invalid")):
            return f"the server rejects the field {name!r}; {flag} removes it"
    return None


def spread_after_first(tokens: int, chunks: int) -> list[int]:
    """``tokens`` (≥ ``chunks`` ≥ 1) over the chunks after the first: k, …, k, r (1 ≤ r ≤ k) when a
    fixed stream interval k gives these counts, else evenly with the larger shares first."""
    k = -(-tokens // chunks)
    last = tokens - (chunks - 1) * k
    if 1 <= last <= k:
        return [k] * (chunks - 1) + [last]
    base, extra = divmod(tokens, chunks)
    return [base + (1 if i < extra else 0) for i in range(chunks)]
