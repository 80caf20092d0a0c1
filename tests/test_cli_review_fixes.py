"""Review fixes to what the CLI says (2026-12-07): a p99 short of requests names the arm and the
replicates it pooled, a local run's missing trace is refused by validate, a mix mismatch prints
weights that differ, `compare --json` answers a usage error in JSON, a file of another kind is one
error, and `plan` under a home that is a file says what `run` says."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from helpers import cli_in_process

ROOT = Path(__file__).resolve().parent.parent

# -- 1. a p99 short of requests: which arm, how many requests, how many of its replicates ----------------

PRIMARY = {"spec": {"metrics": {"primary": ["serve/p99_latency_ms"]}}}


def _reqs(rng, n, reps=5):
    return [pd.DataFrame({"request_id": [f"q{j}" for j in range(n)], "point": "c=4", "bucket": "a",
                          "e2e_ms": 100 * np.exp(rng.normal(0, 0.3, n)), "error": [None] * n}) for _ in range(reps)]


def _run(home, run_id, reqs):
    from benchrun.loadgen.metrics import VerdictPolicy, verdict
    from benchrun.stats.synthetic import make_run

    serving = []
    for r in reqs:
        v, why = verdict(load_model="closed_loop", offered_load=4, n_completed=len(r), n_errors=0, error_kinds={},
                         stats={}, client={}, policy=VerdictPolicy())
        serving.append([{"point": "c=4", "bucket": "all", "offered_load": 4, "verdict": v, "verdict_reasons": why}])
    p99 = [float(np.percentile(r["e2e_ms"], 99)) for r in reqs]
    return make_run(home, run_id, {("serve", "c=4", "p99_latency_ms"): (p99, "ms", "lower")}, spec=PRIMARY,
                    serving={"serve": serving}, requests={"serve": reqs})


def _contended(rd, suite, reps):
    """Mark replicates contended, as the telemetry hook records it, and sign the run again."""
    from benchrun.stats.synthetic import seal_run, write_manifest

    for k in reps:
        p = rd / "structured" / f"{rd.name}_{suite}_r{k}.json"
        doc = json.loads(p.read_text())
        doc["telemetry"] = {"contended": True, "contention_reason": "background CPU 60 %"}
        p.write_text(json.dumps(doc))
    (rd / "reports" / f"{rd.name}_provenance.dsse.json").unlink()
    write_manifest(rd)
    seal_run(rd, rd.parent.parent)


def test_a_p99_short_of_requests_names_the_arm_and_the_replicates_left_out_as_contended(tmp_path):
    # before: "not gateable: 288 requests, needs 368" when each arm ran 5 x 96 = 480 requests: neither
    # which arm nor that two of its replicates had been left out as contended
    from benchrun.stats.analysis import compare_runs

    rng = np.random.default_rng(0)
    base, cand = _run(tmp_path, "base", _reqs(rng, 96)), _run(tmp_path, "cand", _reqs(rng, 96))
    _contended(base, "serve", (4, 5))  # 3 quiet remain: the contended two leave the comparison
    gate, res = compare_runs(base, cand)
    assert res is None and gate.not_comparable
    assert ("primary serve/p99_latency_ms[c=4] cannot be judged (not gateable: the baseline pooled 288 requests "
            "(3 of 5 replicates: 2 left out as contended), needs 368)") in gate.message(), gate.message()


def test_a_p99_short_of_requests_in_one_arm_names_that_arm():
    from benchrun.stats.tails import ArmReplicates, compare_p99

    rng = np.random.default_rng(1)
    arm = lambda k, n: [100 * np.exp(rng.normal(0, 0.3, n)) for _ in range(k)]  # noqa: E731
    tc = compare_p99(arm(5, 100), arm(2, 100))
    assert not tc.gateable and tc.note == "not gateable: the candidate pooled 200 requests (2 of 2 replicates), needs 368"
    tc = compare_p99(arm(3, 100), arm(3, 100), replicates=(ArmReplicates(5, 1, 1), ArmReplicates(3)))
    assert tc.note == ("not gateable: the baseline pooled 300 requests (3 of 5 replicates: 1 left out as contended, "
                       "1 left out as failed) and the candidate 300 (3 of 3 replicates), needs 368")
    # the same count in both arms, all their replicates pooled: as before
    assert compare_p99(arm(5, 24), arm(5, 24)).note == "not gateable: 120 requests, needs 368"


# -- 2. a local run's trace that no replicate would find ----------------------------------------------------


def _with_trace(canary_doc, write_spec, trace, scheduler="local"):
    from benchrun.spec.validation import validate_path

    [(i, j)] = [(i, j) for i, layer in enumerate(canary_doc["spec"]["layers"])
                for j, s in enumerate(layer["suites"]) if s["name"] == "serving_sweep"]
    canary_doc["spec"]["layers"][i]["suites"][j]["parameters"] = {"trace": trace, "requests_per_point": 24}
    canary_doc["spec"]["intent"]["schedulerPath"] = scheduler
    (res,) = validate_path(write_spec(canary_doc))
    where = f"spec.layers[{i}].suites[{j}].parameters"
    return where, res, [(e.path, e.message) for e in res.errors if e.path.startswith(where)]


def test_validate_refuses_a_local_runs_trace_that_no_replicate_would_find(canary_doc, write_spec, tmp_path):
    # before: `validate` checked only the path's form; `benchrun run` then failed every replicate with
    # "TraceError: trace file traces/nosuch.jsonl does not exist"
    missing = tmp_path / "nosuch.jsonl"
    where, res, found = _with_trace(copy.deepcopy(canary_doc), write_spec, str(missing))
    assert not res.valid and found == [(f"{where}.trace", f"serving_sweep: parameter trace '{missing}': no file at "
                                        f"{missing} (a local run's suite reads its trace on this machine, as written); "
                                        "give the path of an existing trace file")]
    # a relative path is read from the run directory, the suite's working directory, which holds no trace
    _, res, found = _with_trace(copy.deepcopy(canary_doc), write_spec, "traces/nosuch.jsonl")
    assert not res.valid and [p for p, _ in found] == [f"{where}.trace"]
    assert "from the run directory (<home>/runs/<run id>/traces/nosuch.jsonl" in found[0][1]
    # an existing trace passes; a Kubernetes run's trace is read where its suite runs: not looked for here
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({"timestamp": 0, "input_length": 8, "output_length": 2}) + "\n")
    assert _with_trace(copy.deepcopy(canary_doc), write_spec, str(trace))[1].valid
    assert _with_trace(copy.deepcopy(canary_doc), write_spec, str(missing), scheduler="slinky-kueue")[2] == []


def test_a_pinned_spec_read_again_does_not_look_for_its_trace(canary_doc, tmp_path):
    """A run's pinned spec is read again by every asset (with the run's own dataset finder): a
    trace deleted since does not make the run's own spec invalid."""
    from benchrun.spec import load_spec_bytes
    from benchrun.spec.datasets import pinned_finder

    [(i, j)] = [(i, j) for i, layer in enumerate(canary_doc["spec"]["layers"])
                for j, s in enumerate(layer["suites"]) if s["name"] == "serving_sweep"]
    canary_doc["spec"]["layers"][i]["suites"][j]["parameters"] = {"trace": str(tmp_path / "gone.jsonl")}
    raw = yaml.safe_dump(canary_doc, sort_keys=False).encode()
    load_spec_bytes(raw, "pinned.yaml", find_dataset=pinned_finder(None, "pinned.yaml"))


