"""Serving metrics from per-request rows: distributions, goodput, SLO attainment, capacity, cost, verdict.

Definitions follow CONTRACT.md §5; field names are :mod:`benchrun.suites.result`'s. All functions are
pure and work on the raw request rows: several workers' rows are merged, then the percentiles computed
once (never averaged).

- ``n_requests`` counts completed requests, ``n_errors`` failed ones (split by ``error_kinds``).
- Percentiles without failures: ``numpy.percentile`` (linear) over completed requests; ``std``
  is the population standard deviation (ddof=0, as vLLM reports it).
- With failures (errors, timeouts) a latency percentile ranks **all** requests, a failed one
  without a value *censored*, slower than every value, as :mod:`benchrun.stats.tails` pools them
  (:func:`ranked_quantiles`, Hazen's positions; :func:`latencies` says which failures each
  distribution censors; ``token_gap_ms`` stays of completed requests). A percentile whose rank
  falls among the censored (:func:`censored_at`) is unknown, its value shown the largest known (a
  lower bound): ``percentiles_censored`` lists it per distribution, ``percentiles_note`` says
  why, an SLO at it is not met, and for the point's requests (``e2e_ms``) it leaves
  ``percentiles_supported`` and invalidates the verdict when it is the verdict's percentile.
- ``window_s``: first measured send to the last measured request's end (success or error).
  Bucket rows use their point's window (buckets are interleaved in time).
- ``achieved_concurrency`` (closed loop): the time-average, between the first and the last
  measured send, of requests in flight (``requests_in_flight``, always reported); for session
  workloads of *active sessions* instead (``active_sessions``: a session is active from its
  first measured send to its last end, think time included), which the verdict compares with
  the concurrency; requests in flight are then lower by the think time's share.
- ``per_user_output_tokens_per_s``: mean over completed requests of output tokens / e2e s.
- ``ttft_ms`` and ``e2e_ms`` run from the request's send, a connection opened inside it included;
  ``connect_ms_*`` is that set-up over the requests that opened one (``n_new_connections``).
- ``jitter_ms``: median over requests with ≥ 2 token gaps of the standard deviation (ddof=0)
  of that request's gaps.
- A request is *good* when it completed and meets every declared SLO: ``ttft_ms``,
  ``decode_ms_per_token`` (a one-token answer has no decode and meets it), ``e2e_ms``.
  ``request_goodput`` = good / window; ``slo_attainment`` = good / (completed + errored + turns not sent).
  Without an SLO both are null (absent, not zero).
- Cost: price per node-second x nodes x window, divided by completed requests (output
  tokens; good requests). Bucket rows apportion the window's cost by output-token share,
  so the cost per token is the same for every bucket of a point. Without a price, null.
- ``capacity_at_slo``: loads in ascending order, the highest of the leading run of loads whose
  point meets **every** declared SLO at p99 (TTFT, decode pace, e2e), with a p99 its request
  count supports (:func:`requests_needed`, 368 at 95 %) and failures do not censor, and a verdict
  that holds (valid, or short only of requests for a higher verdict percentile): counting stops
  at the first load that fails, so a server answering fast errors under overload sets nothing;
  null when the lowest load fails (:func:`capacity_reason` says why).

Minimum samples, ONE rule (:func:`requests_needed`; the comparison, ``benchrun.stats.tails``,
the trial statistics' ``n_required`` and the tail playbook use the same function): a
percentile is supported at confidence ``c`` when its distribution-free (order-statistic)
interval at ``c`` has both ends, i.e. the largest of ``n`` i.i.d. samples exceeds the true
q-quantile with probability ``1 - q**n >= 1 - (1 - c) / 2``. At the default 95 %: p50 6, p90 36,
p95 72, p99 368, p99.9 3688 requests. A point with fewer completed requests than its verdict
percentile needs is ``invalid`` ("368 needed for a bounded p99 at 95 %"); the verdict once asked 459.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction
from typing import Any, Iterable, Sequence

import numpy as np

from benchrun.suites.result import PERCENTILE_SUFFIXES as SUFFIXES

PERCENTILES: dict[str, float] = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p999": 99.9}
# the same as fractions (the censoring rule's exact arithmetic) and as the floats nearest them
QUANTILES: dict[str, Fraction] = {name: Fraction(str(p)) / 100 for name, p in PERCENTILES.items()}


def distribution(values: Iterable[float | None], base: str, censored: int | None = None) -> dict[str, float | None]:
    """``{base}_{mean,p50,p90,p95,p99,p999,min,max,std}``; all null when there are no values.
    ``censored`` (given when this distribution censors failed requests): that many without a value, slower
    than every value; the percentiles then rank all requests (:func:`ranked_quantiles`)."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    if arr.size == 0:
        return {f"{base}_{s}": None for s in SUFFIXES}
    if censored is None:
        qs = np.percentile(arr, list(PERCENTILES.values()))
    else:
        qs = ranked_quantiles(arr, censored, [float(q) for q in QUANTILES.values()])
    out: dict[str, float | None] = {f"{base}_mean": float(arr.mean())}
    for name, q in zip(PERCENTILES, qs):
        out[f"{base}_{name}"] = float(q)
    out[f"{base}_min"] = float(arr.min())
    out[f"{base}_max"] = float(arr.max())
    out[f"{base}_std"] = float(arr.std())
    return out


