"""Review fixes of the job_startup suite: a finite deadline per launch, and the dagster-pipes
version it records."""

from __future__ import annotations

import json
import threading
from importlib import metadata
from pathlib import Path

import pytest

from benchrun.spec.builtin_suites import check_parameters
from benchrun.suites import job_startup
from benchrun.suites._common import ParamError, StaticParams


@pytest.mark.parametrize("timeout_s", [float("inf"), threading.TIMEOUT_MAX * 2, 1e10, 86400.5])
def test_a_deadline_threading_cannot_keep_is_refused_naming_timeout_s(timeout_s):
    """threading.Timer(inf or > TIMEOUT_MAX) died with OverflowError in its own thread: the
    watchdog never ran, and a hung child had no deadline."""
    with pytest.raises(ParamError) as refused:
        job_startup.settings(StaticParams("job_startup", {"timeout_s": timeout_s}))
    assert refused.value.parameter == "timeout_s"
    assert "<= 86400" in str(refused.value) and "give e.g. 60" in str(refused.value)
    # and `benchrun validate` runs the same parsing
    with pytest.raises(ParamError, match="parameter timeout_s=.* must be a number of seconds > 0 and <= 86400"):
        check_parameters("job_startup", {"timeout_s": timeout_s})


def test_deadlines_up_to_an_hour_are_taken():
    assert job_startup.settings(StaticParams("job_startup", {"timeout_s": 86400})).timeout_s == 86400.0
    assert job_startup.settings(StaticParams("job_startup", {})) == (10, 60.0)
    assert job_startup.MAX_TIMEOUT_S < threading.TIMEOUT_MAX


def test_benchrun_validate_reports_the_deadline_at_timeout_s(canary_doc, write_spec):
    from benchrun.spec.validation import validate_path

    [at] = [(i, j) for i, layer in enumerate(canary_doc["spec"]["layers"])
            for j, s in enumerate(layer["suites"]) if s["name"] == "job_startup"]
    canary_doc["spec"]["layers"][at[0]]["suites"][at[1]]["parameters"] = {"launches": 1, "timeout_s": 1e10}
    (res,) = validate_path(write_spec(canary_doc))
    where = f"spec.layers[{at[0]}].suites[{at[1]}].parameters.timeout_s"
    assert [e.message for e in res.errors if e.path == where] == [
        "job_startup: parameter timeout_s=10000000000.0 must be a number of seconds > 0 and <= 86400 (the deadline "
        "of one launch); give e.g. 60"], res.errors


def test_the_recorded_dagster_pipes_version_is_the_installed_one(tmp_path: Path):
    """``dagster_pipes`` has no ``__version__``: the context recorded None every time."""
    from benchrun.suites._runtime import SuiteContext

    ctx = SuiteContext({"BENCHRUN_RUN_ID": "r1", "BENCHRUN_RUN_DIR": str(tmp_path), "BENCHRUN_SUITE": "job_startup",
                        "BENCHRUN_REPLICATE": "1", "BENCHRUN_CASE_ID": "case-1",
                        "BENCHRUN_PARAMS": json.dumps({"launches": 1}), "BENCHRUN_WORKLOAD": "{}"})
    job_startup.run(ctx)
    assert ctx.context["dagster_pipes_version"] == metadata.version("dagster-pipes")
    assert ctx.context["dagster_pipes_version"]
