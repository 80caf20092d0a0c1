"""What the asset checks judge (benchrun.checks): primary metrics only (p99 primaries for the p99 rule)."""

import pandas as pd

from benchrun import checks


def _spec(slo=None, primary=("ttft_ms", "tokens_per_second")):
    return {"spec": {"metrics": {"inference": {"enabled": True, "primary": list(primary), "slo": slo or {}},
                                 "training": {"enabled": False, "primary": ["mfu_pct"]}}}}


def _tails(points):
    return pd.DataFrame([{"suite": s, "replicate": r, "point": p, "bucket": b, "quantity": q, "n_requests": n}
                         for s, p, q, counts in points for r, n in enumerate(counts, 1) for b in ("all", "64/16")])


def test_p99_rule_applies_to_the_points_a_p99_primary_gates_on():
    """The rule read p99 SLO keys the spec model refuses (metrics.inference.slo allows only per-request
    objectives), so it never applied to a valid spec. It now follows the primaries: the canary's
    serving_workflow/p99_latency_ms[c=4] is the p99 of that point's e2e_ms, pooled over replicates."""
    import yaml
    from pathlib import Path

    canary = yaml.safe_load((Path(__file__).resolve().parents[1] / "specs/local/canary.yaml").read_text())
    primary = checks.primary_metrics(canary)
    assert "serving_workflow/p99_latency_ms[c=4]" in primary
    tails = _tails([("serving_workflow", "c=4", "e2e_ms", [80] * 4), ("serving_workflow", "c=4", "ttft_ms", [80] * 4),
                    ("serving_workflow", "c=1", "e2e_ms", [10] * 4), ("serving_sweep", "c=4", "e2e_ms", [24] * 4)])
    [row] = checks.p99_primary_points(tails, primary, 368)
    assert (row["suite"], row["point"], row["pooled_requests"], row["enough"]) == ("serving_workflow", "c=4", 320, False)
    tails = _tails([("serving_workflow", "c=4", "e2e_ms", [80] * 5)])
    assert checks.p99_primary_points(tails, primary, 368)[0]["enough"]  # 400 pooled requests
    bare = checks.p99_primary_points(_tails([("a", "c=1", "e2e_ms", [100]), ("b", "c=2", "e2e_ms", [400])]),
                                     {"p99_latency_ms"}, 368)
    assert [(r["suite"], r["enough"]) for r in bare] == [("a", False), ("b", True)]
    assert checks.p99_primary_points(tails, {"ttft_ms", "tokens_per_second"}, 368) == []
    # only the replicates a comparison pools count (a contended one left out, a failed one's requests): 400
    # pooled requests were "enough" while every comparison of the run judged the point on 320, "not gateable"
    keep = {("serving_workflow", k) for k in (1, 3, 4, 5)}
    [row] = checks.p99_primary_points(tails, primary, 368, keep=keep)
    assert (row["pooled_requests"], row["replicates"], row["enough"]) == (320, 4, False)


def test_the_p99_check_pools_the_replicates_a_comparison_pools(tmp_path):
    """Review 2026-12-08: the check excluded contended replicates by counting every replicate with requests as
    quiet, a failed one included; compare counts ok ones only. r3 failed (its requests file stayed), r4 and
    r5 contended: 2 quiet ones, so compare keeps r4 and r5 and pools 4 × 100 = 400; the check pooled r1-r3."""
    import json

    from benchrun.stats.synthetic import make_run

    rd = make_run(tmp_path, "p", {("serve", "c=4", "p99_latency_ms"): ([1.0] * 5, "ms", "lower")},
                  failed_replicates={"serve": [3]})
    for k in (4, 5):
        path = rd / "structured" / f"p_serve_r{k}.json"
        doc = json.loads(path.read_text())
        doc["telemetry"] = {"contended": True, "contention_reason": "background CPU 60 %"}
        path.write_text(json.dumps(doc))
    assert checks.compared_replicates(rd) == {("serve", k) for k in (1, 2, 4, 5)}
    tails = _tails([("serve", "c=4", "e2e_ms", [100] * 5)])
    [row] = checks.p99_primary_points(tails, {"serve/p99_latency_ms"}, 368, keep=checks.compared_replicates(rd))
    assert (row["pooled_requests"], row["enough"]) == (400, True)


def test_interval_budget_and_outliers_judge_primary_metrics_only():
    summary = pd.DataFrame([
        {"suite": "s", "case": "", "metric": "ttft_ms", "median": 10.0, "median_ci_low": 9.8, "median_ci_high": 10.3},
        {"suite": "s", "case": "", "metric": "tokens_per_second", "median": 100.0, "median_ci_low": 90.0,
         "median_ci_high": 110.0},
        {"suite": "g", "case": "", "metric": "tflops", "median": 1.0, "median_ci_low": 0.5, "median_ci_high": 2.0}])
    primary = checks.primary_metrics(_spec())
    assert primary == {"ttft_ms", "tokens_per_second"}  # the disabled training family does not count
    gating, other = checks.split_by_gating(summary, primary)
    assert list(gating["metric"]) == ["ttft_ms", "tokens_per_second"] and list(other["metric"]) == ["tflops"]
    wide = checks.interval_widths(gating, lambda m: 3.0)  # budget 6 % of the median
    assert [(w["metric"], round(w["width_pct"], 1)) for w in wide] == [("tokens_per_second", 20.0)]
