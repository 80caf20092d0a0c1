"""The statistics audit: false alarms, power, interval coverage, change points and confirmation, re-measured on fabricated data.

Every figure is a simulation with a stated count, through the code the comparison runs:
the first round is the gate itself (``batch.effects`` + ``compare.decide``: exact rank test
or Welch t, Holm over the gating family, the ±3 % margin), the confirmation round is
``benchrun.stats.paired``'s rule (flagged or screened metrics; first n pairs, extension up to
maxPairs; inverse-normal with the first round's unadjusted p at α/5 over family and looks), the p99 is
``benchrun.stats.tails.compare_p99``, the change points ``benchrun.stats.changepoint``.

Sections (``--only`` picks some; counts per cell in brackets, scaled by ``--scale``):

* ``aa``: per-run A/A false alarms, n = 5, 10; 6, 18 gating tests; CV 2, 10 %; before and
  after confirmation, and the share of runs that launch a confirmation round [1,000 runs].
* ``power``: one of 18 gating metrics shifted 5 or 10 % at CV 2 and 5 %, n = 5; the share of
  runs where it is flagged, sent to the round, and confirmed (maxPairs 10 and 15) [500 runs].
* ``coverage``: the median's order-statistic interval and the Hodges–Lehmann interval at
  n = 5, 10 on normal, lognormal and bimodal data [4,000]; the p99-on-requests interval
  (A/A, 5 replicates an arm, CV 2 % between replicates, lognormal σ 0.3 requests) at 24, 100
  and 1,000 requests a replicate, and 100 vs 400 [300, 400 bootstrap resamples];
  ``hodges_lehmann_unequal_spreads``: the reported shift interval against the exact one alone, the
  candidate 1× or 4× as noisy as the baseline, 5–30 replicates an arm [2,000]; ``p99_on_requests_2000``:
  the p99 A/A cells again, one-sided flags both ways, 100 vs 400 and 400 vs 100 [2,000].
* ``changepoint``: histories of 8 sibling series (one hardware key and suite) at CV 2 %,
  floor 3 %, each series judged without the sibling pool and with it (``sibling_pool``, as
  ``change_points`` does): the share of 200-night series that ever alarm with the family's
  φ = 0, 0.5, 0.8 each, mixed (4 at 0 + 4 at 0.5; 1 at 0.5 among 7 at 0) and 0.5 with 80 % of
  the variance common to the 8; 5 % steps (in all 8) after 30 and 100 nights of iid history:
  the share found within 7 nights, the median delay, alarms before the step [100 histories];
  ``after_a_change``: lone series with and without ``Detector.carry`` — a 5 % step at night 100
  of 200 at φ 0 and 0.5 (the step found: a change point within 7 nights of it; any other
  alarm), and a step back at night 130 (an alarm within 7 nights of it) [800 series].
* ``confirm``: a 5 % regression at CV 2 %, n = 5, suspected by the first round (1 and 18
  gating tests), then a confirmation round under a 3 %-per-pair drift: the share confirmed,
  without extension (maxPairs 5) and with (10, 15) [400]; ``position_effect_aa``: A/A rounds
  under a 4 % launch-position effect, the balanced order against baseline first [400].
* ``spread``: Brown–Forsythe (what ``flag_spread`` runs): power at n = 5, 10, 20 for a candidate
  1, 2, 4× as noisy, one test at 5 % [4,000]; A/A runs of 18 metrics with any row flagged after
  Benjamini–Hochberg, n = 5, 10 [1,000 runs].

Each section draws from its own generator, spawned from the seed in the order of
``SECTIONS`` (since 2026-12-05 06:56 UTC; before, one generator ran through the sections in
turn, so a section's figures changed when an earlier section drew differently, and ``--only``
did not reproduce a full run): ``--only changepoint --seed 0`` gives the full run's change-point
cells to the digit. The cells added after a section's first ones draw from their own
generators too (spawned from the section's), so the earlier cells reproduce at the same seed.

The machine is shared: run it with ``nice -n 10``. Usage:
``nice -n 10 .venv/bin/python benchmarks/statistics_audit.py [--scale 1.0] [--only aa,power] [--seed 0]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import time
from typing import Any

import numpy as np

from benchrun.stats import batch
from benchrun.stats import compare as C
from benchrun.stats.changepoint import DETECTOR, detect_series, sibling_pool
from benchrun.stats.describe import median_interval
from benchrun.stats.paired import decide as paired_decide
from benchrun.stats.paired import n_looks, worse_positive
from benchrun.stats.synthetic import lognormal_replicates
from benchrun.stats.tails import compare_p99

MARGIN = math.log1p(0.03)
ALPHA = 0.05


def _first_round(rng: np.random.Generator, shift: float, cv: float, n: int, tests: int, sims: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per run × gating metric: flagged (verdict == regression), sent to the round (flagged or
    screened: ``paired.screened``'s rule) and the unadjusted gate p; metric 0 shifted by
    ``shift`` (a throughput, higher is better: a negative shift is a regression)."""
    rows = sims * tests
    base = lognormal_replicates(rng, 100.0, cv, rows * n).reshape(rows, n)
    factor = np.where(np.arange(rows) % tests == 0, 1 + shift, 1.0)[:, None]
    cand = lognormal_replicates(rng, 100.0, cv, rows * n).reshape(rows, n) * factor
    eff = batch.effects(base, cand, np.ones(rows, bool), 1 - ALPHA)
    sizes = np.full(tests, n)
    reg = np.zeros((sims, tests), bool)
    sent = np.zeros((sims, tests), bool)
    pgate = np.ones((sims, tests))
    for i in range(sims):
        sl = slice(i * tests, (i + 1) * tests)
        d = C.decide({k: v[sl] for k, v in eff.items()}, np.ones(tests, bool), sizes, sizes,
                     np.full(tests, MARGIN), ALPHA)
        verdict = np.asarray(d.verdict)
        reg[i] = verdict == "regression"
        sent[i] = reg[i] | ((verdict == "inconclusive") & (d.p_gate <= ALPHA) & (eff["shift"][sl] < -MARGIN))
        pgate[i] = d.p_gate
    return reg, sent, pgate


