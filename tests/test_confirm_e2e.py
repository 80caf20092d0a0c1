"""Confirm before alert, end to end: a real regression is re-measured and then alerted; an
A/A pair is not. Both arms are real runs of the graph with a tiny real suite."""

import json

import pytest

from benchrun import submit as sub
from benchrun.rundir import RunDir
from helpers import tiny_spec

# A suite that reports the spec's primary metric ttft_ms around a level set by a parameter
# (a stand-in for a runtime whose first-token latency changed), with a little noise.
SUITE = (
    "python -c 'import random; from benchrun.suites._runtime import main\n"
    "def run(ctx):\n"
    "    level = float(ctx.params[\"level_ms\"])\n"
    "    ctx.add_metric(\"ttft_ms\", level * (1 + random.uniform(-0.005, 0.005)), \"ms\", \"lower\", case=\"c=1\")\n"
    "main(run)'"
)


def _spec(doc, name, level, baseline_ref):
    doc = json.loads(json.dumps(doc))
    doc["metadata"]["name"] = name
    doc["spec"]["trials"]["minReplicates"] = 5
    # the custom suite's ttft_ms gates (the canary's own primaries are qualified to serving_workflow)
    doc["spec"]["metrics"]["inference"]["primary"] = ["ttft/ttft_ms[c=1]", "tokens_per_second", "p99_latency_ms",
                                                      "jitter_ms", "cost_per_request_usd"]
    tiny_spec(doc, [], [{"name": "ttft", "repoCommand": SUITE, "parameters": {"level_ms": level}}])
    doc["spec"]["comparison"]["baseline"]["artifactRef"] = baseline_ref
    # the level is what the pair changes: declared, so the one-variable gate lets it (alone) differ
    doc["spec"]["comparison"]["variableUnderTest"] = "layers.component.suites[ttft].parameters.level_ms"
    return doc


def _run(doc, write_spec, fname):
    prepared = sub.prepare(write_spec(doc, fname))
    result = sub.execute(prepared)
    assert result.success
    return RunDir.for_run(prepared.run_id).read_status()


def _condition(status, type_):
    return next(c for c in status["conditions"] if c["type"] == type_)


@pytest.mark.slow
def test_regression_is_confirmed_by_a_fresh_interleaved_round_before_it_alerts(bench_home, canary_doc, write_spec,
                                                                               monkeypatch):
    base = _run(_spec(canary_doc, "base", 10.0, "none-yet"), write_spec, "base.yaml")
    seen = []  # status.json as the round left it, just before the comparison clears its progress
    drop = RunDir.drop_status_fields
    monkeypatch.setattr(RunDir, "drop_status_fields", lambda self, *names: (seen.append(self.read_status()),
                                                                             drop(self, *names)))
    cand = _run(_spec(canary_doc, "cand", 12.0, base["run_id"]), write_spec, "cand.yaml")
    cond = _condition(cand, "RegressionDetected")
    assert cond["status"] == "True", cond
    assert "confirmed" in cond["message"]
    # The round re-ran both arms from their pinned specs, outside the sealed runs.
    root = bench_home / "confirmations" / cand["run_id"]
    b = sorted((root / "baseline" / base["run_id"] / "structured").glob("*_ttft_r*.json"))
    c = sorted((root / "candidate" / cand["run_id"] / "structured").glob("*_ttft_r*.json"))
    assert len(b) == 5 and len(c) == 5
    # `benchrun run`'s progress display showed the round (status.json: the sealed progress file cannot)
    shown = seen[-1]["confirmation_progress"]
    assert shown["launches"] == 10 and shown["last"].startswith("ttft r")
    assert "confirmation_progress" not in cand  # the round is over: the display no longer says "confirming"
    comp = json.loads((bench_home / "runs" / cand["run_id"] / "structured" / f"{cand['run_id']}_comparison.json")
                      .read_text())
    order = comp["confirmation_evidence"]["order"]  # the drawn launch order is the round's evidence
    assert len(order) == 10 and {o["arm"] for o in order[::2]} == {"baseline", "candidate"}
    assert json.loads(b[0].read_text())["metrics"][0]["value"] == pytest.approx(10.0, rel=0.01)
    assert json.loads(c[0].read_text())["metrics"][0]["value"] == pytest.approx(12.0, rel=0.01)


@pytest.mark.slow
def test_an_a_a_pair_raises_no_regression(bench_home, canary_doc, write_spec):
    base = _run(_spec(canary_doc, "aa-base", 10.0, "none-yet"), write_spec, "a.yaml")
    cand = _run(_spec(canary_doc, "aa-cand", 10.0, base["run_id"]), write_spec, "b.yaml")
    assert _condition(cand, "RegressionDetected")["status"] == "False"
    assert not (bench_home / "confirmations" / cand["run_id"]).exists()
