"""A run killed after finalize set Succeeded, before its final signing, is not verified or promoted."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchrun.errors import BenchrunError
from benchrun.stats.synthetic import make_run

SPEC = {"spec": {"metrics": {"inference": {"primary": ["tokens_per_second"]}}}}


def _metrics(rng):
    return {("serve", "c", "tokens_per_second"): (rng.normal(100, 1, 5), "tokens/s", "higher")}


def _killed_after_finalize(home, run_id):
    """Sealed and signed as run_evidence + provenance_attestation leave it, analysed (a file
    published after sealing), then finalize — and nothing after it (the kill)."""
    from benchrun import lifecycle
    from benchrun.rundir import RunDir

    rd = make_run(home, run_id, _metrics(np.random.default_rng(3)), spec=SPEC, sealed=True,
                  status={"phase": "Analyzing", "outcome": "succeeded"})
    (rd / "structured" / f"{run_id}_trial_statistics.json").write_text("{}")
    st = lifecycle.finalize(RunDir(home, run_id))
    assert st["phase"] == "Succeeded"
    return rd


def test_a_run_killed_before_its_final_signature_fails_verify_and_promote(tmp_path, monkeypatch, capsys):
    from benchrun.provenance.commands import _verify_one
    from benchrun.provenance.store_walk import walk_store
    from benchrun.stats.baseline import promote

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    _killed_after_finalize(tmp_path, "killed")
    with pytest.raises(BenchrunError) as exc:
        _verify_one("killed", tmp_path / "keys" / "ed25519.pub.pem", ())
    assert "final signature is missing" in str(exc.value) and "benchrun report killed" in str(exc.value)
    report = walk_store(tmp_path / "keys" / "ed25519.pub.pem", (), tmp_path)
    assert any("final signature is missing" in f for f in report.failures)
    with pytest.raises(BenchrunError) as exc:
        promote("killed", tmp_path)
    assert "final signature is missing" in str(exc.value)
    assert not (tmp_path / "published" / "current").exists()
    # `benchrun runs` says it beside the phase (its JSON keeps the phase and gives the marker)
    from helpers import cli_in_process

    code, out, _ = cli_in_process(["runs", "--json"], monkeypatch, capsys)
    [row] = [r for r in json.loads(out) if r["run_id"] == "killed"]
    assert code == 0 and row["phase"] == "Succeeded" and row["final_signature"] == "pending"
    monkeypatch.setenv("COLUMNS", "250")
    code, out, _ = cli_in_process(["runs"], monkeypatch, capsys)
    assert "Succeeded (final signature pending: benchrun report killed)" in " ".join(out.split())
    code, out, err = cli_in_process(["show", "killed"], monkeypatch, capsys)
    assert code == 0, err
    assert "final signature pending: not verified or promoted until `benchrun report killed`" in out


def test_signing_it_afterwards_completes_it_and_a_normal_run_verifies(tmp_path, monkeypatch):
    from benchrun import lifecycle
    from benchrun.provenance.commands import _verify_one
    from benchrun.rundir import RunDir
    from benchrun.stats.baseline import promote

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    # a synthetic run's pinned spec is not a full spec: the signing section as a real one reads
    from types import SimpleNamespace

    signing = SimpleNamespace(backend=None, attestation_format=None)
    monkeypatch.setattr(lifecycle, "load_pinned", lambda rd: SimpleNamespace(
        run=SimpleNamespace(spec=SimpleNamespace(provenance=SimpleNamespace(signing=signing)))))
    rd = _killed_after_finalize(tmp_path, "killed")
    # `benchrun report` re-signs through resign_if_intact: the files the analysis added are signed now
    assert lifecycle.resign_if_intact(rd, tmp_path) is None
    assert json.loads((rd / "status.json").read_text()).get("final_signature") is None
    lines = _verify_one("killed", tmp_path / "keys" / "ed25519.pub.pem", ())
    assert not any("trial_statistics" in line for line in lines)
    assert promote("killed", tmp_path).is_file()
    # the normal path: finalize then sign_publication, and the figure worker's later re-sign
    rd = _killed_after_finalize(tmp_path, "normal")
    lifecycle.sign_publication(RunDir(tmp_path, "normal"))
    _verify_one("normal", tmp_path / "keys" / "ed25519.pub.pem", ())
    assert lifecycle.resign_if_intact(rd, tmp_path) is None
    assert promote("normal", tmp_path, alias="canary").is_file()


def test_deleting_the_unsigned_pending_marker_does_not_make_such_a_run_verify(tmp_path, monkeypatch):
    """Found in review: only status.json's ``final_signature: pending`` (unsigned) told such a run apart;
    deleting that key made a Succeeded run whose signature covers only its sealing pass verify, the
    store walk and promote. Its signed phase (Analyzing, the sealing signature) now tells it too."""
    from benchrun.provenance.commands import _verify_one
    from benchrun.provenance.store_walk import walk_store
    from benchrun.stats.baseline import promote

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rd = _killed_after_finalize(tmp_path, "killed")
    status = json.loads((rd / "status.json").read_text())
    del status["final_signature"]
    (rd / "status.json").write_text(json.dumps(status))
    with pytest.raises(BenchrunError, match="final signature is missing"):
        _verify_one("killed", tmp_path / "keys" / "ed25519.pub.pem", ())
    report = walk_store(tmp_path / "keys" / "ed25519.pub.pem", (), tmp_path)
    assert any("final signature is missing" in f for f in report.failures)
    with pytest.raises(BenchrunError, match="final signature is missing"):
        promote("killed", tmp_path)


def test_a_run_never_signed_owes_no_final_signature(tmp_path, monkeypatch):
    """Found in review: finalize marked every run ``final_signature: pending``, a run never signed too,
    so Ctrl-C after its final phase made `benchrun run` exit 1 and point at `benchrun report`, which never
    clears the marker of an unsigned run."""
    from benchrun import lifecycle
    from benchrun.provenance import envelope_path
    from benchrun.rundir import RunDir

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    rd = make_run(tmp_path, "unsigned", _metrics(np.random.default_rng(3)), spec=SPEC, sealed=False,
                  status={"phase": "Analyzing", "outcome": "succeeded"})
    assert not envelope_path(rd).is_file()
    st = lifecycle.finalize(RunDir(tmp_path, "unsigned"))
    assert st["phase"] == "Succeeded" and not st.get("final_signature")
    assert lifecycle.exit_code_for(st) == 0
    # a signed one still owes it until signed again
    signed = _killed_after_finalize(tmp_path, "signed")
    assert json.loads((signed / "status.json").read_text())["final_signature"] == "pending"
