"""The comparison fails closed (issue 28 item 1): a pair that is not comparable never exits 0.

Runs are fabricated in the documented run-directory format (benchrun.stats.synthetic); none
of these tests runs a benchmark.
"""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from benchrun.stats import admit
from benchrun.stats.analysis import compare_runs, write_comparison
from benchrun.stats.synthetic import lognormal_replicates, make_run, seal_run, write_manifest
from resources.launcher import LauncherResource

PRIM = {"metrics": {"inference": {"primary": ["tokens_per_second", "p99_latency_ms"]}}}
LAYERS = [{"name": "component", "enabled": True, "suites": [{"name": "serve", "repoCommand": "python -m x"},
                                                            {"name": "load", "repoCommand": "python -m y"}]}]
SPEC = {"spec": {**PRIM, "layers": LAYERS}}


def _metrics(rng, scale=1.0, drop=()):
    out = {("serve", "", "tokens_per_second"): (lognormal_replicates(rng, 100 * scale, 0.02, 5), "tok/s", "higher"),
           ("serve", "", "p99_latency_ms"): (lognormal_replicates(rng, 40, 0.02, 5), "ms", "lower"),
           ("load", "", "rows_per_second"): (lognormal_replicates(rng, 5e4, 0.02, 5), "rows/s", "higher")}
    return {k: v for k, v in out.items() if k[2] not in drop}


def _tamper(rd):
    """Double every value of one sealed result file (the manifest no longer matches)."""
    p = sorted((rd / "structured").glob(f"{rd.name}_serve_r1.json"))[0]
    doc = json.loads(p.read_text())
    for m in doc["metrics"]:
        m["value"] *= 2
    p.write_text(json.dumps(doc))


def _kinds(home, rng):
    """One run of each kind the soak draws from; returns {kind: run id}."""
    make_run(home, "succeeded", _metrics(rng), spec=SPEC)
    make_run(home, "succeeded2", _metrics(rng), spec=SPEC)
    make_run(home, "failed", _metrics(rng), spec=SPEC, status={"phase": "Failed", "outcome": "failed"})
    # kill -9 mid-run: still Running, one suite measured, never sealed
    make_run(home, "killed", {k: v for k, v in _metrics(rng).items() if k[0] == "serve"}, spec=SPEC,
             status={"phase": "Running"}, manifest=False)
    one_suite = {"spec": {**PRIM, "layers": [{**LAYERS[0], "suites": LAYERS[0]["suites"][:1]}]}}
    make_run(home, "different-spec", {k: v for k, v in _metrics(rng).items() if k[0] == "serve"}, spec=one_suite)
    _tamper(make_run(home, "tampered", _metrics(rng), spec=SPEC))
    make_run(home, "missing-primary", _metrics(rng, drop=("p99_latency_ms",)), spec=SPEC)
    # resealed: a result edited and the manifest rewritten to match, with no envelope (never signed, or
    # the envelope deleted): the manifest alone proves nothing, so these must not pass either
    rd = make_run(home, "resealed-unsigned", _metrics(rng), spec=SPEC, sealed=False)
    _tamper(rd)
    write_manifest(rd)
    rd = make_run(home, "envelope-dropped", _metrics(rng), spec=SPEC)
    _tamper(rd)
    (rd / "reports" / f"{rd.name}_provenance.dsse.json").unlink()
    write_manifest(rd)
    return ["succeeded", "failed", "killed", "different-spec", "tampered", "missing-primary", "resealed-unsigned",
            "envelope-dropped"]


def _reasons(home, b, c, **kw):
    gate, res = compare_runs(home / "runs" / b, home / "runs" / c, **kw)
    assert (res is None) == (not gate.passed)
    return {r.reason for r in gate.refusals}, gate, res


def test_every_refusal_in_both_directions(tmp_path):
    rng = np.random.default_rng(1)
    _kinds(tmp_path, rng)
    expect = {"failed": {admit.NOT_SUCCEEDED, admit.EVIDENCE},  # the sealed manifest here says succeeded
              "killed": {admit.NOT_SUCCEEDED, admit.EVIDENCE, admit.SUITES_DIFFER},
              "different-spec": {admit.SUITES_DIFFER},
              "tampered": {admit.EVIDENCE},
              "missing-primary": {admit.PRIMARY_UNMEASURED},
              "resealed-unsigned": {admit.EVIDENCE},
              "envelope-dropped": {admit.EVIDENCE}}
    for kind, reasons in expect.items():
        for b, c in (("succeeded", kind), (kind, "succeeded")):
            got, gate, res = _reasons(tmp_path, b, c)
            want = reasons - ({admit.EVIDENCE} if kind == "failed" else set())
            assert want <= got, (b, c, got)
            assert res is None and gate.not_comparable
            assert not gate.passed and "fail closed" in gate.message()
    ok, gate, res = _reasons(tmp_path, "succeeded", "succeeded2")
    assert not ok and gate.passed and res.condition()["status"] == "False"


def test_refusal_messages_name_what_is_wrong(tmp_path):
    rng = np.random.default_rng(2)
    _kinds(tmp_path, rng)
    _, gate, _ = _reasons(tmp_path, "succeeded", "tampered")
    assert "tampered_serve_r1.json (sha256 differs from manifest.json)" in gate.message()
    _, gate, _ = _reasons(tmp_path, "missing-primary", "succeeded")
    assert "primary serve/p99_latency_ms has no value in the baseline (0 vs 5" in gate.message()
    _, gate, _ = _reasons(tmp_path, "succeeded", "different-spec")
    assert "only in baseline succeeded: component/load" in gate.message()
    for kind in ("resealed-unsigned", "envelope-dropped"):
        _, gate, _ = _reasons(tmp_path, "succeeded", kind)
        assert f"reports/{kind}_provenance.dsse.json is missing: the run is not signed" in gate.message()
    _, gate, _ = _reasons(tmp_path, "succeeded", "killed")
    assert "candidate killed has not run (phase Running)" in gate.message()


def test_a_resealed_tampered_signed_run_is_refused(tmp_path, monkeypatch):
    """Editing a result and rewriting manifest.json: the signature's sealed subjects catch it."""
    from benchrun.provenance import sign_run

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rng = np.random.default_rng(3)
    make_run(tmp_path, "base", _metrics(rng), spec=SPEC)
    cand = make_run(tmp_path, "cand", _metrics(rng), spec=SPEC)
    sign_run(cand, tmp_path)
    assert _reasons(tmp_path, "base", "cand")[0] == set()  # signed and intact: compared
    _tamper(cand)
    write_manifest(cand)
    got, gate, _ = _reasons(tmp_path, "base", "cand")
    assert got == {admit.EVIDENCE} and "signed file manifest.json" in gate.message()
    got, gate, _ = _reasons(tmp_path, "cand", "base")
    assert got == {admit.EVIDENCE}


