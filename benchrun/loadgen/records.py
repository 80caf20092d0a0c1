"""Per-request records: the prepared request of each slot (:class:`_Spec`) and the row measured from its outcome."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from benchrun.loadgen import client as http
from benchrun.loadgen.config import LoadPoint, SweepConfig
from benchrun.loadgen.sse import spread_total
from benchrun.loadgen.workload import draw_bucket, make_prompt, mix_cdf, new_trace_context, salt_permutation, salted, worker_rng

CLOCK = time.perf_counter_ns


class _Spec:
    __slots__ = ("request_id", "trace_id", "bucket", "in_tokens", "out_tokens", "head", "body", "scheduled_ns",
                 "session_id", "turn", "prefix_id", "dataset_index")

    def __init__(self) -> None:
        self.session_id: str | None = None
        self.turn: int | None = None
        self.prefix_id: int | None = None
        self.dataset_index: int | None = None


def _specs(cfg: SweepConfig, endpoint: http.Endpoint, point_index: int, worker: int, nonce: str, n_warm: int, n: int | None,
           n_workers: int = 1, shares: list[int] | None = None) -> Any:
    """Yield warm-up specs then measured specs (endless when ``n`` is None), each with its
    request bytes already built so sending costs nothing on the measured path. With request
    content (a dataset, a tokenizer, shared prefixes) :mod:`benchrun.loadgen.content` builds
    them (sessions are planned by :mod:`benchrun.loadgen.sessions`, which the runner calls);
    ``shares``: every worker's measured requests, over which a dataset's entries are dealt."""
    if cfg.content is not None:
        from benchrun.loadgen.content import content_specs

        yield from content_specs(cfg, endpoint, point_index, worker, nonce, n_warm, n, _Spec, n_workers, shares)
        return
    rng = worker_rng(cfg.seed, point_index, worker, 0)
    words = salted(rng, salt_permutation(cfg.prompt_salt))  # the same draws as rng, the words renamed by the salt
    cdf = mix_cdf(cfg.mix)
    seq = 0

    def one(tag: str) -> _Spec:
        nonlocal seq
        b = cfg.mix[draw_bucket(cdf, rng)]
        s = _Spec()
        s.request_id = f"{nonce}-p{point_index}-w{worker}-{tag}{seq}"
        s.trace_id, traceparent = new_trace_context()
        s.bucket = b.label
        s.in_tokens = b.input_tokens
        s.out_tokens = b.output_tokens
        s.body = http.build_body(endpoint, cfg.model, make_prompt(b.input_tokens, words), b.output_tokens, ignore_eos=cfg.ignore_eos, include_usage=cfg.include_usage)
        s.head = http.build_head(endpoint, "POST", endpoint.path, len(s.body), {"X-Request-Id": s.request_id, "traceparent": traceparent})
        seq += 1
        return s

    for _ in range(n_warm):
        yield one("wu")
    i = 0
    while n is None or i < n:
        yield one("")
        i += 1


class _WorkerState:
    def __init__(self, cfg: SweepConfig, worker: int) -> None:
        self.cfg = cfg
        self.worker = worker
        self.share = (worker, 1)  # (this worker, the workers sharing an open-loop point's schedule)
        self.endpoint = http.Endpoint.from_url(cfg.url, cfg.api)
        self.mono0 = CLOCK()
        self.wall0 = time.time_ns()
        # --tokenizer: counts the streamed text of a reply without usage (as vLLM's bench serve
        # counts generated_text when a backend reports no output tokens); None: chunks count
        self.counter = cfg.content.load()[1] if cfg.content is not None and cfg.content.tokenizer else None
        self.turns_not_sent: dict[str, int] = {}  # per bucket: session turns never sent (a turn before failed)

    def wall_s(self, mono_ns: int) -> float:
        return (self.wall0 + (mono_ns - self.mono0)) / 1e9


def tokenizer_count(out: http.Outcome, counter: Any) -> int:
    """Without usage: the tokenizer's count of the streamed text (``out.generated``), not one token a
    chunk (a server streaming 17 tokens in 5 chunks read 5). A count above the chunks is spread over
    them as a usage total is (:func:`benchrun.loadgen.sse.spread_total`), so the gaps agree with
    decode_ms_per_token; every chunk with text carries a token at least, so a count below the chunks'
    (re-tokenising the joined text merged the model's pieces) is too low and the chunks' count stands
    (found in review)."""
    counted = max(int(counter.count("".join(out.generated or []))), len(out.chunk_tokens))
    if counted > len(out.chunk_tokens):
        spread_total(out.chunk_tokens, counted)
        out.chunk_token_method = "tokenizer_total_spread"
    return counted


def _row(st: _WorkerState, spec: _Spec, out: http.Outcome, end_ns: int, point: LoadPoint, point_index: int) -> dict[str, Any]:
    ok = out.error is None
    usage_out = out.usage_completion
    source = ("usage" if usage_out is not None else "chunks") if ok else None
    counted = 0
    if ok and usage_out is None and st.counter is not None and out.generated is not None:
        counted, source = tokenizer_count(out, st.counter), "tokenizer"
    chunk_tokens = sum(out.chunk_tokens)
    output_tokens = (usage_out if usage_out is not None else counted if source == "tokenizer" else chunk_tokens) if ok else None
    # latency from the request's send (CONTRACT.md §5), a connection opened inside the request
    # included (a user waits for it too: a server that accepts slowly must not read as fast);
    # connect_ms says how much of it was set-up. The first wave's connects are kept out of the
    # measured phase by opening every stream's connection before the go time (preconnect).
    origin = out.send_ns
    ttft = (out.first_ns - origin) / 1e6 if ok and out.first_ns is not None else None
    e2e = (out.last_ns - origin) / 1e6 if ok and out.last_ns is not None else None
    decode = None
    if ok and output_tokens and output_tokens > 1 and e2e is not None and ttft is not None:
        decode = (e2e - ttft) / (output_tokens - 1)
    gaps: list[float] = []
    cn = out.chunk_ns
    prev = cn[0] if cn else 0
    for i in range(1, len(cn)):
        k = out.chunk_tokens[i]
        if k:  # a chunk of no new token (usage did not grow) makes no gap: its time is the next token's
            gaps.extend([(cn[i] - prev) / 1e6 / k] * k)
            prev = cn[i]
    return {
        "request_id": spec.request_id,
        "trace_id": spec.trace_id,
        "worker": st.worker,
        "point": point.label,
        "point_index": point_index,
        "load_model": point.load_model,
        "offered_load": float(point.offered_load),
        "bucket": spec.bucket,
        "input_tokens_requested": spec.in_tokens,
        "output_tokens_requested": spec.out_tokens,
        "scheduled_ts": st.wall_s(spec.scheduled_ns),
        "send_ts": st.wall_s(out.send_ns),
        "schedule_lag_ms": (out.send_ns - spec.scheduled_ns) / 1e6,
        "scheduled_mono_ns": spec.scheduled_ns,
        "send_mono_ns": out.send_ns,
        "write_mono_ns": out.write_ns or None,
        "connect_ms": out.connect_ns / 1e6 if out.connect_ns is not None else None,
        "first_token_mono_ns": out.first_ns,
        "last_token_mono_ns": out.last_ns,
        "end_mono_ns": out.last_ns if (ok and out.last_ns is not None) else end_ns,
        "ttft_ms": ttft,
        "e2e_ms": e2e,
        "input_tokens": (out.usage_prompt if out.usage_prompt is not None else spec.in_tokens) if ok else None,
        "output_tokens": output_tokens,
        "usage_input_tokens": out.usage_prompt,
        "usage_output_tokens": usage_out,
        "chunk_count": len(cn),
        "chunk_output_tokens": chunk_tokens,
        "token_count_source": source,
        "chunk_token_method": out.chunk_token_method if ok else None,
        "output_token_discrepancy": (usage_out - chunk_tokens) if (ok and usage_out is not None) else None,
        # the server's count less its fixed per-request overhead (a chat template's tokens, a BOS),
        # measured once with an empty prompt before the sweep
        "input_token_discrepancy": (out.usage_prompt - st.cfg.prompt_token_overhead - spec.in_tokens) if out.usage_prompt is not None else None,
        "decode_ms_per_token": decode,
        "token_gaps_ms": gaps if ok else [],
        "token_gap_std_ms": float(np.std(gaps)) if ok and len(gaps) >= 2 else None,
        "http_status": out.status,
        "error_kind": out.error_kind,
        "error": out.error,
        "reused_connection": out.reused_connection,
        "stream_end": out.terminator,
        "synthetic": st.cfg.synthetic,
        "session_id": spec.session_id,
        "turn": spec.turn,
        "prefix_id": spec.prefix_id,
        "dataset_index": spec.dataset_index,
        "usage_cached_tokens": out.usage_cached,
    }

