"""Candidate-versus-baseline comparison: per-metric effects (:mod:`benchrun.stats.effects`), verdicts
against a no-change margin, Holm (gating, one-sided) and Benjamini–Hochberg (reported) corrections,
failed replicates gated per suite, and one confirmation round before a gating regression is declared.

Gating. Primary metrics gate; a primary is a bare metric name (every suite and case reporting
it) or qualified as ``suite/metric``, ``metric[case]`` or ``suite/metric[case]``. Each gating
test is one-sided in the regression direction, and Holm's correction runs over the gating
family (the gating metrics plus, for each gating suite with a failed replicate in either arm,
its failure count). The test is the exact permutation rank test when its smallest attainable
p-value can pass Holm's first threshold α / family with these replicate counts; when it cannot
(5 vs 5 replicates allow no p below 1/252 = 0.0040, and α/18 = 0.0028), the gate uses a
one-sided Welch t-test on the same (log) scale — which assumes roughly log-normal replicate
noise — and says so in ``gate_test`` and a note. A suspected gating regression calls one
confirmation round on fresh replicates; only what reproduces there (the same rules, with the
suspects as the family) is declared.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np
from scipy import stats

from benchrun.errors import BenchrunError
from benchrun.stats import batch, equivalence, reading
from benchrun.stats.describe import SERIES_KEYS, group_arrays
from benchrun.stats.family import Primary, benjamini_hochberg, gating_mask, holm, parse_primary  # noqa: F401 (API)
from benchrun.stats.effects import Shift, effect, hodges_lehmann, verdict, verdict_on_scale  # noqa: F401 (API)
from benchrun.stats.launches import launches_by_suite, only
from benchrun.stats.ranktest import EXACT_MAX_N, mw_null_cdf, rejects, smallest_gating_n, smallest_one_sided_p  # noqa: F401

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

VERDICTS = ("regression", "improvement", "no_change", "inconclusive")
FAILED_METRIC = "failed_replicates"

# The fresh replicates of a confirmation round: given the keys (suite, case, metric) of the
# suspected gating regressions, return (baseline_table, candidate_table[, evidence]) of new
# replicates of both arms (the launcher's job). ``evidence`` (a JSON-ready dict: the launch
# order and how it was drawn) is recorded in the comparison. Same columns as replicate_table.
ConfirmHook = Callable[[list[tuple[str, str, str]]], "tuple[Any, ...]"]


# -- the result --------------------------------------------------------------------------------


@dataclass
class Comparison:
    """The result of comparing two runs (or two replicate tables)."""

    rows: "pd.DataFrame"
    confidence: float
    suspected: list[tuple[str, str, str]] = field(default_factory=list)
    screened: list[tuple[str, str, str]] = field(default_factory=list)  # sent to the round unflagged
    confirmed: list[tuple[str, str, str]] = field(default_factory=list)
    confirmation: str = "not_needed"  # not_needed | confirmed | not_confirmed | not_run | failed
    notes: list[str] = field(default_factory=list)
    confirmation_error: str = ""  # why a confirmation round that was needed gave no answer
    confirmation_evidence: dict[str, Any] = field(default_factory=dict)  # launch order of the round
    family: int = 0  # gating tests in Holm's family
    unjudged: list[str] = field(default_factory=list)  # primaries measured in neither run: never tested
    contended_kept: list[str] = field(default_factory=list)  # gating suites compared on contended replicates

    @property
    def regression_detected(self) -> bool:
        return bool(self.confirmed)

    @property
    def gating_regression(self) -> bool:
        """A gating regression was suspected (awaiting, failing or failing to reproduce in the
        confirmation round counts as suspected only while not cleared) or confirmed."""
        return bool(self.confirmed) or (bool(self.suspected) and self.confirmation in ("not_run", "failed"))

    def condition(self) -> dict[str, str]:
        """The ``RegressionDetected`` condition (type, status, reason, message) for status.json."""
        if self.confirmed:
            names = ", ".join(_label(*k) for k in self.confirmed)
            return {"type": "RegressionDetected", "status": "True", "reason": "ConfirmedRegression",
                    "message": f"gating regression confirmed by a fresh interleaved round: {names}"}
        if self.confirmation == "failed":
            names = ", ".join(_label(*k) for k in self.suspected)
            return {"type": "RegressionDetected", "status": "Unknown", "reason": "ConfirmationFailed",
                    "message": f"gating regression suspected on {names}, but the confirmation round gave no "
                               f"answer: {self.confirmation_error}"}
        if self.confirmation == "not_run":
            names = ", ".join(_label(*k) for k in self.suspected)
            return {"type": "RegressionDetected", "status": "Unknown", "reason": "UnconfirmedRegression",
                    "message": f"gating regression awaits a confirmation round: {names}"}
        if self.confirmation == "not_confirmed":
            return {"type": "RegressionDetected", "status": "False", "reason": "NotConfirmed",
                    "message": ("a suspected gating regression did not reproduce in the confirmation round"
                                if self.suspected else "a screened gating change (unadjusted p ≤ α, beyond the "
                                "margin) did not reproduce in the confirmation round")}
        unshown = self.unshown()
        # exit 0 all the same: nothing regressed, but not everything was shown unchanged — or tested, or
        # measured on a quiet machine (a primary measured in neither run, contended replicates kept)
        said = [f"nor were {len(unshown)} shown within their margin: {'; '.join(unshown[:6])}"
                f"{' ...' if len(unshown) > 6 else ''} (more replicates decide: see each row's MDE)"] if unshown else []
        said += [f"primaries measured in neither run were not tested: {', '.join(self.unjudged)}"
                 ] if self.unjudged else []
        said += [f"gating suites compared on contended replicates kept (too few quiet ones; a change there may be "
                 f"the machine's): {'; '.join(self.contended_kept)}"] if self.contended_kept else []
        if said:
            return {"type": "RegressionDetected", "status": "False", "reason": "NoRegressionShown",
                    "message": "no gating metric was shown to regress, " + "; ".join(said)}
        return {"type": "RegressionDetected", "status": "False", "reason": "NoGatingRegression",
                "message": "no gating metric regressed: each was shown within its margin or better"}

    def unshown(self) -> list[str]:
        """Gating rows neither a regression nor shown unchanged or better
        (:func:`benchrun.stats.reading.not_shown`), as ``metric verdict``."""
        if self.rows is None or self.rows.empty or "verdict" not in self.rows.columns:
            return []
        return [f"{r['metric']} {r['verdict']}" for r in self.records() if r.get("gating") and reading.not_shown(r)]

    def records(self) -> list[dict[str, Any]]:
        """One JSON-ready object per metric (NaN becomes None)."""
        out = []
        for rec in self.rows.to_dict(orient="records"):
            out.append({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in rec.items()})
        return out


def _label(suite: str, case: str, metric: str) -> str:
    return f"{suite}/{metric}" + (f"[{case}]" if case else "")


# -- per-arm arrays ----------------------------------------------------------------------------


@dataclass
class _Arm:
    keys: "pd.DataFrame"  # suite, case, metric, unit, direction, n, median, start (into values)
    values: np.ndarray  # ok values, grouped by key in key order
    failed: dict[str, int]  # suite -> failed replicates
    launched: dict[str, int]  # suite -> replicates launched (ok or failed)


def _arm(table: "pd.DataFrame") -> _Arm:
    """One arm's ok values grouped per (suite, case, metric) without iterating groups, and its
    failed and launched replicates per suite (:func:`benchrun.stats.launches.launches_by_suite`)."""
    import pandas as pd

    status = table["status"].astype(str) if "status" in table.columns else pd.Series("ok", index=table.index)
    okmask = (status == "ok").to_numpy()
    ok = table[okmask & table["value"].notna().to_numpy()]
    failed, launched = launches_by_suite(table)
    if ok.empty:
        keys = pd.DataFrame(columns=[*SERIES_KEYS, "unit", "direction", "n", "median", "start"])
        return _Arm(keys, np.empty(0), failed, launched)
    keys, values, starts = group_arrays(ok, SERIES_KEYS)
    keys["start"] = starts
    ns = keys["n"].to_numpy()
    median = np.empty(len(keys))
    for n in np.unique(ns):  # one vectorised median per replicate count
        sel = np.nonzero(ns == n)[0]
        median[sel] = np.median(values[starts[sel][:, None] + np.arange(n)[None, :]], axis=1)
    keys["median"] = median
    keys["min"] = np.minimum.reduceat(values, starts)  # a metric never below 0: its change never below −100 %
    return _Arm(keys, values, failed, launched)


def _nonnegative(arm: _Arm, idx: np.ndarray) -> np.ndarray:
    return (idx >= 0) & (arm.keys["min"].to_numpy(dtype=float)[np.clip(idx, 0, None)] >= 0) if len(arm.keys) else idx < -1


def _matrix(arm: _Arm, idx: np.ndarray, n: int) -> np.ndarray:
    starts = arm.keys["start"].to_numpy()[idx]
    return arm.values[starts[:, None] + np.arange(n)[None, :]]


def _effects_batch(b: _Arm, c: _Arm, ib: np.ndarray, ic: np.ndarray, higher: np.ndarray, comparable: np.ndarray,
                   confidence: float) -> dict[str, np.ndarray]:
    rows = ib.size
    out: dict[str, np.ndarray] = {}
    for f, v in batch.nan_effect().items():
        out[f] = np.full(rows, v, dtype=object if isinstance(v, str) else float)
    nb = np.where(ib >= 0, b.keys["n"].to_numpy()[np.clip(ib, 0, None)] if len(b.keys) else 0, 0)
    nc = np.where(ic >= 0, c.keys["n"].to_numpy()[np.clip(ic, 0, None)] if len(c.keys) else 0, 0)
    pairs = {(int(x), int(y)) for x, y in zip(nb[comparable], nc[comparable])}
    for n_b, n_c in sorted(pairs):
        sel = np.nonzero(comparable & (nb == n_b) & (nc == n_c))[0]
        res = batch.effects(_matrix(b, ib[sel], n_b), _matrix(c, ic[sel], n_c), higher[sel], confidence)
        for f, v in res.items():
            out[f][sel] = v
    return out


def _effects_reference(b: _Arm, c: _Arm, ib: np.ndarray, ic: np.ndarray, higher: np.ndarray,
                       comparable: np.ndarray, confidence: float) -> dict[str, np.ndarray]:
    rows = ib.size
    recs = []
    for i in range(rows):
        if not comparable[i]:
            recs.append(batch.nan_effect())
            continue
        nb_i, nc_i = int(b.keys["n"].iloc[ib[i]]), int(c.keys["n"].iloc[ic[i]])
        bv = _matrix(b, ib[i:i + 1], nb_i)[0]
        cv = _matrix(c, ic[i:i + 1], nc_i)[0]
        recs.append(effect(bv, cv, "higher" if higher[i] else "lower", confidence))
    return {f: np.array([r[f] for r in recs], dtype=object if f in ("test", "scale", "ci_coverage_kind") else float)
            for f in batch.FIELDS}


# -- the comparison --------------------------------------------------------------------------


def compare_tables(
    baseline: "pd.DataFrame",
    candidate: "pd.DataFrame",
    *,
    confidence: float = 0.95,
    primary: Iterable[str] = frozenset(),
    secondary: Iterable[str] = frozenset(),
    delta_pct: Callable[[str], float] | float = 3.0,
    abs_margin: Callable[[str], float | None] | None = None,
    confirm: ConfirmHook | None = None,
    engine: str = "batch",
    tails: Any = None,
    _round: int = 0,
) -> Comparison:
    """Compare two replicate tables metric by metric and return the verdicts.

    Tables have the columns of :func:`benchrun.stats.load.replicate_table`; rows whose
    ``status`` is not ``ok`` are failed replicates (counted per suite, not values).
    ``delta_pct(name)`` is the no-change margin in percent of a log-scale metric;
    ``abs_margin(name)`` the margin, in the metric's unit, of a metric compared on the
    absolute scale (one with a value ≤ 0). ``secondary``: the spec's declared secondary outcomes
    (:func:`benchrun.stats.reading.roles`). ``tails`` (a :class:`benchrun.stats.tails.RequestTails`)
    replaces the p99 rows' evidence by the requests' before the gate. ``engine="reference"`` computes each metric with
    :func:`benchrun.stats.effects.effect` one by one (the tests check the batch against it).
    """
    import pandas as pd

    primary = tuple(primary)
    alpha = 1.0 - confidence
    delta_of = delta_pct if callable(delta_pct) else (lambda _m, d=float(delta_pct): d)
    margin_of = abs_margin or (lambda _m: None)
    b, c = _arm(baseline), _arm(candidate)
    kb = b.keys[[*SERIES_KEYS, "unit", "direction"]].assign(ib=np.arange(len(b.keys)))
    kc = c.keys[[*SERIES_KEYS, "unit", "direction"]].assign(ic=np.arange(len(c.keys)))
    keys = kb.merge(kc, on=SERIES_KEYS, how="outer", suffixes=("", "_c"), sort=True)
    keys["unit"] = keys["unit"].fillna(keys["unit_c"])
    keys["direction"] = keys["direction"].fillna(keys["direction_c"])
    ib = keys["ib"].fillna(-1).to_numpy(dtype=np.int64)
    ic = keys["ic"].fillna(-1).to_numpy(dtype=np.int64)
    rows = len(keys)
    nb = np.where(ib >= 0, b.keys["n"].to_numpy()[np.clip(ib, 0, None)] if len(b.keys) else 0, 0).astype(int)
    nc = np.where(ic >= 0, c.keys["n"].to_numpy()[np.clip(ic, 0, None)] if len(c.keys) else 0, 0).astype(int)
    comparable = (nb >= 2) & (nc >= 2)
    higher = (keys["direction"] == "higher").to_numpy()
    run = _effects_batch if engine == "batch" else _effects_reference
    eff = run(b, c, ib, ic, higher, comparable, confidence)
    eff["eq_low"], eff["eq_high"], eff["eq_coverage"] = equivalence.interval(
        lambda sel, n_b, n_c: (_matrix(b, ib[sel], n_b), _matrix(c, ic[sel], n_c)), nb, nc, higher, comparable,
        confidence)
    suites = keys["suite"].astype(str).to_numpy()
    names = keys["metric"].astype(str).to_numpy()
    cases = keys["case"].astype(str).to_numpy()
    df = pd.DataFrame({
        "metric": [_label(s, k, m) for s, k, m in zip(suites, cases, names)],
        "suite": suites, "case": cases, "name": names,
        "unit": keys["unit"].astype(str).to_numpy(), "direction": keys["direction"].astype(str).to_numpy(),
        "gating": gating_mask(zip(suites, cases, names), primary) if rows else np.zeros(0, bool),
        "delta_pct": np.array([float(delta_of(m)) for m in names]),
        "n_baseline": nb, "n_candidate": nc,
        "failed_baseline": np.array([b.failed.get(s, 0) for s in suites], dtype=int),
        "failed_candidate": np.array([c.failed.get(s, 0) for s in suites], dtype=int),
        "baseline_median": np.where(ib >= 0, b.keys["median"].to_numpy(dtype=float)[np.clip(ib, 0, None)]
                                    if len(b.keys) else np.nan, np.nan),
        "candidate_median": np.where(ic >= 0, c.keys["median"].to_numpy(dtype=float)[np.clip(ic, 0, None)]
                                     if len(c.keys) else np.nan, np.nan),
        "nonnegative": _nonnegative(b, ib) & _nonnegative(c, ic),
        **eff,
    })
    notes = np.where(ib < 0, "absent in the baseline", np.where(ic < 0, "absent in the candidate",
                     np.where(~comparable, "fewer than 2 replicates in an arm", ""))).astype(object)
    df["note"] = notes
    if b.failed or c.failed:
        gating_suites = set(df.loc[df["gating"], "suite"]) if rows else set()
        # a suite a primary names gates its failures even when no value of it is left to compare:
        # failed in every candidate replicate, unavailable in the baseline, it gated nothing (exit 0)
        gating_suites |= {sel.suite for sel in map(parse_primary, primary) if sel.suite is not None}
        df = pd.concat([df, _failure_rows(b, c, primary, gating_suites)], ignore_index=True)
    result = Comparison(rows=df, confidence=confidence)
    if df.empty:
        result.notes.append("no metrics to compare")
        return result
    df["role"] = reading.roles(df["gating"].to_numpy(bool), df["case"].to_numpy(), df["name"].to_numpy(),
                               df["suite"].to_numpy(), secondary)
    _margins(df, margin_of, result)
    if tails is not None:  # p99 rows judged on pooled requests (benchrun.stats.tails.RequestTails)
        tails.apply(df)
    _gate_and_verdicts(df, alpha, result)
    if tails is not None:
        tails.label(df)
    from benchrun.stats.spread import apply_spread, flag_spread  # "noisier" is not "slower" (benchrun.stats.spread)

    apply_spread(df, lambda i: (_matrix(b, ib[i:i + 1], nb[i])[0], _matrix(c, ic[i:i + 1], nc[i])[0])
                 if i < rows and comparable[i] else None, alpha)
    flag_spread(df, lambda sel, n_b, n_c: (_matrix(b, ib[sel], n_b), _matrix(c, ic[sel], n_c)), nb, nc, comparable,
                alpha)
    _reading(df, alpha, result)
    df["confirmation"] = ""
    suspected = [(r.suite, r.case, r.name) for r in df.itertuples() if r.gating and r.verdict == "regression"]
    result.suspected = suspected
    if _round == 0 and confirm is not None:  # unflagged but screened in: the round may confirm them
        from benchrun.stats.paired import screened

        result.screened = [(r.suite, r.case, r.name) for r in df[screened(df, alpha)].itertuples()]
    if not suspected and not result.screened:
        return result
    if _round > 0 or confirm is None:
        result.confirmation = "not_run"
        df.loc[df["gating"] & (df["verdict"] == "regression"), "confirmation"] = "not_run"
        return result
    return _confirm(result, suspected + result.screened, confirm, confidence=confidence, primary=primary,
                    delta_of=delta_of, abs_margin=abs_margin, engine=engine)


def _failure_rows(b: _Arm, c: _Arm, primary: tuple[str, ...], gating_suites: set[str]) -> "pd.DataFrame":
    """One row per suite with a failed replicate in either arm: Fisher's exact test, one-sided
    (the candidate fails more often) for the gate, two-sided reported. It gates when the suite
    has a gating metric or ``failed_replicates`` is itself a primary."""
    import pandas as pd

    sels = [parse_primary(p) for p in primary]
    out = []
    for suite in sorted(set(b.failed) | set(c.failed)):
        fb, fc = b.failed.get(suite, 0), c.failed.get(suite, 0)
        tb, tc = b.launched.get(suite, fb), c.launched.get(suite, fc)
        table = [[fc, tc - fc], [fb, tb - fb]]
        p_reg = float(stats.fisher_exact(table, alternative="greater").pvalue)
        p_imp = float(stats.fisher_exact(table, alternative="less").pvalue)
        p_two = float(stats.fisher_exact(table).pvalue)
        rate_b, rate_c = fb / tb if tb else math.nan, fc / tc if tc else math.nan
        gating = suite in gating_suites or any(s.matches(suite, "", FAILED_METRIC) for s in sels)
        shift = -(rate_c - rate_b)  # higher is better: fewer failures
        out.append({
            "metric": _label(suite, "", FAILED_METRIC), "suite": suite, "case": "", "name": FAILED_METRIC,
            "unit": "fraction of launches", "direction": "lower", "gating": gating, "delta_pct": math.nan,
            "n_baseline": tb, "n_candidate": tc, "failed_baseline": fb, "failed_candidate": fc,
            "baseline_median": rate_b, "candidate_median": rate_c,
            **batch.nan_effect(),
            "shift": shift, "shift_low": shift, "shift_high": shift, "difference": rate_c - rate_b,
            "diff_ci_low": rate_c - rate_b, "diff_ci_high": rate_c - rate_b,
            "p_value": p_two, "p_regression": p_reg, "p_improvement": p_imp, "test": "fisher_exact",
            "scale": "absolute", "note": f"failed replicates: {fb}/{tb} baseline, {fc}/{tc} candidate "
                                         "(their values are not in the other rows of this suite)",
        })
    return pd.DataFrame(out)


def _margins(df: "pd.DataFrame", margin_of: Callable[[str], float | None], result: Comparison) -> None:
    """The margin on the analysis scale: log(1 + δ) for log-scale metrics, the spec's absolute
    margin (default 0: significance alone decides, and no_change cannot be shown) otherwise."""
    log_scale = (df["scale"] == "log").to_numpy()
    margin = np.where(log_scale, np.log1p(df["delta_pct"].to_numpy(dtype=float) / 100.0), np.nan)
    missing = []
    for i in np.nonzero(~log_scale)[0]:
        if df["test"].iat[i] == "none":
            continue
        if df["name"].iat[i] == FAILED_METRIC:
            margin[i] = 0.0
            continue
        m = margin_of(df["name"].iat[i])
        margin[i] = float(m) if m is not None else 0.0
        if m is None and df["role"].iat[i] != "context":  # a context row gets no verdict: no margin to set
            missing.append(df["metric"].iat[i])
    df["margin"] = margin
    if missing:
        result.notes.append(
            f"{len(missing)} metric(s) with a value ≤ 0 are compared by absolute difference without a margin "
            f"({', '.join(missing[:5])}{'…' if len(missing) > 5 else ''}): significance alone decides; set "
            "comparison.absoluteMarginByMetric to allow a no_change verdict")


def gate_tests(n_baseline: np.ndarray, n_candidate: np.ndarray, family: int, alpha: float) -> np.ndarray:
    """Per gating row: ``exact_rank`` when 1/C(n+m, n) can pass α / family, else ``welch_t``."""
    reach = np.array([bool(rejects(smallest_one_sided_p(int(x), int(y)), alpha / max(family, 1)))
                      if x >= 1 and y >= 1 else False for x, y in zip(n_baseline, n_candidate)], dtype=bool)
    return np.where(reach, "exact_rank", "welch_t")


@dataclass
class Decision:
    """What the gate decides for a set of rows (arrays aligned with the rows)."""

    gate_test: np.ndarray
    p_gate: np.ndarray
    p_adjusted: np.ndarray
    p_adjusted_improvement: np.ndarray
    verdict: list[str]
    family: int
    welch_fallback: bool
    p_gate_improvement: np.ndarray | None = None  # the improvement-side p Holm adjusted (rank or Welch, as p_gate)
    too_few: np.ndarray | None = None  # interval inside ±margin, but covering less than 1 − 2α: not "no change"


def decide(eff: dict[str, np.ndarray], gating: np.ndarray, n_baseline: np.ndarray, n_candidate: np.ndarray,
           margin: np.ndarray, alpha: float, fisher: np.ndarray | None = None,
           context: np.ndarray | None = None) -> Decision:
    """Gate tests, corrections and verdicts of rows whose effects are ``eff`` (the fields of
    :func:`benchrun.stats.effects.effect`): gating rows get their one-sided gate p-value
    (exact rank, or Welch t where the rank test cannot reach α / family; Fisher for failure
    counts) and Holm over the family; the other outcomes Benjamini–Hochberg on the two-sided
    p; ``context`` rows (telemetry, utilization) no correction and no verdict ("")."""
    rows = len(gating)
    gating = np.asarray(gating, dtype=bool)
    context = np.zeros(rows, dtype=bool) if context is None else np.asarray(context, dtype=bool) & ~gating
    fisher = np.zeros(rows, dtype=bool) if fisher is None else np.asarray(fisher, dtype=bool)
    p_reg = np.asarray(eff["p_regression"], dtype=float)
    p_imp = np.asarray(eff["p_improvement"], dtype=float)
    family_rows = gating & ~np.isnan(p_reg)
    family = int(family_rows.sum())
    gate_test = np.full(rows, "", dtype=object)
    p_gate = np.full(rows, np.nan)
    p_gate_imp = np.full(rows, np.nan)
    use_t = np.zeros(rows, dtype=bool)
    if family:
        choice = gate_tests(n_baseline, n_candidate, family, alpha)
        t_reg = np.asarray(eff["t_regression"], dtype=float)
        t_imp = np.asarray(eff["t_improvement"], dtype=float)
        use_t = family_rows & ~fisher & (choice == "welch_t") & ~np.isnan(t_reg)
        rank = family_rows & ~use_t
        gate_test[rank] = np.where(fisher[rank], "fisher_exact", "exact_rank")
        gate_test[use_t] = "welch_t"
        p_gate[rank], p_gate_imp[rank] = p_reg[rank], p_imp[rank]
        p_gate[use_t], p_gate_imp[use_t] = t_reg[use_t], t_imp[use_t]
    p_adj = np.full(rows, np.nan)
    p_adj_imp = np.full(rows, np.nan)
    p_adj[gating] = holm(p_gate[gating])
    p_adj_imp[gating] = holm(p_gate_imp[gating])
    secondary = ~gating & ~context
    bh = benjamini_hochberg(np.asarray(eff["p_value"], dtype=float)[secondary])
    p_adj[secondary] = bh
    p_adj_imp[secondary] = bh
    shift, lo, hi = (np.asarray(eff[k], dtype=float) for k in ("shift", "shift_low", "shift_high"))
    verdicts = ["" if ctx else verdict_on_scale(s, a, b, pr, pi, alpha, mg)
                for s, a, b, pr, pi, mg, ctx in zip(shift, lo, hi, p_adj, p_adj_imp, np.asarray(margin, dtype=float),
                                                    context)]
    too_few = np.zeros(rows, dtype=bool)
    if "eq_low" in eff:  # "no change": the 1 − 2α interval inside ±margin, covering 1 − 2α (TOST at α)
        shown, short = equivalence.no_change(eff["eq_low"], eff["eq_high"], eff.get("eq_coverage"), margin, alpha)
        # the 1 − α interval inside the margin implies the 1 − 2α one is: the rule below decides alone
        undecided = np.array([v in ("inconclusive", "no_change") for v in verdicts], dtype=bool)
        verdicts = ["inconclusive" if v == "no_change" else v for v in verdicts]
        verdicts = ["no_change" if s else v for v, s in zip(verdicts, shown & undecided)]
        too_few = short & undecided
    return Decision(gate_test, p_gate, p_adj, p_adj_imp, verdicts, family, bool(use_t.any()), p_gate_imp, too_few)


def _gate_and_verdicts(df: "pd.DataFrame", alpha: float, result: Comparison) -> None:
    gating = df["gating"].to_numpy(bool)
    fisher = (df["test"] == "fisher_exact").to_numpy()
    eff = {k: df[k].to_numpy() for k in ("p_regression", "p_improvement", "t_regression", "t_improvement",
                                         "p_value", "shift", "shift_low", "shift_high", "eq_low", "eq_high",
                                         "eq_coverage")
           if k in df.columns}
    context = (df["role"] == "context").to_numpy() if "role" in df.columns else None
    d = decide(eff, gating, df["n_baseline"].to_numpy(), df["n_candidate"].to_numpy(), df["margin"].to_numpy(),
               alpha, fisher, context)
    if d.welch_fallback:
        welch = d.gate_test == "welch_t"
        failures = int((gating & fisher & ~np.isnan(d.p_gate)).sum())
        nb, nc = int(df.loc[welch, "n_baseline"].min()), int(df.loc[welch, "n_candidate"].min())
        need = smallest_gating_n(d.family, alpha)
        result.notes.append(
            f"{d.family} gating tests with {nb} vs {nc} replicates: the exact rank test's smallest one-sided p "
            f"({smallest_one_sided_p(nb, nc):.4f}) cannot pass Holm's first threshold ({alpha / d.family:.4f}), "
            "so those metrics gate on a one-sided Welch t-test of log values (assumes roughly log-normal noise)"
            + (f"; with {need} replicates per arm the distribution-free test gates" if need else "")
            + "; qualified primaries (suite/metric[case]) shrink the family"
            + (f"; the family includes {failures} failed-replicate row(s) (a gating suite with a failed "
               f"launch adds one), without which the exact test "
               + ("would gate" if rejects(smallest_one_sided_p(nb, nc), alpha / max(d.family - failures, 1))
                  else "still could not gate")
               if failures else ""))
    fam_fisher = gating & fisher & ~np.isnan(d.p_gate)
    if fam_fisher.any():
        fb = df.loc[fam_fisher]
        smallest = [smallest_one_sided_p(int(x), int(y)) for x, y in zip(fb["n_baseline"], fb["n_candidate"])]
        if not rejects(min(smallest), alpha / d.family):
            result.notes.append(f"failed-replicate counts gate with Fisher's exact test; with these replicate "
                                f"counts its smallest p cannot pass Holm's first threshold ({alpha / d.family:.4f})")
    df["gate_test"] = d.gate_test
    df["p_gate"] = d.p_gate
    df["p_gate_improvement"] = d.p_gate_improvement
    df["p_adjusted"] = d.p_adjusted
    df["p_adjusted_improvement"] = d.p_adjusted_improvement
    df["correction"] = np.where(gating, "holm", np.where(context, "none", "bh")) if context is not None \
        else np.where(gating, "holm", "bh")
    df["verdict"] = d.verdict
    for i in np.nonzero(d.too_few)[0]:
        why = equivalence.too_few_note(df["n_baseline"].iat[i], df["n_candidate"].iat[i], df["eq_coverage"].iat[i], alpha)
        df.iat[i, df.columns.get_loc("note")] = "; ".join(x for x in (str(df["note"].iat[i] or ""), why) if x)
    result.family = d.family


def _reading(df: "pd.DataFrame", alpha: float, result: "Comparison") -> None:
    """The reader's columns (:mod:`benchrun.stats.reading`): the change as measured with
    better/worse, the minimum detectable effect and the replicates a large unclear change needs."""
    for k, v in reading.measured_change(df).items():
        df[k] = v
    for k, v in reading.detectable(df, alpha, result.family, df["gate_test"].to_numpy()).items():
        df[k] = v
    ctx = int((df["role"] == "context").sum())
    if ctx:
        result.notes.append(f"{ctx} context row(s) (telemetry, utilization, environment) are shown without a verdict "
                            "and are in no multiple-testing family")


def _confirm(result: Comparison, suspected: list[tuple[str, str, str]], confirm: ConfirmHook, *, confidence: float,
             primary: tuple[str, ...], delta_of: Callable[[str], float],
             abs_margin: Callable[[str], float | None] | None, engine: str) -> Comparison:
    df = result.rows
    log.info("gating regression suspected on %d metric(s) (%d screened in); running one confirmation round",
             len(result.suspected), len(result.screened))
    try:
        answer = confirm(list(suspected))
    except BenchrunError as exc:  # e.g. a run whose pinned spec is gone: keep the verdicts, say why
        log.warning("confirmation round could not run: %s", exc)
        return _unanswered(result, suspected, str(exc))
    fresh_b, fresh_c = answer[0], answer[1]
    if len(answer) > 2 and isinstance(answer[2], dict):
        result.confirmation_evidence = answer[2]
    keyset = set(suspected)
    fail_suites = {s for s, _c, m in suspected if m == FAILED_METRIC}
    sub_b, sub_c = only(fresh_b, keyset, fail_suites), only(fresh_c, keyset, fail_suites)
    # the pairs see every suspect suite's failed launches: survivors must not clear a suite that crashed
    pair_b, pair_c = (only(t, keyset, {s for s, _c, _m in suspected}) for t in (fresh_b, fresh_c))
    # A value metric without 2 fresh ok pairs (matched by replicate) was not tested again: neither
    # confirmed nor cleared.
    from benchrun.stats.paired import paired_confirmation, pairs_of

    untested = [k for k in suspected if k[2] != FAILED_METRIC and pairs_of(sub_b, sub_c, k)[0].size < 2]
    # a suspected failure count gates again in the round (its suite's metrics may not be suspects)
    primary = (*primary, *(f"{suite}/{FAILED_METRIC}" for suite in sorted(fail_suites)))
    again = compare_tables(sub_b, sub_c, confidence=confidence, primary=primary, delta_pct=delta_of,
                           abs_margin=abs_margin, engine=engine, _round=1)
    confirmed_keys = {
        (r.suite, r.case, r.name) for r in again.rows.itertuples() if r.verdict == "regression" and r.gating
    } if not again.rows.empty else set()
    # value metrics: the round's pairs decide, with the first round's p, by benchrun.stats.paired's
    # pre-stated rule (extending the round while unclear); failure counts keep the round's own test
    by_pairs, unjudged = paired_confirmation(
        result, [k for k in suspected if k[2] != FAILED_METRIC and k not in untested], pair_b, pair_c, confirm,
        alpha=1.0 - confidence)
    confirmed_keys = {k for k in confirmed_keys if k[2] == FAILED_METRIC} | by_pairs
    untested += [k for k in suspected if k in unjudged]
    result.confirmed = [k for k in suspected if k in confirmed_keys]
    for k in suspected:
        state = "confirmed" if k in confirmed_keys else "failed" if k in untested else "not_confirmed"
        df.loc[_mask(df, k), "confirmation"] = state
        if state == "confirmed" and k in result.screened:  # the round's evidence decides: a regression
            df.loc[_mask(df, k), "verdict"] = "regression"
    if not result.confirmed and untested:
        short = "fewer than 2 ok fresh replicates of both arms, matched by replicate (see the round's logs)"
        return _unanswered(result, untested, "; ".join(f"{'/'.join(k)}: {unjudged.get(k, short)}" for k in untested))
    result.confirmation = "confirmed" if result.confirmed else "not_confirmed"
    return result


def _mask(df: "pd.DataFrame", key: tuple[str, str, str]) -> "pd.Series":
    return (df["suite"] == key[0]) & (df["case"] == key[1]) & (df["name"] == key[2])


def _unanswered(result: Comparison, keys: list[tuple[str, str, str]], why: str) -> Comparison:
    """A confirmation round that was needed but gave no answer: RegressionDetected=Unknown, with why."""
    result.confirmation = "failed" if set(keys) & set(result.suspected) else result.confirmation
    result.confirmation_error = why
    result.notes.append(f"confirmation round gave no answer: {why}")
    for k in keys:
        result.rows.loc[_mask(result.rows, k), "confirmation"] = "failed"
    return result