def ranked_quantiles(values: np.ndarray, censored: int, qs: Sequence[float]) -> np.ndarray:
    """The ``qs``-quantiles of ``values`` ranked among ``values.size + censored`` requests, the
    censored slower than every value: Hazen's positions, each value at the middle of its 1/N,
    linear in between, as ``benchrun.stats.tails.pooled_quantile`` computes them (for one point,
    the same numbers; the stats layer imports this one, not the reverse). A q past the last
    value's position (:func:`censored_at`) gives the last value: a lower bound, not the quantile."""
    ws = np.full(values.size + censored, 1.0 / (values.size + censored))
    mid = (np.cumsum(ws) - ws / 2)[: values.size]
    return np.interp(np.asarray(qs, dtype=float), mid, np.sort(values))


def censored_at(n_values: int, n_censored: int) -> list[str]:
    """The percentiles whose rank falls among ``n_censored`` requests slower than ``n_values``
    others: ``benchrun.stats.tails.pooled_quantile``'s rule (its +inf), q > (n_values - 1/2) / N,
    in exact arithmetic (tails' float sums also say +inf where q is exactly the last value's
    position, as 0.9 at 14 of 15)."""
    total = n_values + n_censored
    return [name for name, q in QUANTILES.items() if n_censored > 0 and q * total > n_values - Fraction(1, 2)]


