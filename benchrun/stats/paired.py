"""The confirmation round's analysis: paired log ratios, the first round's evidence combined by a pre-stated rule, and more pairs while the answer is unclear.

The round launches baseline and candidate in pairs (``benchrun.confirm``), so slow drift of the
machine hits both members of a pair alike; the pair's log ratio cancels it, where a two-sample
test on the same launches would count the drift as noise. The rule, fixed before the round
(a two-stage adaptive design with the inverse-normal combination, Bauer–Köhne / Lehmacher–Wassmer):

* Which metrics go to the round: a gating metric flagged by the first round, and (when a round
  can run) one *screened*: its unadjusted one-sided gate p ≤ α and its estimate worse than the
  margin. Screening is a futility stop only (a metric not screened cannot be confirmed), so it
  costs no error rate; it is what lets a real 5 % change at n = 5 be confirmed, where 18 gating
  tests' Holm threshold (α/18) is out of reach of 5 versus 5 replicates.
* d_i = log(candidate_i / baseline_i), signed so that d > 0 is worse — or the difference, when
  the first round compared differences (values ≤ 0): the round is judged on the first round's
  scale, where the margin is; pairs are matched by replicate index.
* p₂ = the exact one-sided sign-flip permutation p of Σ d_i (all 2ⁿ flips up to 16 pairs, else
  20,000 seeded random flips): valid for any symmetric per-pair noise, drift included.
* p₁ = the first round's unadjusted one-sided gate p of the metric (exact rank or Welch t, as
  the gate chose); independent of p₂ (other launches).
* z = (Φ⁻¹(1 − p₁) + Φ⁻¹(1 − p₂)) / √2.
* Looks: after the first n₀ pairs and after every further n₀ pairs up to
  ``comparison.confirmation.maxPairs`` (default 3·n₀), J looks in all. At a look: confirmed when
  z ≥ Φ⁻¹(1 − α_c / (m·J)), with m the first round's gating family and α_c = α/5
  (:data:`AFTER_FRACTION`), *and* the pairs' own mean change is worse than the margin (the
  round must reproduce a change worth reporting: strong first-round evidence with a round
  that shows none is not confirmed); not confirmed when z < 0 or at the last look; otherwise
  the round is extended by n₀ more pairs.

Under no change the chance that *any* gating metric of a run is confirmed is then at most
α_c = α/5 (1 % at α = 0.05) — Bonferroni over the m metrics and the J looks, whatever the drift within the round,
the screening, or when the round stops, given a valid first-round p (an offset between the
two runs' machines is not "no change" to it: docs/statistics.md). Measured (``benchmarks/statistics_audit.py``): see
:data:`MEASURED`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np
from scipy import stats

from benchrun.stats.launches import round_failures
from benchrun.stats.ranktest import rejects

EXACT_MAX_PAIRS = 16
MC_FLIPS = 20_000
AFTER_FRACTION = 0.2  # α_c = α/5: the family-wise error after confirmation
RULE = "paired sign-flip test on log ratios, inverse-normal combination with the first round's unadjusted p, " \
       "Bonferroni at α/5 over the gating family and the looks"
# benchmarks/statistics_audit.py, 2026-12-02 (benchmarks/README.md): n = 5, 18 gating tests, CV 2 %
MEASURED = ("A/A: confirmed in 0-0.5 % of runs (n 5, 10; 6, 18 tests; CV 2, 10 %); a 5 % shift among 18 gating "
            "tests at CV 2 %, n = 5: confirmed in 93.4 % of runs (maxPairs 15), 90.6 % (10); under a 3 %-per-pair drift, "
            "once sent to the round: 100 % (15), 96.6 % (10)")


def worse_positive(baseline: Sequence[float], candidate: Sequence[float], direction: str,
                   scale: str = "") -> np.ndarray:
    """Per-pair change, positive when the candidate is worse: a log ratio (``scale`` "log") or a
    difference ("absolute"); "" picks the log ratio unless a value is ≤ 0. The round is judged on
    the first round's scale, where its margin is (:func:`paired_confirmation`): a value ≤ 0 on
    the log scale gives NaN."""
    b, c = np.asarray(baseline, dtype=float), np.asarray(candidate, dtype=float)
    positive = bool((b > 0).all() and (c > 0).all())
    if scale == "absolute" or (not scale and not positive):
        d = c - b
    elif positive:
        d = np.log(c / b)
    else:
        d = np.full(b.shape, np.nan)
    return -d if direction == "higher" else d


def sign_flip_pvalue(d: Sequence[float], *, seed: int = 0) -> float:
    """One-sided p of "the pairs' mean change is > 0" under random signs (exact up to
    ``EXACT_MAX_PAIRS`` pairs)."""
    d = np.asarray(d, dtype=float)
    n = d.size
    if n == 0:
        return 1.0
    obs = d.sum()
    tol = 1e-12 * max(1.0, float(np.abs(d).sum()))
    if n <= EXACT_MAX_PAIRS:
        return float(np.mean(_signs(n) @ d >= obs - tol))
    rng = np.random.default_rng(seed)
    sums = rng.choice((1.0, -1.0), size=(MC_FLIPS, n)) @ d
    return float((1 + np.sum(sums >= obs - tol)) / (1 + MC_FLIPS))


@lru_cache(maxsize=EXACT_MAX_PAIRS + 1)
def _signs(n: int) -> np.ndarray:
    """All 2ⁿ sign vectors (rows)."""
    return np.array(list(itertools.product((1.0, -1.0), repeat=n)))


def combined_z(p_first: float, p_pairs: float) -> float:
    """Inverse-normal combination of the first round's unadjusted p₁ and the pairs' p₂."""
    clip = lambda p: min(max(p, 1e-15), 1 - 1e-15)  # noqa: E731
    return float((stats.norm.isf(clip(p_first)) + stats.norm.isf(clip(p_pairs))) / math.sqrt(2))


def bound(alpha: float, family: int, looks: int) -> float:
    """The z a look must reach: Φ⁻¹(1 − (α/5) / (family · looks))."""
    return float(stats.norm.isf(AFTER_FRACTION * alpha / (max(family, 1) * max(looks, 1))))


def n_looks(first_pairs: int, max_pairs: int) -> int:
    """Looks of a round that starts with ``first_pairs`` and extends by as many up to ``max_pairs``."""
    if first_pairs <= 0:
        return 1
    return 1 + max(0, math.ceil((max_pairs - first_pairs) / first_pairs))


@dataclass(frozen=True)
class Look:
    """One key's state after a look: the pairs, the two p's, z, the bound, and what it decided."""

    pairs: int
    p_first: float
    family: int
    p_pairs: float
    z: float
    bound: float
    look: int
    looks: int
    decision: str  # confirmed | not_confirmed | extend
    mean_change: float = math.nan
    margin: float = 0.0

    def rule(self) -> str:
        small = self.z >= self.bound and not self.mean_change > self.margin
        last = (f"the pairs' mean change {self.mean_change:.4g} is within the margin {self.margin:.4g}"
                if small else f"z = {self.z:.2f} < {self.bound:.2f}")
        why = {"confirmed": f"z = {self.z:.2f} ≥ {self.bound:.2f} and mean change {self.mean_change:.4g} > margin "
                            f"{self.margin:.4g}",
               "not_confirmed": (f"z = {self.z:.2f} < 0 (pairs point the other way)" if self.z < 0 and
                                 self.look < self.looks else f"{last} at the last look"),
               "extend": (f"{last}: more pairs" if small else f"0 ≤ z = {self.z:.2f} < {self.bound:.2f}: more pairs")
               }[self.decision]
        return (f"{self.decision} at look {self.look} of {self.looks} ({self.pairs} pairs): paired sign-flip "
                f"p = {self.p_pairs:.4g}, first round p = {self.p_first:.4g} (unadjusted; {self.family} gating "
                f"tests), {why}")


def decide(p_first: float, d: Sequence[float], *, alpha: float, look: int, looks: int, family: int = 1,
           margin: float = 0.0, seed: int = 0) -> Look:
    """The pre-stated rule at one look (see the module docstring); ``p_first`` is the first
    round's unadjusted one-sided gate p, ``family`` its number of gating tests, ``margin`` the
    row's margin on the scale of ``d`` (log(1 + δ), or the absolute margin)."""
    p2 = sign_flip_pvalue(d, seed=seed)
    z = combined_z(p_first, p2)
    b = bound(alpha, family, looks)
    mean = float(np.mean(d)) if len(d) else math.nan
    margin = float(margin) if np.isfinite(margin) else 0.0
    if z >= b and mean > margin:
        decision = "confirmed"
    elif look >= looks or z < 0:
        decision = "not_confirmed"
    else:
        decision = "extend"
    return Look(len(d), float(p_first), int(family), p2, z, b, look, looks, decision, mean, margin)