def test_an_analyzing_candidate_is_admitted_only_by_the_asset(tmp_path):
    rng = np.random.default_rng(4)
    make_run(tmp_path, "base", _metrics(rng), spec=SPEC)
    make_run(tmp_path, "cand", _metrics(rng), spec=SPEC, status={"phase": "Analyzing", "outcome": "succeeded"})
    make_run(tmp_path, "bad", _metrics(rng), spec=SPEC, status={"phase": "Analyzing", "outcome": "failed"})
    assert _reasons(tmp_path, "base", "cand")[0] == {admit.NOT_SUCCEEDED}
    assert _reasons(tmp_path, "base", "cand", candidate_in_progress=True)[0] == set()
    assert _reasons(tmp_path, "base", "bad", candidate_in_progress=True)[0] == {admit.NOT_SUCCEEDED}
    # the baseline is never "in progress"
    assert admit.NOT_SUCCEEDED in _reasons(tmp_path, "cand", "base", candidate_in_progress=True)[0]


def test_a_retried_candidate_is_compared_as_the_run_in_progress(tmp_path):
    """A retry that resumes after its attempt was marked Failed (a failed step, a reaped process)
    or Canceled still reads that phase while the asset compares it: what its suites measured
    decides, as for a first attempt (it was refused as "not Succeeded (phase Failed, outcome
    failed)" and the run ended Succeeded with that verdict). Only for the run in progress."""
    rng = np.random.default_rng(14)
    make_run(tmp_path, "base", _metrics(rng), spec=SPEC)
    for run_id, phase, measured in (("failed-ok", "Failed", "succeeded"), ("canceled-partial", "Canceled", "partial"),
                                    ("failed-bad", "Failed", "failed"), ("canceled-early", "Canceled", None)):
        make_run(tmp_path, run_id, _metrics(rng), spec=SPEC, sealed=False,
                 status={"phase": phase, "outcome": phase.lower(), "outcome_measured": measured})
    assert _reasons(tmp_path, "base", "failed-ok", candidate_in_progress=True)[0] == set()
    assert _reasons(tmp_path, "base", "canceled-partial", candidate_in_progress=True)[0] == set()
    # what the suites measured failed, or the run was canceled before they finished: refused still
    for run_id in ("failed-bad", "canceled-early"):
        assert _reasons(tmp_path, "base", run_id, candidate_in_progress=True)[0] == {admit.NOT_SUCCEEDED}
    # any other run in that state is refused: it is not the one being materialized
    assert admit.NOT_SUCCEEDED in _reasons(tmp_path, "base", "failed-ok")[0]
    make_run(tmp_path, "cand", _metrics(rng), spec=SPEC, sealed=False, status={"phase": "Analyzing", "outcome": "succeeded"})
    assert admit.NOT_SUCCEEDED in _reasons(tmp_path, "failed-ok", "cand", candidate_in_progress=True)[0]


def test_refused_comparison_writes_an_unknown_condition(tmp_path):
    rng = np.random.default_rng(5)
    make_run(tmp_path, "base", _metrics(rng), spec=SPEC)
    cand = make_run(tmp_path, "cand", _metrics(rng, drop=("p99_latency_ms",)), spec=SPEC)
    gate, res = compare_runs(tmp_path / "runs" / "base", cand)
    doc = json.loads(write_comparison(gate, res, "base", cand).read_text())
    assert doc["gate"]["comparable"] is False and doc["gate"]["refusals"][0]["reason"] == admit.PRIMARY_UNMEASURED
    assert doc["condition"]["status"] == "Unknown" and doc["condition"]["reason"] == "NotComparable"
    assert "metrics" not in doc  # nothing judged
    from benchrun.report import content
    from benchrun.stats.load import load_run

    v = content.verdict(load_run(cand), doc)
    assert v.regressions == "not compared" and "Not comparable, nothing judged" in v.against


def test_a_regression_is_still_said_when_a_primary_is_unmeasured(tmp_path):
    """Fail closed refuses "no regression"; a candidate whose every launch failed still regresses."""
    rng = np.random.default_rng(6)
    prim = {"spec": {"metrics": {"inference": {"primary": ["tokens_per_second"]}}}}
    m = {("serve", "", "tokens_per_second"): (lognormal_replicates(rng, 100, 0.02, 5), "tok/s", "higher")}
    make_run(tmp_path, "base", m, spec=prim)
    make_run(tmp_path, "cand", m, spec=prim, failed_replicates={"serve": [1, 2, 3, 4, 5]})
    gate, res = compare_runs(tmp_path / "runs" / "base", tmp_path / "runs" / "cand")
    assert gate.passed and res.gating_regression
    assert any("not comparable: primary serve/tokens_per_second" in n for n in res.notes)


def test_soak_only_succeeded_pairs_of_the_same_spec_exit_0(tmp_path, monkeypatch):
    """`benchrun compare` over every ordered pair of {succeeded, failed, killed, different spec,
    tampered, missing primary, resealed without a signature, signed then the envelope dropped and
    resealed}: only (succeeded, succeeded, same spec) may exit 0."""
    from typer.testing import CliRunner

    from benchrun.cli import app

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    kinds = _kinds(tmp_path, np.random.default_rng(7))
    runner = CliRunner()
    codes = {}
    for b, c in itertools.product(kinds, repeat=2):
        if b == c:
            b_id, c_id = b, ("succeeded2" if b == "succeeded" else None)
            if c_id is None:
                continue  # a run against itself is exit 2 (tested elsewhere)
        else:
            b_id, c_id = b, c
        r = runner.invoke(app, ["compare", b_id, c_id])
        code = r.exit_code if r.exception is None or isinstance(r.exception, SystemExit) else \
            getattr(r.exception, "exit_code", 1)
        codes[(b, c)] = code
    zero = {k for k, v in codes.items() if v == 0}
    assert zero == {("succeeded", "succeeded")}, codes
    for k, v in codes.items():
        if k != ("succeeded", "succeeded"):
            assert v == admit.EXIT_NOT_COMPARABLE, (k, v)