def censored_distributions(lat: dict[str, tuple[list[Any], int]]) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Each distribution of :func:`latencies`' shape (values, failed requests it censors), numpy's linear
    percentiles where it censors none; and per distribution the percentiles its censored requests reach."""
    out: dict[str, Any] = {}
    by: dict[str, list[str]] = {}
    for base, (values, n_cens) in lat.items():
        out.update(distribution(values, base, n_cens or None))
        if got := censored_at(len(values), n_cens):
            by[base] = got
    return out, by


def min_samples(quantile: float, confidence: float = 0.99) -> int:
    """Smallest n with ``1 - q**n >= confidence`` (see module docstring); q in (0, 1)."""
    if not 0 < quantile < 1 or not 0 < confidence < 1:
        raise ValueError("quantile and confidence must lie in (0, 1)")
    return int(math.ceil(math.log(1 - confidence) / math.log(quantile) - 1e-12))


def requests_needed(q: float = 0.99, confidence: float = 0.95) -> int:
    """THE request-count rule (see module docstring): fewest samples for which the
    distribution-free interval of the q-quantile at ``confidence`` has both ends (368 for p99
    at 95 %): ``min_samples(max(q, 1 - q), 1 - (1 - confidence) / 2)``."""
    return min_samples(max(q, 1 - q), 1 - (1 - confidence) / 2)


@dataclass(frozen=True)
class SLO:
    """Per-request service-level objectives (any subset; at least one)."""

    ttft_ms: float | None = None
    decode_ms_per_token: float | None = None
    e2e_ms: float | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "SLO | None":
        """From ``{"ttft_ms": .., "decode_ms_per_token": .., "e2e_ms": ..}``; None when empty."""
        if not d:
            return None
        known = {"ttft_ms", "decode_ms_per_token", "e2e_ms", "tpot_ms"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown SLO key(s) {unknown}; use ttft_ms, decode_ms_per_token, e2e_ms")
        vals = {}
        for k, v in d.items():
            if v is None:
                continue
            key = "decode_ms_per_token" if k == "tpot_ms" else k
            try:
                f = float(v)
            except (TypeError, ValueError):
                f = math.nan
            if not f > 0:
                raise ValueError(f"SLO {k}={v!r} must be a positive number of milliseconds")
            vals[key] = f
        return cls(**vals) if vals else None

    def as_dict(self) -> dict[str, float]:
        """The declared objectives only."""
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Pricing:
    """A declared price per node-hour and node count (cost metrics exist only with one)."""

    price_per_node_hour_usd: float
    nodes: int = 1

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "Pricing | None":
        """From ``{"pricePerNodeHourUsd": .., "nodes": ..}``; None when absent."""
        if not d:
            return None
        price = d.get("pricePerNodeHourUsd", d.get("price_per_node_hour_usd"))
        if price is None:
            return None
        try:
            p = float(price)
            n = int(d.get("nodes", 1) or 1)
        except (TypeError, ValueError):
            p, n = math.nan, 0
        if not p >= 0 or n < 1:
            raise ValueError("pricing needs pricePerNodeHourUsd >= 0 and nodes >= 1")
        return cls(p, n)

    def cost_usd(self, window_s: float) -> float:
        """Cost of ``nodes`` nodes for ``window_s`` seconds."""
        return self.price_per_node_hour_usd / 3600.0 * self.nodes * window_s


@dataclass(frozen=True)
class VerdictPolicy:
    """Thresholds of the validity verdict of a load point."""

    max_error_rate: float = 0.01
    rate_tolerance: float = 0.05
    min_concurrency_ratio: float = 0.9
    max_schedule_lag_p99_ms: float = 10.0
    max_client_cpu: float = 0.9
    max_loop_lag_p99_ms: float = 10.0
    percentile: str = "p99"
    max_trace_lateness_ms: float = 100.0  # trace replay: no send later than this against the trace
    confidence: float = 0.95  # the comparison's: requests_needed is one rule for both

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "VerdictPolicy":
        """Override defaults from a mapping (unknown keys raise ValueError)."""
        d = dict(d or {})
        names = set(asdict(cls()).keys())
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown verdict policy key(s) {unknown}; known: {sorted(names)}")
        if "percentile" in d and d["percentile"] not in PERCENTILES:
            raise ValueError(f"verdict percentile must be one of {list(PERCENTILES)}")
        return cls(**d)


def is_good(row: dict[str, Any], slo: SLO) -> bool:
    """Completed and within every declared objective."""
    if row.get("error") is not None or row.get("ttft_ms") is None:
        return False
    if slo.ttft_ms is not None and row["ttft_ms"] > slo.ttft_ms:
        return False
    if slo.decode_ms_per_token is not None:
        d = row.get("decode_ms_per_token")
        if d is not None and d > slo.decode_ms_per_token:
            return False
    if slo.e2e_ms is not None and row["e2e_ms"] > slo.e2e_ms:
        return False
    return True


def window_s(rows: Sequence[dict[str, Any]]) -> float | None:
    """Seconds from the first send to the last end among ``rows`` (None when empty)."""
    if not rows:
        return None
    start = min(r["send_mono_ns"] for r in rows)
    end = max(r["end_mono_ns"] for r in rows)
    return max(end - start, 1) / 1e9


def _pctl(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def load_stats(rows: Sequence[dict[str, Any]], load_model: str, offered_load: float) -> dict[str, Any]:
    """Achieved rate, schedule lag and (closed loop) achieved concurrency of a point's rows."""
    out: dict[str, Any] = {"achieved_rate_rps": None, "scheduled_rate_rps": None, "schedule_lag_p99_ms": None, "achieved_concurrency": None}
    if not rows:
        return out
    sends = sorted(r["send_mono_ns"] for r in rows)
    sched = sorted(r["scheduled_mono_ns"] for r in rows)
    if len(sends) >= 2 and sends[-1] > sends[0]:
        out["achieved_rate_rps"] = (len(sends) - 1) / ((sends[-1] - sends[0]) / 1e9)
    if len(sched) >= 2 and sched[-1] > sched[0]:
        out["scheduled_rate_rps"] = (len(sched) - 1) / ((sched[-1] - sched[0]) / 1e9)
    out["schedule_lag_p99_ms"] = _pctl([r["schedule_lag_ms"] for r in rows], 99)
    out["schedule_lag_max_ms"] = max(r["schedule_lag_ms"] for r in rows)
    if load_model == "closed_loop" and len(sends) >= 2 and sends[-1] > sends[0]:
        a, b = sends[0], sends[-1]
        busy = sum(max(0, min(r["end_mono_ns"], b) - max(r["send_mono_ns"], a)) for r in rows)
        out["requests_in_flight"] = busy / (b - a)
        spans: dict[str, list[int]] = {}
        for r in rows:
            sid = r.get("session_id")
            if sid is None:
                continue
            span = spans.setdefault(sid, [r["send_mono_ns"], r["end_mono_ns"]])
            span[0] = min(span[0], r["send_mono_ns"])
            span[1] = max(span[1], r["end_mono_ns"])
        if spans:  # sessions: a slot is busy from its session's first send to its last end, think time included
            active = sum(max(0, min(e, b) - max(s0, a)) for s0, e in spans.values())
            out["active_sessions"] = active / (b - a)
            out["achieved_concurrency"] = out["active_sessions"]
        else:
            out["achieved_concurrency"] = out["requests_in_flight"]
    return out


