"""The synthetic engine of the reference server: its performance model and the continuously batched loop that emits tokens.

See :mod:`benchrun.loadgen.refserver` for the model in words.
"""

from __future__ import annotations

import math

import asyncio
import collections
from dataclasses import dataclass, fields
import time
from typing import Any

CLOCK = time.perf_counter_ns
FINGERPRINT = "benchrun-refserver-synthetic"
TOKEN_TEXT = " syn"


@dataclass(frozen=True)
class PerfModel:
    """The stated performance model of the synthetic engine (see module docstring)."""

    prefill_ms_per_token: float = 0.01
    decode_base_ms: float = 2.0
    decode_ms_per_seq: float = 0.05
    max_batch: int = 64
    max_batched_tokens: int = 8192
    max_queue: int = 4096

    def step_ms(self, batch: int, prefill_tokens: int) -> float:
        """Duration of one engine step for ``batch`` sequences and ``prefill_tokens`` new prompt tokens."""
        return self.decode_base_ms + self.decode_ms_per_seq * batch + self.prefill_ms_per_token * prefill_tokens

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "PerfModel":
        """Build from a mapping of field names; unknown names raise ValueError naming them."""
        d = dict(d or {})
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown reference-server model field(s) {unknown}; known: {sorted(names)}")
        kw = {}
        for f in fields(cls):
            if f.name in d:
                kw[f.name] = int(d[f.name]) if f.type in ("int", int) else float(d[f.name])
        model = cls(**kw)
        if model.max_batch < 1 or model.max_batched_tokens < 1 or model.max_queue < 1:
            raise ValueError("max_batch, max_batched_tokens and max_queue must be >= 1")
        times = (model.prefill_ms_per_token, model.decode_base_ms, model.decode_ms_per_seq)
        if not all(math.isfinite(t) and t >= 0 for t in times):  # NaN passed "< 0": every request then hung
            raise ValueError(f"model times must be finite and >= 0 (prefill_ms_per_token, decode_base_ms, "
                             f"decode_ms_per_seq: {', '.join(f'{t:g}' for t in times)})")
        return model


STREAM_ENDS = ("done", "finish", "close")


@dataclass(frozen=True)
class Dialect:
    """How the server speaks, to emulate the servers benchrun meets.

    ``stream_end``: ``done`` (vLLM, OpenAI: ``data: [DONE]``, then the chunked body's end),
    ``finish`` (``transformers serve``: the last chunk carries ``finish_reason``, then the
    chunked body ends, no ``[DONE]``) or ``close`` (the same, close-delimited: no chunked
    framing, the connection's end ends the body). ``usage_in_last_chunk``: ``usage`` rides on
    the finish_reason chunk (always), not in a chunk of its own after it (only when asked
    with ``stream_options``). ``reject_unknown_fields``: a field outside the OpenAI API (e.g.
    ``ignore_eos``) is a 422 naming it. ``chat_template_tokens``: prompt tokens a chat
    template adds to every chat request. ``stream_interval``: tokens a content chunk carries, as
    vLLM's and SGLang's ``--stream-interval`` send them: the first token alone, then chunks of
    ``stream_interval`` tokens, the remainder last (1: one token a chunk).
    """

    stream_end: str = "done"
    usage_in_last_chunk: bool = False
    reject_unknown_fields: bool = False
    chat_template_tokens: int = 0
    prefix_cache_block: int = 0  # > 0: a prefix cache of blocks of this many words, reported as cached_tokens
    stream_interval: int = 1

    def __post_init__(self) -> None:
        if self.stream_end not in STREAM_ENDS:
            raise ValueError(f"stream_end {self.stream_end!r} is not one of {STREAM_ENDS}")
        if self.chat_template_tokens < 0:
            raise ValueError("chat_template_tokens must be >= 0")
        if self.prefix_cache_block < 0:
            raise ValueError("prefix_cache_block must be >= 0 (0: no prefix cache)")
        if self.stream_interval < 1:
            raise ValueError("stream_interval must be >= 1")


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Seq:
    __slots__ = (
        "rid",
        "prompt_tokens",
        "max_tokens",
        "emitted",
        "writer",
        "chat",
        "include_usage",
        "fault",
        "done",
        "record",
        "cancelled",
        "stream",
        "prefix",
        "mid",
        "model",
        "prefill_left",
        "dialect",
        "cached",
        "sent",
    )

    def __init__(self) -> None:
        self.emitted = 0
        self.sent = 0  # tokens written in content chunks (behind emitted between a stream interval's chunks)
        self.cancelled = False
        self.prefill_left = 0
        self.cached: int | None = None


