"""The change-point fact's file (``<home>/warehouse/change_point_fact/change_points.parquet``):
the previous pass's breaks, read back so each change is announced once, and the new fact written
(:func:`benchrun.stats.changepoint.change_points` makes it; the names are re-exported there)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from benchrun.fsio import atomic_path

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)

# The fact's file under the home: written and read here, shared by benchrun.sharedstate (CHANGE_POINTS).
FACT_RELPATH = "warehouse/change_point_fact/change_points.parquet"


def _previous_breaks(previous: "pd.DataFrame | None") -> dict[str, set[str]]:
    if previous is None or previous.empty or "series_id" not in previous.columns:
        return {}
    out: dict[str, set[str]] = {}
    for sid, run in previous[["series_id", "run_id"]].itertuples(index=False):
        out.setdefault(str(sid), set()).add(str(run))
    return out


def read_change_point_fact(home: Path) -> "pd.DataFrame | None":
    """The fact written by the previous pass, or None (absent or unreadable: every break is new)."""
    import pandas as pd

    path = Path(home) / FACT_RELPATH
    if not path.is_file():
        return None
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as exc:  # derived data: treat as absent rather than fail the pass
        log.warning("%s: unreadable (%s); reporting every change point as new", path, exc)
        return None


def write_change_point_fact(df: "pd.DataFrame", home: Path) -> Path:
    """``<home>/warehouse/change_point_fact/change_points.parquet``: temporary name, then rename."""
    target = Path(home) / FACT_RELPATH
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp:
        df.to_parquet(tmp, index=False)
    return target


def drop_run(home: Path, run_id: str) -> int:
    """Take a deleted run's breaks out of the fact (``benchrun delete``); how many rows went. They stayed
    until the next change-points pass, naming a run no table held any more."""
    fact = read_change_point_fact(home)
    if fact is None or fact.empty or "run_id" not in fact.columns:
        return 0
    kept = fact[fact["run_id"].astype(str) != run_id]
    if len(kept) != len(fact):
        write_change_point_fact(kept.reset_index(drop=True), home)
    return len(fact) - len(kept)