COUNT_REASON_TAIL = " (order-statistic interval; the comparison's rule)"
# how runs recorded before 2026-12-03 ended the same reason (then a one-sided 99 % bound, 459 for p99)
LEGACY_COUNT_REASON_TAILS = (" confidence (order-statistic bound)",)


def pooled_reasons(reasons: Sequence[str]) -> list[str]:
    """A replicate's invalid-verdict reasons that still hold when the comparison pools the
    replicates' requests: all but the request count's (:func:`verdict`, and its older wording),
    which the comparison applies to the pooled count instead (five replicates of 100 requests
    make one p99 of 500)."""
    return [r for r in reasons if not str(r).endswith((COUNT_REASON_TAIL, *LEGACY_COUNT_REASON_TAILS))]


def verdict(*, load_model: str, offered_load: float, n_completed: int, n_errors: int, error_kinds: dict[str, int],
            stats: dict[str, Any], client: dict[str, Any], policy: VerdictPolicy,
            error_example: str | None = None) -> tuple[str, list[str]]:
    """``("valid" | "invalid", reasons)`` for one point (or one bucket of it); ``error_example``
    (one error of the most common kind) is quoted in the error-rate reason, so a rejected field
    and the flag that removes it reach the user, not only the per-request rows."""
    reasons: list[str] = []
    total = n_completed + n_errors
    if total == 0:
        return "invalid", ["no measured requests"]
    if n_errors / total > policy.max_error_rate:
        kinds = ", ".join(f"{v} {k}" for k, v in sorted(error_kinds.items()))
        eg = f"; e.g. {error_example[:300]}" if error_example else ""
        reasons.append(f"error rate {n_errors}/{total} = {n_errors / total:.1%} > {policy.max_error_rate:.1%} ({kinds}{eg})")
    if policy.percentile in censored_percentiles(n_completed, n_errors):
        reasons.append(censored_reason(policy.percentile, n_errors, total))
    q = PERCENTILES[policy.percentile] / 100.0
    need = requests_needed(q, policy.confidence)
    if n_completed < need:
        reasons.append(f"{n_completed} completed requests < {need} needed for a bounded {policy.percentile} at "
                       f"{policy.confidence:.0%}{COUNT_REASON_TAIL}")
    if load_model in ("open_loop", "trace"):
        ach, sch = stats.get("achieved_rate_rps"), stats.get("scheduled_rate_rps")
        if ach is not None and sch:
            if abs(ach / sch - 1) > policy.rate_tolerance:
                reasons.append(f"achieved rate {ach:.3g} req/s differs from the offered schedule's {sch:.3g} req/s by more than {policy.rate_tolerance:.0%}")
    else:
        conc = stats.get("achieved_concurrency")
        if conc is not None and conc < policy.min_concurrency_ratio * offered_load:
            what = "active sessions" if stats.get("active_sessions") is not None else "achieved concurrency"
            reasons.append(f"{what} {conc:.3g} < {policy.min_concurrency_ratio:.0%} of {offered_load:g}")
    lag = stats.get("schedule_lag_p99_ms")
    if lag is not None and lag > policy.max_schedule_lag_p99_ms:
        reasons.append(f"p99 schedule lag {lag:.3g} ms > {policy.max_schedule_lag_p99_ms:g} ms (requests sent late: coordinated omission)")
    worst = stats.get("schedule_lag_max_ms")
    if load_model == "trace" and worst is not None and worst > policy.max_trace_lateness_ms:
        reasons.append(f"client fell behind the trace: a send {worst:.3g} ms late > {policy.max_trace_lateness_ms:g} ms")
    cpu = client.get("client_cpu_max")
    if cpu is not None and cpu > policy.max_client_cpu:
        who = client.get("client_cpu_worker") or "a worker"
        reasons.append(f"client saturated: {who} used {cpu:.0%} of a core (> {policy.max_client_cpu:.0%}); add --workers")
    loop_lag = client.get("loop_lag_p99_ms")
    if loop_lag is not None and loop_lag > policy.max_loop_lag_p99_ms:
        who = f" ({client['loop_lag_worker']})" if client.get("loop_lag_worker") else ""
        reasons.append(f"client event-loop lag p99 {loop_lag:.3g} ms > {policy.max_loop_lag_p99_ms:g} ms{who} (timestamps late)")
    return ("invalid" if reasons else "valid"), reasons