def _confirm(rng: np.random.Generator, p1: float, shift: float, cv: float, n0: int, max_pairs: int,
             family: int, drift: float = 0.0, position: float = 0.0, balanced: bool = True) -> tuple[bool, int]:
    """One confirmation round by the paired rule: confirmed?, pairs launched. ``position``: the
    second launch of each pair measures that much lower (a throughput: worse); the first arm of
    each pair is the round's balanced, shuffled order (``benchrun.confirm.pair_orders``, a fresh
    seed per extension) or, with ``balanced`` False, always the baseline."""
    from benchrun.confirm import pair_orders

    looks = n_looks(n0, max_pairs)
    b: list[float] = []
    c: list[float] = []
    look = 1
    while True:
        k = np.arange(len(b), len(b) + n0)
        level = np.exp(drift * k)
        firsts = [f for f, _ in pair_orders(n0, int(rng.integers(2**31)))] if balanced else ["baseline"] * n0
        first_b = np.array([f == "baseline" for f in firsts])
        b += list(level * np.where(first_b, 1.0, 1 - position) * lognormal_replicates(rng, 100.0, cv, n0))
        c += list(level * (1 + shift) * np.where(first_b, 1 - position, 1.0) * lognormal_replicates(rng, 100.0, cv, n0))
        dec = paired_decide(p1, worse_positive(b, c, "higher"), alpha=ALPHA, look=look, looks=looks, family=family,
                            margin=MARGIN)
        if dec.decision != "extend":
            return dec.decision == "confirmed", len(b)
        look += 1


def section_aa(rng: np.random.Generator, scale: float) -> dict[str, Any]:
    sims = max(50, int(1000 * scale))
    out = {"runs_per_cell": sims, "cells": []}
    for n in (5, 10):
        for tests in (6, 18):
            for cv in (0.02, 0.10):
                reg, sent, pgate = _first_round(rng, 0.0, cv, n, tests, sims)
                confirmed = 0
                for i in np.nonzero(sent.any(axis=1))[0]:
                    confirmed += any([_confirm(rng, float(pgate[i, j]), 0.0, cv, n, 3 * n, tests)[0]
                                      for j in np.nonzero(sent[i])[0]])
                out["cells"].append({"n": n, "tests": tests, "cv": cv, "before": float(reg.any(axis=1).mean()),
                                     "rounds_launched": float(sent.any(axis=1).mean()), "after": confirmed / sims})
    return out


