"""One rule counts a suite's launched and failed replicates (stats.launches.launches_by_suite): the
comparison's per-arm counts (compare._arm, behind the failed_replicates rows and the first round's
refusal) and a confirmation round's (launches.launch_counts, behind round_failures) are both it."""

from __future__ import annotations

import math

import pandas as pd

from benchrun.stats.compare import _arm
from benchrun.stats.launches import launch_counts, launches_by_suite, only

COLUMNS = ("suite", "case", "metric", "unit", "direction", "replicate", "value", "status")


def table(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame([dict(zip(COLUMNS, r)) for r in rows], columns=list(COLUMNS))


MIXED = table([
    # serve: r1 ok (two metrics), r2 failed (its marker row), r3 ok in one row and timeout in another
    ("serve", "c=4", "tps", "1/s", "higher", 1, 100.0, "ok"),
    ("serve", "c=4", "p99", "ms", "lower", 1, 20.0, "ok"),
    ("serve", "", "", "", "", 2, math.nan, "failed"),
    ("serve", "c=4", "tps", "1/s", "higher", 3, 90.0, "ok"),
    ("serve", "", "", "", "", 3, math.nan, "timeout"),
    # fio: three ok replicates, one of them a value-less marker (launched ok, measured nothing)
    ("fio", "rr", "iops", "1/s", "higher", 1, 5.0, "ok"),
    ("fio", "rr", "iops", "1/s", "higher", 2, 6.0, "ok"),
    ("fio", "", "", "", "", 3, math.nan, "ok"),
    # train: one replicate whose status was not recorded counts as not ok, as everywhere
    ("train", "tiny", "tps", "1/s", "higher", 1, 7.0, None),
])


def test_the_rule() -> None:
    failed, launched = launches_by_suite(MIXED)
    assert launched == {"serve": 3, "fio": 3, "train": 1}
    assert failed == {"serve": 2, "train": 1}
    assert launches_by_suite(None) == ({}, {}) and launches_by_suite(MIXED.iloc[0:0]) == ({}, {})
    assert launches_by_suite(MIXED.drop(columns="status")) == ({}, {"serve": 3, "fio": 3, "train": 1})


def test_the_comparison_and_the_confirmation_round_count_alike() -> None:
    for t in (MIXED, MIXED.drop(columns="status"), MIXED.iloc[0:0], MIXED[MIXED["status"] == "ok"]):
        failed, launched = launches_by_suite(t)
        arm = _arm(t)
        assert (arm.failed, arm.launched) == (failed, launched)
        for suite in ("serve", "fio", "train", "absent"):
            assert launch_counts(t, suite) == (failed.get(suite, 0), launched.get(suite, 0))


def test_a_table_cut_to_its_suspects_keeps_every_launch_of_a_failing_suite() -> None:
    cut = only(MIXED, {("serve", "c=4", "p99")}, fail_suites={"serve"})
    assert launch_counts(cut, "serve") == launch_counts(MIXED, "serve") == (2, 3)
    assert (_arm(cut).failed["serve"], _arm(cut).launched["serve"]) == (2, 3)
