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
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

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


def is_context(case: str, name: str) -> bool:
    """Telemetry, utilization and environment rows: context for the outcomes, not outcomes."""
    return case == CONTEXT_CASE or bool(_CONTEXT_NAME.search(name))


def roles(gating: np.ndarray, cases: np.ndarray, names: np.ndarray) -> np.ndarray:
    """``primary`` for gating rows, ``context`` for telemetry/utilization/environment, else ``secondary``."""
    ctx = np.array([is_context(str(c), str(n)) for c, n in zip(cases, names)], dtype=bool)
    return np.where(np.asarray(gating, bool), "primary", np.where(ctx, "context", "secondary")).astype(object)


def measured_change(df: "pd.DataFrame") -> dict[str, np.ndarray]:
    """The change as measured (candidate vs baseline, + = went up) in percent with its interval,
    and better/worse by direction, from the oriented effect columns."""
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
        rel_ok = ~log & (ref > 0)
        change = np.where(log, (m_ratio - 1) * 100, np.where(rel_ok, diff / ref * 100, np.nan))
        c_lo = np.where(log, (m_lo - 1) * 100, np.where(rel_ok, dlo / ref * 100, np.nan))
        c_hi = np.where(log, (m_hi - 1) * 100, np.where(rel_ok, dhi / ref * 100, np.nan))
    shift = df["shift"].to_numpy(dtype=float)
    bw = np.where(np.isnan(shift), "", np.where(shift > 0, "better", np.where(shift < 0, "worse", "same")))
    return {"change_pct": change, "change_low_pct": c_lo, "change_high_pct": c_hi, "better_worse": bw.astype(object)}


def _exact_floor(n_b: int, n_c: int, two_sided: bool) -> float:
    p = 1.0 / math.comb(n_b + n_c, n_b)
    return min(1.0, 2 * p) if two_sided else p


def _floor_n(alpha_tail: float, two_sided: bool) -> int | None:
    for n in range(2, MAX_PLANNED_N + 1):
        if _exact_floor(n, n, two_sided) <= alpha_tail * (2 if two_sided else 1) + 1e-15:
            return n
    return None


def _pct(shift: float, log: bool) -> float:
    return (math.exp(shift) - 1) * 100 if log else math.nan


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
    cols = {k: df[k].to_numpy() for k in ("shift", "shift_low", "shift_high", "ci_coverage", "n_baseline",
                                          "n_candidate", "scale", "margin", "verdict", "name")}
    for i in range(rows):
        if role[i] == "context" or cols["name"][i] == "failed_replicates":
            continue
        s, lo, hi, cov = (float(cols[k][i]) for k in ("shift", "shift_low", "shift_high", "ci_coverage"))
        nb, nc = int(cols["n_baseline"][i]), int(cols["n_candidate"][i])
        if any(math.isnan(v) for v in (s, lo, hi)) or nb < 2 or nc < 2:
            continue
        gating = role[i] == "primary"
        tail = alpha / max(family, 1) if gating else alpha / (2 * max(n_sec, 1))
        two_sided = not gating
        exact = not gating or str(gate_test[i]) != "welch_t"
        z_cov = stats.norm.ppf(0.5 + min(max(cov if not math.isnan(cov) else 0.95, 0.5), 0.9999) / 2)
        se = (hi - lo) / (2 * z_cov) if z_cov > 0 else math.nan
        log = cols["scale"][i] == "log"
        df_t = nb + nc - 2
        q = stats.t.ppf(1 - tail, df_t) + stats.t.ppf(POWER, df_t)
        reachable = not exact or _exact_floor(nb, nc, two_sided) <= tail * (2 if two_sided else 1) + 1e-15
        mde[i] = q * se if reachable else math.inf
        mde_pct[i] = _pct(mde[i], log) if reachable else math.inf
        effect = abs(s)
        if effect <= 0 or math.isnan(se):
            continue
        n_floor = _floor_n(tail, two_sided) if exact else 2
        base = (1 / nb + 1 / nc)
        for n in range(max(2, n_floor or MAX_PLANNED_N + 1), MAX_PLANNED_N + 1):
            qn = stats.t.ppf(1 - tail, 2 * n - 2) + stats.t.ppf(POWER, 2 * n - 2)
            if qn * se * math.sqrt((2 / n) / base) <= effect:
                need[i] = n
                break
        margin = float(cols["margin"][i]) if not math.isnan(float(cols["margin"][i])) else 0.0
        if cols["verdict"][i] == "inconclusive" and effect > margin:
            n_now = min(nb, nc)
            advice[i] = (f"large change, not significant at n = {n_now}: rerun with ≥ {need[i]} replicates"
                         if need[i] > 0 else
                         f"large change, not significant at n = {n_now}: more than {MAX_PLANNED_N} replicates "
                         "would be needed")
    return {"mde": mde, "mde_pct": mde_pct, "replicates_needed": need, "advice": advice}


def change_of(rec: dict) -> tuple[float | None, str]:
    """(change as measured in %, better/worse) of a comparison record; older records without
    ``change_pct`` are read from their higher-is-better ratio and direction."""
    pct, bw = rec.get("change_pct"), rec.get("better_worse") or ""
    if pct is None or (isinstance(pct, float) and math.isnan(pct)):
        ratio = rec.get("ratio")
        if ratio is None or (isinstance(ratio, float) and math.isnan(ratio)) or ratio <= 0:
            return None, ""
        measured = ratio if rec.get("direction") != "lower" else 1.0 / ratio
        pct = (measured - 1.0) * 100.0
        bw = "better" if ratio > 1 else "worse" if ratio < 1 else "same"
    return float(pct), bw


def format_change(rec: dict) -> str:
    """``+113.7 % (worse)``: the one sign convention of every surface."""
    pct, bw = change_of(rec)
    if pct is None:
        return ""
    return f"{pct:+.1f} %" + (f" ({bw})" if bw else "")