@pytest.mark.parametrize("direction", ["candidate", "baseline"])
def test_asset_check_fails_when_not_comparable(tmp_path, monkeypatch, direction):
    """The asset, its check and the run's condition refuse in both directions (the primary
    missing from the candidate, or from the published baseline)."""
    import dagster as dg

    from bench_assets.stats_assets import ConfirmRoundResource, baseline_comparison, no_gating_regression
    from benchrun.stats.baseline import promote

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rng = np.random.default_rng(8)
    full, short = _metrics(rng), _metrics(rng, drop=("p99_latency_ms",))
    make_run(tmp_path, "base", full if direction == "candidate" else short, spec=SPEC, sealed=True)
    promote("base", tmp_path)
    make_run(tmp_path, "cand", short if direction == "candidate" else full,
             spec={"spec": {**SPEC["spec"], "comparison": {"baseline": {"artifactRef": "published/current"}}}},
             status={"phase": "Analyzing", "outcome": "succeeded"})
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions("benchmark_run", ["cand"])
    res = dg.materialize([baseline_comparison, no_gating_regression], instance=inst, partition_key="cand",
                         resources={"confirm_round": ConfirmRoundResource(enabled=False),
                                    "launcher": LauncherResource()},
                         raise_on_error=True)
    check = res.get_asset_check_evaluations()[0]
    assert not check.passed and check.metadata["comparable"].value is False
    status = json.loads((tmp_path / "runs" / "cand" / "status.json").read_text())
    cond = [c for c in status["conditions"] if c["type"] == "RegressionDetected"][0]
    assert (cond["status"], cond["reason"]) == ("Unknown", "NotComparable") and "p99_latency_ms" in cond["message"]
    # and the BenchmarkRun resource's status says so (what kubectl and a CI pipeline read)
    from benchrun.controller.status import ResourceRef, status_from_run

    cr = status_from_run(status, ResourceRef("benchrun-runs", "cand", "uid-1", 1))
    assert cr["verdicts"]["RegressionDetected"] == "Unknown: NotComparable"
    assert any(c["type"] == "RegressionDetected" and c["reason"] == "NotComparable" for c in cr["conditions"])


@pytest.mark.parametrize("ref, missing", [
    ("local/published/canary", True),  # the alias is set, its run is gone
    ("runs/gone-20260101000000-abcdef12", True),  # a run named that does not exist
    ("local/published/never-set", False),  # a first run: the alias is not set yet
    ("", False),  # no baseline named
])
def test_a_named_baseline_that_is_missing_fails_the_check(tmp_path, monkeypatch, ref, missing):
    """RegressionDetected=Unknown (BaselineMissing) while no_gating_regression passed: nothing
    judged is nothing cleared. A first run (the alias not set yet, or none named) still passes."""
    import dagster as dg

    from bench_assets.stats_assets import ConfirmRoundResource, baseline_comparison, no_gating_regression

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    (tmp_path / "published").mkdir()
    (tmp_path / "published" / "canary").write_text("gone-20260101000000-abcdef12\n")
    make_run(tmp_path, "cand", _metrics(np.random.default_rng(9)),
             spec={"spec": {**SPEC["spec"], "comparison": {"baseline": {"artifactRef": ref}}}},
             status={"phase": "Analyzing", "outcome": "succeeded"})
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions("benchmark_run", ["cand"])
    res = dg.materialize([baseline_comparison, no_gating_regression], instance=inst, partition_key="cand",
                         resources={"confirm_round": ConfirmRoundResource(enabled=False), "launcher": LauncherResource()},
                         raise_on_error=True)
    [check] = res.get_asset_check_evaluations()
    status = json.loads((tmp_path / "runs" / "cand" / "status.json").read_text())
    conds = [(c["status"], c["reason"]) for c in status["conditions"] if c["type"] == "RegressionDetected"]
    if missing:
        assert conds == [("Unknown", "BaselineMissing")]
        assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
        assert "gone-20260101000000-abcdef12" in check.description
    else:
        assert conds == [] and check.passed


# -- issue 28 item 2: a baseline must verify ---------------------------------------------------------


def _promote_error(home, run_id):
    from benchrun.errors import BenchrunError
    from benchrun.stats.baseline import promote

    with pytest.raises(BenchrunError) as exc:
        promote(run_id, home)
    assert not (home / "published" / "current").exists()
    return str(exc.value)


def test_promote_verifies_like_verify_and_names_the_file(tmp_path):
    from benchrun.stats.baseline import read_alias
    from benchrun.stats.baseline import promote

    rng = np.random.default_rng(9)
    # a Failed run edited to say Succeeded: the signed outcome says failed
    rd = make_run(tmp_path, "edited", _metrics(rng), spec=SPEC, status={"phase": "Failed", "outcome": "failed"})
    man = json.loads((rd / "manifest.json").read_text())
    man["status"] = "failed"
    (rd / "manifest.json").write_text(json.dumps(man))
    from benchrun.stats.synthetic import seal_run

    seal_run(rd, tmp_path)
    st = json.loads((rd / "status.json").read_text())
    (rd / "status.json").write_text(json.dumps({**st, "phase": "Succeeded", "outcome": "succeeded"}))
    assert "outcome failed" in _promote_error(tmp_path, "edited")  # sealed and signed as failed
    # a signed result file edited after signing
    rd = make_run(tmp_path, "resigned", _metrics(rng), spec=SPEC, sealed=True)
    _tamper(rd)
    assert "resigned_serve_r1.json (sha256 differs)" in _promote_error(tmp_path, "resigned")
    # unsigned, and a stored object changed behind the run's back
    make_run(tmp_path, "unsigned", _metrics(rng), spec=SPEC, sealed=False)
    assert "provenance.dsse.json is missing" in _promote_error(tmp_path, "unsigned")
    rd = make_run(tmp_path, "stored", _metrics(rng), spec=SPEC, sealed=True)
    import hashlib

    sha = hashlib.sha256((rd / "structured" / "stored_serve_r1.json").read_bytes()).hexdigest()
    obj = tmp_path / "objects" / "sha256" / sha[:2] / sha  # the local store is content-addressed: damage one
    obj.chmod(0o644)
    obj.write_bytes(b"{}")
    assert "stored_serve_r1.json" in _promote_error(tmp_path, "stored") or sha in _promote_error(tmp_path, "stored")
    # intact: published, with the attestation digest recorded
    rd = make_run(tmp_path, "good", _metrics(rng), spec=SPEC, sealed=True)
    p = promote("good", tmp_path)
    run_id, rec = read_alias(p)
    assert run_id == "good" and len(rec["attestation_sha256"]) == 64 and rec["stored_objects"] > 0


