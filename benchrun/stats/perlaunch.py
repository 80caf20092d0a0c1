"""One value per launch: a replicate that reported a metric several times (once per rank, node
or GPU) counts once, as the median of those values, because a replicate (one launch) is the unit
of replication, never a rank or a sample.

The one rule for it: the run's summary table (:func:`benchrun.execute.summarise`: ``benchrun show
--all``, ``show --json``'s headline, the table at the end of ``benchrun run``) applies
:func:`launch_value`, and the trial statistics (:func:`benchrun.stats.load.replicate_table`, which
the report, the comparison and the headline read) the same median vectorised by pandas. Pure Python, so the launch
side needs neither pandas nor numpy for it.
"""

from __future__ import annotations

import math
import statistics
from typing import Hashable, Iterable


def launch_value(values: Iterable[float]) -> float:
    """The replicate's one value of a metric it reported as ``values``: their median (NaN left
    out, as pandas' median leaves it out; NaN when nothing is left)."""
    vals = [float(v) for v in values]
    vals = [v for v in vals if not math.isnan(v)]
    return statistics.median(vals) if vals else math.nan


def launch_values(rows: Iterable[tuple[Hashable, int, float]]) -> dict[Hashable, dict[int, float]]:
    """``(key, replicate, value)`` rows → key → replicate → :func:`launch_value` of that
    replicate's values, keys and replicates in the order first seen."""
    grouped: dict[Hashable, dict[int, list[float]]] = {}
    for key, replicate, value in rows:
        grouped.setdefault(key, {}).setdefault(int(replicate), []).append(value)
    return {key: {k: launch_value(v) for k, v in reps.items()} for key, reps in grouped.items()}
