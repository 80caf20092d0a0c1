"""Change points over run history: per series (workload digest × hardware key × metric) of
replicate medians, a sequential two-sided CUSUM (Page) on self-starting, AR(1)-aware
standardised values with a magnitude floor; results go to ``change_point_fact``.

The detector reads a series in time order and decides at each night from the nights before
it only, so re-running it on a longer history reproduces every earlier alarm exactly: change
points neither move nor multiply as nights are added, and the false-alarm rate it has is one
per *history* (the chance that a series without change ever alarms), not per pass.
Benchmark histories are autocorrelated (a machine drifts, images are shared across nights):
each value is standardised by the segment's long-run spread, the innovation spread over 1 − φ
with φ its own lag-1 autocorrelation (bias-corrected, plus a margin for its estimation error),
so that the CUSUM's sums grow as an independent series' would. A young segment (few reference
nights: a wide margin that also damps a real step) borrows a φ pooled over its sibling series,
the other series of the same hardware key and suite (:func:`sibling_pool`; rule in
:class:`Detector`), and on a night when its siblings shift with it, it is also judged on the
pool's φ alone (``Detector.joint``). An alarm also needs the change
to be at least the floor (``comparison.deltaPct`` of the series' spec, 3 % by default): a
statistically clear 0.5 % move on a very quiet series is not reported.
Measured on fabricated 200-night histories (``benchmarks/statistics_audit.py``, held out: ``benchmarks/changepoint_held_out.py``; benchmarks/README.md):
see :data:`MEASURED`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

# the history's gathering (from the home, or the shared state's runs): benchrun.stats.cphistory
from benchrun.stats.cphistory import HISTORY_COLUMNS, gather_history, hardware_key, history_table, run_medians  # noqa: F401
from benchrun.stats.cpfact import _previous_breaks, read_change_point_fact, write_change_point_fact  # noqa: F401 (API)
from benchrun.stats.directions import has_direction
from benchrun.stats.load import DEFAULT_DELTA_PCT
from benchrun.stats.sibcorr import rho2_sums

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

MIN_SEGMENT = 3  # nights: a break this close to one already in the fact is the same break
METHOD = "sequential two-sided CUSUM on self-starting z over the AR(1) long-run spread, magnitude floor"


@dataclass(frozen=True)
class Detector:
    """The sequential detector's parameters, reported with every alarm.

    A segment's first ``warmup`` nights set its reference; from then on each night t is
    standardised against the segment's nights up to t − ``lag`` (so a change under way does not
    leak into its own reference): mean m, lag-1 autocorrelation φ (Kendall bias-corrected, plus
    ``phi_margin``/√n for its estimation error, times 1 + ``young_factor``·(N − n)/N below N =
    ``young_below`` nights, clipped to [0, 0.95]) and the innovation spread
    s; z = (x_t − m)(1 − φ) / s, the night over the long-run spread s/(1 − φ) (a sum of L AR(1)
    nights varies as L long-run variances, so the CUSUM's sums behave as an independent series'),
    clipped to ±``clip`` (one wild night cannot alarm on its own). ``whiten``: the earlier rule,
    z on the AR(1) innovations, (x_t − m − φ (x_{t−1} − m)) / s. Both give a step Δ the same
    drift after its first night, (1 − φ)Δ/s a night; the long-run z is the quieter when φ is
    overstated (an iid series with a young reference's margin: its z varies less than the
    innovations'), and it alarms less on autocorrelated histories at the same detection
    (benchmarks/README.md). Page's CUSUM S⁺ = max(0, S⁺ + z − k), S⁻ = max(0, S⁻ − z − k)
    alarms at ``h`` when the mean of the nights since the excursion began differs from the
    reference mean by at least the floor; the change point is the excursion's first night, and
    a new segment starts there.

    The pooled φ (``phi_prior`` of :func:`detect_series`: φ_p from n_p sibling nights, bias-
    corrected, no margin) is used while the segment's own reference holds fewer than
    ``pool_below`` nights and n_p exceeds the segment's own n. With φ_o the segment's own bias-corrected estimate
    (no margin) and se = √(1/n + 1/n_p): if φ_o − φ_p > ``pool_gap``·se the series is not like its
    siblings and keeps its own rule, φ_o + its margin M; otherwise, d below that edge,
    φ = max(φ_p + its margin, φ_o + max(0, M − ``pool_slope``·d)): the own margin fades below the edge
    instead of vanishing at it (the earlier rule, an infinite slope, which the previous segment's
    prior keeps), so a young φ 0.5 series among iid siblings whose estimate reads just in line is not
    judged with their φ ≈ 0 (those cells 2.0–7.0 % → 2.0–6.0 % ever alarm, seeds 0–5: benchmarks/README.md).

    ``carry``: after a change point the new segment's prior is its own previous segment's φ
    (bias-corrected, no margin) and length, by the same rule — a change moves the mean, not
    the noise process, and a segment that is not like its predecessor (a noisier or more
    persistent process after the change) keeps its own rule — unless the sibling pool has as
    many nights. Only a segment of at least ``warmup`` nights is carried. It changes nothing
    before a lone series' first change point (so not its per-history rate of ever alarming; with
    siblings, a sibling's later segments and so the pool can differ — the audit's pooled cells
    reproduced unchanged); it cuts the alarms that follow a real change in an autocorrelated
    series by 21–36 % (``MEASURED_CARRY``).

    The young factor: a short reference's lag-1 estimate is more spread and skewed than 1/√n says
    (at φ 0.5, 15 nights: sd 0.27 against 0.22), so a 1/√n margin covered a true φ 0.3–0.5 in 69 %
    of 15-night references and 77 % of 93-night ones, and a lone φ 0.5 series ever alarmed in
    5.0–5.8 % of 200-night histories, most before night 50. With the factor the coverage is 76–80 %
    at every length (``tests/test_changepoint.py``) and those series alarm in 3.9–4.4 %; a step
    after 30 nights is found within 7 in 79–80 % instead of 81–83 % (benchmarks/README.md).

    ``joint``: siblings that step together. While the pool is in force a second CUSUM runs on z
    with φ the pool's alone (φ_p + margin, neither the own estimate nor the out-of-line rule), and
    it alarms only on a night when at least this share of the siblings (:func:`sibling_pool`)
    have their newest ``joint_window`` nights' mean beyond their floor and their reference's sd
    from their reference mean, in the same direction (0: off). A series' own 23 nights price φ's
    estimation error (that pricing, not the threshold, is what a young reference's steps lose:
    with the true φ 96 % are found within 7 nights, 79–80 % without); the siblings' corroboration
    is evidence about the step, not about φ, so a φ 0.5 series among iid siblings is not judged
    with their φ unless they shift with it. ``joint_hold``: a sibling whose segment is too young to
    judge its window (as just after its own alarm) is judged against the segment before its change;
    before, once the quicker siblings had alarmed, the slower ones had no corroboration left.

    ``joint_rho``: the joint CUSUM's margin on φ_p is the pool's, times min(1, ρ̄²/``joint_rho``),
    ρ̄² the mean squared pairwise correlation of the series and its siblings over the nights so far
    (:func:`sibling_pool`; 0, or no ρ̄²: the full margin). Siblings with shared noise (80 % of the
    variance common: ρ̄² ≈ 0.64) shift together without a change, so their corroboration is no
    evidence and an understated φ_p alarms: they keep the whole margin. Uncorrelated siblings (ρ̄²
    about 1/n, chance) shift together only when something moved them, and the margin then only
    damps the step: with it 92.9–93.75 % of the audit's steps after 30 nights are found within 7,
    with this 95.0–95.9 % (seeds 0–3), the 80 % common-variance family alarming as before
    (benchmarks/README.md).
    """

    k: float = 0.75
    h: float = 5.5
    warmup: int = 15
    lag: int = 7
    phi_margin: float = 0.75
    clip: float = 3.0
    pool_below: int = 120
    pool_gap: float = 0.5
    whiten: bool = False
    carry: bool = True
    young_factor: float = 0.5
    young_below: int = 60
    joint: float = 0.3
    joint_window: int = 3
    joint_rho: float = 0.25
    pool_slope: float = 0.5
    joint_hold: bool = True

    def describe(self, floor_pct: float, pool: tuple[float, float] | None = None, prior_from: str = "siblings") -> str:
        """The parameters as JSON; ``pool``: the prior (φ, n) in force at the alarm, if any, and
        ``prior_from`` where it came from (the siblings or the series' previous segment)."""
        d = {"method": METHOD, "k": self.k, "h": self.h, "warmup": self.warmup, "lag": self.lag,
             "phi_margin": self.phi_margin, "clip": self.clip, "floor_pct": floor_pct, "pool_below": self.pool_below,
             "pool_gap": self.pool_gap, "whiten": self.whiten, "carry": self.carry, "young_factor": self.young_factor,
             "young_below": self.young_below, "joint": self.joint, "joint_window": self.joint_window,
             "joint_rho": self.joint_rho, "pool_slope": self.pool_slope, "joint_hold": self.joint_hold,
             "measured": MEASURED}
        if self.carry:
            d["measured_carry"] = MEASURED_CARRY
        if pool is not None and pool[1] > 0 and math.isfinite(pool[0]):
            d["phi_pool"], d["phi_pool_n"] = round(float(pool[0]), 4), round(float(pool[1]), 1)
            d["phi_prior_from"] = prior_from or "siblings"
        return json.dumps(d, sort_keys=True)


DETECTOR = Detector()
# benchmarks/changepoint_held_out.py (2026-12-06 10:53-11:09 UTC, development VM, 2 cores): the audit's families and
# step cells on 20 seeds no tuning used (1000-1019), 2,000 histories of 8 sibling series a cell, 200 nights (steps: 30
# after them), CV 2 %, floor 3 %; pooled share with the sibling pool (without it in brackets), a 95 % bootstrap interval
# over histories in benchmarks/README.md. The per-change history of these figures (seeds 0-5): benchmarks/README.md.
MEASURED = ("held out (20 seeds, 2,000 histories of 8 sibling series a cell, 200 nights, CV 2 %, floor 3 %), with the "
            "sibling pool (without): ever alarm 1.1 % (1.4 %) iid, 0.7 % (3.5 %) AR(1) phi 0.5, 0.5 % (4.6 %) phi 0.8, a "
            "phi-0.5 series among phi-0 siblings 3.3-3.5 % (3.2-3.6 %), phi 0.5 with 80 % of the variance common 2.8 % "
            "(3.8 %); every iid and phi <= 0.5 cell's 95 % interval below 5 %. 5 % steps (all 8 siblings) found within 7 "
            "nights: 98.4 % (95.8 %) after 100 nights of history, 95.7 % (75.2 %) after 30")
MEASURED_CARRY = ("a 5 % step at night 100 of 200, lone series: other alarms in 3.6-5.1 % of phi-0.5 series carrying "
                  "the previous segment's phi (4.8-6.6 % without), 1.5-2.0 % (1.5-2.0 %) iid; a step back 30 nights "
                  "later found within 7 nights 70.4-74.5 % (68.8-72.6 %)")
FACT_COLUMNS = [
    "series_id", "workload_spec_digest", "hardware_key", "suite", "case", "metric", "direction",
    "change_index", "run_id", "change_utc", "before_mean", "after_mean", "before_n", "after_n",
    "magnitude_pct", "p_value", "p_adjusted", "kind", "artifact_manifest_digest", "method", "detected_utc",
    "ar1_phi", "new", "alarm_index", "alarm_run_id", "floor_pct", "detector",
]


@dataclass(frozen=True)
class ChangePoint:
    """One significant break in a series: index of the first point after it, and its size."""

    index: int
    before_mean: float
    after_mean: float
    before_n: int
    after_n: int
    magnitude_pct: float
    p_value: float
    p_adjusted: float
    phi: float = 0.0
    alarm_index: int = -1  # the night whose value raised the alarm (the change was known from then on)
    phi_pool: float = math.nan  # the φ prior in force at the alarm (nan, 0: none offered)
    pool_n: float = 0.0
    prior_from: str = ""  # "siblings" (sibling_pool), "siblings, joint" (Detector.joint) or "previous segment" (carry)


def _own_phi(ref: np.ndarray, m: float) -> float:
    """Lag-1 autocorrelation of ``ref`` about m, Kendall bias-corrected, no margin."""
    a, b = ref[1:] - m, ref[:-1] - m
    ss = float(((ref - m) ** 2).sum())
    phi = float((a * b).sum() / ss) if ss > 0 else 0.0
    # Kendall's bias of the least-squares lag-1 estimate; the sample autocorrelation's is (1 + 4φ)/n, so
    # this under-corrects by ~0.04 at φ 0.5 and 23 nights, which the margin was tuned with (an unbiased
    # estimate at a smaller margin gave the same trade: benchmarks/README.md, statistics audit)
    return phi + (1 + 3 * max(phi, 0.0)) / ref.size


def _margin(phi_margin: float, n: float, young: tuple[float, int]) -> float:
    """φ's margin for an estimate from n nights: ``phi_margin``/√n, times 1 + f·(N − n)/N below
    N nights (``young`` = (f, N): :attr:`Detector.young_factor`, ``young_below``)."""
    factor, below = young
    return phi_margin / math.sqrt(n) * (1.0 + factor * max(0.0, below - n) / below if below > 0 else 1.0)


def _reference(x: np.ndarray, lo: int, hi: int, phi_margin: float, prior: tuple[float, float] | None = None,
               pool_below: int = 0, pool_gap: float = 0.5,
               young: tuple[float, int] = (DETECTOR.young_factor, DETECTOR.young_below),
               slope: float = math.inf) -> tuple[float, float, float]:
    """Mean, AR(1) φ and innovation spread of x[lo:hi] (see :class:`Detector`); ``prior`` is
    the sibling pool (φ_p, n_p) known when the reference ends (or the previous segment's φ);
    ``slope``: the own margin kept in line falls by this per unit below the edge (``Detector.pool_slope``
    for a sibling prior; inf, none kept, for the previous segment's)."""
    ref = x[lo:hi]
    n = ref.size
    m = float(ref.mean())
    own = _own_phi(ref, m)
    margin = _margin(phi_margin, n, young)
    phi = own + margin
    if prior is not None and n < pool_below and prior[1] > n and math.isfinite(prior[0]):
        pp, pn = prior
        edge = pool_gap * math.sqrt(1 / n + 1 / pn)
        if own - pp <= edge:  # in line with its siblings
            below = edge - (own - pp)
            kept = max(0.0, margin - slope * below) if math.isfinite(slope) else 0.0
            phi = max(pp + _margin(phi_margin, pn, young), own + kept)
    phi = min(max(phi, 0.0), 0.95)
    return m, phi, _spread(ref, m, phi)


def _spread(ref: np.ndarray, m: float, phi: float) -> float:
    """The innovation spread of ``ref`` about m at φ, widened for m's error."""
    a, b = ref[1:] - m, ref[:-1] - m
    resid = float(((a - phi * b) ** 2).sum()) / max(ref.size - 2, 1)
    return math.sqrt(max(resid * (1 + 1 / ref.size), 0.0))


def _locate(x: np.ndarray, seg: int, begin: int, t: int, lag: int) -> int:
    """The change point of an alarm at night t: the least-squares split of x[seg:t+1] (two
    means) among the nights from ``lag`` before the CUSUM excursion began to t."""
    lo, hi = max(seg + 2, begin - lag), t
    if hi <= lo:
        return begin
    y = x[seg:t + 1] - x[seg:t + 1].mean()
    ks = np.arange(lo - seg, hi - seg + 1)
    csum = np.cumsum(y)
    n = y.size
    score = np.abs(csum[ks - 1]) * np.sqrt(n / (ks * (n - ks)))
    return int(seg + ks[int(np.argmax(score))])


def detect_series(values: Sequence[float], *, floor_pct: float = 3.0, detector: Detector = DETECTOR,
                  phi_prior: tuple[Any, Any] | None = None) -> list[ChangePoint]:
    """Change points of one series (in time order), each decided from the nights up to its
    alarm only (so a longer history reports the same ones, plus any later).

    ``phi_prior``: a pooled φ and its number of nights for young segments (rule in
    :class:`Detector`), either one (φ, n) for the whole series or two arrays as long as the
    series, element i the pool from sibling nights up to night i (what :func:`sibling_pool`
    returns; a reference ending before night j uses element j − 1, so alarms still do not move
    as nights are added). n = 0 or a NaN φ: no pool at that night.
    """
    x = np.asarray(values, dtype=float)
    d = detector
    pool_phi = pool_n = joint = rho2 = None
    if phi_prior is not None:
        pool_phi = np.broadcast_to(np.asarray(phi_prior[0], dtype=float), x.shape)
        pool_n = np.broadcast_to(np.asarray(phi_prior[1], dtype=float), x.shape)
        if len(phi_prior) > 2 and d.joint > 0:  # the siblings' shares shifted up, down (sibling_pool)
            joint = [np.broadcast_to(np.asarray(a, dtype=float), x.shape) for a in phi_prior[2:4]]
            if len(phi_prior) > 4:  # the siblings' mean squared correlation (``Detector.joint_rho``)
                rho2 = np.broadcast_to(np.asarray(phi_prior[4], dtype=float), x.shape)
    out: list[ChangePoint] = []
    seg = 0
    sp = sm = jp = jm = 0.0  # jp, jm: the joint CUSUM (``Detector.joint``), on the pool's φ alone
    start_p = start_m = start_jp = start_jm = 0
    carried: tuple[float, float] | None = None  # the previous segment's own φ and nights (``carry``)
    t = seg + d.warmup
    while t < x.size:
        if sp == 0:
            start_p = t
        if sm == 0:
            start_m = t
        if jp == 0:
            start_jp = t
        if jm == 0:
            start_jm = t
        hi = max(seg + d.warmup, t - d.lag)
        prior = None if pool_phi is None else (float(pool_phi[hi - 1]), float(pool_n[hi - 1]))
        source = "siblings" if prior is not None else ""
        if carried is not None and not (prior is not None and prior[1] >= carried[1] and math.isfinite(prior[0])):
            prior, source = carried, "previous segment"
        m, phi, s = _reference(x, seg, hi, d.phi_margin, prior, d.pool_below, d.pool_gap,
                               (d.young_factor, d.young_below), d.pool_slope if source == "siblings" else math.inf)
        if not s > 0:  # a constant reference: any move is infinitely many sds; judge by the floor alone
            z = math.copysign(d.clip, x[t] - m) if x[t] != m else 0.0
        else:
            dev = x[t] - m - phi * (x[t - 1] - m) if d.whiten else (x[t] - m) * (1.0 - phi)
            z = min(max(dev / s, -d.clip), d.clip)
        zj, pj = z, phi
        if joint is not None and source == "siblings" and hi - seg < d.pool_below and prior[1] > hi - seg \
                and math.isfinite(prior[0]) and s > 0:
            mj = _margin(d.phi_margin, prior[1], (d.young_factor, d.young_below))
            r2 = math.nan if rho2 is None else float(rho2[hi - 1])
            if d.joint_rho > 0 and math.isfinite(r2):  # shared noise corroborates itself: it keeps the margin
                mj *= min(1.0, max(r2, 0.0) / d.joint_rho)
            pj = min(max(prior[0] + mj, 0.0), 0.95)
            sj = _spread(x[seg:hi], m, pj)
            zj = min(max((x[t] - m) * (1.0 - pj) / sj, -d.clip), d.clip) if sj > 0 else z
        sp, sm = max(0.0, sp + z - d.k), max(0.0, sm - z - d.k)
        jp, jm = max(0.0, jp + zj - d.k), max(0.0, jm - zj - d.k)
        fired = None
        cands = [(sp, start_p, phi, source), (sm, start_m, phi, source)]
        if joint is not None:  # the joint CUSUM counts only on a night its siblings shift with it
            cands += [(jp if joint[0][t] >= d.joint else 0.0, start_jp, pj, "siblings, joint"),
                      (jm if joint[1][t] >= d.joint else 0.0, start_jm, pj, "siblings, joint")]
        for i, (stat, begin, used, src) in enumerate(cands):
            if stat >= d.h and (i < 2 or fired is None):
                begin = _locate(x, seg, begin, t, d.lag)
                before, after = float(x[seg:begin].mean()), float(x[begin:t + 1].mean())
                mag = 100.0 * (after - before) / abs(before) if before else math.nan
                if not abs(mag) < floor_pct:  # NaN (a zero reference) passes: no floor applies
                    fired = ChangePoint(begin, before, after, begin - seg, t + 1 - begin, mag, math.nan, math.nan,
                                        used, t, *(prior if prior is not None else (math.nan, 0.0)), src)
        if fired is None:
            t += 1
            continue
        out.append(fired)
        if d.carry and fired.index - seg >= d.warmup:
            before = x[seg:fired.index]
            carried = (min(max(_own_phi(before, float(before.mean())), 0.0), 0.95), float(before.size))
        seg, sp, sm, jp, jm = fired.index, 0.0, 0.0, 0.0, 0.0
        t = max(seg + d.warmup, t + 1)
    return out


def sibling_pool(series: Sequence[tuple[Sequence[int], Sequence[float]]], *, detector: Detector = DETECTOR,
                 min_n: int = 8, floors: Sequence[float] | None = None) -> list[tuple[np.ndarray, ...]]:
    """For each series of one hardware key and suite, the AR(1) φ pooled over the others.

    ``series``: (positions, values) per series, positions increasing integers on a timeline
    the series share (the run order). Returns, per series, (φ_p, n_p) arrays as long as its
    values: element i pools every *other* series over its nights up to night i's position, each
    from its current segment only (since its latest change point alarmed by then, found by
    :func:`detect_series` without a pool) and only with at least ``min_n`` nights there. φ_p is
    the nights-weighted mean of their lag-1 autocorrelations, bias-corrected for the k means
    removed (+k(1 + 3φ)/N over N nights); n_p = N / (1 + (k − 1)·ρ̄²), a design effect for
    siblings that move together (ρ̄²: the mean squared correlation between pairs of them over
    the nights so far, steps included, so it errs towards fewer effective nights). Everything at
    element i comes from nights at or before it: alarms do not move as nights are added.
    Then two more arrays for ``Detector.joint``: the share of the other series (with ``min_n``
    reference nights before their newest ``joint_window``; ``Detector.joint_hold``: one with fewer, as just
    after its change point, against its segment before that change) whose newest window's mean is above
    (below) their segment's mean before it by at least their floor (``floors``, 3 % each by
    default) and that reference's sd; and for ``Detector.joint_rho`` the mean ρ² over every pair
    of the series, this one included (NaN under two).
    """
    k = len(series)
    pos = [np.asarray(p, dtype=int) for p, _ in series]
    val = [np.asarray(v, dtype=float) for _, v in series]
    if k < 2:
        return [(np.full(v.size, math.nan), np.zeros(v.size)) for v in val]
    floors = [DEFAULT_DELTA_PCT] * k if floors is None else list(floors)
    w = max(1, detector.joint_window)
    width = int(max(p.max() for p in pos if p.size) + 1) if any(p.size for p in pos) else 0
    shifted = np.zeros((3, k, width))  # per series and position: a window to judge, shifted up, down
    # per series and timeline position c: n, Σ n·r over its current segment (r: lag-1 autocorrelation)
    n_at = np.zeros((k, width))
    nr_at = np.zeros((k, width))
    for j in range(k):
        x, p = val[j], pos[j]
        if x.size == 0:
            continue
        starts = np.zeros(x.size, dtype=int)  # segment start in force once night i is known
        prev = np.full(x.size, -1, dtype=int)  # and the one before it (-1: none)
        for cp in detect_series(x, detector=detector):
            prev[cp.alarm_index:] = starts[cp.alarm_index]
            starts[cp.alarm_index:] = cp.index
        c1 = np.r_[0.0, np.cumsum(x)]
        c2 = np.r_[0.0, np.cumsum(x * x)]
        cl = np.r_[0.0, 0.0, np.cumsum(x[1:] * x[:-1])]  # cl[i]: Σ x_u x_{u−1}, 1 ≤ u < i
        hi = np.arange(1, x.size + 1)
        lo = starts
        n = hi - lo
        mean = (c1[hi] - c1[lo]) / n
        ss = c2[hi] - c2[lo] - n * mean**2
        lag = (cl[hi] - cl[lo + 1]) - mean * ((c1[hi] - c1[lo + 1]) + (c1[hi - 1] - c1[lo])) + (n - 1) * mean**2
        ok = (n >= min_n) & (ss > 1e-12 * np.maximum(c2[hi] - c2[lo], 1e-300))
        r = np.where(ok, lag / np.where(ok, ss, 1.0), 0.0)
        # carry night i's figures forward to every position until the series' next night
        idx = np.searchsorted(p, np.arange(width), side="right") - 1
        have = idx >= 0
        n_at[j, have] = np.where(ok, n, 0)[idx[have]]
        nr_at[j, have] = (np.where(ok, n, 0) * r)[idx[have]]
        cut = hi - w  # the newest window x[cut:hi] against the segment's nights before it
        nr = cut - lo
        fine = (nr >= min_n) & (cut >= 0)
        nr_s, cut_s = np.maximum(nr, 1), np.maximum(cut, 0)
        ref_m = (c1[cut_s] - c1[lo]) / nr_s
        ref_sd = np.sqrt(np.maximum((c2[cut_s] - c2[lo]) / nr_s - ref_m**2, 0.0))
        diff = (c1[hi] - c1[cut_s]) / w - ref_m
        need = np.maximum(np.abs(ref_m) * floors[j] / 100.0, ref_sd)
        if detector.joint_hold:  # a segment too young to judge: its window against the segment before its change
            end = np.minimum(cut_s, lo)
            na = end - prev
            held = ~fine & (prev >= 0) & (cut >= 0) & (na >= min_n)
            na_s, pv = np.maximum(na, 1), np.maximum(prev, 0)
            ref_m = (c1[end] - c1[pv]) / na_s
            ref_sd = np.sqrt(np.maximum((c2[end] - c2[pv]) / na_s - ref_m**2, 0.0))
            diff = np.where(held, (c1[hi] - c1[cut_s]) / w - ref_m, diff)
            need = np.where(held, np.maximum(np.abs(ref_m) * floors[j] / 100.0, ref_sd), need)
            fine = fine | held
        for row, flag in enumerate((fine, fine & (diff >= need), fine & (-diff >= need))):
            shifted[row, j, have] = flag[idx[have]]
    contrib = n_at > 0
    tot, row = rho2_sums(pos, val, width, min_n, contrib)
    big_all, nr_all, k_all = n_at.sum(axis=0), nr_at.sum(axis=0), contrib.sum(axis=0)
    # for Detector.joint_rho: the mean ρ² over every pair, this series' included (one sibling that
    # shares its noise counts too); NaN with fewer than two series: the full margin
    shared = np.where(k_all > 1, tot / np.maximum(k_all * (k_all - 1), 1), math.nan)
    out = []
    for j in range(k):
        big_n = big_all - n_at[j]
        kk = k_all - contrib[j]
        rbar = np.divide(nr_all - nr_at[j], big_n, out=np.zeros(width), where=big_n > 0)
        phi = rbar + kk * (1 + 3 * np.maximum(rbar, 0.0)) / np.maximum(big_n, 1)
        pairs = kk * (kk - 1)
        r2 = np.divide(tot - 2 * row[:, j] * contrib[j], pairs, out=np.zeros(width), where=pairs > 0)
        n_eff = big_n / (1 + np.maximum(kk - 1, 0) * r2)
        phi = np.where(big_n > 0, np.minimum(np.maximum(phi, 0.0), 0.95), math.nan)
        p = pos[j]
        others = shifted[:, :, p].sum(axis=1) - shifted[:, j, p]
        up, down = (np.divide(others[r], others[0], out=np.zeros(p.size), where=others[0] > 0) for r in (1, 2))
        out.append((phi[p], np.where(big_n > 0, n_eff, 0.0)[p], up, down, shared[p]))
    return out


def detect(values: Sequence[float], *, floor_pct: float = 3.0, detector: Detector = DETECTOR) -> list[ChangePoint]:
    """Change points of one series (see :func:`detect_series`); the first ``warmup`` nights
    of a series set its reference and hold none."""
    return detect_series(values, floor_pct=floor_pct, detector=detector)


SERIES = ["workload_spec_digest", "hardware_key", "suite", "case", "metric"]


def change_points(history: "pd.DataFrame", *, previous: "pd.DataFrame | None" = None,
                  detector: Detector = DETECTOR, pool: bool = True) -> "pd.DataFrame":
    """Detect change points in every series of a history table; one row per change point.

    Each series is read in time order by the sequential detector (:class:`Detector`; its
    parameters and floor are in every row's ``detector``), so a longer history reports the same
    rows plus any later ones. The floor is the series' ``floor_pct`` (its newest run's
    ``comparison.deltaPct``), else 3 %. ``new`` is False for a change point already in
    ``previous`` (the fact of the last pass: same series and a break within ``MIN_SEGMENT``
    runs of it), so each change is announced once. With ``pool`` (the default) a young
    segment's φ borrows from the series' siblings: the other series of its hardware
    key and suite (other workloads, cases, metrics; :func:`sibling_pool`), on the run order
    they share; the pool in force at an alarm is in its ``detector`` (``phi_pool``, ``phi_pool_n``).
    """
    import pandas as pd

    now = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    seen = _previous_breaks(previous)
    pools = _pools(history, detector) if pool else {}
    rows = []
    for key, grp in history.groupby(SERIES, sort=True):
        grp = grp.sort_values(["created_utc", "run_id"], kind="stable").reset_index(drop=True)
        sid = hashlib.sha256("|".join(map(str, key)).encode()).hexdigest()[:16]
        floor = DEFAULT_DELTA_PCT
        if "floor_pct" in grp.columns and grp["floor_pct"].notna().any():
            floor = float(grp["floor_pct"].dropna().iloc[-1])
        cps = detect_series(grp["median"].to_numpy(), floor_pct=floor, detector=detector, phi_prior=pools.get(key))
        direction = grp["direction"].iloc[0]
        runs = grp["run_id"].tolist()
        for cp in cps:
            at = grp.iloc[cp.index]
            worse = (cp.after_mean < cp.before_mean) == (direction == "higher")
            old = any(abs(cp.index - runs.index(r)) <= MIN_SEGMENT for r in seen.get(sid, ()) if r in runs)
            rows.append({
                "series_id": sid, **dict(zip(SERIES, key)), "direction": direction,
                "change_index": cp.index, "run_id": at["run_id"], "change_utc": at["created_utc"],
                "before_mean": cp.before_mean, "after_mean": cp.after_mean, "before_n": cp.before_n,
                "after_n": cp.after_n, "magnitude_pct": cp.magnitude_pct, "p_value": cp.p_value,
                "p_adjusted": cp.p_adjusted,  # a series with no better direction (host CPU) only shifted
                "kind": ("regression" if worse else "improvement") if has_direction(direction) else "shift",
                "artifact_manifest_digest": at["artifact_manifest_digest"], "method": METHOD, "detected_utc": now,
                "ar1_phi": cp.phi, "new": not old, "alarm_index": cp.alarm_index,
                "alarm_run_id": grp.iloc[cp.alarm_index]["run_id"], "floor_pct": floor,
                "detector": detector.describe(floor, (cp.phi_pool, cp.pool_n), cp.prior_from),
            })
    return pd.DataFrame(rows, columns=FACT_COLUMNS)


def _pools(history: "pd.DataFrame", detector: Detector) -> dict[tuple, tuple[np.ndarray, ...]]:
    """Per series key: its sibling pool (:func:`sibling_pool`) over its hardware key and suite."""
    out: dict[tuple, tuple[np.ndarray, ...]] = {}
    for _hs, grp in history.groupby(["hardware_key", "suite"], sort=True):
        order = grp[["created_utc", "run_id"]].drop_duplicates().sort_values(["created_utc", "run_id"], kind="stable")
        at = {r: i for i, r in enumerate(order.itertuples(index=False, name=None))}
        keys, series, floors = [], [], []
        for key, g in grp.groupby(SERIES, sort=True):
            g = g.sort_values(["created_utc", "run_id"], kind="stable")
            keys.append(key)
            series.append(([at[r] for r in g[["created_utc", "run_id"]].itertuples(index=False, name=None)],
                           g["median"].to_numpy(dtype=float)))
            fl = g["floor_pct"].dropna() if "floor_pct" in g.columns else ()
            floors.append(float(fl.iloc[-1]) if len(fl) else DEFAULT_DELTA_PCT)  # as change_points' floor
        if len(series) > 1:
            out.update(zip(keys, sibling_pool(series, detector=detector, floors=floors)))
    return out
