"""What a comparison row says to a reader: its role, its change as measured with better/worse, and what its n can show.

* **Role.** ``primary`` (gating: the spec's primaries, Holm over their family), ``secondary``
  (other outcomes: Benjamini–Hochberg over their own family), ``context`` (telemetry,
  utilization, environment: shown, never given a verdict, never in a family).
* **One sign convention.** ``change_pct`` is the candidate against the baseline as measured
  (+x % when the value went up), with its interval; ``better_worse`` says whether that is
  better or worse by the metric's direction. Every surface (CLI, JSON, report) shows both.
* **What n can show.** ``mde_pct`` is the smallest change this n detects with 80 % power at
  the row's family-corrected α (Holm's first threshold α/F one-sided for gating rows,
  α/m two-sided for secondary ones; the standard error is read off the row's own interval),
  ``inf`` when the exact rank test cannot reach that α at all; ``replicates_needed`` is the
  smallest n per arm that would show the observed change, and ``advice`` says so when the
  change is beyond δ but not significant.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Iterable

import numpy as np
from scipy import stats

from benchrun.console import number
from benchrun.stats.directions import DIRECTIONS, NO_DIRECTION, has_direction, read_direction
from benchrun.stats.family import Primary, parse_primary
from benchrun.stats.ranktest import rejects, smallest_one_sided_p

if TYPE_CHECKING:
    import pandas as pd

ROLES = ("primary", "secondary", "context")
CONTEXT_CASE = "telemetry"  # benchrun.telemetry.summary writes its rows with this case
_CONTEXT_NAME = re.compile(
    r"(^|_)(cpu_utilization|gpu_utilization|utilization|background_cpu|suite_cpu|memory_used|gpu_memory_used|"
    r"gpu_throttled|temperature|power_draw|loadavg|load_avg)(_|$)"
)
POWER = 0.8
MAX_PLANNED_N = 200


# benchrun.telemetry.summary's per-replicate statistics of a sampled quantity (its rows are
# named <quantity>_mean, _p95, _peak): a declared quantity covers them
TELEMETRY_SUMMARIES = ("_mean", "_p95", "_peak")


def is_context(case: str, name: str) -> bool:
    """Telemetry, utilization and environment rows: context for the outcomes, not outcomes."""
    return case == CONTEXT_CASE or bool(_CONTEXT_NAME.search(name))


def declared(selectors: Iterable[Primary], suite: str, case: str, name: str) -> bool:
    """Whether the spec names this row (``metrics.<family>.secondary``, the primaries' selector
    syntax): an exact match, or a telemetry summary of a declared sampled quantity (a declared
    ``gpu_utilization_pct`` covers the telemetry rows ``gpu_utilization_pct_mean`` and ``_p95``)."""
    for sel in selectors:
        if sel.matches(suite, case, name):
            return True
        if (case == CONTEXT_CASE and sel.case is None and sel.suite in (None, suite)
                and any(name == sel.metric + s for s in TELEMETRY_SUMMARIES)):
            return True
    return False


def roles(gating: np.ndarray, cases: np.ndarray, names: np.ndarray, suites: np.ndarray | None = None,
          secondary: Iterable[str] = ()) -> np.ndarray:
    """``primary`` for gating rows (the spec's primaries); ``secondary`` for the spec's declared
    secondaries (``metrics.<family>.secondary``) even when they are telemetry or utilization;
    ``context`` for the other telemetry/utilization/environment rows; else ``secondary``."""
    sels = [parse_primary(s, field="secondary") for s in secondary]
    suites = np.full(len(names), "", dtype=object) if suites is None else suites
    ctx = np.array([is_context(str(c), str(n)) and not declared(sels, str(s), str(c), str(n))
                    for s, c, n in zip(suites, cases, names)], dtype=bool)
    return np.where(np.asarray(gating, bool), "primary", np.where(ctx, "context", "secondary")).astype(object)


NEAR_ZERO_SHARE = 0.01  # a baseline median below 1 % of the difference interval's half-width has no % change


def measured_change(df: "pd.DataFrame") -> dict[str, np.ndarray]:
    """The change as measured (candidate vs baseline, + = went up) in percent with its interval,
    and better/worse by direction, from the oriented effect columns.

    On the absolute scale (a value ≤ 0 in an arm) the change is the difference over the
    baseline median: none (NaN) when that median is 0 or below ``NEAR_ZERO_SHARE`` of the
    difference interval's half-width (the percent interval would be wider than ±10,000 %: a
    baseline of 2.6e-10 against 0 read [−2.4e12, +1.3e12] %), and, for a metric with no value
    below 0 in either arm (``nonnegative``), never below −100 % (a CPU share of 20 against
    1.6e-10 read an interval from −229 %)."""
    higher = (df["direction"] == "higher").to_numpy()
    log = (df["scale"] == "log").to_numpy()
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio, lo, hi = (df[k].to_numpy(dtype=float) for k in ("ratio", "ci_low", "ci_high"))
        # log scale: ratio is exp(shift) on the higher-is-better scale; lower-is-better inverts it
        m_ratio = np.where(higher, ratio, 1.0 / ratio)
        m_lo = np.where(higher, lo, 1.0 / hi)
        m_hi = np.where(higher, hi, 1.0 / lo)
        ref = np.abs(df["baseline_median"].to_numpy(dtype=float))
        diff = df["difference"].to_numpy(dtype=float)
        dlo, dhi = df["diff_ci_low"].to_numpy(dtype=float), df["diff_ci_high"].to_numpy(dtype=float)
        rel_ok = ~log & (ref > 0) & ~(ref < NEAR_ZERO_SHARE * np.abs(dhi - dlo) / 2)
        floor = np.where(df["nonnegative"].to_numpy(dtype=bool) if "nonnegative" in df else False, -100.0, -np.inf)
        change = np.where(log, (m_ratio - 1) * 100, np.where(rel_ok, np.maximum(diff / ref * 100, floor), np.nan))
        c_lo = np.where(log, (m_lo - 1) * 100, np.where(rel_ok, np.maximum(dlo / ref * 100, floor), np.nan))
        c_hi = np.where(log, (m_hi - 1) * 100, np.where(rel_ok, np.maximum(dhi / ref * 100, floor), np.nan))
    shift = df["shift"].to_numpy(dtype=float)
    bw = np.where(np.isnan(shift), "", np.where(shift > 0, "better", np.where(shift < 0, "worse", "same")))
    # a row with no direction (host CPU utilization, benchrun.stats.directions) is neither better nor worse
    bw = np.where(df["direction"].isin(DIRECTIONS).to_numpy(), bw, "")
    return {"change_pct": change, "change_low_pct": c_lo, "change_high_pct": c_hi, "better_worse": bw.astype(object)}


def _exact_floor(n_b: int, n_c: int, two_sided: bool) -> float:
    p = smallest_one_sided_p(n_b, n_c)
    return min(1.0, 2 * p) if two_sided else p


def _floor_n(alpha_tail: float, two_sided: bool) -> int | None:
    for n in range(2, MAX_PLANNED_N + 1):
        if rejects(_exact_floor(n, n, two_sided), alpha_tail * (2 if two_sided else 1)):
            return n
    return None


def _pct(shift: float, log: bool) -> float:
    return (math.exp(shift) - 1) * 100 if log else math.nan


@lru_cache(maxsize=256)
def _q(tail: float, dof: int) -> float:
    """t quantiles for a one-sided test at ``tail`` with 80 % power."""
    return float(stats.t.ppf(1 - tail, dof) + stats.t.ppf(POWER, dof))


@lru_cache(maxsize=64)
def _plan(tail: float, two_sided: bool, exact: bool) -> tuple[np.ndarray, np.ndarray]:
    """(n = 2..MAX, q(n) · sqrt(2/n)) for planning, with n below the exact floor masked (inf)."""
    ns = np.arange(2, MAX_PLANNED_N + 1)
    q = stats.t.ppf(1 - tail, 2 * ns - 2) + stats.t.ppf(POWER, 2 * ns - 2)
    scale = q * np.sqrt(2.0 / ns)
    if exact:
        floor_n = _floor_n(tail, two_sided)
        scale = np.where(ns >= (floor_n or MAX_PLANNED_N + 1), scale, np.inf)
    return ns, scale


def detectable(df: "pd.DataFrame", alpha: float, family: int, gate_test: np.ndarray) -> dict[str, np.ndarray]:
    """Per row: minimum detectable effect (analysis scale and %), replicates needed to show the
    observed change, and the advice for a large change that is not significant."""
    rows = len(df)
    role = df["role"].to_numpy()
    n_sec = int(((role == "secondary") & df["p_value"].notna().to_numpy()).sum())
    mde = np.full(rows, np.nan)
    mde_pct = np.full(rows, np.nan)
    need = np.full(rows, -1, dtype=int)
    advice = np.full(rows, "", dtype=object)
    s, lo, hi, cov = (df[k].to_numpy(dtype=float) for k in ("shift", "shift_low", "shift_high", "ci_coverage"))
    nb, nc = df["n_baseline"].to_numpy(dtype=int), df["n_candidate"].to_numpy(dtype=int)
    scale, margin, verdict = df["scale"].to_numpy(), df["margin"].to_numpy(dtype=float), df["verdict"].to_numpy()
    names = df["name"].to_numpy()
    pct = df["change_pct"].to_numpy(dtype=float) if "change_pct" in df else np.full(rows, np.nan)
    delta = df["delta_pct"].to_numpy(dtype=float) if "delta_pct" in df else np.full(rows, np.nan)
    c = np.where(np.isnan(cov), 0.95, np.clip(cov, 0.5, 0.9999))
    z_cov = stats.norm.ppf(0.5 + c / 2)  # the row's own interval gives its standard error
    with np.errstate(invalid="ignore", divide="ignore"):
        se_all = (hi - lo) / (2 * z_cov)
    for i in range(rows):
        if role[i] == "context" or names[i] == "failed_replicates":
            continue
        if any(math.isnan(v) for v in (s[i], lo[i], hi[i])) or nb[i] < 2 or nc[i] < 2:
            continue
        gating = role[i] == "primary"
        tail = alpha / max(family, 1) if gating else alpha / (2 * max(n_sec, 1))
        two_sided = not gating
        exact = not gating or str(gate_test[i]) != "welch_t"
        se = float(se_all[i])
        log = scale[i] == "log"
        reachable = not exact or bool(rejects(_exact_floor(int(nb[i]), int(nc[i]), two_sided), tail * (2 if two_sided else 1)))
        mde[i] = _q(tail, int(nb[i] + nc[i] - 2)) * se if reachable else math.inf
        mde_pct[i] = _pct(mde[i], log) if reachable else math.inf
        effect = abs(s[i])
        if effect <= 0 or math.isnan(se):
            continue
        ns, sc = _plan(tail, two_sided, exact)
        base = 1 / nb[i] + 1 / nc[i]
        ok = np.nonzero(sc * se / math.sqrt(base) <= effect)[0]
        if ok.size:
            need[i] = int(ns[ok[0]])
        mg = margin[i] if not math.isnan(margin[i]) else 0.0
        if scale[i] != "log" and mg <= 0:  # no absolute margin set: "large" is beyond δ % as measured
            large = bool(abs(pct[i]) > delta[i]) if math.isfinite(pct[i]) and math.isfinite(delta[i]) else False
        else:
            large = effect > mg
        if verdict[i] in ("inconclusive", "spread changed") and large:
            n_now = int(min(nb[i], nc[i]))
            advice[i] = (f"large change, not significant at n = {n_now}: rerun with ≥ {need[i]} replicates"
                         if need[i] > 0 else
                         f"large change, not significant at n = {n_now}: more than {MAX_PLANNED_N} replicates "
                         "would be needed")
    return {"mde": mde, "mde_pct": mde_pct, "replicates_needed": need, "advice": advice}


def change_of(rec: dict) -> tuple[float | None, str]:
    """(change as measured in %, better/worse) of a comparison record; older records without
    ``change_pct`` are read from their higher-is-better ratio and direction. A record that has the
    field empty is one whose comparison withheld the percentage (a baseline median near zero, judged
    on the absolute scale, where the "ratio" is no ratio): no change in % (before, 0.001 → 5 read
    +499900 %)."""
    pct, bw = rec.get("change_pct"), rec.get("better_worse") or ""
    if "change_pct" in rec and (pct is None or (isinstance(pct, float) and math.isnan(pct))):
        return None, ""
    if pct is None:
        ratio = rec.get("ratio")
        if ratio is None or (isinstance(ratio, float) and math.isnan(ratio)) or ratio <= 0:
            return None, ""
        # as the comparison oriented it (a record with no direction at all: higher, as it was written then)
        measured = ratio if rec.get("direction", "higher") == "higher" else 1.0 / ratio
        pct = (measured - 1.0) * 100.0
        bw = ("better" if ratio > 1 else "worse" if ratio < 1 else "same") if has_direction(rec.get("direction")) else ""
    return float(pct), bw


def change_interval_of(rec: dict) -> tuple[float | None, float | None]:
    """(low, high) of the change as measured in %: ``change_low_pct`` / ``change_high_pct``, or, on
    an older record, from its interval on the higher-is-better ratio scale and its direction."""
    lo, hi = rec.get("change_low_pct"), rec.get("change_high_pct")
    if "change_low_pct" in rec or "change_high_pct" in rec:  # withheld where empty (as :func:`change_of`)
        return (None if lo is None or (isinstance(lo, float) and math.isnan(lo)) else lo,
                None if hi is None or (isinstance(hi, float) and math.isnan(hi)) else hi)
    if rec.get("ci_low") is not None and rec.get("ci_high") is not None:
        a, b = float(rec["ci_low"]), float(rec["ci_high"])
        lo, hi = ((a - 1) * 100, (b - 1) * 100) if rec.get("direction", "higher") == "higher" else \
            ((1 / b - 1) * 100 if b > 0 else math.nan, (1 / a - 1) * 100 if a > 0 else math.inf)
    return lo, hi


def format_change(rec: dict) -> str:
    """``+113.7 % (worse)``: the one sign convention of every surface."""
    pct, bw = change_of(rec)
    if pct is None:
        return ""
    return f"{pct:+.1f} %" + (f" ({bw})" if bw else "")


# A request percentile judged on pooled requests (benchrun.stats.tails): its shift is the ratio of
# the two arms' pooled-request p99s, not a Hodges–Lehmann estimate over replicates; those p99s are
# in their own columns, and baseline_median / candidate_median stay the replicate medians.
POOLED_METHOD = "pooled requests, cluster bootstrap over replicates"
POOLED_COLUMNS = ("p99_pooled_baseline", "p99_pooled_candidate")
POOLED_MARK = "§"


def pooled_shift(rec: dict) -> bool:
    """Whether this row's change is the ratio of the arms' pooled-request p99s (a row the
    comparison judged on requests and could gate), not the Hodges–Lehmann shift over replicates."""
    return rec.get("tail_method") == POOLED_METHOD and change_of(rec)[0] is not None


def pooled_note(rec: dict) -> str:
    """``§ serving_workflow/p99_latency_ms[c=4]: change = the ratio of the two arms' pooled-request
    p99s, 28.06 → 25.62 ms (pooled over each arm's replicates: 400 baseline, 400 candidate
    requests), not …; the baseline and candidate shown are the replicate medians``; "" for any
    other row."""
    if not pooled_shift(rec):
        return ""
    label = rec.get("metric") or rec.get("name") or ""
    b, c = (rec.get(k) for k in POOLED_COLUMNS)
    unit = f" {rec['unit']}" if rec.get("unit") else ""
    nb, nc = _count(rec, "n_requests_baseline"), _count(rec, "n_requests_candidate")
    pooled = (f"pooled over each arm's replicates: {nb:,} baseline, {nc:,} candidate requests" if nb and nc
              else "pooled over each arm's replicates")
    both = (f", {number(float(b))} → {number(float(c))}{unit}" if isinstance(b, (int, float)) and isinstance(c, (int, float))
            and math.isfinite(b) and math.isfinite(c) else "")
    return (f"{POOLED_MARK} {label}: change = the ratio of the two arms' pooled-request p99s{both} ({pooled}), not "
            "the Hodges–Lehmann shift over replicates; the baseline and candidate shown are the replicate medians"
            + ("" if rec.get("baseline_median") is not None else
               " (not known: this comparison was recorded before they were kept beside the pooled p99s)"))


def read_record(rec: dict) -> dict:
    """A comparison record as this version writes it.

    One recorded before the pooled-request p99s had their own columns wrote them over
    ``baseline_median`` / ``candidate_median`` on the rows it could gate (a finite ratio, a verdict
    other than ``not gateable``): those move to ``p99_pooled_*`` and the replicate medians, which
    that record does not hold, are None; a row it could not gate kept its replicate medians. One
    recorded before a metric was read with no direction (:mod:`benchrun.stats.directions`) is read
    with none now: no better/worse beside its change."""
    direction = rec.get("direction")
    if direction is not None and read_direction(rec.get("case"), rec.get("name"), direction) == NO_DIRECTION \
            and direction != NO_DIRECTION:
        # the change and its interval as measured, read with the direction the record was written with
        # (its ratio and ci_* are oriented by it), then no direction
        (pct, _), (lo, hi) = change_of(rec), change_interval_of(rec)
        rec = {**rec, "direction": NO_DIRECTION, "better_worse": "", "change_pct": pct,
               "change_low_pct": lo, "change_high_pct": hi}
    if rec.get("tail_method") != POOLED_METHOD or any(k in rec for k in POOLED_COLUMNS):
        return rec
    ratio = rec.get("ratio")
    gated = (isinstance(ratio, (int, float)) and math.isfinite(ratio)
             and not str(rec.get("verdict") or "").startswith("not gateable"))
    if not gated:
        return rec
    return {**rec, POOLED_COLUMNS[0]: rec.get("baseline_median"), POOLED_COLUMNS[1]: rec.get("candidate_median"),
            "baseline_median": None, "candidate_median": None}


def read_comparison(doc: Any) -> Any:
    """A comparison document (``structured/<run_id>_comparison.json``) with its records read by
    :func:`read_record`; anything else unchanged."""
    if not isinstance(doc, dict) or not isinstance(doc.get("metrics"), list):
        return doc
    return {**doc, "metrics": [read_record(r) if isinstance(r, dict) else r for r in doc["metrics"]]}


def pooled_notes(records: Iterable[dict]) -> list[str]:
    """:func:`pooled_note` of every row it applies to."""
    return [n for n in (pooled_note(r) for r in records) if n]


FAILED_ROW = "failed_replicates"  # benchrun.stats.compare's row per suite with a failure (its n is launches)
LEFT_OUT_MARK = "‡"


def _count(rec: dict, key: str) -> int:
    v = rec.get(key)
    return 0 if v is None or (isinstance(v, float) and math.isnan(v)) else int(v)


def not_shown(rec: dict) -> bool:
    """A row neither a regression nor shown unchanged or better (``inconclusive``, ``spread
    changed``; a failure count only where the candidate failed more): what exit 0's
    ``NoRegressionShown`` names and the report's verdict box counts."""
    if rec.get("verdict") in ("no_change", "improvement", "regression"):
        return False
    if rec.get("name") == FAILED_ROW:
        return _count(rec, "failed_candidate") > _count(rec, "failed_baseline")
    return True


