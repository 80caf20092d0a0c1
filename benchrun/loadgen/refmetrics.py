"""The reference server's ``GET /metrics``: its engine's state in the Prometheus text format, under vLLM's metric names.

So that ``--server-metrics`` is tested against a server here (:mod:`benchrun.loadgen.servermetrics`
maps the same names for vLLM and SGLang). What each one counts in the synthetic engine:

- ``vllm:num_requests_running``: sequences decoding (admitted, prompt prefilled, not finished);
- ``vllm:num_requests_waiting``: sequences queued for admission;
- ``vllm:kv_cache_usage_perc`` (0-1): tokens held by the running sequences (prompt + generated)
  over ``KV_TOKENS_PER_SEQ × max_batch``, the cache the model pretends to have;
- ``vllm:prompt_tokens_total``, ``vllm:prefix_cache_queries_total``: prompt tokens of admitted
  requests (every prompt token is looked up); ``vllm:prefix_cache_hits_total``: the cached
  tokens of those requests, counted where the server's prefix cache
  (``--prefix-cache-block``) is looked up (0 without one);
- ``vllm:num_preemptions_total``: the engine's ``preemptions`` counter (0: it never preempts).
"""

from __future__ import annotations

from typing import Any

KV_TOKENS_PER_SEQ = 4096


def render(engine: Any, counters: dict[str, float], model_name: str) -> bytes:
    """The exposition text of one scrape."""
    perf = engine.perf
    running = list(engine.running)
    held = sum(s.prompt_tokens + s.emitted for s in running)
    usage = min(1.0, held / float(KV_TOKENS_PER_SEQ * perf.max_batch))
    lab = '{model_name="%s"}' % model_name.replace("\\", "\\\\").replace('"', '\\"')
    prompt = float(counters.get("prompt_tokens", 0))
    rows = [
        ("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", len(running)),
        ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", len(engine.waiting)),
        ("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage),
        ("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", prompt),
        ("vllm:prefix_cache_queries", "counter", "Prefix cache queries, in tokens.", prompt),
        ("vllm:prefix_cache_hits", "counter", "Prefix cache hits, in tokens.", float(counters.get("prefix_cache_hits", 0))),
        ("vllm:num_preemptions", "counter", "Cumulative number of preemptions.", float(getattr(engine, "preemptions", 0))),
    ]
    out = []
    for name, kind, doc, value in rows:
        sample = name + ("_total" if kind == "counter" else "")
        out.append(f"# HELP {sample} {doc}\n# TYPE {sample} {kind}\n{sample}{lab} {float(value)!r}\n")
    return "".join(out).encode()
