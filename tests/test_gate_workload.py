"""The one-variable gate over the whole workload (issue 26 items 1-2): the pinned specs field by field."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import yaml

from benchrun.spec import paths, validate_bytes
from benchrun.stats.gate import check_gate
from benchrun.stats.load import load_run
from benchrun.stats.synthetic import lognormal_replicates, make_run
from resources.launcher import LauncherResource

ROOT = Path(__file__).resolve().parents[1]
CANARY = yaml.safe_load((ROOT / "specs/local/canary.yaml").read_text())
GEMM_CMD = "layers.micro.suites[gemm].repoCommand"


def _suite(doc, name):
    return next(s for layer in doc["spec"]["layers"] for s in layer["suites"] if s["name"] == name)


def _pair(tmp_path, edit_cand, variable="runtime_version"):
    rng = np.random.default_rng(0)
    m = {("gemm", "", "tflops"): (lognormal_replicates(rng, 1, 0.02, 5), "TFLOP/s", "higher")}
    base = copy.deepcopy(CANARY)
    base["spec"]["comparison"]["variableUnderTest"] = variable
    cand = copy.deepcopy(base)
    edit_cand(cand)
    make_run(tmp_path, "base", m, spec=base)
    make_run(tmp_path, "cand", m, spec=cand)
    return load_run(tmp_path / "runs" / "base"), load_run(tmp_path / "runs" / "cand")


def _threads(doc):
    _suite(doc, "gemm")["repoCommand"] = "env OMP_NUM_THREADS=1 python -m benchrun.suites.gemm"


def test_a_changed_command_is_seen_and_passes_only_when_declared(tmp_path):
    b, c = _pair(tmp_path, _threads)
    undeclared = check_gate(b, c)  # runtime_version: the command is not what it may change (passed before)
    assert not undeclared.passed
    assert [d.field for d in undeclared.refused] == ["spec." + GEMM_CMD]
    assert "env OMP_NUM_THREADS=1" in undeclared.message() and "not declared" in undeclared.message()
    declared = check_gate(b, c, variable=GEMM_CMD)
    assert declared.passed and [(d.field, d.how) for d in declared.diffs] == [("spec." + GEMM_CMD, "declared")]
    assert f"spec.{GEMM_CMD}" in declared.message() and "(declared)" in declared.message()


def test_a_second_undeclared_difference_is_refused_naming_both_paths(tmp_path):
    def two(doc):
        _threads(doc)
        _suite(doc, "serving_sweep")["parameters"]["requests_per_point"] = 48
    b, c = _pair(tmp_path, two, variable=GEMM_CMD)
    gate = check_gate(b, c)  # the variable is read from the candidate's pinned spec
    assert gate.variable == GEMM_CMD and not gate.passed
    msg = gate.message()
    assert "spec.layers.component.suites[serving_sweep].parameters.requests_per_point: 24 -> 48 (not declared)" in msg
    assert f"spec.{GEMM_CMD}" in msg and "(declared)" in msg
    # an explicit override passes the pair and is recorded
    over = check_gate(b, c, allow_differences=["layers.component.suites[serving_sweep].parameters"])
    assert over.passed and "allowed by --allow-differences" in over.message()
    assert over.allowed_differences == ("layers.component.suites[serving_sweep].parameters",)


@pytest.mark.parametrize("edit,path", [
    (lambda d: d["spec"]["trials"].__setitem__("minReplicates", 7), "spec.trials.minReplicates"),
    (lambda d: _suite(d, "gemm")["parameters"].__setitem__("sizes", [1024]), "spec.layers.micro.suites[gemm].parameters.sizes"),
    (lambda d: d["spec"]["workload"].__setitem__("precision", "bf16"), "spec.workload.precision"),
    (lambda d: _suite(d, "gemm").__setitem__("env", {"OMP_NUM_THREADS": "1"}), "spec.layers.micro.suites[gemm].env.OMP_NUM_THREADS"),
])
def test_every_workload_field_is_compared(tmp_path, edit, path):
    b, c = _pair(tmp_path, edit)
    gate = check_gate(b, c)
    assert not gate.passed and [d.field for d in gate.refused] == [path]


def test_env_paths_and_cadence(tmp_path):
    def env(doc):
        _suite(doc, "gemm")["env"] = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "4"}
        doc["spec"]["intent"]["cadence"] = "adhoc"  # when a run happens is not what it runs
    rng = np.random.default_rng(1)
    m = {("gemm", "", "tflops"): (lognormal_replicates(rng, 1, 0.02, 5), "TFLOP/s", "higher")}
    base, cand = copy.deepcopy(CANARY), copy.deepcopy(CANARY)
    _suite(base, "gemm")["env"] = {"OMP_NUM_THREADS": "8", "MKL_NUM_THREADS": "4"}
    env(cand)
    make_run(tmp_path, "base", m, spec=base)
    make_run(tmp_path, "cand", m, spec=cand)
    gate = check_gate(load_run(tmp_path / "runs" / "base"), load_run(tmp_path / "runs" / "cand"),
                      variable="layers.micro.suites[gemm].env.OMP_NUM_THREADS")
    assert gate.passed and [d.field for d in gate.diffs] == ["spec.layers.micro.suites[gemm].env.OMP_NUM_THREADS"]


def test_paths_parse_resolve_and_render():
    assert paths.parse("layers.micro.suites[gemm].env.OMP_NUM_THREADS") == (
        "layers", "micro", "suites", "gemm", "env", "OMP_NUM_THREADS")
    assert paths.parse("spec.layers[micro].suites[gemm]") == ("layers", "micro", "suites", "gemm")
    assert paths.render(("layers", "component", "suites", "serving_sweep", "args")) == \
        "layers.component.suites[serving_sweep].args"
    assert paths.resolve(CANARY["spec"], "layers.micro.suites[gemm].parameters.sizes") == (True, [512])
    assert paths.resolve(CANARY["spec"], "layers.micro.suites[nosuch]")[0] is False
    for bad in ("", "a..b", "layers.[x", "x y"):
        with pytest.raises(ValueError):
            paths.parse(bad)


def _validate(doc):
    return validate_bytes(yaml.safe_dump(doc).encode(), "exp.yaml")[0]


def test_the_gemm_threads_experiment_is_a_valid_spec():
    exp = copy.deepcopy(CANARY)
    exp["metadata"]["name"] = "gemm-one-thread"
    exp["spec"]["intent"]["cadence"] = "adhoc"
    _threads(exp)
    exp["spec"]["comparison"]["variableUnderTest"] = GEMM_CMD
    res = _validate(exp)
    assert res.valid, [str(e) for e in res.errors]
    # the names people used before stay valid aliases
    exp["spec"]["comparison"]["variableUnderTest"] = "runtime_version"
    assert _validate(exp).valid
    # a path must name a field of this spec, in a compared section
    for bad, why in (("layers.micro.suites[gemmm].repoCommand", "names no field"),
                     ("sinks.rawArtifacts.pathTemplate", "does not compare"),
                     ("layers.micro suites", "not a spec path")):
        exp["spec"]["comparison"]["variableUnderTest"] = bad
        res = _validate(exp)
        assert not res.valid and any(why in str(e) for e in res.errors), (bad, [str(e) for e in res.errors])


def test_an_adhoc_run_is_published_only_when_allowed(tmp_path):
    from benchrun.errors import BenchrunError
    from benchrun.stats.baseline import promote

    rng = np.random.default_rng(2)
    exp = copy.deepcopy(CANARY)
    exp["spec"]["intent"]["cadence"] = "adhoc"
    make_run(tmp_path, "exp", {("gemm", "", "tflops"): (lognormal_replicates(rng, 1, 0.02, 5), "TFLOP/s", "higher")},
             spec=exp, sealed=True)
    with pytest.raises(BenchrunError, match="ad-hoc experiment.*--allow-adhoc"):
        promote("exp", tmp_path)
    assert promote("exp", tmp_path, allow_adhoc=True).is_file()


def test_a_declared_workload_field_passes_although_the_workload_digest_differs(tmp_path):
    def bf16(doc):
        doc["spec"]["workload"]["precision"] = "bf16"
        doc["spec"]["comparison"]["controls"]["fixed"]["precision"] = "bf16"
    b, c = _pair(tmp_path, bf16, variable="workload.precision")
    c.status["workload_spec_digest"] = "x" * 64  # what a real run's status says when spec.workload changed
    gate = check_gate(b, c)
    assert gate.passed and [d.field for d in gate.diffs] == ["spec.workload.precision"]
    assert not check_gate(b, c, variable="runtime_version").passed


def test_a_default_written_out_is_no_difference_to_the_gate_nor_to_the_workload(tmp_path):
    """nodes: 1, trials.maxReplicates: 10 and dataset.format: auto are the defaults: writing them out
    made the pair "differ" (exit 4) and changed workload_spec_digest (a different workload's history)."""
    from benchrun.spec.digest import workload_spec_digest

    def with_dataset(doc, **extra):
        doc["spec"]["workload"]["dataset"] = {"path": "specs/datasets/benchrun-conversations.jsonl",
                                              "sha256": "0" * 64, **extra}

    def defaults(doc):
        _suite(doc, "gemm")["nodes"] = 1
        doc["spec"]["trials"]["maxReplicates"] = 10
        with_dataset(doc, format="auto")

    b, c = _pair(tmp_path, defaults)
    with_dataset(b.spec)
    # the digest as written differs, as a real run's status says; the normalized one does not
    b.status["workload_spec_digest"], c.status["workload_spec_digest"] = (workload_spec_digest(r.spec) for r in (b, c))
    assert b.status["workload_spec_digest"] != c.status["workload_spec_digest"]
    gate = check_gate(b, c)
    assert gate.passed and gate.diffs == [], gate.message()
    from benchrun.spec.normal import WorkloadDigests, normalized_workload_digest

    assert normalized_workload_digest(b.spec) == normalized_workload_digest(c.spec) is not None
    # a value that is not the default is still a difference, shown as the values in effect
    _suite(c.spec, "gemm")["nodes"] = 2
    c.spec["spec"]["workload"]["dataset"]["format"] = "jsonl"
    c.status["workload_spec_digest"] = workload_spec_digest(c.spec)
    refused = check_gate(b, c)
    assert sorted(d.field for d in refused.refused) == [
        "spec.layers.micro.suites[gemm].nodes", "spec.workload.dataset.format", "status.workload_spec_digest"]
    assert [(d.baseline, d.candidate) for d in refused.refused if d.field.endswith("nodes")] == [(1, 2)]
    # runs recorded before the normalized digest match on the digest as written, as they did
    old, new = WorkloadDigests("w" * 64), WorkloadDigests("w" * 64, "n" * 64)
    assert old.matches(new) and new.matches(WorkloadDigests("x" * 64, "n" * 64))
    assert not new.matches(WorkloadDigests("w" * 64, "m" * 64)) and not old.matches(WorkloadDigests("x" * 64))


def test_a_pinned_spec_the_model_no_longer_reads_is_compared_as_written(tmp_path):
    def old(doc):
        doc["spec"]["intent"]["retiredField"] = True  # unknown to this model
    b, c = _pair(tmp_path, old)
    gate = check_gate(b, c)
    assert not gate.passed and [d.field for d in gate.refused] == ["spec.intent.retiredField"]


def test_allow_differences_in_the_spec_is_recorded_in_the_comparison_and_the_report(tmp_path, monkeypatch):
    import json

    import dagster as dg

    from bench_assets.stats_assets import ConfirmRoundResource, baseline_comparison
    from benchrun.report.html import build_report

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rng = np.random.default_rng(5)
    m = {("gemm", "", "tflops"): (lognormal_replicates(rng, 1, 0.02, 5), "TFLOP/s", "higher")}
    base, cand = copy.deepcopy(CANARY), copy.deepcopy(CANARY)
    _threads(cand)
    cand["spec"]["comparison"]["baseline"]["artifactRef"] = "base"
    cand["spec"]["comparison"]["allowDifferences"] = [GEMM_CMD]
    cand["spec"]["metrics"]["inference"]["primary"] = ["gemm/tflops"]
    make_run(tmp_path, "base", m, spec=base)
    make_run(tmp_path, "cand", m, spec=cand, status={"phase": "Analyzing", "outcome": "succeeded"})
    spec_ok = copy.deepcopy(CANARY)
    spec_ok["spec"]["comparison"]["allowDifferences"] = [GEMM_CMD]
    assert _validate(spec_ok).valid
    spec_ok["spec"]["comparison"]["allowDifferences"] = ["layers..x"]
    assert not _validate(spec_ok).valid
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions("benchmark_run", ["cand"])
    dg.materialize([baseline_comparison], instance=inst, partition_key="cand",
                   resources={"confirm_round": ConfirmRoundResource(enabled=False), "launcher": LauncherResource()})
    doc = json.loads((tmp_path / "runs" / "cand" / "structured" / "cand_comparison.json").read_text())
    assert doc["gate"]["passed"] and doc["gate"]["allowed_differences"] == [GEMM_CMD]
    assert "comparison.allowDifferences: " + GEMM_CMD in doc["gate"]["message"]
    assert doc["gate"]["allowed_by"] == "comparison.allowDifferences"
    page = build_report(tmp_path / "runs" / "cand").read_text()
    assert f"gate overridden</dt><dd><span class='badge warn'>{GEMM_CMD} (allowed by comparison.allowDifferences)" in page


def test_the_shipped_gemm_threads_experiment_passes_the_gate_against_the_canary(tmp_path):
    """specs/local/gemm-threads.yaml (the README's experiment) differs from the canary in exactly
    its declared variable: the gate passes and names that one path."""
    rng = np.random.default_rng(0)
    m = {("gemm", "", "tflops"): (lognormal_replicates(rng, 1, 0.02, 5), "TFLOP/s", "higher")}
    experiment = yaml.safe_load((ROOT / "specs/local/gemm-threads.yaml").read_text())
    [result] = validate_bytes((ROOT / "specs/local/gemm-threads.yaml").read_bytes(), "gemm-threads.yaml")
    assert result.valid and result.errors == []
    make_run(tmp_path, "base", m, spec=copy.deepcopy(CANARY))
    make_run(tmp_path, "cand", m, spec=experiment)
    gate = check_gate(load_run(tmp_path / "runs" / "base"), load_run(tmp_path / "runs" / "cand"))
    assert gate.passed, gate.message()
    assert [(d.field, d.how) for d in gate.diffs] == [("spec.layers.micro.suites[gemm].env.OMP_NUM_THREADS",
                                                       "declared")]


def _cli(monkeypatch, capsys, *args):
    """The real entry point (`benchrun ...`): exit code, stdout, stderr."""
    import sys

    from benchrun.cli import main

    monkeypatch.setattr(sys, "argv", ["benchrun", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted-key", "home-key-only"])
def test_cli_compare_refuses_an_undeclared_difference_and_records_an_allow_differences_override(
        tmp_path, monkeypatch, capsys, trusted):
    """``home-key-only``: no key configured (the default on a new machine). The override rewrote the
    signed comparison and the report but could not re-sign (the check before re-signing refused the
    home's own key), so the run failed ``verify`` and could no longer be promoted."""
    import json

    from benchrun.provenance.keys import load_signing_key
    from benchrun.spec.validation import load_spec_bytes
    from benchrun.stats.synthetic import BASE_SPEC, _deep_update

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rng = np.random.default_rng(7)
    base = copy.deepcopy(CANARY)
    base["spec"]["metrics"]["inference"]["primary"].append("gemm/tflops")  # the canary's own are not measured here
    cand = copy.deepcopy(base)
    _threads(cand)  # variable runtime_version; the gemm command differs
    for run_id, doc in (("base", base), ("cand", cand)):
        # the real digest of the spec make_run pins, so the run can be signed again as a real one is
        pinned = yaml.safe_dump(_deep_update(copy.deepcopy(BASE_SPEC), doc), sort_keys=False).encode()
        make_run(tmp_path, run_id, {("gemm", "", "tflops"): (lognormal_replicates(rng, 1, 0.02, 5), "TFLOP/s",
                                                             "higher")}, spec=doc,
                 status={"spec_digest": load_spec_bytes(pinned, "pinned").spec_digest})
    if trusted:
        monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", load_signing_key(tmp_path).keyid)  # the key checked out of band
    else:
        for var in ("BENCHRUN_TRUSTED_KEYIDS", "BENCHRUN_VERIFY_PUBLIC_KEY"):
            monkeypatch.delenv(var, raising=False)
    own = tmp_path / "keys" / "ed25519.pub.pem"
    key_args = () if trusted else ("--public-key", str(own))
    comparison = tmp_path / "runs" / "cand" / "structured" / "cand_comparison.json"
    code, out, err = _cli(monkeypatch, capsys, "compare", "base", "cand")
    assert code == 4, (out, err)
    assert f"spec.{GEMM_CMD}" in err and "not declared" in err and "env OMP_NUM_THREADS=1" in err
    assert not comparison.exists()  # a refused pair records nothing
    code, out, err = _cli(monkeypatch, capsys, "compare", "base", "cand", "--json", "--allow-differences", GEMM_CMD)
    assert code == 0, (out, err)
    rows = json.loads(out)["metrics"]
    assert rows and all(r["allowed_differences"] == [GEMM_CMD] for r in rows)
    assert f"gate overridden: --allow-differences {GEMM_CMD}; recorded in {comparison}" in err
    doc = json.loads(comparison.read_text())
    assert doc["gate"]["passed"] and doc["gate"]["allowed_differences"] == [GEMM_CMD]
    assert doc["gate"]["allowed_by"] == "--allow-differences"
    assert f"differences allowed by --allow-differences: {GEMM_CMD}" in doc["gate"]["message"]
    assert [(d["field"], d["how"]) for d in doc["gate"]["differences"]] == [
        (f"spec.{GEMM_CMD}", "allowed by --allow-differences")]
    page = (tmp_path / "runs" / "cand" / "reports" / "cand_report.html").read_text()
    assert f"gate overridden</dt><dd><span class='badge warn'>{GEMM_CMD} (allowed by --allow-differences)" in page
    # recorded through the run's own signing path (re-signed as `benchrun report` does): it still verifies
    from benchrun.provenance.signing import envelope_path, subject_mismatches, verify_envelope

    assert "warning" not in err
    run_dir = tmp_path / "runs" / "cand"
    statement = verify_envelope(envelope_path(run_dir), None if trusted else own, home=tmp_path)
    assert "structured/cand_comparison.json" in statement.subjects and subject_mismatches(statement, run_dir) == []
    code, out, err = _cli(monkeypatch, capsys, "verify", "cand", *key_args)
    assert code == 0, (out, err)
    # the text output says it too, and the second override says it replaced the first
    code, out, err = _cli(monkeypatch, capsys, "compare", "base", "cand", "--allow-differences", GEMM_CMD)
    assert code == 0 and f"allowed by --allow-differences: {GEMM_CMD}" in out
    assert "(replacing the comparison the run had)" in err


def test_a_passed_gate_names_a_spec_difference_among_what_changed() -> None:
    # "changed: nothing; spec differences: spec...OMP_NUM_THREADS: '<absent>' -> '1' (declared)"
    from benchrun.stats.gate import FieldDiff, GateResult

    env = "spec.layers[0].suites[0].env.OMP_NUM_THREADS"
    gate = GateResult(variable=env, diffs=[FieldDiff(env, "spec", "<absent>", "1", True, "declared")])
    assert gate.passed
    message = gate.message()
    assert "changed: spec; spec differences: " in message and "nothing" not in message
    assert "changed: nothing)" in GateResult(variable="runtime_version").message()
