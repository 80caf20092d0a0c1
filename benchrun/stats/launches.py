"""Launch counts in replicate tables: the one rule under which a suite's surviving replicates cannot speak for it, and a confirmation round's tables cut to its suspects.

The rule (:func:`survivors_cannot_speak`) serves both rounds: the first round refuses the pair
(``benchrun.stats.admit.failure_refusals``) and the confirmation round leaves the suite's suspects
unanswered (``benchrun.stats.paired.paired_confirmation``): the replicates that survived — the
fast ones, when the others hit their timeout — would otherwise decide, and clear, a regression.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

KEY_COLUMNS = ("suite", "case", "metric")


def survivors_cannot_speak(failed_baseline: int, launched_baseline: int, failed_candidate: int,
                           launched_candidate: int) -> bool:
    """At least half of the candidate's launches failed, a larger share than the baseline's (at 5
    replicates an arm Fisher's test on the counts cannot reach significance before too few survive
    to compare: 3 of 5 failed, p 0.17)."""
    fb, tb, fc, tc = int(failed_baseline), int(launched_baseline), int(failed_candidate), int(launched_candidate)
    return bool(tc and 2 * fc >= tc and fc * max(tb, 1) > fb * tc)


def launches_by_suite(table: Any) -> tuple[dict[str, int], dict[str, int]]:
    """(failed, launched) replicates per suite of a replicate table: every replicate with a row
    was launched; it failed when any of its rows has a status other than ``ok`` (none did in a
    table without a status column). A suite with no failed replicate is absent from ``failed``."""
    if table is None or len(table) == 0:
        return {}, {}
    pairs = table[["suite", "replicate"]]
    launched = pairs.drop_duplicates().groupby("suite").size().to_dict()
    failed = {}
    if "status" in table.columns:
        bad = pairs[(table["status"].astype(str) != "ok").to_numpy()]
        failed = bad.drop_duplicates().groupby("suite").size().to_dict() if len(bad) else {}
    return {str(k): int(v) for k, v in failed.items()}, {str(k): int(v) for k, v in launched.items()}


def launch_counts(table: Any, suite: str) -> tuple[int, int]:
    """(failed, launched) replicates of ``suite`` in a replicate table (:func:`launches_by_suite`)."""
    failed, launched = launches_by_suite(table)
    return failed.get(suite, 0), launched.get(suite, 0)


def round_failures(fresh_b: Any, fresh_c: Any, suite: str) -> str:
    """Why a confirmation round's launches of ``suite`` cannot decide its suspects ("" when they
    can): the rule of :func:`survivors_cannot_speak` applied to the round's own launches."""
    (fb, tb), (fc, tc) = launch_counts(fresh_b, suite), launch_counts(fresh_c, suite)
    if not survivors_cannot_speak(fb, tb, fc, tc):
        return ""
    return (f"{fc} of {tc} candidate launches of {suite} failed in the round ({fb} of {tb} of the baseline's): "
            "the survivors cannot speak for the suite")


def only(table: "pd.DataFrame", keys: set[tuple[str, str, str]], fail_suites: set[str] = frozenset()
         ) -> "pd.DataFrame":
    """The rows of a replicate table whose (suite, case, metric) is in ``keys``, plus the failed
    replicates of the suites in ``fail_suites`` and a value-less marker row for each of their ok
    launches (so every launch still counts as launched)."""
    if table.empty:
        return table
    import pandas as pd

    sel = np.array([tuple(k) in keys for k in table[list(KEY_COLUMNS)].itertuples(index=False)], dtype=bool)
    if "status" not in table.columns or not fail_suites:
        return table[sel]
    in_fail = table["suite"].isin(fail_suites).to_numpy()
    sel |= (table["status"].astype(str) != "ok").to_numpy() & in_fail
    launches = table[in_fail & (table["status"].astype(str) == "ok").to_numpy()][["suite", "replicate"]]
    markers = launches.drop_duplicates().assign(case="", metric="", unit="", direction="", value=np.nan, status="ok")
    return pd.concat([table[sel], markers[list(table.columns)]], ignore_index=True)