def section_power(rng: np.random.Generator, scale: float) -> dict[str, Any]:
    sims = max(50, int(500 * scale))
    out = {"runs_per_cell": sims, "n": 5, "tests": 18, "cells": []}
    for shift in (0.05, 0.10):
        for cv in (0.02, 0.05):
            for max_pairs in (10, 15):
                reg, sent, pgate = _first_round(rng, -shift, cv, 5, 18, sims)
                conf = [_confirm(rng, float(pgate[i, 0]), -shift, cv, 5, max_pairs, 18)
                        for i in np.nonzero(sent[:, 0])[0]]
                out["cells"].append({"shift": shift, "cv": cv, "max_pairs": max_pairs,
                                     "flagged": float(reg[:, 0].mean()), "sent_to_round": float(sent[:, 0].mean()),
                                     "confirmed": sum(c for c, _ in conf) / sims,
                                     "mean_pairs": float(np.mean([p for _, p in conf])) if conf else None})
    return out


def _draw(rng: np.random.Generator, kind: str, size: tuple[int, ...]) -> tuple[np.ndarray, float]:
    """Values and their true median."""
    if kind == "normal":
        return 100 + rng.normal(0, 2, size), 100.0
    if kind == "lognormal":
        return 100 * np.exp(rng.normal(0, 0.5, size)), 100.0
    mix = rng.random(size) < 0.5  # bimodal: two well-separated modes of equal weight, median between
    return np.where(mix, rng.normal(90, 1, size), rng.normal(110, 1, size)), 100.0


def section_coverage(rng: np.random.Generator, scale: float) -> dict[str, Any]:
    sims = max(200, int(4000 * scale))
    med, hl = [], []
    for kind in ("normal", "lognormal", "bimodal"):
        for n in (5, 10):
            x, truth = _draw(rng, kind, (sims, n))
            ivs = [median_interval(row, 0.95) for row in x]
            med.append({"dist": kind, "n": n, "stated": float(np.mean([iv.coverage for iv in ivs])),
                        "measured": float(np.mean([iv.low <= truth <= iv.high for iv in ivs]))})
            y, _t = _draw(rng, kind, (sims, n))
            e = batch.effects(np.abs(x), np.abs(y), np.ones(sims, bool), 0.95)  # same distribution: shift 0
            hl.append({"dist": kind, "n": n, "stated": float(np.nanmean(e["ci_coverage"])),
                       "measured": float(np.mean((e["shift_low"] <= 0) & (e["shift_high"] >= 0)))})
    tail_sims = max(50, int(300 * scale))
    p99 = []
    for nb, nc in ((24, 24), (100, 100), (1000, 1000), (100, 400)):
        gateable = cover = flag = 0
        for s in range(tail_sims):
            def arm(n: int) -> list[np.ndarray]:
                return [100 * np.exp(rng.normal(0, 0.02)) * np.exp(rng.normal(0, 0.3, n)) for _ in range(5)]
            tc = compare_p99(arm(nb), arm(nc), n_boot=400, seed=s)
            if not tc.gateable:
                continue
            gateable += 1
            cover += tc.low <= 0 <= tc.high
            flag += tc.p_higher < 0.05
        p99.append({"requests_per_replicate": f"{nb} vs {nc}", "replicates": 5, "runs": tail_sims,
                    "gateable": gateable / tail_sims, "stated": 0.95,
                    "measured": cover / gateable if gateable else None,
                    "one_sided_5pct_flags": flag / gateable if gateable else None})
    # the cells below draw from their own generators, spawned from the seed: the cells above draw what they drew before
    own = np.random.default_rng(rng.bit_generator.seed_seq.spawn(1)[0])
    return {"runs_per_cell": sims, "median": med, "hodges_lehmann": hl, "p99_on_requests": p99,
            "hodges_lehmann_unequal_spreads": _unequal_spreads(own, max(500, int(2000 * scale))),
            "p99_on_requests_2000": _p99_flags(np.random.default_rng(rng.bit_generator.seed_seq.spawn(1)[0]),
                                               max(300, int(2000 * scale)))}