def screened(df: Any, alpha: float) -> np.ndarray:
    """Rows sent to the confirmation round without a first-round flag: gating value metrics
    whose unadjusted one-sided gate p ≤ α and whose estimate is worse than the margin (an
    unclear first round that a real change of δ or more would often give)."""
    p = df["p_gate"].to_numpy(dtype=float)
    shift, margin = df["shift"].to_numpy(dtype=float), df["margin"].to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        return (df["gating"].to_numpy(bool) & (df["verdict"] == "inconclusive").to_numpy()
                & (df["name"] != "failed_replicates").to_numpy() & rejects(p, alpha) & (shift < -margin))


def _ok_values(t: Any, key: tuple[str, str, str]) -> dict[int, float]:
    """Replicate index → ok, finite value of ``key`` in one arm's replicate table."""
    if t is None or len(t) == 0:
        return {}
    sel = (t["suite"] == key[0]) & (t["case"] == key[1]) & (t["metric"] == key[2])
    if "status" in t.columns:
        sel &= t["status"].astype(str) == "ok"
    return {int(r): float(v) for r, v in zip(t.loc[sel, "replicate"], t.loc[sel, "value"]) if np.isfinite(v)}


def pairs_of(baseline: Any, candidate: Any, key: tuple[str, str, str]) -> tuple[np.ndarray, np.ndarray]:
    """The ok values of ``key`` in both arms' replicate tables, matched by replicate index."""
    b, c = _ok_values(baseline, key), _ok_values(candidate, key)
    common = sorted(set(b) & set(c))
    return np.array([b[r] for r in common]), np.array([c[r] for r in common])


