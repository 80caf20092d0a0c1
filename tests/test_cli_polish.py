"""Small things a first-time user meets in the CLI (issue 15, item 7)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from benchrun.spec import SpecInvalid, load_spec_bytes

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "BENCHRUN_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("DAGSTER_HOME", None)
    return subprocess.run([sys.executable, "-m", "benchrun.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)


def test_a_misspelled_primary_metric_is_named_as_unknown(canary_doc):
    canary_doc["spec"]["metrics"]["inference"]["primary"][0] = "ttft_msec"
    with pytest.raises(SpecInvalid) as err:
        load_spec_bytes(yaml.safe_dump(canary_doc).encode(), "typo.yaml")
    found = {e.path: e.message for e in err.value.errors}
    assert found["spec.metrics.inference.primary[0]"] == "unknown metric 'ttft_msec' (did you mean 'ttft_ms'?)"
    canary_doc["spec"]["metrics"]["inference"]["primary"][0] = "ttft_ms"
    canary_doc["spec"]["metrics"]["inference"]["secondary"] = ["my_suite_widgets_per_s"]  # custom: not a typo
    load_spec_bytes(yaml.safe_dump(canary_doc).encode(), "custom.yaml")


def test_compare_a_run_with_itself_is_refused(tmp_path):
    from benchrun.stats.synthetic import lognormal_replicates, make_run

    rng = np.random.default_rng(0)
    make_run(tmp_path, "only", {("serve", "", "tokens_per_second"): (lognormal_replicates(rng, 100, 0.02, 5),
                                                                     "tok/s", "higher")})
    r = _cli("compare", "only", "only", home=tmp_path)
    assert r.returncode == 2 and "same run" in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1


def test_piped_help_is_plain_text_and_submit_says_what_next(tmp_path):
    r = _cli("--help", home=tmp_path)
    assert r.returncode == 0 and "run " in r.stdout
    assert not any(ch in r.stdout for ch in "╭╮│─"), r.stdout  # no rich box when piped
    r = _cli("query", "--help", home=tmp_path)
    assert "[default: " in r.stdout and "\\[" not in r.stdout, r.stdout  # no markup escapes either
    r = _cli("submit", str(ROOT / "specs/local/canary.yaml"), home=tmp_path)
    assert r.returncode == 0, r.stderr
    run_id = r.stdout.strip()
    assert run_id.startswith("local-canary-") and "\n" not in run_id  # stdout: the run id alone
    assert f"benchrun show {run_id}" in r.stderr and "make ui" in r.stderr


def test_submit_and_run_print_a_rejection_on_stderr_and_nothing_on_stdout(tmp_path, canary_doc, monkeypatch, capsys):
    """stdout carries submit's run id alone (scripts read it): a rejection went there too."""
    from helpers import cli_in_process

    canary_doc["spec"]["trials"]["minReplicates"] = 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(canary_doc, sort_keys=False))
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path / "home"))
    for command in ("submit", "run"):
        code, out, err = cli_in_process([command, str(bad)], monkeypatch, capsys)
        assert (code, out) == (2, ""), (command, out)
        assert "rejected: 1 validation error(s)" in err and "spec.trials.minReplicates" in err, (command, err)


def test_compare_refuses_a_run_that_has_not_run(tmp_path):
    from benchrun.stats.synthetic import lognormal_replicates, make_run

    rng = np.random.default_rng(1)
    make_run(tmp_path, "done", {("serve", "", "tokens_per_second"): (lognormal_replicates(rng, 100, 0.02, 5),
                                                                     "tok/s", "higher")})
    pending = _cli("submit", str(ROOT / "specs/local/canary.yaml"), home=tmp_path).stdout.strip()
    r = _cli("compare", "done", pending, home=tmp_path)
    assert r.returncode == 5 and "has not run (phase Pending)" in r.stderr, r.stderr  # not comparable
    assert "Traceback" not in r.stderr and "<absent>" not in r.stderr + r.stdout


def _errors(doc) -> dict[str, str]:
    with pytest.raises(SpecInvalid) as err:
        load_spec_bytes(yaml.safe_dump(doc).encode(), "margins.yaml")
    return {e.path: e.message for e in err.value.errors}


def test_a_per_metric_margin_the_comparison_would_never_match_is_an_error(canary_doc):
    """delta_pct() looks margins up by the bare metric name: a misspelt or qualified key used to
    pass validation and leave the metric on comparison.deltaPct without a word."""
    comp = canary_doc["spec"]["comparison"]
    canary_doc["spec"]["metrics"]["inference"]["secondary"] = ["my_suite_widgets_per_s"]
    comp["deltaPctByMetric"] = {"p99_latncy_ms": 5, "serving_workflow/ttft_ms[c=4]": 4,
                                "my_suite_widgets_per_sec": 2, "busbw_gbps": 1}
    comp["absoluteMarginByMetric"] = {"reqest_goodput": 1}
    found = _errors(canary_doc)
    key = "spec.comparison.deltaPctByMetric"
    assert found[f"{key}.p99_latncy_ms"].startswith("unknown metric 'p99_latncy_ms' (did you mean 'p99_latency_ms'?)")
    assert "write 'ttft_ms'" in found[f'{key}["serving_workflow/ttft_ms[c=4]"]']
    assert "did you mean 'my_suite_widgets_per_s'" in found[f"{key}.my_suite_widgets_per_sec"]  # a declared custom one
    assert "did you mean 'request_goodput'" in found["spec.comparison.absoluteMarginByMetric.reqest_goodput"]
    assert not any("busbw_gbps" in path for path in found)  # far from every name: a custom suite's own metric
    comp["deltaPctByMetric"] = {"p99_latency_ms": 5, "my_suite_widgets_per_s": 2, "busbw_gbps": 1}
    comp["absoluteMarginByMetric"] = {"request_goodput": 1}
    load_spec_bytes(yaml.safe_dump(canary_doc).encode(), "margins.yaml")


def test_a_no_change_band_of_100_percent_or_more_is_refused(canary_doc):
    canary_doc["spec"]["comparison"]["deltaPct"] = 100
    canary_doc["spec"]["comparison"]["deltaPctByMetric"] = {"ttft_ms": 250}
    found = _errors(canary_doc)
    assert "less than 100" in found["spec.comparison.deltaPct"]
    assert "less than 100" in found["spec.comparison.deltaPctByMetric.ttft_ms"]
