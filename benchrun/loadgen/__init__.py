"""Serving load generator for OpenAI-compatible endpoints, a reference server, and serving metrics.

Modules:

- :mod:`benchrun.loadgen.workload` — the sequence-length mix, seeded request drawing, prompts,
  request ids and W3C trace context.
- :mod:`benchrun.loadgen.client` — the asyncio HTTP/1.1 streaming client and SSE parser.
- :mod:`benchrun.loadgen.runner` — load models (closed / open loop), sweeps, worker processes.
- :mod:`benchrun.loadgen.metrics` — per-point and per-bucket summaries (CONTRACT.md §5),
  goodput, SLO attainment, capacity at SLO, cost, and the validity verdict.
- :mod:`benchrun.loadgen.output` — the per-request parquet and the latency-throughput figures.
- :mod:`benchrun.loadgen.refserver` — the synthetic continuously batched reference server.
- :mod:`benchrun.loadgen.suite` — the body shared by the ``serving_sweep`` and
  ``serving_workflow`` suites.
- :mod:`benchrun.loadgen.commands` — the ``benchrun loadgen`` and ``benchrun refserver``
  commands (they also write the JSON summary).

Everything here except ``commands`` imports only the standard library and numpy (pyarrow and
matplotlib lazily, for writing parquet and figures) because it runs inside benchmark pods;
``commands`` is the CLI's (typer, rich) and nothing else here imports it.
"""