def censored_percentiles(n_completed: int, n_errors: int) -> list[str]:
    """The point's percentiles whose rank falls among the failed requests, each slower than every
    completed one: :func:`censored_at` (``benchrun.stats.tails``' rule for the comparison's p99)."""
    return censored_at(n_completed, n_errors)


def censored_reason(name: str, n_errors: int, total: int) -> str:
    """Why percentile ``name`` is unknown: its (Hazen) rank is past the last known value."""
    rank = QUANTILES[name] * total + Fraction(1, 2)
    return (f"{name} not supported: {n_errors} of {total} requests failed, and its rank ({float(rank):.10g} of {total}) "
            f"is past the {total - n_errors} known (a failed request counts as slower than every completed one)")


def supported_percentiles(n: int, confidence: float = 0.95, n_errors: int = 0) -> list[str]:
    """The percentiles whose request count (:func:`requests_needed`) ``n`` completed requests meet
    and whose rank ``n_errors`` failed ones do not reach (:func:`censored_percentiles`)."""
    censored = censored_percentiles(n, n_errors)
    return [name for name, q in PERCENTILES.items()
            if n >= requests_needed(q / 100.0, confidence) and name not in censored]


def summarize(rows: Sequence[dict[str, Any]], *, point: str, load_model: str, offered_load: float, bucket: str,
              window: float | None, slo: SLO | None, pricing: Pricing | None, point_output_tokens: int | None = None,
              stats: dict[str, Any] | None = None, client: dict[str, Any] | None = None,
              policy: VerdictPolicy | None = None, turns_not_sent: int = 0) -> dict[str, Any]:
    """One serving summary row (point x bucket) from measured request rows.

    ``window`` is the point's window; ``point_output_tokens`` the point's total output
    tokens (for apportioning cost to a bucket; defaults to this row set's own total);
    ``turns_not_sent``: planned session turns never sent (a turn before failed), not good.
    """
    policy = policy or VerdictPolicy()
    ok = [r for r in rows if r.get("error") is None]
    errs = [r for r in rows if r.get("error") is not None]
    kinds: dict[str, int] = {}
    for r in errs:
        kinds[r.get("error_kind") or "error"] = kinds.get(r.get("error_kind") or "error", 0) + 1
    out: dict[str, Any] = {
        "point": point,
        "load_model": load_model,
        "offered_load": float(offered_load),
        "bucket": bucket,
        "n_requests": len(ok),
        "n_errors": len(errs),
        "error_kinds": kinds,
        "window_s": window,
        "turns_not_sent": turns_not_sent,
    }
    lat = latencies(ok, errs)
    fields, censored_by = censored_distributions(lat)
    out.update(fields)
    out.update(distribution((g for r in ok for g in (r.get("token_gaps_ms") or ())), "token_gap_ms"))
    out["n_new_connections"] = len(lat["connect_ms"][0])
    stds = [r["token_gap_std_ms"] for r in ok if r.get("token_gap_std_ms") is not None]
    out["jitter_ms"] = float(np.median(stds)) if stds else None
    out_tokens = int(sum(r["output_tokens"] or 0 for r in ok))
    in_tokens = int(sum(r["input_tokens"] or 0 for r in ok))
    out["output_tokens_total"] = out_tokens
    out["input_tokens_total"] = in_tokens
    out["output_token_discrepancy_total"] = int(sum(r.get("output_token_discrepancy") or 0 for r in ok))
    out["input_token_discrepancy_total"] = int(sum(r.get("input_token_discrepancy") or 0 for r in ok))
    if window:
        out["tokens_per_second"] = out_tokens / window
        out["request_throughput_rps"] = len(ok) / window
    else:
        out["tokens_per_second"] = out["request_throughput_rps"] = None
    rates = [r["output_tokens"] / (r["e2e_ms"] / 1000.0) for r in ok if r["e2e_ms"] and r["output_tokens"]]
    out["per_user_output_tokens_per_s"] = float(np.mean(rates)) if rates else None
    if slo is not None:
        good = sum(1 for r in ok if is_good(r, slo))
        out["n_good"] = good
        out["request_goodput"] = good / window if window else None
        out["slo_attainment"] = good / (len(rows) + turns_not_sent) if rows or turns_not_sent else None
    else:
        out["n_good"] = None
        out["request_goodput"] = None
        out["slo_attainment"] = None
    out["cost_per_request_usd"] = out["cost_per_token_usd"] = out["cost_per_good_request_usd"] = None
    if pricing is not None and window:
        total_tokens = point_output_tokens if point_output_tokens is not None else out_tokens
        share = (out_tokens / total_tokens) if total_tokens else (1.0 if point_output_tokens is None else 0.0)
        cost = pricing.cost_usd(window) * share
        out["cost_window_usd"] = cost
        out["cost_per_request_usd"] = cost / len(ok) if ok else None
        out["cost_per_token_usd"] = cost / out_tokens if out_tokens else None
        if slo is not None and out["n_good"]:
            out["cost_per_good_request_usd"] = cost / out["n_good"]
    st = stats if stats is not None else load_stats(rows, load_model, offered_load)
    out["achieved_rate_rps"] = st.get("achieved_rate_rps")
    out["scheduled_rate_rps"] = st.get("scheduled_rate_rps")
    out["achieved_concurrency"] = st.get("achieved_concurrency")
    out["requests_in_flight"] = st.get("requests_in_flight")
    if st.get("active_sessions") is not None:
        out["active_sessions"] = st["active_sessions"]
    out["schedule_lag_p99_ms"] = st.get("schedule_lag_p99_ms")
    cl = client or {}
    out["client_cpu_max"] = cl.get("client_cpu_max")
    out["loop_lag_p99_ms"] = cl.get("loop_lag_p99_ms")
    out["percentiles_supported"] = supported_percentiles(len(ok), policy.confidence, len(errs))
    out["percentiles_censored"] = censored_by if errs else None
    censored = censored_percentiles(len(ok), len(errs))
    notes = [censored_reason(name, len(errs), len(rows)) for name in censored]
    for base, names in censored_by.items():  # a distribution of fewer values (decode, connect) censored further
        values, n_cens = lat[base]
        notes += [f"{base}: {censored_reason(name, n_cens, len(values) + n_cens)}"
                  for name in names if name not in censored]
    out["percentiles_note"] = "; ".join(
        notes + ["a value shown for a percentile not supported is the largest known, a lower bound"]) if notes else None
    v, reasons = verdict(
        load_model=load_model, offered_load=offered_load, n_completed=len(ok), n_errors=len(errs), error_kinds=kinds,
        stats=st, client=cl, policy=policy,
        error_example=next((r.get("error") for r in errs if kinds and r.get("error_kind") == max(kinds, key=kinds.__getitem__)), None),
    )
    out["verdict"] = v
    out["verdict_reasons"] = reasons
    # no usage from the server: output tokens are chunks, exact only where each chunk is one token
    from_chunks = sum(1 for r in ok if r.get("token_count_source") == "chunks")
    out["n_output_tokens_from_chunks"] = from_chunks
    out["output_tokens_note"] = (
        f"{from_chunks} of {len(ok)} completed requests had no usage from the server: their output tokens "
        "(and decode_ms_per_token, token gaps, tokens_per_second) count one token per streamed chunk, exact only "
        "for a server that streams one token a chunk; ask it for usage (--include-usage), or give --tokenizer "
        "to count the streamed text" if from_chunks else None)
    return out


