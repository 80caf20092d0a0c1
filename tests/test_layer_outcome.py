"""A layer's status and counts, and the run's outcome, count failures by the one rule the headline
rows use (benchrun.execute.replicate_counts): a replicate unavailable where others of its suite
measured failed; a suite unavailable throughout did not."""

from __future__ import annotations

from benchrun.execute import LayerOutcome, layer_status, run_outcome, summarise
from benchrun.launch.base import LaunchResult
from benchrun.lifecycle import exit_code_for

RUN = "t-20260101000000-abcdef12"


def _res(suite: str, k: int, status: str) -> LaunchResult:
    metrics = [{"name": "v", "value": 1.0 + k, "unit": "u", "case": ""}] if status == "ok" else []
    return LaunchResult(run_id=RUN, layer="micro", suite=suite, replicate=k, benchmark_case_id="c", status=status,
                        reason=None, exit_code=0, wall_s=1.0, t_request=0.0, t_spawned=0.0, t_finished=0.0,
                        log="", result=None, metrics=metrics)


def test_an_unavailable_replicate_beside_an_ok_one_fails_the_layer_and_the_run_as_summarise_says():
    """Review: ok, unavailable, unavailable of one suite read `succeeded`, failed 0, exit 0, while the
    headline rows (summarise) said 2 failed: the device went away part-way."""
    results = [_res("s", 1, "ok"), _res("s", 2, "unavailable"), _res("s", 3, "unavailable")]
    [row] = summarise(results)
    assert (row["n_ok"], row["n_failed"]) == (1, 2)
    assert layer_status(results) == "partial"
    outcome = LayerOutcome("micro", layer_status(results), results)
    assert outcome.n_failed == 2
    doc = outcome.to_json()
    assert (doc["ok"], doc["failed"], doc["unavailable"], doc["launches"]) == (1, 2, 0, 3)
    status, issues = run_outcome({"micro": doc})
    assert status == "partial" and issues == ["micro: 2 of 3 replicates failed"]
    assert exit_code_for({"phase": "Succeeded", "outcome": status}) == 1


def test_a_suite_unavailable_throughout_is_no_failure():
    """No GPU here: every replicate of the suite says unavailable; the layer still succeeded."""
    results = [_res("cpu", 1, "ok"), _res("cpu", 2, "ok"), _res("gpu", 1, "unavailable"), _res("gpu", 2, "unavailable")]
    assert layer_status(results) == "succeeded"
    doc = LayerOutcome("micro", layer_status(results), results).to_json()
    assert (doc["ok"], doc["failed"], doc["unavailable"]) == (2, 0, 2)
    assert run_outcome({"micro": doc}) == ("succeeded", [])
    assert {r["suite"]: r["n_failed"] for r in summarise(results)} == {"cpu": 0, "gpu": 0}


def test_every_replicate_failed_by_the_rule_fails_the_layer():
    results = [_res("s", 1, "failed"), _res("s", 2, "failed")]
    assert layer_status(results) == "failed"
    results = [_res("s", 1, "ok"), _res("s", 2, "unavailable"), _res("t", 1, "failed")]
    assert layer_status(results) == "partial"
    assert LayerOutcome("micro", "partial", results).n_failed == 2


def test_a_metric_only_some_replicates_report_counts_those_replicates():
    """Review 2026-12-07: `show --all` read `57.07 57.07 57.07 ok 5` for a telemetry metric only the
    contended replicate r4 reported (the suite's ok count beside one replicate's value)."""
    results = [_res("fio", k, "ok") for k in range(1, 6)] + [_res("fio", 6, "failed")]
    results[3].metrics.append({"name": "background_cpu_pct_p95", "value": 57.07, "unit": "%", "case": "telemetry"})
    rows = {r["metric"]: r for r in summarise(results)}
    assert (rows["v"]["n_ok"], rows["v"]["n_failed"]) == (5, 1)
    only = rows["background_cpu_pct_p95"]
    assert (only["n_ok"], only["median"], only["n_failed"]) == (1, 57.07, 1)