def extension_lost(baseline: Any, candidate: Any, key: tuple[str, str, str], since: int, launched: int) -> str:
    """Why an extension's pairs (replicate indices above ``since``, ``launched`` of them) cannot
    decide ``key`` ("" when they can): at least half of them did not pair up — a launch failed
    in either arm. The survivors' rule (:func:`benchrun.stats.launches.survivors_cannot_speak`)
    on the extension's own launches, in either arm: the first look's rule counts the whole round,
    where an extension whose launches all failed hides behind the pairs of the first look. At the
    first look (``since`` 0) it is the round's own pairs: ``round_failures`` counts the candidate's
    failed launches only, so a round whose baseline launches mostly failed was judged on the
    survivors (3 of 5 lost: a −10 % confirmed on 5 pairs read NotConfirmed on 2)."""
    b, c = _ok_values(baseline, key), _ok_values(candidate, key)
    new = sum(1 for r in set(b) & set(c) if r > since)
    if launched <= 0 or 2 * (launched - new) < launched:
        return ""
    if since <= 0:  # the first look: a baseline launch that failed costs its pair as a candidate's does
        return (f"only {new} of the {launched} pairs the round launched paired up for {'/'.join(key)} (a launch "
                "failed in either arm): the pairs that survived cannot speak for the round")
    return (f"only {new} of the {launched} pairs the round was extended by paired up for {'/'.join(key)} "
            "(a launch failed in either arm): the pairs of the earlier looks cannot speak for the extension")


