"""The gating family: which rows gate (primary selectors such as ``suite/metric[case]``) and
how a family's p-values are corrected (Holm step-down for the gate, Benjamini–Hochberg for the
reported rows). Pure functions, imported by :mod:`benchrun.stats.compare` and the confirmation."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

import numpy as np
from scipy import stats

from benchrun.errors import BenchrunError


def holm(pvalues: Iterable[float]) -> np.ndarray:
    """Holm step-down adjusted p-values (NaN stays NaN and is not counted in the family)."""
    p = np.asarray(list(pvalues) if not isinstance(pvalues, np.ndarray) else pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.nonzero(~np.isnan(p))[0]
    if idx.size == 0:
        return out
    order = idx[np.argsort(p[idx], kind="stable")]
    m = order.size
    adj = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    out[order] = adj
    return out


def benjamini_hochberg(pvalues: Iterable[float]) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (scipy.stats.false_discovery_control); NaN kept."""
    p = np.asarray(list(pvalues) if not isinstance(pvalues, np.ndarray) else pvalues, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if ok.any():
        out[ok] = stats.false_discovery_control(p[ok], method="bh")
    return out


# -- primaries -------------------------------------------------------------------------------

_PRIMARY = re.compile(r"^(?:(?P<suite>[^/\[\]]+)/)?(?P<metric>[^/\[\]]+)(?:\[(?P<case>[^\[\]]*)\])?$")


@dataclass(frozen=True)
class Primary:
    """One gating selector: a metric name, optionally limited to a suite and/or a case."""

    metric: str
    suite: str | None = None
    case: str | None = None

    def matches(self, suite: str, case: str, metric: str) -> bool:
        return (metric == self.metric and (self.suite is None or suite == self.suite)
                and (self.case is None or case == self.case))


def parse_primary(text: str, field: str = "primary") -> Primary:
    """``ttft_ms``, ``serving_sweep/ttft_ms``, ``ttft_ms[c=4]`` or ``serving_sweep/ttft_ms[c=4]``
    (a selector of ``metrics.<family>.primary``, or of ``.secondary`` with ``field``)."""
    m = _PRIMARY.match(str(text).strip())
    if not m:
        raise BenchrunError(f"{field} metric {text!r} is not NAME, SUITE/NAME, NAME[CASE] or SUITE/NAME[CASE]; "
                            f"fix metrics.<family>.{field}")
    return Primary(m.group("metric"), m.group("suite"), m.group("case"))


def gating_mask(keys: Iterable[tuple[str, str, str]], primary: Iterable[str]) -> np.ndarray:
    """True for each (suite, case, metric) that some primary selector matches."""
    sels = [parse_primary(p) for p in primary]
    return np.array([any(s.matches(*k) for s in sels) for k in keys], dtype=bool)