def latencies(ok: Sequence[dict[str, Any]], errs: Sequence[dict[str, Any]]) -> dict[str, tuple[list[Any], int]]:
    """Per latency distribution: its values and how many failed requests it censors (slower than
    every value). ``e2e_ms``: every failed one (as the comparison). ``ttft_ms``: those failed before
    their first token; one failed after it has a real TTFT, a value. ``decode_ms_per_token``: those
    failed after their first token (the decode did not finish); one failed before never decoded and
    is left out, as a one-token answer is. ``connect_ms``: those whose connection failed; a failed
    request that connected has a real connect time."""
    started = [r for r in errs if r.get("first_token_mono_ns") is not None]
    out = {"ttft_ms": ([r["ttft_ms"] for r in ok] + [(r["first_token_mono_ns"] - r["send_mono_ns"]) / 1e6 for r in started],
                       len(errs) - len(started)),
           "decode_ms_per_token": ([r["decode_ms_per_token"] for r in ok], len(started)),
           "e2e_ms": ([r["e2e_ms"] for r in ok], len(errs)),
           "connect_ms": ([r.get("connect_ms") for r in (*ok, *errs)], sum(r.get("error_kind") == "connect" for r in errs))}
    return {k: ([v for v in values if v is not None], n) for k, (values, n) in out.items()}