# -- 3. a sequence-length mix that differs prints weights that differ ------------------------------------------


def test_a_mix_mismatch_prints_the_weights_that_differ(canary_doc, write_spec):
    # before: "is [{128/32@0.7},...] but spec.workload.sequenceLengthMix is [{128/32@0.7},...]"
    from benchrun.spec.validation import validate_path

    canary_doc["spec"]["workload"]["sequenceLengthMix"][0]["weight"] = 0.70000001
    (res,) = validate_path(write_spec(canary_doc))
    [message] = [e.message for e in res.errors if e.path == "spec.comparison.controls.fixed.sequenceLengthMix"]
    assert message == ("is [{128/32@0.7},{256/64@0.3}] but spec.workload.sequenceLengthMix is "
                       "[{128/32@0.70000001},{256/64@0.3}]; they must be equal")


# -- 4. `compare --json`: a usage error is JSON too ---------------------------------------------------------


@pytest.mark.parametrize("args, message, baseline", [
    (["compare", "base-run", "--json"], "Missing argument 'CANDIDATE'.", "base-run"),
    (["compare", "--json", "a", "b", "--variable"], "Option '--variable' requires an argument.", None),
])
def test_compare_json_writes_a_usage_error_as_json(args, message, baseline, monkeypatch, capsys, tmp_path):
    # before: exit 2 with nothing on stdout, though --json always writes why
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path / "home"))
    code, out, err = cli_in_process(args, monkeypatch, capsys)
    assert code == 2 and message in err  # click's usage lines stay on stderr
    doc = json.loads(out)
    assert doc == {"refused": True, "error": True, "exit_code": 2, "message": message, "baseline": baseline,
                   "candidate": None}
    # without --json, and for another command, stdout stays empty
    code, out, _err = cli_in_process([a for a in args if a != "--json"], monkeypatch, capsys)
    assert code == 2 and out == ""
    code, out, _err = cli_in_process(["promote", "--json", "--nosuch"], monkeypatch, capsys)
    assert code == 2 and out == ""


