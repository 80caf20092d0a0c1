"""Tail latencies judged on requests: each arm's per-request records pooled, p99s compared with an interval that treats replicates as clusters, and a p99 its request count cannot support marked not gateable.

A replicate's own p99 from 24 or 32 requests is its maximum, biased low by about a fifth and
with an interval that covers the true p99 half the time; comparing such p99s replicate by
replicate flags A/A "regressions" whenever the arms ran different numbers of requests. Here:

* A request that errored or timed out is censored, slower than every completed one (+inf): left
  out, the errors a valid point allows (≤ 1 %) would hide a worse tail; an arm whose p99 falls
  among them is not gateable (its value is unknown).
* Each arm's p99 is the 0.99-quantile of the *pooled* requests of its replicates, every
  replicate weighing the same (its requests 1/nᵣ each), so an arm that ran more requests in
  one replicate (duration mode) does not tilt the estimate toward that replicate; the
  quantile interpolates between values (Hazen's positions), whose bias, unlike the step
  quantile's, hardly depends on the request count (unequal arms are not read as a change).
* The interval of log(p99_candidate / p99_baseline) is a cluster bootstrap: replicates (not
  requests, which share queue state and the machine's moment) are resampled within each arm;
  the standard error of each arm's log p99 from it, inflated by √(k/(k−1)) for k replicates,
  and a Welch t interval with Satterthwaite's degrees of freedom from the replicate counts.
  Coverage measured on fabricated data is in ``benchmarks/README.md`` (statistics audit).
* A p99 needs :func:`requests_needed` pooled requests in each arm (368 at 95 %: the fewest for
  which the order-statistic interval of the p99 has an upper end) — the one rule for the
  request count, shared with ``trial_statistics``' ``n_required`` — and a valid load-generator
  verdict for that point in every replicate, the request count aside (a replicate of 100
  requests is invalid for its own p99, not for the pooled one: ``pooled_reasons``); otherwise
  the row is ``not gateable: the baseline pooled N requests (k of K replicates: j left out as
  contended), needs M`` (naming each arm short of M, and the replicates the comparison left out of
  it; ``N requests, needs M`` when both arms pooled the same N from all their replicates; or the
  verdict's reasons) and leaves the
  gating family, never a verdict — a primary such row refuses the whole pair
  (``admit.ungateable_primaries``: it is not cleared of what it could not test). "No change" on such a row is the two one-sided tests on this
  interval at 1 − 2α, not on the replicate p99s.
* A percentile compared replicate by replicate (another suite's p99: gemm calls, training
  steps, launches, batches, collectives, fio completions; the suites record ``samples`` with
  it) is of each replicate's own samples: it needs at least M of them in every replicate of both
  arms, else it is ``not gateable: as few as N samples in a replicate, needs M``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from scipy import stats

from benchrun.loadgen.metrics import pooled_reasons, requests_needed  # the one request-count rule (re-exported)
from benchrun.stats.equivalence import level as equivalence_level
from benchrun.stats.reading import FAILED_ROW, POOLED_COLUMNS, POOLED_METHOD
from benchrun.stats.validity import invalid_note, invalid_replicates

# the comparison's per-replicate p99 metrics and the request column behind each
# (benchrun.loadgen.metrics.HEADLINE: p99_latency_ms is e2e_ms_p99 of a point)
P99_METRICS = {"p99_latency_ms": ("e2e_ms", 0.99)}
N_BOOT = 1000


def pooled_quantile(replicates: Sequence[np.ndarray], q: float) -> float:
    """The q-quantile of the replicates' pooled values, each replicate weighing the same. A value
    of +inf is a request that errored or timed out, censored: slower than every completed one; the
    quantile is +inf when it reaches them (Hazen's position of q beyond the last completed value's)."""
    reps = [np.asarray(r, dtype=float) for r in replicates if len(r)]
    if not reps:
        return math.nan
    vals = np.concatenate(reps)
    w = np.concatenate([np.full(r.size, 1.0 / r.size) for r in reps])
    order = np.lexsort((w, vals))  # tied values lightest first: the same whatever the replicates' order
    ws = w[order] / len(reps)
    # each value at the middle of its weight (Hazen's plotting position), linear in between: the
    # step quantile's bias depends on the request count, which unequal arms would read as a change
    mid = np.cumsum(ws) - ws / 2
    done = np.isfinite(vals[order])  # the censored (+inf) sort last
    if not done.all():
        # q at the last completed value's own position is that value: the cumulative sum's rounding
        # (14/15 - 1/30 summed as 0.8999999999999999) must not push it among the censored
        if not done.any() or q > mid[done][-1] + 1e-12:
            return math.inf
        return float(np.interp(q, mid[done], vals[order][done]))
    return float(np.interp(q, mid, vals[order]))


def _boot_log_quantiles(replicates: Sequence[np.ndarray], q: float, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """log pooled q-quantiles (:func:`pooled_quantile`, Hazen's positions) of ``n_boot`` cluster
    resamples (replicates drawn with replacement; one drawn c times is c copies of its values).

    The bootstrap resamples the estimator the comparison reports: with the step quantile here
    (as before 2026-12-05) its spread was that of a coarser estimator, and the interval covered
    97.2 % at 100 requests a replicate for a stated 95 % (96.0 % now; benchmarks/README.md).
    Vectorised over resamples, memory n_boot × replicates whatever the request count: a resample's
    cumulative weight up to a value is Σ_j c_j/(k n_j)·#{x_j ≤ v}; bisection over the sorted
    distinct values finds the first v* where it reaches q (the step quantile), then Hazen's rule
    interpolates between the knots around q — v*'s first and last copy (tied values lightest
    first, as :func:`pooled_quantile` orders them) and its neighbours among the drawn replicates.
    """
    k = len(replicates)
    srt = [np.sort(np.asarray(r, dtype=float)) for r in replicates]
    w = np.array([1.0 / (k * x.size) for x in srt])  # one copy of a value of replicate j
    draws = rng.integers(0, k, size=(n_boot, k))
    counts = np.stack([(draws == j).sum(axis=1) for j in range(k)], axis=1)  # resamples × replicates
    drawn = counts > 0
    cw = counts * w  # a resample's weight per value of replicate j

    def below(v: np.ndarray, side: str) -> tuple[np.ndarray, np.ndarray]:
        """(#{x_j < v} or #{x_j ≤ v} per resample and replicate, the weight that makes)"""
        n = np.stack([np.searchsorted(x, v, side=side) for x in srt], axis=1)
        return n, (cw * n).sum(axis=1)

    distinct = np.unique(np.concatenate(srt))
    lo, hi = np.zeros(n_boot, dtype=int), np.full(n_boot, distinct.size - 1)
    while (lo < hi).any():  # first distinct value whose cumulative weight reaches q (to rounding)
        mid = (lo + hi) // 2
        ok = below(distinct[mid], "right")[1] >= q - 1e-12
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid + 1)
    v = distinct[lo]
    n_lt, end_prev = below(v, "left")
    n_le, end_v = below(v, "right")

    def tie_weights(n_lo: np.ndarray, n_hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """lightest and heaviest copy among the drawn replicates holding the value"""
        has = drawn & (n_hi > n_lo)
        ww = np.broadcast_to(w, has.shape)
        return np.where(has, ww, np.inf).min(axis=1), np.where(has, ww, 0.0).max(axis=1)

    first_v, last_v = tie_weights(n_lt, n_le)
    lowmid, upmid = end_prev + first_v / 2, end_v - last_v / 2
    # neighbours among the drawn replicates: the largest value below v*, the smallest above
    size = np.array([x.size for x in srt])
    prev_j = np.stack([np.where(n_lt[:, j] > 0, x[np.maximum(n_lt[:, j] - 1, 0)], -np.inf) for j, x in enumerate(srt)], axis=1)
    next_j = np.stack([np.where(n_le[:, j] < size[j], x[np.minimum(n_le[:, j], size[j] - 1)], np.inf)
                       for j, x in enumerate(srt)], axis=1)
    pv = np.where(drawn, prev_j, -np.inf).max(axis=1)
    nv = np.where(drawn, next_j, np.inf).min(axis=1)
    has_p, has_n = np.isfinite(pv), np.isfinite(nv)
    _, last_p = tie_weights(*(below(np.where(has_p, pv, v), side)[0] for side in ("left", "right")))
    first_n, _ = tie_weights(*(below(np.where(has_n, nv, v), side)[0] for side in ("left", "right")))
    up_p, low_n = end_prev - last_p / 2, end_v + first_n / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        before = pv + (q - up_p) / (lowmid - up_p) * (v - pv)
        after = v + (q - upmid) / (low_n - upmid) * (nv - v)
    out = np.where((q < lowmid) & has_p, before, np.where((q > upmid) & has_n, after, v))
    return np.log(out)


@dataclass(frozen=True)
class TailComparison:
    """One p99 compared on requests: per-arm pooled p99, the candidate/baseline ratio with its
    interval and one-sided p's, or why it is not gateable."""

    n_baseline: int
    n_candidate: int
    needed: int
    p99_baseline: float
    p99_candidate: float
    log_ratio: float  # log(candidate / baseline)
    low: float
    high: float
    p_higher: float  # one-sided p of "the candidate's p99 is higher"
    p_lower: float
    gateable: bool
    note: str
    eq_low: float = math.nan  # the 1 − 2α interval of log_ratio: inside ±margin it is TOST at α ("no change")
    eq_high: float = math.nan


@dataclass(frozen=True)
class ArmReplicates:
    """An arm's replicates of one point as the comparison saw them, for the note of a p99 whose
    pooled requests are too few: how many had requests there (``of``), and of those how many the
    comparison left out as contended or as failed (their requests are not pooled)."""

    of: int
    contended: int = 0
    failed: int = 0


def _short_note(arms: Sequence[tuple[str, int, int, ArmReplicates | None]], need: int) -> str:
    """``not gateable: the baseline pooled 288 requests (3 of 5 replicates: 2 left out as contended),
    needs 368``: each arm short of ``need`` named, with the replicates it pooled; arms given as
    (side, pooled requests, replicates pooled, :class:`ArmReplicates` or None)."""
    short = [a for a in arms if a[1] < need]
    whole = all(info is None or info.of == k for _side, _n, k, info in arms)
    if len(short) == 2 and short[0][1] == short[1][1] and whole:  # the same count in both, nothing left out
        return f"not gateable: {short[0][1]} requests, needs {need}"
    parts = []
    for side, n, k, info in short:
        of = info.of if info is not None else k
        left = [f"{c} left out as {why}" for c, why in ((info.contended, "contended"), (info.failed, "failed"))
                if c] if info is not None else []
        reps = f"{k} of {of} replicate{'s' if of != 1 else ''}" + (f": {', '.join(left)}" if left else "")
        parts.append(f"the {side} pooled {n} requests ({reps})" if not parts else f"the {side} {n} ({reps})")
    return f"not gateable: {' and '.join(parts)}, needs {need}"


def compare_p99(baseline: Sequence[np.ndarray], candidate: Sequence[np.ndarray], *, q: float = 0.99,
                confidence: float = 0.95, n_boot: int = N_BOOT, seed: int = 0,
                invalid: str = "",
                replicates: tuple[ArmReplicates | None, ArmReplicates | None] = (None, None)) -> TailComparison:
    """Compare the pooled q-quantiles of two arms, each a list of per-replicate request values;
    +inf marks a request that errored or timed out (censored: slower than every completed one).
    An arm whose quantile reaches its censored requests is not gateable (its value is unknown).
    ``replicates``: per arm, the replicates it had and those left out (:class:`ArmReplicates`), named
    in the note of an arm with too few pooled requests."""
    b = [x[~np.isnan(x) & (x != -np.inf)] for x in (np.asarray(r, dtype=float) for r in baseline)]
    c = [x[~np.isnan(x) & (x != -np.inf)] for x in (np.asarray(r, dtype=float) for r in candidate)]
    b, c = [r for r in b if r.size], [r for r in c if r.size]
    nb, nc = sum(r.size for r in b), sum(r.size for r in c)
    need = requests_needed(q, confidence)
    qb, qc = pooled_quantile(b, q), pooled_quantile(c, q)
    nan = math.nan

    def refuse(note: str) -> TailComparison:
        return TailComparison(nb, nc, need, qb, qc, nan, nan, nan, nan, nan, False, note)

    if min(nb, nc) < need:
        return refuse(_short_note((("baseline", nb, len(b), replicates[0]), ("candidate", nc, len(c), replicates[1])),
                                  need))
    if invalid:
        return refuse(f"not gateable: load generator verdict invalid ({invalid})")
    if math.isinf(qb) or math.isinf(qc):
        eb, ec = (sum(int(np.isinf(r).sum()) for r in arm) for arm in (b, c))
        return refuse(f"not gateable: the {q:g}-quantile falls among the errored or timed-out requests "
                      f"(baseline {eb} of {nb}, candidate {ec} of {nc})")
    if min(len(b), len(c)) < 2 or not (qb > 0 and qc > 0):
        return refuse("not gateable: fewer than 2 replicates with requests in an arm")
    b, c = _censored_at(b, c)
    rng = np.random.default_rng(seed)
    var, dfs = [], []
    for arm in (b, c):
        k = len(arm)
        boot = _boot_log_quantiles(arm, q, n_boot, rng)
        var.append(float(boot.var(ddof=1)) * k / (k - 1))
        dfs.append(k - 1)
    d = math.log(qc / qb)
    se2 = var[0] + var[1]
    if not se2 > 0:
        p_hi = 0.0 if d > 0 else 1.0 if d < 0 else 0.5
        return TailComparison(nb, nc, need, qb, qc, d, d, d, p_hi, 1.0 - p_hi if d else 0.5, True, "", d, d)
    df = se2**2 / sum(v**2 / f for v, f in zip(var, dfs) if v > 0)
    se = math.sqrt(se2)
    t = float(stats.t.isf((1 - confidence) / 2, df))
    t_eq = float(stats.t.isf(1 - confidence, df))
    p_higher = float(stats.t.sf(d / se, df))
    return TailComparison(nb, nc, need, qb, qc, d, d - t * se, d + t * se, p_higher, 1.0 - p_higher, True, "",
                          d - t_eq * se, d + t_eq * se)


def _censored_at(b: list[np.ndarray], c: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Both arms with their censored requests (+inf) at twice the slowest completed one: above every
    completed request, so a quantile below them is unchanged, and finite, so a bootstrap resample
    whose quantile reaches them widens the interval instead of making it infinite."""
    done = [r[np.isfinite(r)] for r in (*b, *c)]
    top = max((float(r.max()) for r in done if r.size), default=1.0)
    at = 2.0 * top if top > 0 else 1.0
    return [np.where(np.isinf(r), at, r) for r in b], [np.where(np.isinf(r), at, r) for r in c]


# -- the comparison's hook ---------------------------------------------------------------------


def _kept(frame: Any, keep: set[tuple[str, int]] | None) -> Any:
    """``frame``'s rows of the (suite, replicate)s in ``keep`` (None: all)."""
    if keep is None or frame is None or not len(frame) or not {"suite", "replicate"} <= set(frame.columns):
        return frame
    import pandas as pd

    pairs = pd.MultiIndex.from_arrays([frame["suite"].astype(str), frame["replicate"].astype(int)])
    return frame[pairs.isin(list(keep))]  # vectorised: a run's requests can be millions of rows


def _replicates_at(req: Any) -> dict[tuple[str, str], set[int]]:
    """(suite, point) → the replicates with request rows there."""
    if req is None or not len(req) or not {"suite", "point", "replicate"} <= set(req.columns):
        return {}
    out: dict[tuple[str, str], set[int]] = {}
    cells = req[["suite", "point", "replicate"]].drop_duplicates()
    for suite, point, rep in zip(cells["suite"].astype(str), cells["point"].astype(str), cells["replicate"].astype(int)):
        out.setdefault((suite, point), set()).add(int(rep))
    return out


def _arm_replicates(run_dir: Path, req: Any, keep: set[tuple[str, int]] | None) -> dict[tuple[str, str], ArmReplicates]:
    """(suite, point) → the arm's replicates with requests there, and how many of them ``keep`` left
    out as contended (:func:`benchrun.stats.contention.contended_replicates`) or otherwise (failed)."""
    seen = _replicates_at(req)
    if keep is None:
        return {at: ArmReplicates(len(reps)) for at, reps in seen.items()}
    from benchrun.stats.contention import contended_replicates

    contended = contended_replicates(run_dir) if any((s, r) not in keep for (s, _p), reps in seen.items()
                                                     for r in reps) else {}
    out = {}
    for (suite, point), reps in seen.items():
        left = {r for r in reps if (suite, r) not in keep}
        busy = len(left & contended.get(suite, set()))
        out[(suite, point)] = ArmReplicates(len(reps), busy, len(left) - busy)
    return out


def _arm_requests(run_dir: Path, keep: set[tuple[str, int]] | None = None
                  ) -> tuple[Any, dict[tuple[str, str], list[str]], dict[tuple[str, str], ArmReplicates]]:
    """The run's per-request rows and, per (suite, point), the load generator's invalid verdicts
    ("r<k>: reasons"). A request that errored or timed out keeps its place with +inf latencies:
    censored, slower than every completed one (the load generator calls a point valid with up to
    1 % of errors; left out, they would hide exactly the slowest requests of a worse tail).
    ``keep``: the (suite, replicate)s the comparison kept (ok, and not left out as contended): the
    requests and verdicts of the others are not this arm's (a contended replicate's 3x slower requests
    set the pooled p99 of a row whose n said it was left out). Third, per (suite, point), the
    replicates it had and those left out (:func:`_arm_replicates`)."""
    from benchrun.stats.load import requests_tables, serving_rows

    every = requests_tables(run_dir)
    had = _arm_replicates(run_dir, every, keep)
    req = _kept(every, keep)
    del every
    if len(req) and "error" in req.columns:
        err = req["error"]
        failed = ~(err.isna() | (err.astype(str) == "")).to_numpy()
        if failed.any():
            req = req.copy()
            for col in sorted({col for col, _q in P99_METRICS.values()} & set(req.columns)):
                req[col] = np.where(failed, np.inf, req[col].to_numpy(dtype=float))
    bad: dict[tuple[str, str], list[str]] = {}
    srv = _kept(serving_rows(run_dir), keep)
    if len(srv) and {"verdict", "point"} <= set(srv.columns):
        rows = srv[(srv.get("bucket", "all") == "all") & (srv["verdict"] != "valid")]
        for r in rows.itertuples():
            reasons = getattr(r, "verdict_reasons", None)
            listed = isinstance(reasons, (list, tuple, np.ndarray)) and len(reasons) > 0
            # a replicate's own request count is not a reason here: the p99 is of the pooled requests
            left = pooled_reasons(list(reasons)) if listed else ["invalid"]
            if left:
                bad.setdefault((str(r.suite), str(r.point)), []).append(f"r{r.replicate}: {'; '.join(left)}")
    return req, bad, had


def _per_replicate(req: Any, suite: str, point: str, column: str) -> list[np.ndarray]:
    if req is None or len(req) == 0 or column not in req.columns or "point" not in req.columns:
        return []
    sel = req[(req["suite"] == suite) & (req["point"].astype(str) == point)]
    return [g[column].dropna().to_numpy(dtype=float) for _r, g in sel.groupby("replicate", sort=True)]


PERCENTILE_NAME = re.compile(r"(?:^|_)p(9\d+)(?:_|$)")  # p90 .. p999 in a metric's name


def percentile_of(name: str) -> float | None:
    """The quantile an upper-percentile metric's name states (``p99_call_ms`` → 0.99,
    ``launch_to_ready_p999_s`` → 0.999), else None."""
    m = PERCENTILE_NAME.search(name)
    if m is None:
        return None
    digits = m.group(1)
    return float("0." + digits)


def _sample_counts(run_dir: Path) -> dict[tuple[str, str, str], int]:
    """(suite, case, metric) → the fewest samples any ok replicate's percentile metric was
    computed from (the suites record ``samples`` with their p99s)."""
    from benchrun.stats.load import suite_results

    out: dict[tuple[str, str, str], int] = {}
    for doc in suite_results(run_dir):
        if doc.get("status") != "ok":
            continue
        for m in doc.get("metrics", []):
            n = m.get("samples")
            if isinstance(n, (int, float)) and not isinstance(n, bool) and n >= 0:
                key = (str(doc.get("suite")), str(m.get("case") or ""), str(m.get("name")))
                out[key] = min(int(n), out.get(key, int(n)))
    return out


def kept_replicates(table: Any) -> set[tuple[str, int]]:
    """The (suite, replicate)s of a replicate table's ok rows (after the contention rule's exclusions)."""
    if table is None or table.empty:
        return set()
    ok = table["status"].astype(str) == "ok" if "status" in table.columns else np.ones(len(table), dtype=bool)
    return {(str(s), int(r)) for s, r in zip(table.loc[ok, "suite"], table.loc[ok, "replicate"])}


class RequestTails:
    """Supplies the comparison's p99 rows from both runs' requests (``compare_tables(tails=...)``).

    :meth:`apply` runs before the gate: each p99 row with requests in both runs gets the
    request-level ratio, interval and p's (the gate's test reads them) and the two arms'
    pooled-request p99s in ``p99_pooled_baseline`` / ``p99_pooled_candidate``
    (``baseline_median`` / ``candidate_median`` stay the replicate medians); a row that is not
    gateable loses its p's (it leaves the family). :meth:`label` runs after: those rows'
    verdict is their ``not gateable: ...`` note.
    """

    def __init__(self, baseline_dir: str | Path, candidate_dir: str | Path, *, confidence: float = 0.95,
                 keep: tuple[set[tuple[str, int]] | None, set[tuple[str, int]] | None] = (None, None)) -> None:
        # ``keep``: per arm, the (suite, replicate)s the comparison's other rows are of (:func:`kept_replicates`)
        self.b_req, self.b_bad, self.b_had = _arm_requests(Path(baseline_dir), keep[0])
        self.c_req, self.c_bad, self.c_had = _arm_requests(Path(candidate_dir), keep[1])
        self.b_n, self.c_n = _sample_counts(Path(baseline_dir)), _sample_counts(Path(candidate_dir))
        self.b_invalid, self.c_invalid = invalid_replicates(Path(baseline_dir)), invalid_replicates(Path(candidate_dir))
        self.confidence = confidence
        self.refused: dict[int, str] = {}

    def apply(self, df: Any) -> None:
        for col in ("n_requests_baseline", "n_requests_candidate", *POOLED_COLUMNS):
            if col not in df.columns:
                df[col] = np.nan
        if "tail_method" not in df.columns:
            df["tail_method"] = ""
        for i, r in df.iterrows():
            # a measurement row (not the suite's failure count, whose launches crash or not whatever the
            # figure measured, nor a context row, which has no verdict)
            own = ("" if r["name"] == FAILED_ROW or r.get("role") == "context"
                   else invalid_note(str(r["suite"]), self.b_invalid, self.c_invalid))
            if own:  # as measured, shown; never judged (it leaves the family, admit refuses a primary)
                self._unjudged(df, i)
                self.refused[i] = own
                continue
            # the load generator's verdict on this row's point, other than a replicate's own request count
            invalid = "; ".join([*(f"baseline {x}" for x in self.b_bad.get((r["suite"], r["case"]), [])),
                                 *(f"candidate {x}" for x in self.c_bad.get((r["suite"], r["case"]), []))])
            spec = P99_METRICS.get(str(r["name"]))
            b = c = []
            if spec is not None:
                b = _per_replicate(self.b_req, r["suite"], r["case"], spec[0])
                c = _per_replicate(self.c_req, r["suite"], r["case"], spec[0])
            if invalid and r["name"] != FAILED_ROW and r.get("role") != "context" and not (b or c):
                # any figure of a point whose client fell behind or whose requests erred is no measurement of the
                # server (before, only a p99 with request records read the verdict: a throughput there, or a
                # p99 of runs curated without request records, was gated)
                self._unjudged(df, i)
                self.refused[i] = f"not gateable: load generator verdict invalid ({invalid})"
                continue
            if spec is None:
                self._replicate_percentile(df, i, r)
                continue
            column, q = spec
            if not b and not c:  # no request records (older runs): the replicate p99s, by their sample count
                self._replicate_percentile(df, i, r)
                continue
            at = (str(r["suite"]), str(r["case"]))
            tc = compare_p99(b, c, q=q, confidence=self.confidence, invalid=invalid,
                             replicates=(self.b_had.get(at), self.c_had.get(at)))
            higher = r["direction"] == "higher"
            df.at[i, "n_requests_baseline"], df.at[i, "n_requests_candidate"] = tc.n_baseline, tc.n_candidate
            df.at[i, "tail_method"] = POOLED_METHOD
            # the arms' pooled-request p99s, beside (never instead of) the replicate medians
            for col, v in zip(POOLED_COLUMNS, (tc.p99_baseline, tc.p99_candidate)):
                df.at[i, col] = v if math.isfinite(v) else math.nan
            if not tc.gateable:  # its value unknown too: no shift shown
                self._unjudged(df, i, ("shift", "shift_low", "shift_high", "ratio", "ci_low", "ci_high"))
                self.refused[i] = tc.note
                continue
            sign = 1.0 if higher else -1.0  # shift > 0 is better, on the log scale
            lo, hi = sorted((sign * tc.low, sign * tc.high))
            p_reg, p_imp = (tc.p_lower, tc.p_higher) if higher else (tc.p_higher, tc.p_lower)
            df.at[i, "shift"], df.at[i, "shift_low"], df.at[i, "shift_high"] = sign * tc.log_ratio, lo, hi
            # "no change" on requests too: the replicate p99s' Hodges–Lehmann interval would decide it otherwise
            df.at[i, "eq_low"], df.at[i, "eq_high"] = sorted((sign * tc.eq_low, sign * tc.eq_high))
            if "eq_coverage" in df.columns:  # the bootstrap's nominal 1 − 2α (approximate; measured above)
                df.at[i, "eq_coverage"] = equivalence_level(self.confidence)
            df.at[i, "ratio"], df.at[i, "ci_low"], df.at[i, "ci_high"] = math.exp(sign * tc.log_ratio), math.exp(lo), math.exp(hi)
            df.at[i, "p_regression"] = df.at[i, "t_regression"] = p_reg
            df.at[i, "p_improvement"] = df.at[i, "t_improvement"] = p_imp
            df.at[i, "p_value"] = min(1.0, 2 * min(p_reg, p_imp))

    def _replicate_percentile(self, df: Any, i: Any, r: Any) -> None:
        """A percentile compared replicate by replicate (not on requests): each replicate's value is
        of its own samples, so it needs :func:`requests_needed` of them in every replicate of both
        arms (a p99 of 50 calls is their maximum); fewer, and the row is not gateable. A row whose
        suites recorded no sample count keeps its verdict."""
        q = percentile_of(str(r["name"]))
        key = (str(r["suite"]), str(r["case"]), str(r["name"]))
        counts = [d[key] for d in (self.b_n, self.c_n) if key in d]
        if q is None or not counts:
            return
        need = requests_needed(q, self.confidence)
        n = min(counts)
        if n >= need:
            return
        self._unjudged(df, i)
        df.at[i, "tail_method"] = f"replicate percentiles, as few as {n} samples in a replicate"
        self.refused[i] = f"not gateable: as few as {n} samples in a replicate, needs {need}"

    @staticmethod
    def _unjudged(df: Any, i: Any, also: tuple[str, ...] = ()) -> None:
        """The row's tests and equivalence cleared (it leaves the family); its change stays shown
        unless ``also`` clears it."""
        for f in ("p_regression", "p_improvement", "t_regression", "t_improvement", "p_value", "eq_low", "eq_high",
                  "eq_coverage", *also):
            if f in df.columns:
                df.at[i, f] = math.nan

    def label(self, df: Any) -> None:
        for i, note in self.refused.items():
            df.at[i, "verdict"] = note
            df.at[i, "note"] = note