def _p99_flags(rng: np.random.Generator, runs: int) -> list[dict[str, Any]]:
    """The p99-on-requests A/A cells with enough runs to read a one-sided 5 % rate to ±0.5 point,
    both directions, unequal request counts each way round."""
    out = []
    for nb, nc in ((100, 100), (1000, 1000), (100, 400), (400, 100)):
        higher = lower = cover = 0
        for s in range(runs):
            def arm(n: int) -> list[np.ndarray]:
                return [100 * np.exp(rng.normal(0, 0.02)) * np.exp(rng.normal(0, 0.3, n)) for _ in range(5)]
            tc = compare_p99(arm(nb), arm(nc), n_boot=400, seed=s)
            higher += tc.p_higher < 0.05
            lower += tc.p_lower < 0.05
            cover += tc.low <= 0 <= tc.high
        out.append({"requests_per_replicate": f"{nb} vs {nc}", "runs": runs, "stated": 0.95, "measured": cover / runs,
                    "one_sided_5pct_higher": higher / runs, "one_sided_5pct_lower": lower / runs})
    return out


def _unequal_spreads(rng: np.random.Generator, sims: int) -> list[dict[str, Any]]:
    """Coverage of the shift interval the comparison reports (the exact Hodges–Lehmann interval
    widened to Brunner–Munzel's accepted shifts) and of the exact interval alone, same medians,
    the candidate 1× or 4× as noisy as the baseline (log-normal, CV 2 %)."""
    from benchrun.stats.effects import critical_rank

    out = []
    for n_c, n_b in ((5, 5), (10, 10), (30, 30), (8, 30), (30, 8)):
        k, stated = critical_rank(n_c, n_b, 0.95)
        for factor in (1.0, 4.0):
            b = 100 * np.exp(rng.normal(0, 0.02, (sims, n_b)))
            c = 100 * np.exp(rng.normal(0, 0.02 * factor, (sims, n_c)))
            e = batch.effects(b, c, np.ones(sims, bool), 0.95)
            d = np.sort((np.log(c)[:, :, None] - np.log(b)[:, None, :]).reshape(sims, -1), axis=1)
            exact = (d[:, k - 1] <= 0) & (d[:, -k] >= 0)
            reported = (e["shift_low"] <= 0) & (e["shift_high"] >= 0)
            out.append({"candidate_n": n_c, "baseline_n": n_b, "spread_factor": factor, "stated": stated,
                        "measured": float(reported.mean()), "exact_interval_alone": float(exact.mean()),
                        "widened": float((e["ci_coverage_kind"] == "widened").mean()),
                        "width_vs_exact": float(np.median((e["shift_high"] - e["shift_low"]) / (d[:, -k] - d[:, k - 1])))})
    return out


def _ar1(rng: np.random.Generator, phi: float, n: int) -> np.ndarray:
    e = rng.standard_normal(n + 50)
    y = np.empty_like(e)
    y[0] = e[0] / math.sqrt(1 - phi**2)
    for t in range(1, e.size):
        y[t] = phi * y[t - 1] + e[t]
    return 100 * (1 + 0.02 * math.sqrt(1 - phi**2) * y[50:])  # CV 2 % marginal


def _family(rng: np.random.Generator, phis: list[float], n: int, step_at: int | None = None,
            rho: float = 0.0) -> list[np.ndarray]:
    """One history's sibling series (one hardware key and suite), CV 2 %, AR(1) with the given φ
    each; ``rho``: the share of variance common to all (same φ only); a 5 % step at ``step_at``
    in every series (a change of the software moves its siblings together)."""
    common = _ar1(rng, phis[0], n) / 100 - 1 if rho else 0.0
    out = []
    for phi in phis:
        y = 100 * (1 + math.sqrt(rho) * common + math.sqrt(1 - rho) * (_ar1(rng, phi, n) / 100 - 1))
        if step_at is not None:
            y[step_at:] *= 1.05
        out.append(y)
    return out


def _both(ys: list[np.ndarray]) -> list[tuple[list, list]]:
    """Each series' change points without the sibling pool and with it (the warehouse's path)."""
    pools = sibling_pool([(np.arange(y.size), y) for y in ys])
    return [(detect_series(y), detect_series(y, phi_prior=pool)) for y, pool in zip(ys, pools)]


FAMILIES = [("8 x phi 0", [0.0] * 8, 0.0), ("8 x phi 0.5", [0.5] * 8, 0.0), ("8 x phi 0.8", [0.8] * 8, 0.0),
            ("4 x phi 0 + 4 x phi 0.5", [0.0] * 4 + [0.5] * 4, 0.0),
            ("1 x phi 0.5 + 7 x phi 0", [0.5] + [0.0] * 7, 0.0),
            ("8 x phi 0.5, 80 % of variance common", [0.5] * 8, 0.8)]