def left_out(rec: dict) -> str:
    """What kept replicates of this row's suite out of its comparison, in the row's own words:
    its ``contention`` text when contended replicates were excluded (or kept, too few quiet ones
    left: the reader must know those were compared), and the failed replicates of
    each arm; "" when every ok, quiet replicate was compared (a ``failed_replicates`` row counts
    its launches, none left out)."""
    if rec.get("name") == FAILED_ROW or str(rec.get("metric") or "").endswith(f"/{FAILED_ROW}"):
        return ""
    parts = []
    contention = str(rec.get("contention") or "")
    if "excluded" in contention or "kept (" in contention:  # kept though contended: said as well
        parts.append(contention)
    parts += [f"{arm}: {n} failed replicate" + ("s" if n > 1 else "")
              for arm, n in (("baseline", _count(rec, "failed_baseline")), ("candidate", _count(rec, "failed_candidate")))
              if n]
    return "; ".join(parts)


def n_shown(rec: dict) -> str:
    """``5/4``: the replicates each arm compared (baseline/candidate), marked ‡ when some were left
    out (:func:`left_out` says why)."""
    n = f"{_count(rec, 'n_baseline')}/{_count(rec, 'n_candidate')}"
    return f"{n} {LEFT_OUT_MARK}" if left_out(rec) else n


def left_out_notes(records: Iterable[dict]) -> list[str]:
    """One footnote per suite whose rows left replicates out: ``‡ serving_workflow: candidate: 1
    contended …, excluded`` (the rows of one suite share their contention and failures)."""
    out: dict[str, str] = {}
    for r in records:
        why = left_out(r)
        if why:
            out.setdefault(str(r.get("suite") or r.get("metric") or ""), why)
    return [f"{LEFT_OUT_MARK} {suite}: {why}" for suite, why in out.items()]