# -- 5. a file of another kind is one error -----------------------------------------------------------------


def test_validate_gives_a_document_of_another_kind_one_error():
    # before: `kind: is 'CustomResourceDefinition'`, then 19 BenchmarkRun schema errors and a "did you mean 'sinks'"
    from benchrun.spec.validation import validate_path

    crd = ROOT / "specs/crd/benchmarkrun-crd.yaml"
    [res] = validate_path(crd)
    assert not res.valid and [(e.path, e.message) for e in res.errors] == [(
        "kind", "is 'CustomResourceDefinition' (apiVersion 'apiextensions.k8s.io/v1'): this document is not a "
                "BenchmarkRun (apiVersion benchmarking.aisp.dev/v1alpha1, kind BenchmarkRun), so nothing else in it "
                "was checked; give a BenchmarkRun spec")]


def test_a_kind_close_to_benchmarkrun_is_still_checked_in_full(canary_doc, write_spec):
    from benchrun.spec.validation import validate_path

    canary_doc["kind"] = "BenchRun"  # a BenchmarkRun with a typo: every other error is still worth reporting
    del canary_doc["spec"]["sinks"]
    (res,) = validate_path(write_spec(canary_doc))
    assert {"kind", "spec.sinks"} <= {e.path for e in res.errors}


# -- 6. `plan` under a home that is a file ------------------------------------------------------------------


def test_plan_under_a_home_that_is_a_file_says_what_run_says(tmp_path, monkeypatch, capsys):
    # before: "there is no benchrun home … `benchrun run SPEC` creates one" (exit 1), which run cannot
    from benchrun.errors import BenchrunError
    from benchrun.paths import benchrun_home

    home = tmp_path / "homefile"
    home.write_text("")
    monkeypatch.setenv("BENCHRUN_HOME", str(home))
    with pytest.raises(BenchrunError) as run_says:
        benchrun_home()  # what `run` and `submit` say
    code, _out, err = cli_in_process(["plan", str(ROOT / "specs/local/canary.yaml")], monkeypatch, capsys)
    assert code == 2 and err.strip() == f"error: {run_says.value}"
    assert "cannot be used as a directory: File exists" in err and not home.is_dir()
    # a home not made yet: plan still says there is none (and makes none)
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path / "none"))
    code, _out, err = cli_in_process(["plan", str(ROOT / "specs/local/canary.yaml")], monkeypatch, capsys)
    assert code == 1 and "there is no benchrun home" in err and not (tmp_path / "none").exists()


def test_compare_names_a_missing_candidate_alias_as_the_candidate(tmp_path, monkeypatch, capsys):
    """Found in review: `compare RUN published/nosuch` said "baseline alias published/nosuch is not set"."""
    from benchrun.stats.synthetic import make_run

    make_run(tmp_path, "base-x", {("s", "", "m"): ([1.0, 1.1, 0.9], "ms", "lower")})
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    code, out, err = cli_in_process(["compare", "base-x", "published/nosuch", "--json"], monkeypatch, capsys)
    assert code == 1, err
    message = json.loads(out)["message"]
    assert message.startswith("candidate alias published/nosuch is not set"), message  # was: "baseline alias ..."


def test_validate_refuses_a_sweep_that_names_one_load_point_twice(canary_doc, write_spec):
    """Found in the re-review: `concurrency: [4, 4]` passed validate and ran, writing two unlabelled rows of
    every headline metric at c=4, which the comparison (since today) refuses to merge; refused up front."""
    from benchrun.spec.validation import validate_path

    [(i, j)] = [(i, j) for i, layer in enumerate(canary_doc["spec"]["layers"])
                for j, s in enumerate(layer["suites"]) if s["name"] == "serving_sweep"]
    params = canary_doc["spec"]["layers"][i]["suites"][j]["parameters"]
    params["concurrency"] = [4, 4, 8]
    (res,) = validate_path(write_spec(canary_doc))
    assert not res.valid
    assert any("load point c=4 given more than once" in e.message for e in res.errors), [e.message for e in res.errors]


def test_every_command_that_reads_a_home_says_what_run_says_under_a_home_that_is_a_file(tmp_path, monkeypatch,
                                                                                       capsys):
    # plan said it (above); query, report and the other readers said "there is no benchrun home … `benchrun
    # run SPEC` creates one", which run cannot
    home = tmp_path / "homefile"
    home.write_text("")
    monkeypatch.setenv("BENCHRUN_HOME", str(home / "inside"))  # a folder above the home is the file
    for argv in (["query", "SELECT 1"], ["maintain-warehouse"], ["rebuild-warehouse"]):
        code, _out, err = cli_in_process(argv, monkeypatch, capsys)
        assert code == 2 and "cannot be used as a directory" in err and "creates one" not in err, (argv, err)
