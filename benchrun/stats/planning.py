"""Replicate planning: from the history of a spec's primary metrics, how many replicates each needs for the gate to detect a δ change with 80 % power (``benchrun plan SPEC``).

The gate tests each (suite, case, metric) a primary selector matches, so a plan is made per
primary and per suite that reports it. The noise of a metric in a suite is the within-run
spread of log values of its noisiest case (the suite runs one replicate count for all of its
cases, so the case that needs the most decides), planned for the one-sided ``NOISE_BOUND`` upper
confidence bound of that spread (a point estimate from a short history plans too few about half
of the time), in the newest runs of the same
workload (``workload_spec_digest``; the normalized digest where both sides have one, so a
default written out is the same workload: :mod:`benchrun.spec.normal`) in ``$BENCHRUN_HOME/runs`` — else, for a metric those runs
do not report, in the newest runs of any workload that do — ad-hoc experiments (``intent.cadence:
adhoc``) left out unless the planned spec is one itself. The power is simulated through the
gate itself (``batch.effects`` + ``compare.decide``: exact rank test or Welch t, Holm over
the gating family the history shows — every (suite, case, metric) the primaries match) on
lognormal replicates with that spread: a true change of δ in the regression direction — the
log shift log(1 + δ) the comparison's margin is — is "detected" when its Holm-adjusted
one-sided p passes α (significance alone: a verdict of ``regression`` also needs the estimate
beyond δ, which a true change of exactly δ reaches half of the time). The smallest n from 2
to ``max_n`` reaching the power is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchrun.errors import BenchrunError
from benchrun.stats.ranktest import rejects

if TYPE_CHECKING:
    from benchrun.spec.normal import WorkloadDigests

HISTORY_RUNS = 20
SIMS = 400
# the noise a plan is made for: the one-sided 80 % upper confidence bound of the history's
# variance, ss / χ²₀.₂(dof) — a point estimate from a few runs is below the truth about half the
# time, and the plan with it (a review, 2026-12-07: one run of 3 replicates planned fewer than
# needed in 62 % of histories, at 0.66 mean power for a stated 0.8)
NOISE_BOUND = 0.8

Key = tuple[str, str, str]


@dataclass(frozen=True)
class MetricPlan:
    """The plan of one primary metric in one suite: its history, noise, δ and the replicates it needs."""

    metric: str
    suite: str  # "" where no run reports the metric
    runs: int
    cv: float
    delta_pct: float
    family: int
    needed: int | None  # None: not reached by max_n (or no history)
    power_at_current: float | None
    current: int
    note: str
    case: str = ""  # the case whose noise decides (the suite's noisiest), "" without cases
    adhoc_left_out: int = 0  # ad-hoc experiments left out of the history it could have read
    dof: int = 0  # degrees of freedom of the noise estimate
    cv_planned: float = math.nan  # the CV planned for: NOISE_BOUND's upper bound of ``cv``


ADHOC = "adhoc"


@dataclass(frozen=True)
class History:
    """The Succeeded runs a plan may read, oldest first, and the ad-hoc ones it leaves out."""

    same: list[Path]  # of the same workload
    other: list[Path]  # of other workloads
    adhoc_same: int = 0  # ad-hoc experiments of the same workload left out
    adhoc_other: int = 0


def _history(home: Path, digest: "str | WorkloadDigests | None", *, adhoc: bool = True) -> History:
    """The Succeeded runs in ``home``, oldest first, split by workload. ``digest``: the workload's
    digests (a bare string is the digest as written). ``adhoc`` false leaves out the runs whose
    ``intent.cadence`` is adhoc, counted: an experiment changes one variable on purpose (the
    workload digest does not cover a suite's env or image), so its spread is not the noise of the
    scheduled runs of that workload."""
    from benchrun.spec.normal import WorkloadDigests
    from benchrun.stats.load import load_run

    mine = digest if isinstance(digest, WorkloadDigests) else WorkloadDigests(digest)

    runs = []
    for rd in sorted((Path(home) / "runs").glob("*")):
        if not (rd / "status.json").is_file():
            continue
        try:
            run = load_run(rd)
        except BenchrunError:
            continue
        if run.status.get("phase") != "Succeeded":
            continue
        same = mine.matches(WorkloadDigests.of_status(run.status))
        runs.append((same, run.cadence == ADHOC, run.status.get("created_utc") or "", rd))
    runs.sort(key=lambda r: r[2])
    kept = [r for r in runs if adhoc or not r[1]]
    return History([r[3] for r in kept if r[0]], [r[3] for r in kept if not r[0]],
                   0 if adhoc else sum(r[0] and r[1] for r in runs),
                   0 if adhoc else sum(not r[0] and r[1] for r in runs))


def _table(rd: Path) -> Any:
    """A run's replicate table with the replicates still contended left out (as the comparison does)."""
    from benchrun.stats.contention import contended_replicates, exclude
    from benchrun.stats.load import replicate_table

    try:
        return exclude(replicate_table(rd), contended_replicates(rd))[0]
    except BenchrunError:
        return None


def _matched(t: Any, primary: str, *, positive: bool = True) -> Any:
    """The rows of table ``t`` the primary selector matches (with a positive value, unless
    ``positive`` is false)."""
    from benchrun.stats.compare import gating_mask

    if t is None or t.empty:
        return None
    keys = list(zip(t["suite"].astype(str), t["case"].astype(str), t["metric"].astype(str)))
    sel = t[gating_mask(keys, [primary]) & ((t["value"] > 0) if positive else True)]
    return sel if not sel.empty else None


def _not_positive(tables: list[Any], primary: str, suite: str) -> int:
    """How many of the history's values of ``primary`` in ``suite`` are ≤ 0 (the comparison then
    judges differences against an absolute margin, not the log ratios a plan simulates)."""
    n = 0
    for t in tables:
        sel = _matched(t, primary, positive=False)
        if sel is not None:
            n += int((sel.loc[sel["suite"].astype(str) == suite, "value"] <= 0).sum())
    return n


def _spread(tables: list[Any], primary: str, suite: str | None) -> tuple[dict[Key, list[float]], int]:
    """Per (suite, case, metric) key ``primary`` names (in ``suite``, when given): [Σ squared
    deviations of log values from their run's mean, degrees of freedom]; and the runs used."""
    acc: dict[Key, list[float]] = {}
    runs = 0
    for t in tables:
        sel = _matched(t, primary)
        if sel is None:
            continue
        if suite is not None:
            sel = sel[sel["suite"].astype(str) == suite]
        used = False
        for k, g in sel.groupby(["suite", "case", "metric"]):
            v = np.log(g["value"].to_numpy(dtype=float))
            if v.size >= 2:
                a = acc.setdefault(tuple(str(x) for x in k), [0.0, 0.0])  # type: ignore[arg-type]
                a[0] += float(((v - v.mean()) ** 2).sum())
                a[1] += v.size - 1
                used = True
        runs += used
    return acc, runs


def _cv(ss: float, dof: float) -> float:
    return math.sqrt(math.expm1(ss / dof)) if dof else math.nan


def _cv_bound(ss: float, dof: float) -> float:
    """The CV at the one-sided ``NOISE_BOUND`` upper confidence bound of the log variance,
    ss / χ²_{1−NOISE_BOUND}(dof)."""
    from scipy.stats import chi2

    return math.sqrt(math.expm1(ss / float(chi2.ppf(1.0 - NOISE_BOUND, dof)))) if dof else math.nan


def _pooled(acc: dict[Key, list[float]]) -> float:
    """The CV of ``_spread``'s keys pooled: their squared deviations over their degrees of freedom."""
    return _cv(sum(a[0] for a in acc.values()), sum(a[1] for a in acc.values()))


def pooled_cv(tables: list[Any], primary: str, suite: str | None = None) -> tuple[float, int]:
    """Pooled within-run sd of log values of the rows ``primary`` names (in ``suite``, when
    given), as a CV; runs used."""
    acc, runs = _spread(tables, primary, suite)
    if not runs:
        return math.nan, 0
    return _pooled(acc), runs


def _keys(tables: list[Any], primary: str) -> set[Key]:
    """The (suite, case, metric) keys ``primary`` matches in the newest table that has any."""
    for t in reversed(tables):
        sel = _matched(t, primary)
        if sel is not None:
            return set(zip(sel["suite"].astype(str), sel["case"].astype(str), sel["metric"].astype(str)))
    return set()


def _reporting(home: Path, digest: "str | WorkloadDigests | None", primaries: list[str], *, adhoc: bool = True
               ) -> tuple[dict[str, tuple[list[Any], bool]], History]:
    """Per primary: the history its noise is read from and whether that is the workload's own —
    the newest runs of the same workload that report it, else the newest runs of any workload
    that do (read newest first, only as far as needed); and the runs it chose from
    (:func:`_history`)."""
    hist = _history(home, digest, adhoc=adhoc)
    same, other = hist.same, hist.other
    own = [_table(rd) for rd in same[-HISTORY_RUNS:]]
    out: dict[str, tuple[list[Any], bool]] = {}
    others: list[Any] = []  # newest first, loaded lazily
    for p in primaries:
        if any(_matched(t, p) is not None for t in own):
            out[p] = (own, True)
            continue
        found: list[Any] = []
        for i, rd in enumerate(reversed(other)):
            if i == len(others):
                others.append(_table(rd))
            if _matched(others[i], p) is not None:
                found.append(others[i])
                if len(found) == HISTORY_RUNS:
                    break
        out[p] = (found[::-1], False)
    return out, hist


def _adhoc_left(hist: History, own: bool) -> tuple[int, str]:
    """How many ad-hoc experiments the history a metric was read from left out, and the plan's note
    saying so ('' when none): of this workload, and of other workloads where those were read."""
    n = hist.adhoc_same + (0 if own else hist.adhoc_other)
    if not n:
        return 0, ""
    where = "of this workload" if own else f"({hist.adhoc_same} of this workload, {hist.adhoc_other} of others)"
    return n, (f"{n} ad-hoc run(s) {where} left out (intent.cadence adhoc: an experiment changes a variable "
               "on purpose, so its spread is not this spec's noise)")


def power(n: int, cv: float, delta_pct: float, family: int, alpha: float, *, sims: int = SIMS, seed: int = 0) -> float:
    """Share of simulated comparisons (n vs n, ``family`` gating tests, one shifted by δ) whose
    shifted metric's Holm-adjusted gate p passes α."""
    from benchrun.stats import batch
    from benchrun.stats import compare as C
    from benchrun.stats.synthetic import lognormal_replicates

    rng = np.random.default_rng(seed)
    rows = sims * family
    base = lognormal_replicates(rng, 100.0, cv, rows * n).reshape(rows, n)
    # the change the gate's margin is: a log shift of log(1 + δ) (not × (1 − δ), a larger one)
    factor = np.where(np.arange(rows) % family == 0, 1.0 / (1.0 + delta_pct / 100.0), 1.0)[:, None]
    cand = lognormal_replicates(rng, 100.0, cv, rows * n).reshape(rows, n) * factor
    eff = batch.effects(base, cand, np.ones(rows, bool), 1 - alpha)
    sizes = np.full(family, n)
    hits = 0
    for i in range(sims):
        sl = slice(i * family, (i + 1) * family)
        d = C.decide({k: v[sl] for k, v in eff.items()}, np.ones(family, bool), sizes, sizes,
                     np.zeros(family), alpha)
        hits += bool(rejects(d.p_adjusted[0], alpha))
    return hits / sims


def _suite_replicates(doc: dict[str, Any]) -> dict[str, int]:
    """Suite → the replicates it runs as the spec stands (its own count, else trials.minReplicates)."""
    spec = doc.get("spec") or {}
    low = int((spec.get("trials") or {}).get("minReplicates") or 0)
    return {str(s.get("name")): int(s.get("replicates") or low)
            for layer in spec.get("layers") or [] for s in layer.get("suites") or []}


def _needed(cv: float, delta: float, family: int, alpha: float, current: int, *, target: float, max_n: int,
            sims: int) -> tuple[int | None, float | None, str]:
    """(smallest n from 2 to ``max_n`` whose power reaches ``target`` or None, power at ``current``, note)."""
    if cv == 0:
        return 2, 1.0, "no noise in the history"

    def pw(n: int) -> float:
        return power(n, cv, delta, family, alpha, sims=sims)

    if pw(max_n) < target:
        return None, (pw(current) if current >= 2 else None), f"more than {max_n} replicates needed"
    seen: dict[int, float] = {}
    lo, hi = 2, max_n
    while lo < hi:  # power rises with n (up to simulation noise): bisect
        mid = (lo + hi) // 2
        seen[mid] = pw(mid)
        if seen[mid] >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo, (seen[current] if current in seen else pw(current) if current >= 2 else None), ""


def _request_floor(counts: dict[str, Any], suite: str, metric: str, confidence: float) -> tuple[int, str] | None:
    """For a request-level percentile (``p99_latency_ms``) of a suite with a fixed request count:
    (the fewest replicates whose pooled requests reach ``tails.requests_needed``, the note). The
    comparison judges such a percentile on the arms' pooled requests and refuses it below that
    count (PrimaryNotGateable), whatever the replicate-level power says; None otherwise. ``counts``:
    the spec's :func:`benchrun.stats.power.suite_request_counts`."""
    from benchrun.stats.tails import percentile_of, requests_needed

    q = percentile_of(metric)
    count = counts.get(suite)
    if q is None or count is None:
        return None
    requests, key = count[0], count[1]
    need = requests_needed(q, confidence)
    reps = max(2, -(-need // max(requests, 1)))
    return reps, (f"a p{q * 100:g} is judged on pooled requests and needs {need}: at {requests} requests a "
                  f"replicate ({key}) at least {reps} replicates; the power above is of replicate p{q * 100:g}s")


def plan(doc: dict[str, Any], digest: "str | WorkloadDigests | None", home: Path, *, target: float = 0.8, max_n: int = 30,
         sims: int = SIMS) -> list[MetricPlan]:
    """The replicate plan of every primary metric of a spec document (camelCase, as written), one
    per suite that reports it (one with ``suite`` "" where none does)."""
    from benchrun.checks import primary_metrics
    from benchrun.stats.load import delta_pct
    from benchrun.stats.power import suite_request_counts

    spec = doc.get("spec") or {}
    trials = spec.get("trials") or {}
    alpha = 1.0 - float(trials.get("confidenceLevel", 0.95))
    low = int(trials.get("minReplicates") or 0)
    current = _suite_replicates(doc)
    requests = suite_request_counts(doc)  # a request percentile's replicates cover its pooled requests
    primaries = sorted(primary_metrics(doc))
    # an ad-hoc spec may learn from every run of its workload; a scheduled one not from experiments
    planned_adhoc = (spec.get("intent") or {}).get("cadence") == ADHOC
    history, hist = _reporting(home, digest, primaries, adhoc=planned_adhoc)
    keys: set[Key] = set()
    for p in primaries:  # the gate tests every (suite, case, metric) a primary matches
        keys |= _keys(history[p][0], p) or {("", "", p)}
    family = max(1, len(keys))
    out = []
    for p in primaries:
        name = p.split("/", 1)[-1].split("[", 1)[0]
        delta = delta_pct(doc, name)
        tables, own = history[p]
        suites = sorted({str(x) for t in tables if (m := _matched(t, p)) is not None for x in m["suite"].unique()})
        n_left, left = _adhoc_left(hist, own)
        if not suites:
            out.append(MetricPlan(p, "", 0, math.nan, delta, family, None, None, low,
                                  "; ".join(x for x in ("no history: run the spec a few times first", left) if x),
                                  adhoc_left_out=n_left))
        for suite in suites:
            acc, runs = _spread(tables, p, suite)
            now = current.get(suite, low)
            if not runs:
                out.append(MetricPlan(p, suite, 0, math.nan, delta, family, None, None, now,
                                      "; ".join(x for x in ("no history with 2 replicates a run", left) if x),
                                      adhoc_left_out=n_left))
                continue
            bad = _not_positive(tables, p, suite)
            if bad:
                out.append(MetricPlan(p, suite, 0, math.nan, delta, family, None, None, now, "; ".join(x for x in (
                    f"not planned: {bad} value(s) ≤ 0 in the history, so the comparison judges differences against "
                    "comparison.absoluteMarginByMetric, where a plan simulates log ratios against δ", left) if x),
                    adhoc_left_out=n_left))
                continue
            # the suite runs one count for all its cases: the noisiest (case, metric) decides,
            # planned at the upper bound of its noise (NOISE_BOUND)
            worst = max(acc, key=lambda k: _cv_bound(*acc[k]))
            cv, dof = _cv(*acc[worst]), int(acc[worst][1])
            cv_up = _cv_bound(*acc[worst])
            needed, at_now, note = _needed(cv_up, delta, family, alpha, now, target=target, max_n=max_n, sims=sims)
            notes = [note, f"planned for CV {cv_up:.2%}, the {NOISE_BOUND:.0%} upper confidence bound of the CV "
                           f"{cv:.2%} read from {dof} degrees of freedom"]
            floor = _request_floor(requests, suite, name, 1.0 - alpha)
            if floor is not None:
                reps, why = floor
                notes.append(why)
                needed = max(needed, reps) if needed is not None else None
            if len(acc) > 1:
                pooled = _pooled(acc)
                label = f"{worst[2]}[{worst[1]}]" if worst[1] else worst[2]
                notes.append(f"the noisiest of {len(acc)} cases, {label} (CV over all of them {pooled:.2%})")
            if not own:
                notes.append("history of other workloads: none of this one reports it")
            notes.append(left)
            out.append(MetricPlan(p, suite, runs, cv, delta, family, needed, at_now, now,
                                  "; ".join(x for x in notes if x), worst[1], n_left, dof, cv_up))
    return out


def auto_replicates(doc: dict[str, Any], digest: "str | WorkloadDigests | None", home: Path, suites: list[str], low: int, high: int,
                    *, target: float = 0.8, sims: int = 200) -> dict[str, dict[str, Any]]:
    """``trials.replicates: auto``: per suite, the most replicates any primary metric it reports
    needs (:func:`plan`), bounded to [``low``, ``high``]; ``low`` for a suite that reports no
    primary metric or has no history, ``high`` when even that many fall short. Each entry says why."""
    plans = plan(doc, digest, home, target=target, max_n=high, sims=sims)
    out: dict[str, dict[str, Any]] = {}
    for suite in suites:
        known = [p for p in plans if p.suite == suite and p.runs]
        if not known:
            unplanned = "; ".join(f"{p.metric}: {p.note}" for p in plans if p.suite == suite and p.note.startswith("not planned"))
            out[suite] = {"replicates": low, "why": "no primary metric with history: trials.minReplicates"
                          + (f" ({unplanned})" if unplanned else "")}
            continue
        short = [p.metric for p in known if p.needed is None]
        need = high if short else max(int(p.needed) for p in known if p.needed is not None)
        n = min(max(need, low), high)
        why = (f"{', '.join(short)} need more than {high}: trials.maxReplicates" if short else
               "; ".join(f"{p.metric}{f'[{p.case}]' if p.case and '[' not in p.metric else ''} needs {p.needed} (CV {p.cv:.2%} from {p.runs} runs, "
                         f"planned for its {NOISE_BOUND:.0%} upper bound {p.cv_planned:.2%}, δ {p.delta_pct:g} %, "
                         f"{p.family} gating tests)" for p in known))
        left = max((p.adhoc_left_out for p in known), default=0)
        if left:
            why += f"; {left} ad-hoc run(s) left out of the history (experiments are not this spec's noise)"
        out[suite] = {"replicates": n, "why": why, "metrics": [p.metric for p in known]}
    return out