class Engine:
    """The continuously batched engine loop under a :class:`PerfModel`."""

    def __init__(self, perf: PerfModel) -> None:
        self.perf = perf
        self.waiting: collections.deque[_Seq] = collections.deque()
        self.running: list[_Seq] = []
        self._wake = asyncio.Event()
        self.steps = 0

    def submit(self, seq: _Seq) -> bool:
        """Queue a sequence; False when the queue is full."""
        if len(self.waiting) >= self.perf.max_queue:
            return False
        self.waiting.append(seq)
        self._wake.set()
        return True

    async def run(self) -> None:
        """Step forever (cancelled on shutdown).

        Chunked prefill: a prompt longer than ``max_batched_tokens`` is prefilled over several
        steps, a step's worth at a time beside the decoding sequences (as vLLM does), so one
        huge prompt never makes a step that stalls every other stream; prompts that fit in a
        step are admitted whole, as before.
        """
        perf = self.perf
        next_t = CLOCK()
        prefilling: list[_Seq] = []  # admitted, prompt not yet fully prefilled
        while True:
            if not self.waiting and not self.running and not prefilling:
                self._wake.clear()
                await self._wake.wait()
                next_t = CLOCK()
            new: list[_Seq] = []
            budget = perf.max_batched_tokens - len(self.running)
            # New prompts that fit are admitted first; a long prompt being prefilled gets the rest
            # of the step's budget, and never less than a quarter of it, so it cannot starve.
            reserve = max(1, perf.max_batched_tokens // 4) if prefilling else 0
            prefill = reserve
            while self.waiting and len(self.running) + len(prefilling) + len(new) < perf.max_batch:
                s = self.waiting[0]
                if s.cancelled:
                    self.waiting.popleft()
                    continue
                if s.prompt_tokens > perf.max_batched_tokens:
                    take = min(s.prompt_tokens, budget - prefill)
                    if take <= 0:
                        break
                elif prefill + s.prompt_tokens > budget and (new or self.running or prefilling):
                    break
                else:
                    take = s.prompt_tokens
                self.waiting.popleft()
                s.prefill_left = s.prompt_tokens - take
                new.append(s)
                prefill += take
            prefill -= reserve
            for s in prefilling:
                take = max(0, min(s.prefill_left, budget - prefill))
                s.prefill_left -= take
                prefill += take
            batch = len(self.running) + len(prefilling) + len(new)
            now = CLOCK()
            if now - next_t > 5_000_000:
                next_t = now
            next_t += int(perf.step_ms(batch, prefill) * 1e6)
            delay = next_t - CLOCK()
            await asyncio.sleep(delay / 1e9 if delay > 0 else 0)
            self.steps += 1
            t_adm = CLOCK()
            for s in new:
                s.record["admitted_ns"] = t_adm
            prefilling.extend(new)
            ready = [s for s in prefilling if s.prefill_left <= 0]
            prefilling = [s for s in prefilling if s.prefill_left > 0 and not self._gone(s)]
            self.running.extend(ready)
            still: list[_Seq] = []
            for s in self.running:
                if self._gone(s):
                    continue
                if _emit(s):
                    still.append(s)
            self.running = still

    @staticmethod
    def _gone(s: _Seq) -> bool:
        """Cancelled or its client left: resolved, and dropped from the engine."""
        if s.cancelled or (s.writer is not None and s.writer.is_closing()):
            s.cancelled = True
            s.record["status"] = "client_gone"
            _resolve(s)
            return True
        return False


def _frame(s: _Seq, data: bytes) -> bytes:
    """``data`` as the body's next bytes: an HTTP chunk, or raw in a close-delimited body."""
    return data if s.dialect.stream_end == "close" else _chunk(data)


def _resolve(s: _Seq) -> None:
    if not s.done.done():
        s.done.set_result(None)


def _usage(s: _Seq) -> bytes:
    details = b',"prompt_tokens_details":{"cached_tokens":%d}' % s.cached if s.cached is not None else b""
    return b'{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d%s}' % (
        s.prompt_tokens, s.max_tokens, s.prompt_tokens + s.max_tokens, details)


class PrefixCache:
    """Blocks of ``block`` words keyed by the hash of everything before and in them (as vLLM's
    automatic prefix caching keys KV blocks): a prompt's cached tokens are its leading full
    blocks seen before. Reported in ``usage``; the timing model does not shorten the prefill."""

    def __init__(self, block: int, max_blocks: int = 1_000_000) -> None:
        self.block = block
        self.max_blocks = max_blocks
        self._blocks: set[int] = set()

    def lookup_and_add(self, words: list[str]) -> int:
        """Cached tokens of ``words`` (before this request), then its blocks are cached."""
        h = 0
        hits = 0
        missed = False
        b = self.block
        for k in range(len(words) // b):
            h = hash((h, tuple(words[k * b:(k + 1) * b])))
            if not missed and h in self._blocks:
                hits += b
            else:
                missed = True
            if len(self._blocks) >= self.max_blocks:
                self._blocks.clear()
            self._blocks.add(h)
        return min(hits, max(0, len(words) - 1))


def _token_event(s: _Seq, last: bool, k: int = 1) -> bytes:
    # the no_done fault ends a stream with neither [DONE] nor a finish_reason (a truncated stream)
    finish = b'"length"' if last and s.fault != "no_done" else b"null"
    tail = b',"usage":' + _usage(s) + b"}" if last and s.dialect.usage_in_last_chunk else b"}"
    if s.chat:
        delta = b'{"role":"assistant","content":"' if s.sent == 0 else b'{"content":"'
        body = s.prefix + b'"choices":[{"index":0,"delta":' + delta + TOKEN_TEXT.encode() * k + b'"},"finish_reason":' + finish + b"}]" + tail
    else:
        body = (
            s.prefix
            + b'"choices":[{"index":0,"text":"'
            + TOKEN_TEXT.encode() * k
            + b'","logprobs":null,"finish_reason":'
            + finish
            + b"}]"
            + tail
        )
    return b"data: " + body + b"\n\n"


def _emit(s: _Seq) -> bool:
    """Emit one token for ``s``; False when the sequence leaves the batch."""
    rec = s.record
    if not s.stream:
        s.emitted += 1
        t = CLOCK()
        if s.emitted == 1:
            rec["first_token_ns"] = t
        if s.emitted >= s.max_tokens:
            rec["last_token_ns"] = t
            rec["completion_tokens"] = s.emitted
            _resolve(s)
            return False
        return True
    w = s.writer
    if s.emitted == s.mid and s.fault in ("close_midstream", "stall", "malformed_sse"):
        if s.fault == "close_midstream":
            rec["status"] = "fault:close_midstream"
            rec["completion_tokens"] = s.emitted
            w.close()
            _resolve(s)
            return False
        if s.fault == "stall":
            rec["status"] = "fault:stall"
            rec["completion_tokens"] = s.emitted
            _resolve(s)
            return False
        w.write(_frame(s, b"data: {not json\n\n"))
    last = s.emitted + 1 >= s.max_tokens
    if not last and s.emitted % s.dialect.stream_interval:  # held for the interval's chunk: generated, not sent
        s.emitted += 1
        return True
    data = _token_event(s, last, s.emitted + 1 - s.sent)
    s.sent = s.emitted + 1
    if last:
        d = s.dialect
        if s.include_usage and not d.usage_in_last_chunk:
            data += b"data: " + s.prefix + b'"choices":[],"usage":' + _usage(s) + b"}\n\n"
        if s.fault != "no_done" and d.stream_end == "done":
            data += b"data: [DONE]\n\n"
        w.write(data if d.stream_end == "close" else _chunk(data) + b"0\r\n\r\n")
    else:
        w.write(_frame(s, data))
    t = CLOCK()
    s.emitted += 1
    if s.emitted == 1:
        rec["first_token_ns"] = t
    if last:
        rec["last_token_ns"] = t
        rec["completion_tokens"] = s.emitted
        rec["status"] = "ok" if s.fault == "none" else f"fault:{s.fault}"
        _resolve(s)
        return False
    return True

