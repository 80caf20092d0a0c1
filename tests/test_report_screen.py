"""Issue 26: the report of a run WITH a comparison, in headless Chromium at 1300x900: the verdict
and the headline are on the first screen, the forest plot is drawn from outcome rows only (no
context row), and nothing on the page errors. (tests/test_first_use.py screenshots a report
without a baseline.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchrun.stats.analysis import compare_runs, write_comparison
from benchrun.stats.synthetic import lognormal_replicates, make_run
from chrome_cdp import CHROMIUM, render

pytestmark = pytest.mark.slow


def _metrics(rng, level=1.0):
    out = {("serve", "c=8", "tokens_per_second"): (lognormal_replicates(rng, 100 * level, 0.02, 5), "tok/s", "higher"),
           ("serve", "c=8", "p99_latency_ms"): (lognormal_replicates(rng, 50 / level, 0.02, 5), "ms", "lower"),
           ("gemm", "n=512", "tflops"): (lognormal_replicates(rng, 1.0, 0.02, 5), "TFLOP/s", "higher")}
    for i in range(12):  # context: telemetry rows, moving on their own
        out[("serve", "telemetry", f"gpu{i}_power_w_mean")] = (lognormal_replicates(rng, 300 * (1 + i % 3), 0.05, 5),
                                                              "W", "lower")
    return out


def test_a_compared_run_shows_its_verdict_and_headline_on_the_first_screen(tmp_path, monkeypatch):
    if not Path(CHROMIUM).exists():
        pytest.skip("unavailable: no chromium (make test installs it as root)")
    from benchrun.report.figures import forest_rows
    from benchrun.report.html import build_report

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rng = np.random.default_rng(3)
    base = make_run(tmp_path, "base", _metrics(rng))
    cand = make_run(tmp_path, "cand", _metrics(rng, 0.8))  # 20 % slower: a regression
    gate, res = compare_runs(base, cand)
    write_comparison(gate, res, "base", cand)
    report = build_report(cand)
    comp = json.loads((cand / "structured" / "cand_comparison.json").read_text())
    roles = {m["metric"]: m.get("role") for m in comp["metrics"]}
    assert sum(r == "context" for r in roles.values()) == 12
    drawn = forest_rows(comp["metrics"])
    assert drawn and all(roles[r["metric"]] != "context" for r in drawn) and len(drawn) == 3
    assert (cand / "figures" / "cand_comparison_forest.png").is_file()
    page = render(report, "(() => { const v = document.getElementById('verdict').getBoundingClientRect();"
                          " const h = document.getElementById('headline').getBoundingClientRect();"
                          " return {verdict_bottom: v.bottom, headline_top: h.top, width: innerWidth,"
                          " height: innerHeight, text: document.getElementById('verdict').innerText}; })()")
    assert page.errors == []
    (tmp_path / "report.png").write_bytes(page.screenshot)
    v = page.value
    assert v["width"] == 1300  # a 1300x900 window; headless gives the page less height than that
    # at scroll 0 the rectangles are page pixels: both within the first 900 and on the visible screen
    assert 0 < v["verdict_bottom"] <= min(900, v["height"]) and v["headline_top"] < min(900, v["height"]), v
    assert "base" in v["text"] and "regression" in v["text"].lower(), v["text"]
