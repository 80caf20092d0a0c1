"""The job_startup suite: real child processes speaking Dagster Pipes, timeline in order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchrun.suites.job_startup import PHASES
from helpers import run_builtin_suite

RUN_ID = "t-startup"


def run_suite(run_dir: Path, params: dict[str, Any], **env_extra: str):
    return run_builtin_suite("job_startup", RUN_ID, run_dir, params, **env_extra)


def test_launch_timeline_is_ordered_and_kept_per_launch(tmp_path: Path) -> None:
    proc, doc = run_suite(tmp_path, {"launches": 2})
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "ok"
    launches = json.loads((tmp_path / doc["samples"]["launches"]).read_text())["launches"]
    assert [x["launch"] for x in launches] == [0, 1]
    for x in launches:
        stamps = [x["t_launch"]] + [x[f"t_{p}"] for p in PHASES]
        # one clock across processes: each stage after the one before (10 ms slack for clock granularity)
        assert all(b >= a - 0.01 for a, b in zip(stamps, stamps[1:])), stamps
        assert x["first_pipes_method"] == "opened"
        assert x["t_exit"] - x["t_launch"] < 60
        assert x["child_t_pipes_opened"] <= x["t_first_pipes_message"] + 0.01
    by = {m["name"]: m["value"] for m in doc["metrics"]}
    assert set(by) == {f"launch_to_{p}_{q}_s" for p in PHASES for q in ("p50", "p99")}
    for p in PHASES:
        values = [x[f"t_{p}"] - x["t_launch"] for x in launches]
        assert min(values) - 1e-9 <= by[f"launch_to_{p}_p50_s"] <= by[f"launch_to_{p}_p99_s"] <= max(values) + 1e-9
    assert 0 < by["launch_to_process_start_p50_s"] < by["launch_to_first_measurement_p50_s"]


def test_child_past_its_deadline_is_a_failed_replicate(tmp_path: Path) -> None:
    proc, doc = run_suite(tmp_path, {"launches": 1, "timeout_s": 0.01})
    assert proc.returncode == 1
    assert doc["status"] == "failed" and "did not finish within 0.01s" in doc["reason"]


@pytest.mark.parametrize(("params", "named"), [({"launches": 0}, "launches"), ({"timeout_s": -1}, "timeout_s")])
def test_bad_parameters_fail_with_the_parameter_named(tmp_path: Path, params: dict[str, Any], named: str) -> None:
    proc, doc = run_suite(tmp_path, params)
    assert proc.returncode == 1
    assert doc["status"] == "failed" and f"parameter {named}" in doc["reason"]


def test_the_measured_window_is_the_timed_launches(tmp_path: Path) -> None:
    """Review: job_startup recorded no measured window, so its telemetry summaries covered the
    suite's own start-up as well as the launches."""
    proc, doc = run_suite(tmp_path, {"launches": 2})
    assert proc.returncode == 0, proc.stderr
    launches = json.loads((tmp_path / doc["samples"]["launches"]).read_text())["launches"]
    assert doc["measured_window"] == {"start_unix": min(x["t_launch"] for x in launches),
                                      "end_unix": max(x["t_exit"] for x in launches)}
