"""What the asset checks judge (benchrun.checks): primary metrics and p99 SLOs only."""

import pandas as pd

from benchrun import checks


def _spec(slo=None, primary=("ttft_ms", "tokens_per_second")):
    return {"spec": {"metrics": {"inference": {"enabled": True, "primary": list(primary), "slo": slo or {}},
                                 "training": {"enabled": False, "primary": ["mfu_pct"]}}}}


def test_p99_rule_applies_only_to_quantities_with_a_p99_slo():
    assert checks.p99_slo_quantities(_spec({"ttft_ms": 200, "decode_ms_per_token": 30})) == {}
    assert checks.p99_slo_quantities(_spec({"p99_latency_ms": 300, "ttft_ms_p99": 80, "ttft_ms": 50})) == {
        "e2e_ms": 300.0, "ttft_ms": 80.0}


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