def capacity_problems(p: dict[str, Any], slo: SLO, confidence: float = 0.95) -> list[str]:
    """Why one bucket-"all" summary does not count towards ``capacity_at_slo`` (empty: it counts).

    It counts when requests completed; its p99 is supported: ``percentiles_supported`` holds it
    (else, for a row without one, its completed requests reach :func:`requests_needed` at
    ``confidence``) and failures do not censor it; every declared objective is met at p99 (a
    decode p99 is absent only when every answer was one token: no decode, met); and its verdict
    holds: ``valid``, or invalid only for too few requests to bound the verdict's percentile
    (:func:`pooled_reasons`), so an overloaded point (errors above ``max_error_rate``, load not
    reached, client saturated) never counts however fast its few answers were. No separate
    slo_attainment floor: a p99 within the SLO and an error rate within policy already put
    attainment at about ``0.99 x (1 - max_error_rate)`` or above."""
    n, n_err = int(p.get("n_requests") or 0), int(p.get("n_errors") or 0)
    if not n:
        return ["no completed request"]
    out, censored = [], "p99" in censored_percentiles(n, n_err)
    if censored:
        out.append(censored_reason("p99", n_err, n + n_err))
    elif _p99_short(p, confidence):
        out.append(f"p99 not supported: {n} completed requests < {requests_needed(0.99, confidence)} needed at "
                   f"{confidence:.0%}")
    for key, limit in slo.as_dict().items():
        value = p.get(f"{key}_p99")
        if not censored and "p99" in (p.get("percentiles_censored") or {}).get(key, ()):
            out.append(f"{key}_p99 not supported: its rank falls among its failed requests")  # decode, of fewer
            continue
        if value is None and key == "decode_ms_per_token":
            continue
        if value is None or value > limit:
            out.append(f"{key}_p99 {'absent' if value is None else f'{value:.4g}'} > SLO {limit:g}")
    if p.get("verdict", "valid") != "valid":
        out.extend(f"verdict: {r}" for r in pooled_reasons(p.get("verdict_reasons") or ["invalid"]) if r not in out)
    return out


