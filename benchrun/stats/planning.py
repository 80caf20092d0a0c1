"""Replicate planning: from the history of a spec's primary metrics, how many replicates each needs for the gate to detect a δ change with 80 % power (``benchrun plan SPEC``).

The noise of a metric is its pooled within-run spread of log values over the newest runs of
the same workload (``workload_spec_digest``) in ``$BENCHRUN_HOME/runs`` — else of any run
that reports it — and the power is simulated through the gate itself (``batch.effects`` +
``compare.decide``: exact rank test or Welch t, Holm over the spec's gating family) on
lognormal replicates with that spread: a true shift of δ in the regression direction is
"detected" when its Holm-adjusted one-sided p passes α (significance alone: a verdict of
``regression`` also needs the estimate beyond δ, which a true shift of exactly δ reaches half
of the time). The smallest n from 2 to ``max_n`` reaching the power is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchrun.errors import BenchrunError

HISTORY_RUNS = 20
SIMS = 400


@dataclass(frozen=True)
class MetricPlan:
    """The plan of one primary metric: its history, noise, δ and the replicates it needs."""

    metric: str
    runs: int
    cv: float
    delta_pct: float
    family: int
    needed: int | None  # None: not reached by max_n (or no history)
    power_at_current: float | None
    current: int
    note: str


def _history(home: Path, digest: str | None) -> list[Any]:
    """Replicate tables of the newest Succeeded runs, same workload first."""
    from benchrun.stats.contention import contended_replicates, exclude
    from benchrun.stats.load import load_run, replicate_table

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
        runs.append((run.status.get("workload_spec_digest") == digest, run.status.get("created_utc") or "", rd))
    same = [r for r in runs if r[0]] or runs
    same.sort(key=lambda r: r[1])
    out = []
    for _s, _t, rd in same[-HISTORY_RUNS:]:
        try:  # replicates still contended leave the spread as they leave the comparison
            out.append(exclude(replicate_table(rd), contended_replicates(rd))[0])
        except BenchrunError:
            continue
    return out


def pooled_cv(tables: list[Any], primary: str) -> tuple[float, int]:
    """Pooled within-run sd of log values of the rows ``primary`` names, as a CV; runs used."""
    from benchrun.stats.compare import gating_mask

    ss, dof, runs = 0.0, 0, 0
    for t in tables:
        if t is None or t.empty:
            continue
        keys = list(zip(t["suite"].astype(str), t["case"].astype(str), t["metric"].astype(str)))
        sel = t[gating_mask(keys, [primary]) & (t["value"] > 0)]
        used = False
        for _k, g in sel.groupby(["suite", "case", "metric"]):
            v = np.log(g["value"].to_numpy(dtype=float))
            if v.size >= 2:
                ss += float(((v - v.mean()) ** 2).sum())
                dof += v.size - 1
                used = True
        runs += used
    if dof == 0:
        return math.nan, 0
    return math.sqrt(math.expm1(ss / dof)), runs


def power(n: int, cv: float, delta_pct: float, family: int, alpha: float, *, sims: int = SIMS, seed: int = 0) -> float:
    """Share of simulated comparisons (n vs n, ``family`` gating tests, one shifted by δ) whose
    shifted metric's Holm-adjusted gate p passes α."""
    from benchrun.stats import batch
    from benchrun.stats import compare as C
    from benchrun.stats.synthetic import lognormal_replicates

    rng = np.random.default_rng(seed)
    rows = sims * family
    base = lognormal_replicates(rng, 100.0, cv, rows * n).reshape(rows, n)
    factor = np.where(np.arange(rows) % family == 0, 1 - delta_pct / 100.0, 1.0)[:, None]
    cand = lognormal_replicates(rng, 100.0, cv, rows * n).reshape(rows, n) * factor
    eff = batch.effects(base, cand, np.ones(rows, bool), 1 - alpha)
    sizes = np.full(family, n)
    hits = 0
    for i in range(sims):
        sl = slice(i * family, (i + 1) * family)
        d = C.decide({k: v[sl] for k, v in eff.items()}, np.ones(family, bool), sizes, sizes,
                     np.zeros(family), alpha)
        hits += bool(d.p_adjusted[0] < alpha)
    return hits / sims


