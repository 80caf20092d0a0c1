"""Serving load generator for OpenAI-compatible endpoints, a reference server, and serving metrics.

Modules:

- :mod:`benchrun.loadgen.workload` — the sequence-length mix, seeded request drawing, prompts,
  request ids and W3C trace context.
- :mod:`benchrun.loadgen.client` — the asyncio HTTP/1.1 streaming client (one request, end to end),
  built from :mod:`~benchrun.loadgen.endpoint` (URL, request body and head),
  :mod:`~benchrun.loadgen.conn` (kernel-stamped connections and the keep-alive pool) and
  :mod:`~benchrun.loadgen.sse` (response head and SSE stream parsing into an ``Outcome``).
- :mod:`benchrun.loadgen.runner` — sweeps: points, warm-up, measured phase, merging; with
  :mod:`~benchrun.loadgen.config` (load points, sweep config and result),
  :mod:`~benchrun.loadgen.schedule` (closed-loop slots, open-loop arrivals, one phase),
  :mod:`~benchrun.loadgen.records` (prepared requests and per-request rows) and
  :mod:`~benchrun.loadgen.workers` (worker subprocesses).
- :mod:`benchrun.loadgen.metrics` — per-point and per-bucket summaries (CONTRACT.md §5),
  goodput, SLO attainment, capacity at SLO, cost, and the validity verdict.
- :mod:`benchrun.loadgen.output` — the per-request parquet and the latency-throughput figures.
- :mod:`benchrun.loadgen.refserver` — the synthetic continuously batched reference server's HTTP
  front and serving loop; :mod:`~benchrun.loadgen.refengine` (performance model, engine loop),
  :mod:`~benchrun.loadgen.refrequest` (request validation), :mod:`~benchrun.loadgen.refprocess`
  (the server as a child process).
- :mod:`benchrun.loadgen.suite` — the body shared by the ``serving_sweep`` and
  ``serving_workflow`` suites.
- :mod:`benchrun.loadgen.commands` — the ``benchrun loadgen`` and ``benchrun refserver``
  commands (they also write the JSON summary).

Everything here except ``commands`` imports only the standard library and numpy (pyarrow and
matplotlib lazily, for writing parquet and figures) because it runs inside benchmark pods;
``commands`` is the CLI's (typer, rich) and nothing else here imports it.
"""
