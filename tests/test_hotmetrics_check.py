"""The cardinality_within_budget check on hot_metrics: what a person looks for in the UI."""

from __future__ import annotations

import dataclasses

import dagster as dg
import pytest

from benchrun import hotmetrics
from benchrun import submit as sub


def _materialize(canary_doc, write_spec, max_series: int):
    from bench_assets.publish_assets import hot_metrics

    canary_doc["spec"]["sinks"]["hotMetrics"]["cardinalityBudget"]["maxActiveSeries"] = max_series
    prepared = sub.prepare(write_spec(canary_doc))
    instance = sub.get_instance()
    sub.register_partition(instance, prepared.run_id)
    res = dg.materialize([hot_metrics], instance=instance, partition_key=prepared.run_id)
    [check] = res.get_asset_check_evaluations()
    assert check.check_name == "cardinality_within_budget" and check.asset_key == dg.AssetKey("hot_metrics")
    [mat] = res.get_asset_materialization_events()
    return check, mat.materialization.metadata


def test_series_within_the_budget_pass(bench_home, canary_doc, write_spec):
    check, meta = _materialize(canary_doc, write_spec, 2_000_000)
    assert check.passed, check.description
    assert check.metadata["series_dropped"].value == 0 and check.metadata["series"].value == meta["series"].value > 0
    assert check.metadata["forbidden_labels_found"].value == []


def test_series_over_the_budget_warn_naming_how_many_and_the_budget(bench_home, canary_doc, write_spec):
    """Found in review: ARCHITECTURE.md lists "cardinality within budget" among the checks a person
    looks for in the UI; series over the budget were only a log warning and a metadata count."""
    check, meta = _materialize(canary_doc, write_spec, 1)
    dropped = meta["series_dropped"].value
    assert dropped > 0 and check.metadata["series_dropped"].value == dropped
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert f"{dropped} of {dropped + 1} series over the cardinality budget not published" in check.description
    assert "maxActiveSeries 1, 0 held by other runs: 1 allowed" in check.description
    assert check.metadata["max_active_series"].value == 1


@pytest.mark.parametrize("label", sorted(hotmetrics.FORBIDDEN_LABELS))
def test_a_forbidden_label_in_the_published_series_fails(bench_home, canary_doc, write_spec, monkeypatch, label):
    """render strips request_id, trace_id and prompt_hash; one that reached the published series anyway
    (a regression in render, a new series path) fails the check, naming the label."""
    real = hotmetrics.render

    def leaky(*args, **kwargs):
        hm = real(*args, **kwargs)
        leak = hotmetrics.Series("benchrun_leak", tuple(sorted({label: "r-1", "run_id": hm.run_id}.items())), 1.0,
                                 hotmetrics.PRIORITY_METRIC)
        return dataclasses.replace(hm, series=(*hm.series, leak))

    monkeypatch.setattr(hotmetrics, "render", leaky)
    check, _ = _materialize(canary_doc, write_spec, 2_000_000)
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert check.metadata["forbidden_labels_found"].value == [label]
    assert f"forbidden label(s) {label} in 1 published series" in check.description


def test_a_label_the_spec_drops_counts_too_and_run_id_never_does():
    from bench_assets.publish_assets import cardinality_result

    hm = hotmetrics.HotMetrics(
        run_id="r-20261201000000-abcdef12",
        series=(hotmetrics.Series("benchrun_x", (("gpu_uuid", "GPU-1"), ("run_id", "r-20261201000000-abcdef12")), 1.0,
                                  hotmetrics.PRIORITY_DETAIL),),
        help={}, max_active_series=10, existing_series=0, series_total=1, dropped_by_budget={}, merged_series=0,
        labels_removed=())
    assert cardinality_result(hm, hm.text, ["run_id"]).passed
    res = cardinality_result(hm, hm.text, ["gpu_uuid", "run_id"])
    assert not res.passed and res.severity == dg.AssetCheckSeverity.ERROR
    assert res.metadata["forbidden_labels_found"].value == ["gpu_uuid"]
