"""Reader of ``vllm bench serve`` result JSON into benchrun's per-point serving shape.

The input is the file ``vllm bench serve --save-result`` writes
(``--append-result`` writes one such object per line; each becomes one point). Its fields,
as vLLM's ``benchmarks/serve.py`` documents and writes them:

- setup: ``date``, ``backend`` / ``endpoint_type``, ``model_id``, ``tokenizer_id``,
  ``num_prompts``, ``request_rate`` (a number or ``"inf"``), ``burstiness``,
  ``max_concurrency`` (null when unlimited);
- totals: ``duration`` (s), ``completed``, ``failed`` (newer versions), ``total_input_tokens``,
  ``total_output_tokens``, ``request_throughput``, ``request_goodput`` (null without
  ``--goodput``), ``output_throughput``, ``total_token_throughput``;
- per metric ``m`` in ``--percentile-metrics`` (default ttft,tpot,itl; e2el optional):
  ``mean_<m>_ms``, ``median_<m>_ms``, ``std_<m>_ms`` and ``p<P>_<m>_ms`` for each
  ``--metric-percentiles`` P (``p99``, ``p99.9`` ...);
- with ``--save-detailed``: ``input_lens``, ``output_lens``, ``ttfts`` (s), ``itls``
  (list of per-request lists, s), ``errors`` (empty string on success).

Mapping (CONTRACT.md §5 names): ttft → ``ttft_ms``, tpot → ``decode_ms_per_token`` (same
formula, per token: (latency − ttft) / (output tokens − 1)), itl → ``chunk_gap_ms``, e2el →
``e2e_ms``, output_throughput →
``tokens_per_second``, request_throughput → ``request_throughput_rps``, request_goodput →
``request_goodput``, duration → ``window_s``. With per-request detail the distributions,
``jitter_ms`` and ``per_user_output_tokens_per_s`` are recomputed from the raw values with
benchrun's own definitions; otherwise they come from the summary fields present (missing
percentiles stay null). The recomputed latency percentiles count failed requests as the load
generator does (:func:`benchrun.loadgen.metrics.latencies`): a failed request ranks slower than
every value (``censored``), ``e2e_ms`` censoring every failure, ``ttft_ms`` those failed before
their first token (ttft 0 or missing; a failure after it keeps its TTFT as a value) and
``decode_ms_per_token`` those failed after it (a distribution that censors none keeps numpy's
linear percentiles, as :func:`benchrun.loadgen.metrics.summarize` passes ``censored``);
``percentiles_censored`` lists the percentiles whose rank falls among the censored (their value
is the largest known, a lower bound).

vLLM's itl is per streamed CHUNK, not per token: its request functions append
``timestamp - most_recent_timestamp`` for every chunk after the first, so a chunk of k tokens
(speculative decoding, ``--stream-interval`` k) is one gap k times a token's. benchrun's
``token_gap_ms`` splits such a chunk into k equal gaps, so the two are kept apart:
``chunk_gap_ms`` holds vLLM's itl as it is, and ``token_gap_ms`` (and ``jitter_ms``, the spread of
token gaps) is filled only when per-request detail shows one token per chunk in every completed
request (``len(itl) == output_len - 1``), where the two coincide; otherwise they are null and
``token_gaps_from`` says why. ``chunk_jitter_ms`` is the same median of per-request spreads over
chunk gaps. The point label (the metrics' ``case``) names every setting that makes
a run a different experiment (:func:`load_point`): ``c=8`` (infinite rate), ``rate=8``,
``rate=8,burstiness=0.25``, ``rate=8,max_concurrency=4``, and a ramped rate
(``--ramp-up-strategy``) ``ramp=linear:1-20`` (``,max_concurrency=64`` ...), load model
``ramp_up``, never the ``c=64`` of a fixed-concurrency run. ``verdict`` is null: vLLM records
neither schedule lag nor client saturation, so the point cannot be judged; ``verdict_reasons``
says so.

Standard library and numpy: the recomputed distributions are
:func:`benchrun.loadgen.metrics.distribution`, the one definition the load generator uses.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from benchrun.errors import BenchrunError
from benchrun.loadgen.metrics import HEADLINE, PERCENTILES, censored_distributions, distribution
from benchrun.suites.result import PERCENTILE_SUFFIXES, metric

# vLLM's itl is a gap between chunks, not tokens: it never becomes token_gap_ms (module docstring)
_METRICS = {"ttft": "ttft_ms", "tpot": "decode_ms_per_token", "itl": "chunk_gap_ms", "e2el": "e2e_ms"}
# summary-field spelling of each percentile: p90 -> "90", p999 -> "99.9"
_PCT = {name: f"{q:g}" for name, q in PERCENTILES.items()}
# a headline field that is a percentile of the point's requests (e2e_ms_p99, ttft_ms_p50, ...)
_PERCENTILE_FIELD = re.compile(r"_p\d+$")


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _from_summary(doc: dict[str, Any], m: str, base: str) -> dict[str, float | None]:
    out: dict[str, float | None] = {f"{base}_{s}": None for s in PERCENTILE_SUFFIXES}
    out[f"{base}_mean"] = _num(doc.get(f"mean_{m}_ms"))
    out[f"{base}_std"] = _num(doc.get(f"std_{m}_ms"))
    out[f"{base}_p50"] = _num(doc.get(f"median_{m}_ms", doc.get(f"p50_{m}_ms")))
    for name, q in _PCT.items():
        if name != "p50" and doc.get(f"p{q}_{m}_ms") is not None:
            out[f"{base}_{name}"] = _num(doc.get(f"p{q}_{m}_ms"))
    return out


def load_point(doc: dict[str, Any], where: str = "vllm result") -> tuple[str, float, str]:
    """``(load_model, offered_load, label)`` of one result; the label is the case, so every setting
    that makes a different experiment is in it. An infinite rate is a closed loop at
    ``max_concurrency`` (``c=8``; burstiness shapes no arrivals there). A finite rate is open loop,
    labelled as the load generator labels its own points (``rate=8``, gamma arrivals
    ``rate=8,burstiness=0.25``; vLLM draws gamma gaps, Poisson at its default 1.0), plus the cap on
    requests in flight when one was set (``rate=8,max_concurrency=4``): runs that differ in either
    are not replicates of one another. A ramped rate (``ramp_up_strategy`` set: vLLM raises the rate
    from ``ramp_up_start_rps`` to ``ramp_up_end_rps`` over the run, whatever ``request_rate`` says)
    is load model ``ramp_up`` at the end rate, labelled ``ramp=linear:1-20`` plus the burstiness and
    the cap as above: neither a closed loop at its ``max_concurrency`` nor a fixed rate."""
    strategy = doc.get("ramp_up_strategy")
    if strategy is not None:
        start, end = float(doc["ramp_up_start_rps"]), float(doc["ramp_up_end_rps"])
        label = f"ramp={str(strategy)}:{start:g}-{end:g}"
        burstiness = None if doc.get("burstiness") is None else float(doc["burstiness"])
        if burstiness is not None and burstiness != 1.0:
            label += f",burstiness={burstiness:g}"
        if doc.get("max_concurrency") is not None:
            label += f",max_concurrency={int(float(doc['max_concurrency']))}"
        return "ramp_up", end, label
    rate = doc.get("request_rate")
    rate_f = None if rate in (None, "inf") else _num(rate)
    # strict: a field of the wrong type is refused (ValueError), not read as unset and pooled
    conc = None if doc.get("max_concurrency") is None else float(doc["max_concurrency"])
    if rate_f is None:
        if conc is None:
            raise BenchrunError(f"{where}: request_rate is inf and max_concurrency is null; the load point is undefined")
        return "closed_loop", float(conc), f"c={int(conc)}"
    label = f"rate={rate_f:g}"
    burstiness = None if doc.get("burstiness") is None else float(doc["burstiness"])
    if burstiness is not None and burstiness != 1.0:
        label += f",burstiness={burstiness:g}"
    if conc is not None:
        label += f",max_concurrency={int(conc)}"
    return "open_loop", rate_f, label


def point_from_result(doc: dict[str, Any], where: str = "vllm result") -> dict[str, Any]:
    """One per-point serving row (bucket ``all``) from one ``vllm bench serve`` result object."""
    if not isinstance(doc, dict) or "completed" not in doc or "duration" not in doc:
        raise BenchrunError(f"{where}: not a vllm bench serve result (needs 'completed' and 'duration'); save it with --save-result")
    load_model, offered, label = load_point(doc, where)
    completed = int(doc["completed"])
    window = _num(doc.get("duration"))
    errors = doc.get("errors")
    if doc.get("failed") is not None:
        failed = int(doc["failed"])
    elif isinstance(errors, list):
        failed = sum(1 for e in errors if e)
    elif doc.get("num_prompts") is not None:
        failed = max(0, int(doc["num_prompts"]) - completed)
    else:
        failed = 0
    row: dict[str, Any] = {
        "point": label,
        "load_model": load_model,
        "offered_load": offered,
        "bucket": "all",
        "n_requests": completed,
        "n_errors": failed,
        "window_s": window,
        "tokens_per_second": _num(doc.get("output_throughput")),
        "request_throughput_rps": _num(doc.get("request_throughput")),
        "request_goodput": _num(doc.get("request_goodput")),
        "slo_attainment": None,
        "cost_per_request_usd": None,
        "cost_per_token_usd": None,
        "achieved_rate_rps": None,
        "schedule_lag_p99_ms": None,
        "jitter_ms": None,
        "per_user_output_tokens_per_s": None,
        "verdict": None,
        "verdict_reasons": ["not judged: vllm bench serve records neither schedule lag nor client saturation"],
        "source": "vllm bench serve",
        "model": doc.get("model_id"),
        "date": doc.get("date"),
        "burstiness": _num(doc.get("burstiness")),
        "max_concurrency": _num(doc.get("max_concurrency")),
        "output_tokens_total": doc.get("total_output_tokens"),
        "input_tokens_total": doc.get("total_input_tokens"),
    }
    if row["request_goodput"] is not None and window and (completed + failed):
        row["slo_attainment"] = row["request_goodput"] * window / (completed + failed)
    ttfts, itls, outs = doc.get("ttfts"), doc.get("itls"), doc.get("output_lens")
    detailed = isinstance(ttfts, list) and isinstance(itls, list) and isinstance(outs, list) and len(ttfts) == len(itls) == len(outs)
    if detailed:
        def _failed(i: int) -> bool:
            return isinstance(errors, list) and i < len(errors) and bool(errors[i])
        ok = [i for i in range(len(ttfts)) if not _failed(i) and _num(ttfts[i]) is not None and (outs[i] or 0) > 0]
        # the load generator's rule (loadgen.metrics.latencies): failures rank slowest
        if isinstance(errors, list):
            fails = [i for i in range(len(ttfts)) if _failed(i)]
            started = [i for i in fails if (_num(ttfts[i]) or 0) > 0]  # vLLM leaves ttft 0 until a token
            n_failed = len(fails)
        else:  # no per-request errors: the failed count, none known to have started
            started, n_failed = [], failed
        ttft_ms = [ttfts[i] * 1000 for i in ok]
        e2e_ms = [(ttfts[i] + sum(itls[i] or [])) * 1000 for i in ok]
        tpot = [(e2e_ms[k] - ttft_ms[k]) / (outs[i] - 1) for k, i in enumerate(ok) if outs[i] > 1]
        gaps = [g * 1000 for i in ok for g in (itls[i] or [])]
        lat = {"ttft_ms": (ttft_ms + [ttfts[i] * 1000 for i in started], n_failed - len(started)),
               "e2e_ms": (e2e_ms, n_failed), "decode_ms_per_token": (tpot, len(started))}
        fields, censored_by = censored_distributions(lat)  # the load generator's summarize, as it does it
        row.update(fields)
        row["percentiles_censored"] = censored_by if n_failed else None
        row.update(distribution(gaps, "chunk_gap_ms"))
        stds = [float(np.std([x * 1000 for x in itls[i]])) for i in ok if len(itls[i] or []) >= 2]
        row["chunk_jitter_ms"] = float(np.median(stds)) if stds else None
        multi = sum(1 for i in ok if len(itls[i] or []) != outs[i] - 1)
        if multi == 0:  # one token per chunk: each chunk gap is a token gap
            row.update(distribution(gaps, "token_gap_ms"))
            row["jitter_ms"] = row["chunk_jitter_ms"]
            row["token_gaps_from"] = "chunk gaps: one token per chunk in every completed request"
        else:
            row.update(distribution([], "token_gap_ms"))
            row["token_gaps_from"] = (f"unknown: {multi} of {len(ok)} completed requests had chunk count != output tokens "
                                      "(vLLM's itl is per chunk; see chunk_gap_ms)")
        rates = [outs[i] / (e2e_ms[k] / 1000) for k, i in enumerate(ok) if e2e_ms[k] > 0]
        row["per_user_output_tokens_per_s"] = sum(rates) / len(rates) if rates else None
        row["distributions_from"] = "per-request detail (--save-detailed)"
    else:
        for m, base in _METRICS.items():
            row.update(_from_summary(doc, m, base))
        row.update(distribution([], "token_gap_ms"))
        row["chunk_jitter_ms"] = None
        row["token_gaps_from"] = "unknown: vLLM's itl is per chunk (chunk_gap_ms); tokens per chunk need --save-detailed"
        row["distributions_from"] = "summary fields (percentiles not saved are null)"
    return row


def points_from_file(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every point in a result file (one JSON object, or one object per line)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise BenchrunError(f"{p}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise BenchrunError(f"{p}: not UTF-8 text; expected vllm bench serve --save-result output") from None
    try:
        docs = [json.loads(text)]
    except json.JSONDecodeError:
        docs = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    docs.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise BenchrunError(f"{p}:{n}: not JSON ({exc.msg}); expected vllm bench serve --save-result output") from None
    if not docs:
        raise BenchrunError(f"{p}: empty; expected vllm bench serve --save-result output")
    points = []
    for i, d in enumerate(docs):
        where = f"{p}" if len(docs) == 1 else f"{p} object {i + 1}"
        try:
            points.append(point_from_result(d, where))
        except (TypeError, ValueError, LookupError, AttributeError) as exc:
            raise BenchrunError(f"{where}: a field has an unexpected type or value ({exc}); "
                                "expected vllm bench serve --save-result output") from None
    return points


def metrics_from_file(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Headline metric rows (``case`` = the point label) for :func:`benchrun.ingest.ingest_file`. A row
    that is a percentile of the point's requests (``p99_latency_ms``, ``ttft_ms`` = the p50 ...) carries
    ``samples`` = the point's completed requests, as the suites' percentiles do: a comparison does not
    gate on a p99 of too few requests (:mod:`benchrun.stats.tails`)."""
    rows = []
    for pt in points_from_file(path):
        for name, fld, unit, direction in HEADLINE:
            if pt.get(fld) is None:
                continue
            keys = {"samples": int(pt["n_requests"])} if _PERCENTILE_FIELD.search(fld) else {}
            rows.append(metric(name, pt[fld], unit, direction, case=pt["point"], **keys))
    return rows