def plan(doc: dict[str, Any], digest: str | None, home: Path, *, target: float = 0.8, max_n: int = 30,
         sims: int = SIMS) -> list[MetricPlan]:
    """The replicate plan of every primary metric of a spec document (camelCase, as written)."""
    from benchrun.checks import primary_metrics
    from benchrun.stats.load import delta_pct

    spec = doc.get("spec") or {}
    trials = spec.get("trials") or {}
    alpha = 1.0 - float(trials.get("confidenceLevel", 0.95))
    current = int(trials.get("minReplicates") or 0)
    primaries = sorted(primary_metrics(doc))
    family = max(1, len(primaries))
    tables = _history(home, digest)
    out = []
    for p in primaries:
        name = p.split("/", 1)[-1].split("[", 1)[0]
        delta = delta_pct(doc, name)
        cv, runs = pooled_cv(tables, p)
        if not runs or not math.isfinite(cv):
            out.append(MetricPlan(p, 0, math.nan, delta, family, None, None, current,
                                  "no history: run the spec a few times first"))
            continue
        if cv == 0:
            out.append(MetricPlan(p, runs, 0.0, delta, family, 2, 1.0, current, "no noise in the history"))
            continue
        pw = {}
        lo, hi = 2, max_n
        if power(hi, cv, delta, family, alpha, sims=sims) < target:
            out.append(MetricPlan(p, runs, cv, delta, family, None,
                                  power(current, cv, delta, family, alpha, sims=sims) if current >= 2 else None,
                                  current, f"more than {max_n} replicates needed"))
            continue
        while lo < hi:  # power rises with n (up to simulation noise): bisect
            mid = (lo + hi) // 2
            pw[mid] = power(mid, cv, delta, family, alpha, sims=sims)
            if pw[mid] >= target:
                hi = mid
            else:
                lo = mid + 1
        at_current = pw.get(current) if current in pw else (
            power(current, cv, delta, family, alpha, sims=sims) if current >= 2 else None)
        out.append(MetricPlan(p, runs, cv, delta, family, lo, at_current, current, ""))
    return out


def applies(primary: str, suite: str) -> bool:
    """Whether a primary metric (``metric``, ``suite/metric`` or ``suite/metric[case]``) names ``suite``'s metrics."""
    return "/" not in primary or primary.split("/", 1)[0] == suite


def auto_replicates(doc: dict[str, Any], digest: str | None, home: Path, suites: list[str], low: int, high: int,
                    *, target: float = 0.8, sims: int = 200) -> dict[str, dict[str, Any]]:
    """``trials.replicates: auto``: per suite, the most replicates any of its primary metrics needs
    (:func:`plan`), bounded to [``low``, ``high``]; ``low`` for a suite without primaries or
    history, ``high`` when even that many fall short. Each entry says why."""
    plans = plan(doc, digest, home, target=target, max_n=high, sims=sims)
    out: dict[str, dict[str, Any]] = {}
    for suite in suites:
        mine = [p for p in plans if applies(p.metric, suite)]
        known = [p for p in mine if p.runs]
        if not known:
            out[suite] = {"replicates": low, "why": "no primary metric with history: trials.minReplicates"}
            continue
        short = [p.metric for p in known if p.needed is None]
        need = high if short else max(int(p.needed) for p in known if p.needed is not None)
        n = min(max(need, low), high)
        why = (f"{', '.join(short)} need more than {high}: trials.maxReplicates" if short else
               "; ".join(f"{p.metric} needs {p.needed} (CV {p.cv:.2%} from {p.runs} runs, δ {p.delta_pct:g} %)"
                         for p in known))
        out[suite] = {"replicates": n, "why": why, "metrics": [p.metric for p in known]}
    return out