def section_changepoint(rng: np.random.Generator, scale: float) -> dict[str, Any]:
    """Per series of 8 siblings, without the pool and with it; a mixed family reports each φ."""
    sims = max(20, int(100 * scale))
    fa = []
    for name, phis, rho in FAMILIES:
        counts: dict[float, list[int]] = {phi: [0, 0, 0] for phi in phis}  # series, ever alarm: no pool, pool
        for _ in range(sims):
            for phi, (no, po) in zip(phis, _both(_family(rng, phis, 200, rho=rho))):
                c = counts[phi]
                c[0] += 1
                c[1] += bool(no)
                c[2] += bool(po)
        for phi, (n, no, po) in counts.items():
            fa.append({"family": name, "phi": phi, "series": n, "ever_alarm_no_pool": no / n,
                       "ever_alarm_pool": po / n})
    steps = []
    for at in (30, 100):
        res = {"no_pool": [0, 0, []], "pool": [0, 0, []]}  # within 7, alarm before the step, delays
        n = 0
        for _ in range(sims):
            for cps_pair in _both(_family(rng, [0.0] * 8, at + 30, step_at=at)):
                n += 1
                for key, cps in zip(res, cps_pair):
                    r = res[key]
                    r[1] += any(c.alarm_index < at for c in cps)
                    hit = [c.alarm_index - at for c in cps if c.alarm_index >= at]
                    if hit:
                        r[2].append(hit[0])
                        r[0] += hit[0] < 7
        steps.append({"step_after_nights": at, "series": n, **{
            f"{key}_{what}": val for key, (w, e, d) in res.items() for what, val in
            (("found_within_7", w / n), ("median_delay_nights", float(np.median(d)) if d else None),
             ("alarm_before_step", e / n))}})
    return {"histories_per_cell": sims, "series_per_history": 8, "cv": 0.02, "floor_pct": 3.0,
            "detector": json.loads(DETECTOR.describe(3.0)), "false_alarms_200_nights": fa, "steps_5pct": steps,
            # its own generator, spawned from the seed: the sections after this one draw what they drew before
            "after_a_change": _after_a_change(np.random.default_rng(rng.bit_generator.seed_seq.spawn(1)[0]), sims * 8)}


def _after_a_change(rng: np.random.Generator, n: int) -> list[dict[str, Any]]:
    """Single series (no siblings), with the previous segment's φ carried into the next
    (``Detector.carry``, the default) and without: a 5 % step at night 100 of 200, and what
    else alarms; and a step back ("the fix") 30 nights after it, found within 7 nights."""
    import dataclasses

    dets = {"carry": DETECTOR, "no_carry": dataclasses.replace(DETECTOR, carry=False)}
    out = []
    for phi in (0.0, 0.5):
        found = {k: 0 for k in dets}
        other = {k: 0 for k in dets}
        for _ in range(n):
            y = _ar1(rng, phi, 200)
            y[100:] *= 1.05
            for key, det in dets.items():
                cps = detect_series(y, detector=det)
                hit = [c for c in cps if c.alarm_index >= 100 and abs(c.index - 100) <= 7]
                found[key] += bool(hit)
                other[key] += any(c not in hit[:1] for c in cps)
        out.append({"case": "5 % step at night 100 of 200", "phi": phi, "series": n,
                    **{f"{k}_found": found[k] / n for k in dets}, **{f"{k}_other_alarm": other[k] / n for k in dets}})
    fix = {k: 0 for k in dets}
    for _ in range(n):
        y = _ar1(rng, 0.0, 160)
        y[100:130] *= 1.05
        for key, det in dets.items():
            h = [c.alarm_index - 130 for c in detect_series(y, detector=det) if c.alarm_index >= 130]
            fix[key] += bool(h) and h[0] < 7
    out.append({"case": "iid: 5 % step at 100, back at 130; the step back found within 7 nights", "phi": 0.0,
                "series": n, **{f"{k}_found_within_7": fix[k] / n for k in dets}})
    return out