def _p99_short(p: dict[str, Any], confidence: float) -> bool:
    """Too few completed requests for a supported p99 (failures aside)."""
    n, supported = int(p.get("n_requests") or 0), p.get("percentiles_supported")
    if supported is None or "p99" in censored_percentiles(n, int(p.get("n_errors") or 0)):
        return n < requests_needed(0.99, confidence)
    return "p99" not in supported


def point_passes_slo(p: dict[str, Any], slo: SLO) -> bool:
    """One bucket-"all" summary counts towards ``capacity_at_slo`` (:func:`capacity_problems`)."""
    return not capacity_problems(p, slo)


def _passing_loads(points: Sequence[dict[str, Any]], slo: SLO) -> dict[float, bool]:
    by_load: dict[float, bool] = {}
    for p in points:
        if p.get("bucket", "all") != "all":
            continue
        load = float(p["offered_load"])
        by_load[load] = by_load.get(load, True) and point_passes_slo(p, slo)
    return by_load


def capacity_at_slo(points: Sequence[dict[str, Any]], slo: SLO | None) -> float | None:
    """The highest ``offered_load`` of the leading run of passing loads (:func:`point_passes_slo`)
    among bucket-"all" summaries, loads in ascending order: the sweep stops counting at the first
    load that fails (a load with several points passes only when all do), so a point that passes
    again above a failing load (a server shedding load fast) never sets the capacity. None without
    SLO or when the lowest load already fails (:func:`capacity_reason`)."""
    if slo is None:
        return None
    by_load = _passing_loads(points, slo)
    best: float | None = None
    for load in sorted(by_load):
        if not by_load[load]:
            break
        best = load
    return best


def capacity_reason(points: Sequence[dict[str, Any]], slo: SLO | None, confidence: float = 0.95,
                    more: str = "") -> str | None:
    """Why :func:`capacity_at_slo` is None with an SLO: what keeps the lowest load from counting,
    and, when it is the request count, how many requests a point needs (``more``: how to give it
    them, in the caller's terms). None when there is a capacity or no SLO."""
    if slo is None or capacity_at_slo(points, slo) is not None:
        return None
    alls = [p for p in points if p.get("bucket", "all") == "all"]
    if not alls:
        return "no load point was measured"
    lowest = min(float(p["offered_load"]) for p in alls)
    failing = [p for p in alls if float(p["offered_load"]) == lowest and not point_passes_slo(p, slo)]
    problems = [f"{p.get('point', lowest)}: {'; '.join(capacity_problems(p, slo, confidence))}" for p in failing]
    out = "the lowest load does not count (" + " | ".join(problems) + ")"
    if any(_p99_short(p, confidence) for p in failing):
        out += f"; a point needs {requests_needed(0.99, confidence)} completed requests for a supported p99 at {confidence:.0%}"
        out += f" ({more})" if more else ""
    return out


# Headline metrics of a serving point (suites and readers of other tools alike): (spec name, summary field, unit, direction).
HEADLINE = (
    ("ttft_ms", "ttft_ms_p50", "ms", "lower"),
    ("p50_latency_ms", "e2e_ms_p50", "ms", "lower"),
    ("p99_latency_ms", "e2e_ms_p99", "ms", "lower"),
    ("decode_ms_per_token", "decode_ms_per_token_p50", "ms/token", "lower"),
    ("tokens_per_second", "tokens_per_second", "tokens/s", "higher"),
    ("request_throughput_rps", "request_throughput_rps", "req/s", "higher"),
    ("jitter_ms", "jitter_ms", "ms", "lower"),
    ("request_goodput", "request_goodput", "req/s", "higher"),
    ("slo_attainment", "slo_attainment", "fraction", "higher"),
    ("cost_per_request_usd", "cost_per_request_usd", "USD/request", "lower"),
    ("cost_per_token_usd", "cost_per_token_usd", "USD/token", "lower"),
)