def paired_confirmation(result: Any, keys: list[tuple[str, str, str]], fresh_b: Any, fresh_c: Any,
                        hook: Callable[..., Any], *, alpha: float
                        ) -> tuple[set[tuple[str, str, str]], dict[tuple[str, str, str], str]]:
    """Decide ``keys`` (suspected or screened value metrics) by the pre-stated paired rule; extend
    the round through ``hook.extend(keys, pairs)`` while some are unclear and ``hook.max_pairs``
    allows. The first round's p is each row's ``p_gate``, the family ``result.family``; each
    pair's change is taken on the row's first-round ``scale``, where its margin is.

    The looks follow the pairs *launched* (``hook.pairs`` when the hook says, else the pairs
    present): the first n₀, then n₀ more at a time, never past ``max_pairs`` (default 3·n₀) —
    a failed replicate costs its pair, not the schedule. Writes each key's deciding rule into
    ``result.rows['confirmation_rule']`` and the looks into
    ``result.confirmation_evidence['paired']``; returns the confirmed keys and, per key the
    round could not judge (a value ≤ 0 where the first round compared log ratios, an extension
    that could not be launched, at least half of the candidate's launches of the key's suite failed
    — :func:`benchrun.stats.launches.round_failures` — or at least half of the first look's pairs or of
    an extension's did not pair up — :func:`extension_lost` — and the survivors did not confirm), why.
    ``fresh_b``/``fresh_c`` must hold the failed launches of the keys' suites.
    """
    from benchrun.errors import BenchrunError

    df = result.rows
    if "confirmation_rule" not in df.columns:
        df["confirmation_rule"] = ""
    scales = df["scale"] if "scale" in df.columns else [""] * len(df)  # rows made before they carried a scale
    first = {k: (float(r.p_gate) if np.isfinite(r.p_gate) else 1.0, str(r.direction),
                 float(r.margin) if np.isfinite(r.margin) else 0.0, str(sc or ""))
             for r, sc in zip(df.itertuples(), scales) for k in [(r.suite, r.case, r.name)] if k in set(keys)}
    family = int(getattr(result, "family", 0) or 1)
    present = max([pairs_of(fresh_b, fresh_c, k)[0].size for k in keys] or [0])
    n0 = int(getattr(hook, "pairs", 0) or 0) or _launched(fresh_b, fresh_c, keys) or present
    max_pairs = int(getattr(hook, "max_pairs", None) or 3 * n0)
    extend = getattr(hook, "extend", None)
    looks = n_looks(n0, max_pairs) if extend is not None else 1
    open_keys, confirmed, log = list(keys), set(), {}
    unjudged: dict[tuple[str, str, str], str] = {}
    look, pairs_now, since = 1, n0, 0
    while open_keys:
        still = []
        for k in open_keys:
            b, c = pairs_of(fresh_b, fresh_c, k)
            p1, direction, margin, scale = first.get(k, (1.0, "lower", 0.0, ""))
            d = worse_positive(b, c, direction, scale)
            if not np.isfinite(d).all():
                unjudged[k] = "a value ≤ 0 in the round, where the first round compared log ratios"
                continue
            dec = decide(p1, d, alpha=alpha, look=look, looks=looks, family=family, margin=margin)
            # the first round's rule on the round's own launches: survivors of a suite that mostly
            # crashed do not clear it (they may still confirm: a regression they show is said)
            crashed = "" if dec.decision == "confirmed" else (
                round_failures(fresh_b, fresh_c, k[0]) or extension_lost(fresh_b, fresh_c, k, since, pairs_now - since))
            log.setdefault("/".join(k), []).append({**dec.__dict__, "rule": dec.rule(),
                                                   **({"unjudged": crashed} if crashed else {})})
            df.loc[(df["suite"] == k[0]) & (df["case"] == k[1]) & (df["name"] == k[2]), "confirmation_rule"] = \
                f"no answer at look {look}: {crashed}" if crashed else dec.rule()
            if crashed:
                unjudged[k] = crashed
            elif dec.decision == "confirmed":
                confirmed.add(k)
            elif dec.decision == "extend":
                still.append(k)
        if not still or extend is None or pairs_now >= max_pairs:
            break
        more = min(n0, max_pairs - pairs_now)
        try:
            fresh_b, fresh_c = extend(still, more)
        except BenchrunError as exc:  # the looks made so far stand; the open keys get no answer
            for k in still:
                unjudged[k] = f"the round could not be extended: {exc}"
            break
        since, pairs_now = pairs_now, pairs_now + more
        look += 1
        open_keys = still
    result.confirmation_evidence = {**(result.confirmation_evidence or {}),
                                    "paired": {"rule": RULE, "alpha": alpha, "family": family, "first_pairs": n0,
                                               "pairs_present_at_first_look": present, "max_pairs": max_pairs,
                                               "looks": looks, "keys": log,
                                               "unjudged": {"/".join(k): v for k, v in unjudged.items()}}}
    return confirmed, unjudged


def _launched(fresh_b: Any, fresh_c: Any, keys: list[tuple[str, str, str]]) -> int:
    """Pairs launched for the keys' suites: the highest replicate index in either arm's table,
    failed replicates included (the round numbers its pairs 1, 2, …)."""
    suites = {k[0] for k in keys}
    top = 0
    for t in (fresh_b, fresh_c):
        if t is not None and len(t):
            reps = t.loc[t["suite"].isin(suites), "replicate"]
            top = max(top, int(reps.max()) if len(reps) else 0)
    return top