def section_confirm(rng: np.random.Generator, scale: float) -> dict[str, Any]:
    sims = max(50, int(400 * scale))
    out = {"runs_per_cell": sims, "shift": 0.05, "cv": 0.02, "n": 5, "drift_per_pair": 0.03, "cells": [],
           "position_effect_aa": []}
    for tests in (1, 18):
        reg, sent, pgate = _first_round(rng, -0.05, 0.02, 5, tests, sims)
        sus = np.nonzero(sent[:, 0])[0]
        for max_pairs in (5, 10, 15):
            res = [_confirm(rng, float(pgate[i, 0]), -0.05, 0.02, 5, max_pairs, tests, drift=0.03) for i in sus]
            out["cells"].append({"tests": tests, "max_pairs": max_pairs, "sent_to_round": len(sus) / sims,
                                 "confirmed_given_sent": float(np.mean([c for c, _ in res])) if res else None,
                                 "confirmed": float(np.sum([c for c, _ in res])) / sims,
                                 "mean_pairs": float(np.mean([p for _, p in res])) if res else None})
    # A/A rounds (the metrics an A/A first round sends, 18 gating tests) under a 4 % launch-position
    # effect: confirmed with the round's balanced order against a fixed baseline-first order (own
    # generator, spawned from the seed: the cells above draw what they drew before)
    own = np.random.default_rng(rng.bit_generator.seed_seq.spawn(1)[0])
    _reg, sent_aa, pgate_aa = _first_round(own, 0.0, 0.02, 5, 18, sims * 4)
    p_sent = pgate_aa[sent_aa]
    for balanced in (True, False):
        res = [_confirm(own, float(p), 0.0, 0.02, 5, 15, 18, position=0.04, balanced=balanced)
               for p in p_sent[:sims]]
        out["position_effect_aa"].append({"position_effect": 0.04, "order": "balanced" if balanced else "baseline first",
                                          "rounds": len(res), "confirmed": float(np.mean([c for c, _ in res]))
                                          if res else None})
    return out


def section_spread(rng: np.random.Generator, scale: float) -> dict[str, Any]:
    """Brown–Forsythe (``spread.brown_forsythe_p``, what ``flag_spread`` runs per row): power for a
    candidate 2× and 4× as noisy, one test at 5 %, and the share of A/A runs of 18 metrics with any
    row flagged after Benjamini–Hochberg (log-normal replicates, CV 2 %)."""
    from benchrun.stats.family import benjamini_hochberg
    from benchrun.stats.spread import brown_forsythe_p

    sims = max(500, int(4000 * scale))
    power = []
    for n in (5, 10, 20):
        for k in (1.0, 2.0, 4.0):
            b = rng.normal(0, 0.02, (sims, n))
            c = rng.normal(0, 0.02 * k, (sims, n))
            power.append({"n": n, "spread_factor": k, "flagged_one_test": float((brown_forsythe_p(b, c) < ALPHA).mean())})
    runs = max(200, int(1000 * scale))
    aa = []
    for n in (5, 10):
        flagged = 0
        for _ in range(runs):
            p = brown_forsythe_p(rng.normal(0, 0.02, (18, n)), rng.normal(0, 0.02, (18, n)))
            flagged += bool((benjamini_hochberg(p) < ALPHA).any())
        aa.append({"n": n, "metrics": 18, "runs": runs, "any_row_flagged": flagged / runs})
    return {"simulations_per_cell": sims, "power": power, "aa_runs": aa}


SECTIONS = {"aa": section_aa, "power": section_power, "coverage": section_coverage,
            "changepoint": section_changepoint, "confirm": section_confirm, "spread": section_spread}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every simulation count (default 1)")
    ap.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    # one generator per section, spawned from the seed in SECTIONS' order: a section draws the same
    # whichever others run before it, so `--only X` reproduces the full run's X to the digit
    streams = dict(zip(SECTIONS, np.random.SeedSequence(args.seed).spawn(len(SECTIONS))))
    report: dict[str, Any] = {"date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                              "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                              "load_at_start": os.getloadavg()[0], "scale": args.scale}
    for name in args.only.split(","):
        t0 = time.time()
        report[name] = SECTIONS[name](np.random.default_rng(streams[name]), args.scale)
        report[name]["seconds"] = round(time.time() - t0, 1)
        print(json.dumps({name: report[name]}, indent=1), flush=True)
    report["load_at_end"] = os.getloadavg()[0]
    print(json.dumps({k: report[k] for k in ("date_utc", "machine", "load_at_start", "load_at_end", "scale")}))


if __name__ == "__main__":
    main()
