"""Replicate planning from history (benchrun.stats.planning, ``benchrun plan``)."""

from __future__ import annotations

import numpy as np
import pytest

from benchrun.stats.planning import plan, pooled_cv, power
from benchrun.stats.synthetic import lognormal_replicates, make_run

DOC = {"spec": {"trials": {"minReplicates": 5, "confidenceLevel": 0.95},
                "comparison": {"deltaPct": 5.0},
                "metrics": {"inference": {"primary": ["serve/tps", "serve/quiet"]}}}}


@pytest.mark.slow
def test_plan_reads_the_noise_from_history_and_says_how_many_replicates(tmp_path):
    # before: no plan existed; the spec's minReplicates was a guess
    rng = np.random.default_rng(0)
    for i in range(4):
        make_run(tmp_path, f"n{i}", {("serve", "", "tps"): (lognormal_replicates(rng, 100, 0.04, 6), "t/s", "higher"),
                                     ("serve", "", "quiet"): (lognormal_replicates(rng, 100, 0.005, 6), "t/s", "higher")},
                 status={"created_utc": f"2026-11-0{i + 1}T00:00:00Z"})
    plans = {p.metric: p for p in plan(DOC, "w" * 64, tmp_path, sims=80)}
    noisy, quiet = plans["serve/tps"], plans["serve/quiet"]
    assert noisy.runs == 4 and 0.025 < noisy.cv < 0.06 and quiet.cv < 0.01
    assert quiet.needed is not None and noisy.needed is not None and noisy.needed > quiet.needed
    assert power(noisy.needed, noisy.cv, 5.0, 2, 0.05, sims=200) >= 0.65  # the plan's n does reach the power
    empty = plan(DOC, "w" * 64, tmp_path / "nowhere", sims=50)
    assert all(p.needed is None and "no history" in p.note for p in empty)


def test_pooled_cv_is_within_run():
    import pandas as pd

    t1 = pd.DataFrame({"suite": "s", "case": "", "metric": "m", "value": [100.0, 102.0, 98.0]})
    t2 = pd.DataFrame({"suite": "s", "case": "", "metric": "m", "value": [200.0, 204.0, 196.0]})
    cv, runs = pooled_cv([t1, t2], "s/m")
    assert runs == 2 and 0.015 < cv < 0.025  # the level between runs does not count
