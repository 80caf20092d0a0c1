"""The dagster.yaml the Dagster chart (1.13.27, the version deploy/helm/values.yaml pins) renders from
the values: its run coordinator and concurrency sections, as the chart's templates
(helpers/instance/_run-coordinator.tpl, _concurrency.tpl) write them, checked by the installed
Dagster's own validation. No Helm here, so the two templates' rules are written out below; a values
key they do not model is refused.

Found in review: the values set queuedRunCoordinator.maxConcurrentRuns beside concurrency pools; the
chart's own check passes that, and Dagster refuses the instance (``DagsterInvalidConfigError: Found
config value for ['max_concurrent_runs'] in run_coordinator which is incompatible with the
concurrency > runs config``): the daemon, the webserver and every run worker failed to start.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from conftest import ROOT

VALUES = ROOT / "deploy/helm/values.yaml"
_QRC_KEYS = {"maxConcurrentRuns", "tagConcurrencyLimits", "dequeueIntervalSeconds"}
_POOL_KEYS = {"defaultLimit", "granularity", "opGranularityRunBuffer"}
_RUN_KEYS = {"maxConcurrentRuns", "tagConcurrencyLimits"}


def chart_instance(v: dict[str, Any]) -> dict[str, Any]:
    """run_coordinator and concurrency of the rendered dagster.yaml; the chart's ``fail`` as ValueError."""
    rc = v["dagsterDaemon"]["runCoordinator"]
    assert rc["type"] == "QueuedRunCoordinator" and rc["enabled"]
    qrc = (rc.get("config") or {}).get("queuedRunCoordinator") or {}
    conc = v.get("concurrency") or {}
    pools, runs = conc.get("pools") or {}, conc.get("runs") or {}
    for keys, known in ((qrc, _QRC_KEYS), (pools, _POOL_KEYS), (runs, _RUN_KEYS)):
        assert set(keys) <= known, f"values keys this model does not know: {set(keys) - known}"
    if runs.get("maxConcurrentRuns") is not None and qrc.get("maxConcurrentRuns") is not None:  # _concurrency.tpl
        raise ValueError("Cannot set both concurrency.runs.maxConcurrentRuns and "
                         "dagsterDaemon.runCoordinator.config.queuedRunCoordinator.maxConcurrentRuns")
    coordinator: dict[str, Any] = {"module": "dagster.core.run_coordinator", "class": "QueuedRunCoordinator"}
    config = {}
    if qrc.get("maxConcurrentRuns") is not None:  # _run-coordinator.tpl: only the keys set
        config["max_concurrent_runs"] = qrc["maxConcurrentRuns"]
    if qrc.get("tagConcurrencyLimits"):
        config["tag_concurrency_limits"] = qrc["tagConcurrencyLimits"]
    if config:
        coordinator["config"] = config
    out: dict[str, Any] = {"run_coordinator": coordinator}
    if conc.get("enabled"):
        rendered: dict[str, Any] = {}
        if pools.get("defaultLimit") is not None:
            rendered["pools"] = {"default_limit": pools["defaultLimit"]}
        if runs.get("maxConcurrentRuns") is not None:
            rendered["runs"] = {"max_concurrent_runs": runs["maxConcurrentRuns"]}
        out["concurrency"] = rendered
    return out


def test_the_values_render_an_instance_dagster_accepts():
    from dagster._core.instance.config import validate_concurrency_config

    instance = chart_instance(yaml.safe_load(VALUES.read_text()))
    validate_concurrency_config(instance)  # raised DagsterInvalidConfigError before
    # what the values mean: 16 run workers wait at once, the warehouse writer's pool admits one step
    assert instance["concurrency"] == {"pools": {"default_limit": 1}, "runs": {"max_concurrent_runs": 16}}
    assert "config" not in instance["run_coordinator"]


def test_the_model_refuses_what_dagster_refuses():
    from dagster._core.errors import DagsterInvalidConfigError
    from dagster._core.instance.config import validate_concurrency_config

    v = yaml.safe_load(VALUES.read_text())
    v["dagsterDaemon"]["runCoordinator"]["config"]["queuedRunCoordinator"] = {"maxConcurrentRuns": 16}
    v["concurrency"].pop("runs")
    with pytest.raises(DagsterInvalidConfigError, match="max_concurrent_runs"):
        validate_concurrency_config(chart_instance(v))
    v["concurrency"]["runs"] = {"maxConcurrentRuns": 16}
    with pytest.raises(ValueError, match="Cannot set both"):
        chart_instance(v)
