"""Contended replicates in the comparison (benchrun.stats.contention), on fabricated runs."""

from __future__ import annotations

import json

from benchrun.stats.analysis import compare_runs
from benchrun.stats.contention import exclude
from benchrun.stats.synthetic import make_run, write_manifest

SPEC = {"spec": {"metrics": {"inference": {"enabled": True, "primary": ["s/tps"]}}}}


def _mark(rd, suite, reps):
    for k in reps:
        p = rd / "structured" / f"{rd.name}_{suite}_r{k}.json"
        doc = json.loads(p.read_text())
        doc["telemetry"] = {"contended": True, "contention_reason": "background CPU 60 %"}
        p.write_text(json.dumps(doc))
    write_manifest(rd)  # as the run itself would have recorded them (else the evidence does not verify)


def test_contended_replicates_leave_the_comparison_and_the_rows_say_so(tmp_path):
    # before: two contended baseline replicates (15 % low) hid a real 10 % regression
    base = make_run(tmp_path, "base", {("s", "", "tps"): ([100, 100.5, 99.5, 85, 84], "t/s", "higher")}, spec=SPEC)
    cand = make_run(tmp_path, "cand", {("s", "", "tps"): ([90, 90.5, 89.5, 90.2, 89.8], "t/s", "higher")}, spec=SPEC)
    _mark(base, "s", (4, 5))
    _gate, res = compare_runs(base, cand)
    row = res.rows.iloc[0]
    assert row.verdict == "regression" and row.n_baseline == 3
    assert row.contended_baseline == 2 and row.contended_candidate == 0
    assert row.contention == "baseline: 2 contended, excluded"


def test_too_few_quiet_replicates_keep_the_contended_ones():
    import pandas as pd

    t = pd.DataFrame({"suite": "s", "case": "", "metric": "m", "unit": "u", "direction": "higher",
                      "replicate": [1, 2, 3, 4], "value": [1.0, 2, 3, 4], "status": "ok"})
    kept, info = exclude(t, {"s": {1, 2}})
    assert len(kept) == 4 and info["s"][1].startswith("kept (only 2 quiet")
    dropped, info = exclude(t, {"s": {1}})
    assert sorted(dropped.replicate) == [2, 3, 4] and info["s"] == (1, "excluded")