def test_compare_checks_the_alias_record_again(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from benchrun.cli import app
    from benchrun.stats.baseline import promote
    from benchrun.stats.synthetic import write_manifest

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rng = np.random.default_rng(10)
    base = make_run(tmp_path, "base", _metrics(rng), spec=SPEC, sealed=True)
    make_run(tmp_path, "cand", _metrics(rng), spec=SPEC)
    promote("base", tmp_path)
    runner = CliRunner()
    assert runner.invoke(app, ["compare", "published/current", "cand"]).exit_code == 0
    # resealed after promotion (a result edited, manifest rewritten, envelope dropped)
    _tamper(base)
    (base / "reports" / "base_provenance.dsse.json").unlink()
    write_manifest(base)
    r = runner.invoke(app, ["compare", "published/current", "cand"])
    assert getattr(r.exception, "exit_code", r.exit_code) == admit.EXIT_NOT_COMPARABLE
    gate, _ = compare_runs(base, tmp_path / "runs" / "cand", baseline_alias="current")
    reasons = {x.reason for x in gate.refusals}
    assert reasons == {admit.BASELINE_ALIAS, admit.EVIDENCE}  # and its envelope is gone
    assert "manifest.json is not the one verified when published/current was promoted" in gate.message()
    # an alias from before records existed is refused, with the fix
    (tmp_path / "published" / "current").write_text("base\n")
    gate, _ = compare_runs(base, tmp_path / "runs" / "cand", baseline_alias="current")
    assert "run `benchrun promote base` again" in gate.message()


def test_a_primary_measured_in_neither_run_is_noted_but_nothing_measured_is_refused(tmp_path):
    rng = np.random.default_rng(11)
    spec = {"spec": {"metrics": {"inference": {"primary": ["tokens_per_second", "jitter_ms"]}}}}
    m = {("serve", "", "tokens_per_second"): (lognormal_replicates(rng, 100, 0.02, 5), "tok/s", "higher")}
    make_run(tmp_path, "base", m, spec=spec)
    make_run(tmp_path, "cand", m, spec=spec)
    gate, res = compare_runs(tmp_path / "runs" / "base", tmp_path / "runs" / "cand")
    assert gate.passed and any("measured in neither run, so not judged: jitter_ms" in n for n in res.notes)
    # review 2026-12-07: the condition said NoGatingRegression ("each was shown within its margin") of a
    # primary never tested; it names it now
    assert res.condition()["reason"] == "NoRegressionShown" and "jitter_ms" in res.condition()["message"]
    none = {"spec": {"metrics": {"inference": {"primary": ["jitter_ms"]}}}}
    make_run(tmp_path, "b2", m, spec=none)
    make_run(tmp_path, "c2", m, spec=none)
    gate, res = compare_runs(tmp_path / "runs" / "b2", tmp_path / "runs" / "c2")
    assert res is None and "none of the primaries (jitter_ms) has a value in either run" in gate.message()


def test_the_run_being_analysed_is_admitted_before_it_is_signed(tmp_path):
    """The baseline_comparison asset compares the run in progress (phase Analyzing), whose envelope
    provenance_attestation may not have written yet: only that run may be unsigned."""
    rng = np.random.default_rng(12)
    make_run(tmp_path, "base", _metrics(rng), spec=SPEC)
    make_run(tmp_path, "cand", _metrics(rng), spec=SPEC, sealed=False, status={"phase": "Analyzing", "outcome": "succeeded"})
    write_manifest(tmp_path / "runs" / "cand")
    got, gate, _ = _reasons(tmp_path, "base", "cand", candidate_in_progress=True)
    assert got == set() and gate.passed
    got, _, _ = _reasons(tmp_path, "cand", "base")  # as a baseline, or once finished, it must be signed
    assert admit.EVIDENCE in got


def test_a_result_file_added_after_sealing_is_refused_not_read(tmp_path):
    """Ten fabricated replicates dropped into structured/ after the run was sealed turned a 40 %
    regression into an improvement: the analysis read every file matching the name, the evidence
    check only the files the manifest lists."""
    rng = np.random.default_rng(4)
    make_run(tmp_path, "base", _metrics(rng), spec=SPEC)
    cand = make_run(tmp_path, "cand", _metrics(rng, scale=0.6), spec=SPEC)
    extra = cand / "structured" / "cand_serve_r6.json"
    doc = json.loads((cand / "structured" / "cand_serve_r1.json").read_text())
    doc["replicate"] = 6
    for m in doc["metrics"]:
        m["value"] *= 3
    extra.write_text(json.dumps(doc))
    got, gate, res = _reasons(tmp_path, "base", "cand")
    assert got == {admit.EVIDENCE} and res is None
    assert "structured/cand_serve_r6.json (not in manifest.json: added after the run was sealed)" in gate.message()


def test_a_metric_recorded_in_another_unit_is_refused(tmp_path):
    """A p99 of 0.06 s against 40 ms read as −99.9 % and exited 0: rows merged on the metric's name
    and took the baseline's unit."""
    rng = np.random.default_rng(5)
    make_run(tmp_path, "base", _metrics(rng), spec=SPEC)
    m = _metrics(rng)
    vals, _, d = m[("serve", "", "p99_latency_ms")]
    m[("serve", "", "p99_latency_ms")] = ([v * 1.5 / 1000 for v in vals], "s", d)
    make_run(tmp_path, "cand", m, spec=SPEC)
    got, gate, res = _reasons(tmp_path, "base", "cand")
    assert got == {admit.UNITS_DIFFER} and res is None and gate.not_comparable
    assert ("serve/p99_latency_ms is not recorded the same way: baseline ms (lower is better); candidate s (lower "
            "is better)") in gate.message()


def test_compare_variable_and_allowed_differences_are_checked_as_validate_checks_them(tmp_path, monkeypatch):
    """``--variable nonsense`` passed the gate ("one-variable gate passed (variable nonsense)") and
    exited 0, where ``validate`` refuses the same value as ``comparison.variableUnderTest``."""
    from typer.testing import CliRunner

    from benchrun.cli import app

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rng = np.random.default_rng(6)
    make_run(tmp_path, "base", _metrics(rng), spec=SPEC)
    make_run(tmp_path, "cand", _metrics(rng), spec=SPEC)
    r = CliRunner().invoke(app, ["compare", "base", "cand", "--variable", "nonsense"])
    assert r.exception.exit_code == 2 and "compare --variable: 'nonsense' is in spec.nonsense, which the " \
                                          "one-variable gate does not compare" in str(r.exception), r.output
    r = CliRunner().invoke(app, ["compare", "base", "cand", "--variable", "layers.component.suites[serve].nosuch"])
    assert r.exception.exit_code == 2 and "names no field of this spec" in str(r.exception)
    r = CliRunner().invoke(app, ["compare", "base", "cand", "--allow-differences", "layers[[bad"])
    assert r.exception.exit_code == 2 and "compare --allow-differences:" in str(r.exception)
    assert CliRunner().invoke(app, ["compare", "base", "cand", "--variable", "runtime_version"]).exit_code == 0


def test_the_candidate_cannot_set_a_laxer_bar_than_the_baseline(tmp_path):
    """The comparison took the primaries and margins from the candidate's spec alone, which the
    one-variable gate does not compare: a candidate with ``deltaPct: 99`` called a 40 % drop "no
    change", and one that disabled its metric family had no primaries (exit 0 both)."""
    rng = np.random.default_rng(7)
    make_run(tmp_path, "base", _metrics(rng), spec=SPEC)
    lax = {"spec": {**SPEC["spec"], "comparison": {"deltaPct": 99}}}
    make_run(tmp_path, "lax", _metrics(rng, scale=0.6), spec=lax)
    got, gate, res = _reasons(tmp_path, "base", "lax")
    row = res.rows.set_index("name").loc["tokens_per_second"]
    assert bool(row.gating) and row.margin == pytest.approx(np.log(1.03)) and row.verdict == "regression"
    assert res.gating_regression or res.suspected
    assert any("set comparison.deltaPct differently: gated on the stricter" in n for n in res.notes)
    blind = {"spec": {**SPEC["spec"], "metrics": {"inference": {"enabled": False, "primary": ["tokens_per_second"]}}}}
    make_run(tmp_path, "blind", _metrics(rng, scale=0.6), spec=blind)
    _, _, res = _reasons(tmp_path, "base", "blind")
    assert bool(res.rows.set_index("name").loc["tokens_per_second"].gating) and res.suspected


def test_a_candidate_that_adds_an_absolute_margin_does_not_lower_the_bar(tmp_path):
    """No absolute margin is the strictest (0: significance alone decides); taking the smallest of the
    margins that were set let a candidate's ``absoluteMarginByMetric: {errors: 1000}`` call 0 → 50
    errors "no change"."""
    prim = {"metrics": {"inference": {"primary": ["tokens_per_second", "errors"]}}, "layers": LAYERS}

    def m(err):
        return {("serve", "", "tokens_per_second"): ([100, 101, 99, 100.5, 99.5], "tok/s", "higher"),
                ("serve", "", "errors"): (err, "count", "lower"),
                ("load", "", "rows_per_second"): ([5e4] * 5, "rows/s", "higher")}

    make_run(tmp_path, "base", m([0, 0, 0, 0, 0]), spec={"spec": prim})
    make_run(tmp_path, "cand", m([50, 52, 49, 51, 50]),
             spec={"spec": {**prim, "comparison": {"absoluteMarginByMetric": {"errors": 1000}}}})
    _, _, res = _reasons(tmp_path, "base", "cand")
    row = res.rows.set_index("name").loc["errors"]
    assert row.margin == 0 and row.verdict == "regression" and res.suspected


def test_compare_variable_may_name_a_field_only_the_baseline_has(tmp_path, monkeypatch):
    """A field the candidate removed is a difference too: `--variable` resolved in the candidate's
    spec alone refused the pair with exit 2 (while the reverse order passed)."""
    import copy

    from typer.testing import CliRunner

    from benchrun.cli import app

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rng = np.random.default_rng(8)
    with_env = copy.deepcopy(SPEC)
    with_env["spec"]["layers"][0]["suites"][0]["env"] = {"OMP_NUM_THREADS": "1"}
    make_run(tmp_path, "base", _metrics(rng), spec=with_env)
    make_run(tmp_path, "cand", _metrics(rng), spec=SPEC)
    var = "layers.component.suites[serve].env.OMP_NUM_THREADS"
    r = CliRunner().invoke(app, ["compare", "base", "cand", "--variable", var])
    assert not (r.exception and getattr(r.exception, "exit_code", None) == 2), r.output


@pytest.mark.parametrize("confidence,n,primaries", [(0.9, 3, 2), (0.8, 3, 4), (0.9, 4, 7)])
def test_the_exact_test_chosen_at_alpha_over_the_family_also_rejects_there(tmp_path, confidence, n, primaries):
    """α = 1 − 0.9 is 0.0999…98 in binary and Holm's 2 × 1/C(6,3) is exactly 0.1: the exact rank
    test was chosen (its smallest p reaches α/F) but the verdict asked p < α, so a halved
    throughput was "inconclusive" and compare exited 0. One rejection rule now serves both."""
    names = ["tokens_per_second"] + [f"m{i}" for i in range(primaries - 1)]
    spec = {"spec": {"metrics": {"inference": {"primary": names}}, "layers": LAYERS,
                     "trials": {"minReplicates": n, "confidenceLevel": confidence}}}
    base = {("serve", "", k): ([100.0 + 0.5 * i for i in range(n)], "u", "higher") for k in names}
    cand = {**base, ("serve", "", "tokens_per_second"): ([50.0 + 0.5 * i for i in range(n)], "u", "higher")}
    make_run(tmp_path, "base", base, spec=spec)
    make_run(tmp_path, "cand", cand, spec=spec)
    gate, res = compare_runs(tmp_path / "runs" / "base", tmp_path / "runs" / "cand")
    row = res.rows[res.rows["name"] == "tokens_per_second"].iloc[0]
    assert row["gate_test"] == "exact_rank" and row["verdict"] == "regression", row.to_dict()
    assert res.gating_regression


def test_replicates_that_lost_their_device_part_way_count_as_failed(tmp_path):
    """3 of 5 candidate launches `unavailable` while the other 2 measured: the device went away,
    and judging the 2 survivors exited 0. They count as failed (refused like failures); a suite
    unavailable in every replicate of both arms (no GPU here) is no failure."""
    rng = np.random.default_rng(2)
    spec = {"spec": {"metrics": {"inference": {"primary": ["tokens_per_second"]}}, "layers": LAYERS}}

    def m():
        return {("serve", "", "tokens_per_second"): (lognormal_replicates(rng, 100, 0.02, 5), "tok/s", "higher")}

    make_run(tmp_path, "base", m(), spec=spec)
    make_run(tmp_path, "cand", m(), spec=spec, launches={"serve": ["ok", "ok", "unavailable", "unavailable", "unavailable"]})
    gate, res = compare_runs(tmp_path / "runs" / "base", tmp_path / "runs" / "cand")
    assert res is None and [r.reason for r in gate.refusals] == ["ReplicatesFailed"], gate.message()
    assert "3 of 5 candidate replicates failed" in gate.message()
    from benchrun.stats.load import replicate_table

    gpu = {("serve", "", "tokens_per_second"): ([], "tok/s", "higher")}
    make_run(tmp_path, "none-here", gpu, spec=spec, launches={"serve": ["unavailable"] * 5})
    assert replicate_table(tmp_path / "runs" / "none-here", include_failed=True).empty


def test_a_primary_left_out_of_some_ok_candidate_replicates_is_not_cleared(tmp_path):
    """The load generator leaves `capacity_at_slo` out when no point met the SLO (the worst
    outcome): a candidate that reported it in 2 of 5 ok replicates was judged on those 2 and
    exited 0 as `no_change`. Left out more often than in the baseline, it is refused."""
    rng = np.random.default_rng(3)
    spec = {"spec": {"metrics": {"inference": {"primary": ["tokens_per_second", "capacity_at_slo"]}}, "layers": LAYERS}}
    tps = ("serve", "", "tokens_per_second")
    make_run(tmp_path, "base", {tps: (lognormal_replicates(rng, 100, 0.02, 5), "tok/s", "higher"),
                                ("serve", "sweep", "capacity_at_slo"): ([8.0] * 5, "requests", "higher")}, spec=spec)
    base_metrics = {tps: (lognormal_replicates(rng, 100, 0.02, 5), "tok/s", "higher")}
    make_run(tmp_path, "cand", {**base_metrics, ("serve", "sweep", "capacity_at_slo"): ([8.0, 8.0], "requests", "higher")},
             spec=spec)
    gate, res = compare_runs(tmp_path / "runs" / "base", tmp_path / "runs" / "cand")
    assert res is None and [r.reason for r in gate.refusals] == ["PrimaryNotMeasured"], gate.message()
    assert "capacity_at_slo[sweep] has a value in only 2 of 5 ok candidate replicates (5 of 5" in gate.message()
    # left out as often in both arms: both are judged on what they reported, as before
    make_run(tmp_path, "base2", {tps: (lognormal_replicates(rng, 100, 0.02, 5), "tok/s", "higher"),
                                 ("serve", "sweep", "capacity_at_slo"): ([8.0, 8.0, 8.0], "requests", "higher")}, spec=spec)
    gate, res = compare_runs(tmp_path / "runs" / "base2", tmp_path / "runs" / "cand")
    assert res is None and "2 of 5 ok candidate replicates (3 of 5" in gate.message()
    make_run(tmp_path, "cand2", {**base_metrics, ("serve", "sweep", "capacity_at_slo"): ([8.0, 8.0, 8.0], "requests", "higher")},
             spec=spec)
    gate, res = compare_runs(tmp_path / "runs" / "base2", tmp_path / "runs" / "cand2")
    assert res is not None and gate.refusals == [], gate.message()


def test_ok_replicates_that_reported_no_metric_count_as_ok_launches(tmp_path):
    """A suite whose only primary is left out when it has no value (a custom suite reporting just
    `capacity_at_slo`) wrote ok documents with no metrics in 3 of 5 replicates: those replicates
    made no row, so the ok count was 2 and the 2 that reported were judged, exit 0. They count."""
    from benchrun.checks import suite_replicates
    from benchrun.stats.load import replicate_table

    spec = {"spec": {"metrics": {"inference": {"primary": ["capacity_at_slo"]}}, "layers": LAYERS}}
    cap = ("serve", "sweep", "capacity_at_slo")
    make_run(tmp_path, "base", {cap: ([8.0] * 5, "requests", "higher")}, spec=spec)
    cand = make_run(tmp_path, "cand", {cap: ([8.0] * 5, "requests", "higher")}, spec=spec)
    for k in (3, 4, 5):  # the suite wrote ok, with no value to give
        p = cand / "structured" / f"cand_serve_r{k}.json"
        doc = json.loads(p.read_text())
        doc["metrics"] = []
        p.write_text(json.dumps(doc))
    (cand / "reports" / "cand_provenance.dsse.json").unlink()
    write_manifest(cand)
    seal_run(cand, tmp_path)
    assert suite_replicates(replicate_table(cand, include_failed=True)) == {"serve": (5, 0)}
    assert replicate_table(cand)["replicate"].tolist() == [1, 2]  # the values are what they were
    gate, res = compare_runs(tmp_path / "runs" / "base", cand)
    assert res is None and [r.reason for r in gate.refusals] == ["PrimaryNotMeasured"], gate.message()
    assert "has a value in only 2 of 5 ok candidate replicates (5 of 5" in gate.message()


def test_a_confirmation_round_before_a_refusal_stays_on_record(tmp_path):
    """A suspected regression ran its confirmation round (15 pairs, 2 minutes in the reviewer's
    run) and the pair was then refused on what the rows showed: the comparison document kept
    only the gate, and the status said "nothing judged". The round and the rows stay on record."""
    import pandas as pd

    from benchrun.stats.analysis import gate_condition

    rng = np.random.default_rng(5)
    spec = {"spec": {"metrics": {"inference": {"primary": ["tokens_per_second", "capacity_at_slo"]}}, "layers": LAYERS}}
    tps = ("serve", "", "tokens_per_second")
    make_run(tmp_path, "base", {tps: ([100, 101, 99, 100.5, 99.5], "tok/s", "higher"),
                                ("serve", "sweep", "capacity_at_slo"): ([8.0] * 5, "requests", "higher")}, spec=spec)
    make_run(tmp_path, "cand", {tps: ([95, 94.5, 95.5, 94, 96], "tok/s", "higher"),
                                ("serve", "sweep", "capacity_at_slo"): ([8.0, 8.0], "requests", "higher")}, spec=spec)
    calls = []

    def round_(keys):
        calls.append(sorted(keys))
        rows = [{"suite": s, "case": c, "metric": m, "unit": "tok/s", "direction": "higher", "replicate": i,
                 "value": float(v), "status": "ok"} for s, c, m in keys for i, v in enumerate(rng.normal(100, 1, 5), 1)]
        t = pd.DataFrame(rows)
        return t, t.assign(value=t["value"] * 1.001), {"scheme": "fabricated"}

    gate, res = compare_runs(tmp_path / "runs" / "base", tmp_path / "runs" / "cand", confirm=round_)
    assert res is None and calls == [[tps]] and [r.reason for r in gate.refusals] == ["PrimaryNotMeasured"]
    doc = json.loads(write_comparison(gate, res, "base", tmp_path / "runs" / "cand").read_text())
    assert doc["confirmation"] == "not_confirmed" and doc["confirmation_evidence"]["scheme"] == "fabricated"
    row = next(r for r in doc["unjudged"]["metrics"] if r["metric"] == "serve/tokens_per_second")
    assert row["confirmation"] == "not_confirmed"
    cond = gate_condition(gate)
    assert cond["reason"] == "NotComparable" and "a confirmation round ran and did not confirm" in cond["message"]
    assert doc["condition"] == cond
    from benchrun.report import content
    from benchrun.stats.load import load_run

    v = content.verdict(load_run(tmp_path / "runs" / "cand"), doc)
    assert v.regressions == "not compared" and "did not confirm the suspected regression" in v.against


def test_compare_json_says_why_it_refused(tmp_path, monkeypatch, capsys):
    """`compare --json` wrote nothing on stdout when it refused (exit 4 or 5): a CI job parsing the JSON
    had nothing to read. It now writes one object with the refusal, its reasons and the exit code."""
    from helpers import cli_in_process

    rng = np.random.default_rng(7)
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    make_run(tmp_path, "ok-a", _metrics(rng), spec=SPEC)
    make_run(tmp_path, "no-p99", _metrics(rng, drop=("p99_latency_ms",)), spec=SPEC)
    code, out, err = cli_in_process(["compare", "ok-a", "no-p99", "--json"], monkeypatch, capsys)
    assert code == admit.EXIT_NOT_COMPARABLE and "fail closed" in err
    doc = json.loads(out)
    assert doc["refused"] is True and doc["exit_code"] == code and doc["comparable"] is False
    assert doc["baseline"] == "ok-a" and doc["candidate"] == "no-p99" and "fail closed" in doc["message"]
    assert [r["reason"] for r in doc["refusals"]] == [admit.PRIMARY_UNMEASURED]
    # the one-variable gate's refusal (exit 4): the fields that differ
    other = {"spec": {**SPEC["spec"], "trials": {"minReplicates": 7}}}
    make_run(tmp_path, "other-trials", _metrics(rng), spec=other)
    code, out, _ = cli_in_process(["compare", "ok-a", "other-trials", "--json"], monkeypatch, capsys)
    doc = json.loads(out)
    assert code == 4 and doc["exit_code"] == 4 and doc["comparable"] is True and doc["refusals"] == []
    assert any(d["field"].startswith("spec.trials") for d in doc["differences"]), doc["differences"]


def test_compare_json_says_why_when_a_run_or_the_baseline_alias_does_not_resolve(tmp_path, monkeypatch, capsys):
    """A first-time pipeline's `compare published/canary RUN --json` (no alias promoted yet) exited 1
    with nothing on stdout: a CI job parsing the JSON had nothing to read."""
    from helpers import cli_in_process

    rng = np.random.default_rng(8)
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    make_run(tmp_path, "ok-a", _metrics(rng), spec=SPEC)
    for args, code, said in ((["published/canary", "ok-a"], 1, "promote"), (["ok-a", "nope"], 1, "nope"),
                             (["ok-a", "ok-a"], 2, "the same run")):
        got, out, err = cli_in_process(["compare", *args, "--json"], monkeypatch, capsys)
        assert got == code and said in err, (args, err)
        doc = json.loads(out)
        assert doc["refused"] is True and doc["error"] is True and doc["exit_code"] == code and said in doc["message"]
        assert [doc["baseline"], doc["candidate"]] == args


def test_every_command_says_no_such_run_the_same_way(tmp_path, monkeypatch, capsys):
    """New-user trial: `show nope` said "no status.json under …" and `verify nope` "no run directory under …",
    where cancel, delete, report and compare say the run is not there and how to list the runs."""
    from helpers import cli_in_process

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    make_run(tmp_path, "ok-a", _metrics(np.random.default_rng(9)), spec=SPEC)
    for args in (["show", "nope-run"], ["verify", "nope-run"], ["cancel", "nope-run"]):
        code, _, err = cli_in_process(args, monkeypatch, capsys)
        assert code == 1 and "no such run 'nope-run'" in err and "`benchrun runs` lists the runs" in err, (args, err)


# -- found by an adversarial review (2026-12-06): pairs that exited 0 ---------------------------------

def _serve(rng, level, case="c=4"):
    return {("serve", case, "tokens_per_second"): (lognormal_replicates(rng, level, 0.02, 5), "tok/s", "higher"),
            ("serve", case, "p99_latency_ms"): (lognormal_replicates(rng, 40 * 100 / level, 0.02, 5), "ms", "lower")}


def test_a_pair_whose_specs_declare_no_primary_is_not_judged(tmp_path):
    # every metric regressed (-50 %), both rows "regression", RegressionDetected=False, exit 0
    rng = np.random.default_rng(11)
    none = {"spec": {"metrics": {"inference": {"enabled": True, "primary": []}}}}
    make_run(tmp_path, "b", _serve(rng, 100), spec=none)
    make_run(tmp_path, "c", _serve(rng, 50), spec=none)
    reasons, gate, _ = _reasons(tmp_path, "b", "c")
    assert reasons == {admit.PRIMARY_UNMEASURED} and "neither spec declares a primary metric" in gate.message()
    # validate says it first: an inference spec without primaries is refused
    from benchrun.spec.rules import rule_inference_metrics

    doc = {"spec": {"intent": {"workloadType": "inference"}, "metrics": {"inference": {"enabled": True}}}}
    [(path, msg)] = [f for f in rule_inference_metrics(doc) if f[0][-1] == "primary"]
    assert "required for workloadType inference" in msg


def test_a_primary_naming_a_case_its_suite_never_reported_refuses_the_pair(tmp_path):
    # serve ran only c=4; the primary p99_latency_ms[c=8] was a note and its x4 regression at c=4 passed (exit 0)
    rng = np.random.default_rng(12)
    spec = {"spec": {"metrics": {"inference": {"primary": ["serve/tokens_per_second[c=4]",
                                                           "serve/p99_latency_ms[c=8]"]}}}}
    make_run(tmp_path, "b", _serve(rng, 100), spec=spec)
    worse = _serve(rng, 100)
    worse[("serve", "c=4", "p99_latency_ms")] = (lognormal_replicates(rng, 160, 0.02, 5), "ms", "lower")
    make_run(tmp_path, "c", worse, spec=spec)
    reasons, gate, _ = _reasons(tmp_path, "b", "c")
    assert reasons == {admit.PRIMARY_UNMEASURED}
    assert "primary serve/p99_latency_ms[c=8] matches nothing suite serve reported" in gate.message()
    assert "c=4" in gate.message()
    # a primary of a suite that ran in neither run (no GPU here) stays a note
    spec["spec"]["metrics"]["inference"]["primary"][1] = "gpu_suite/p99_latency_ms[c=8]"
    make_run(tmp_path, "b2", _serve(rng, 100), spec=spec)
    make_run(tmp_path, "c2", _serve(rng, 100), spec=spec)
    reasons, gate, res = _reasons(tmp_path, "b2", "c2")
    assert reasons == set() and any("measured in neither run" in n for n in res.notes)


def test_a_status_json_edited_to_succeeded_after_the_run_was_signed_failed_is_refused(tmp_path):
    rng = np.random.default_rng(13)
    make_run(tmp_path, "b", _serve(rng, 100))
    rd = make_run(tmp_path, "c", _serve(rng, 100), status={"phase": "Failed", "outcome": "failed"})
    st = json.loads((rd / "status.json").read_text())
    st.update(phase="Succeeded", outcome="succeeded")
    (rd / "status.json").write_text(json.dumps(st))
    reasons, gate, _ = _reasons(tmp_path, "b", "c")
    assert admit.EVIDENCE in reasons
    assert "status.json says phase 'Succeeded', but the signed statement records phase 'Failed'" in gate.message()


def test_any_figure_of_a_point_the_load_generator_judged_invalid_is_not_gated(tmp_path):
    # without request records the p99 row skipped the verdict, and a throughput row never read it: exit 0
    rng = np.random.default_rng(14)
    why = "error rate 25/400 = 6.2% > 1.0%"

    def serving(bad):
        return {"serve": [[{"point": "c=4", "bucket": "all", "offered_load": 4, "verdict": "invalid" if bad else "valid",
                            "verdict_reasons": [why] if bad else []}] for _ in range(5)]}

    make_run(tmp_path, "b", _serve(rng, 100), serving=serving(False))
    make_run(tmp_path, "c", _serve(rng, 100), serving=serving(True))
    reasons, gate, _ = _reasons(tmp_path, "b", "c")
    assert reasons == {admit.PRIMARY_NOT_GATEABLE}
    assert "primary serve/tokens_per_second[c=4] cannot be judged (not gateable: load generator verdict invalid " \
           f"(candidate r1: {why}" in gate.message()
    assert "serve/p99_latency_ms[c=4] cannot be judged" in gate.message()


def test_a_primary_suite_that_failed_every_candidate_replicate_is_refused_when_the_baseline_had_none(tmp_path):
    """Review 2026-12-07: a suite a primary names (`load/rows_per_second`) was unavailable in the
    baseline and failed 5 of 5 in the candidate; the primary, measured in neither run, became a
    note, its suite's failure row did not gate (no gating row of that suite was left), and the pair
    exited 0 (NoGatingRegression)."""
    rng = np.random.default_rng(8)
    spec = {"spec": {"metrics": {"inference": {"primary": ["serve/tokens_per_second", "load/rows_per_second"]}},
                     "layers": LAYERS}}

    def serve():
        return {("serve", "", "tokens_per_second"): (lognormal_replicates(rng, 100, 0.02, 5), "tok/s", "higher")}

    load = {("load", "", "rows_per_second"): ([5e4] * 5, "rows/s", "higher")}
    base = make_run(tmp_path, "base", {**serve(), **load}, spec=spec, manifest=False,
                    launches={"serve": ["ok"] * 5, "load": ["unavailable"] * 5})
    for doc in (base / "structured").glob("base_load_*.json"):  # the suite said: no device here
        d = json.loads(doc.read_text())
        doc.write_text(json.dumps({**d, "status": "unavailable", "reason": "unavailable: no CUDA device",
                                   "metrics": []}))
    write_manifest(base)
    seal_run(base, tmp_path)
    make_run(tmp_path, "cand", {**serve(), **load}, spec=spec, failed_replicates={"load": [1, 2, 3, 4, 5]})
    gate, res = compare_runs(tmp_path / "runs" / "base", tmp_path / "runs" / "cand")
    assert res is None and "ReplicatesFailed" in [r.reason for r in gate.refusals], gate.message()
    assert "5 of 5 candidate replicates failed" in gate.message()


def test_promoting_a_run_measured_on_a_contended_machine_says_so(tmp_path, monkeypatch, capsys):
    # review 2026-12-07: a baseline with ReplicatesUncontended=False (37 of 40) was published without a word
    from helpers import cli_in_process

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rng = np.random.default_rng(10)
    busy = [{"type": "ReplicatesUncontended", "status": "False", "reason": "BackgroundLoad",
             "message": "3 of 40 replicates contended"}]
    make_run(tmp_path, "busy", _metrics(rng), spec=SPEC, status={"conditions": busy})
    make_run(tmp_path, "quiet", _metrics(rng), spec=SPEC)
    code, out, err = cli_in_process(["promote", "busy", "--alias", "canary"], monkeypatch, capsys)
    assert code == 0 and "published/canary -> busy" in out, (out, err)
    assert "warning: published/canary was measured partly on a contended machine" in err
    assert "3 of 40 replicates contended" in err
    code, out, err = cli_in_process(["promote", "quiet", "--alias", "canary"], monkeypatch, capsys)
    assert code == 0 and "contended" not in err, err


@pytest.mark.parametrize("primary", ["serve/tokens_per_second", "tokens_per_second"])
def test_a_primary_suite_that_failed_every_replicate_in_both_runs_is_refused(tmp_path, primary):
    """Review 2026-12-07: a gating suite that failed 5 of 5 in both runs left its primary measured in
    neither run: a note, exit 0 — where 4 failures of 5 in each were refused (1 vs 1 ok replicates).
    A suite that is unavailable in both (no GPU on either host) stays a note."""
    rng = np.random.default_rng(21)
    spec = {"spec": {"metrics": {"inference": {"primary": [primary, "load/rows_per_second"]}}, "layers": LAYERS}}
    for name in ("base", "cand"):
        make_run(tmp_path, name, _metrics(rng), spec=spec, failed_replicates={"serve": [1, 2, 3, 4, 5]},
                 status={"outcome": "partial"})
    reasons, gate, res = _reasons(tmp_path, "base", "cand")
    assert res is None and reasons == {admit.REPLICATES_FAILED}, gate.message()
    assert (f"primary {primary} has no value in either run, and the suite that may measure it failed: serve "
            "(5 of 5 candidate, 5 of 5 baseline replicates failed)") in gate.message()
    for name in ("base-na", "cand-na"):
        make_run(tmp_path, name, _metrics(rng), spec=spec, launches={"serve": ["unavailable"] * 5, "load": ["ok"] * 5})
    reasons, gate, res = _reasons(tmp_path, "base-na", "cand-na")
    assert reasons == set() and res.condition()["reason"] == "NoRegressionShown", gate.message()


def test_a_succeeded_run_signed_only_when_its_evidence_was_sealed_is_refused(tmp_path):
    """Review 2026-12-07: a run signed while Analyzing (the sealing signature), then failed by the
    reaper, with status.json edited to Succeeded, was compared (exit 0) in either role; promote
    refused it (its final signature is missing). The run in progress itself is still admitted."""
    rng = np.random.default_rng(22)
    make_run(tmp_path, "base", _metrics(rng), spec=SPEC)
    rd = make_run(tmp_path, "sealed", _metrics(rng), spec=SPEC, status={"phase": "Analyzing", "outcome": "succeeded"})
    got, _, _ = _reasons(tmp_path, "base", "sealed", candidate_in_progress=True)
    assert got == set()
    st = json.loads((rd / "status.json").read_text())
    st.update(phase="Succeeded", outcome="succeeded")
    (rd / "status.json").write_text(json.dumps(st))
    for pair in (("base", "sealed"), ("sealed", "base")):
        got, gate, _ = _reasons(tmp_path, *pair)
        assert got == {admit.EVIDENCE} and "the run's final signature is missing" in gate.message()


def test_a_damaged_pinned_spec_is_refused_not_a_traceback(tmp_path, monkeypatch, capsys):
    """Review 2026-12-07: a pinned spec reading `spec: null` crashed `compare` (AttributeError, exit 1,
    no JSON) before admission could refuse the run."""
    from helpers import cli_in_process

    rng = np.random.default_rng(23)
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    make_run(tmp_path, "base", _metrics(rng), spec=SPEC)
    rd = make_run(tmp_path, "damaged", _metrics(rng), spec=SPEC)
    (rd / "structured" / "damaged_spec.yaml").write_text("spec: null\n")
    for args in (["compare", "base", "damaged", "--json"], ["compare", "damaged", "base", "--variable", "runtime_version"]):
        code, out, err = cli_in_process(args, monkeypatch, capsys)
        assert code == admit.EXIT_NOT_COMPARABLE and "Traceback" not in err and "damaged_spec.yaml" in err, err
        if "--json" in args:
            assert json.loads(out)["exit_code"] == admit.EXIT_NOT_COMPARABLE
