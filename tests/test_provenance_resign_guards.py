"""Re-signing and `verify` never trust what status.json (never signed) says on its own: a forged
"final signature pending" does not complete a run; a sealed run with no envelope passes as "being
analyzed" only while a live process analyzes it, with its files as sealed; publication grade is not
granted for a signature this installation cannot make; an encrypted signing key verifies what it
signed; re-materializing the attestation asset goes through the re-signing checks."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from benchrun.cli import app
from benchrun.errors import BenchrunError
from benchrun.provenance import envelope_path, sign_run, verify_run
from benchrun.provenance.keys import KEY_ENV, KEY_PASSWORD_ENV, load_signing_key
from benchrun.stats.synthetic import make_run, seal_run
from test_provenance import RUN_ID, make_sealed_run

SPEC = {"spec": {"metrics": {"inference": {"primary": ["tokens_per_second"]}}}}


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (KEY_ENV, KEY_PASSWORD_ENV, "BENCHRUN_TRUSTED_KEYIDS", "BENCHRUN_VERIFY_PUBLIC_KEY",
                 "BENCHRUN_PUSHGATEWAY_URL"):
        monkeypatch.delenv(name, raising=False)


def _edit_status(rd: Path, **fields) -> None:
    st = json.loads((rd / "status.json").read_text())
    st.update(fields)
    (rd / "status.json").write_text(json.dumps(st))


def _synthetic_signing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A synthetic run's pinned spec is not a full spec: the signing section as a real one reads."""
    from benchrun import lifecycle

    signing = SimpleNamespace(backend=None, attestation_format=None)
    monkeypatch.setattr(lifecycle, "load_pinned", lambda rd: SimpleNamespace(
        run=SimpleNamespace(spec=SimpleNamespace(provenance=SimpleNamespace(signing=signing)))))


def _sealed_analyzing(home: Path, run_id: str, outcome: str = "succeeded") -> Path:
    """Sealed and signed as run_evidence + provenance_attestation leave a run (phase Analyzing), its
    sealed manifest recording ``outcome``."""
    metrics = {("serve", "c", "tokens_per_second"): (np.random.default_rng(3).normal(100, 1, 5), "tokens/s", "higher")}
    rd = make_run(home, run_id, metrics, spec=SPEC, sealed=False,
                  status={"phase": "Analyzing", "outcome": outcome})
    manifest = json.loads((rd / "manifest.json").read_text())
    manifest.update(status=outcome, success=outcome == "succeeded")
    (rd / "manifest.json").write_text(json.dumps(manifest))
    seal_run(rd, home)
    return rd


# -- 1. a forged "final signature pending" -------------------------------------------------------


def test_a_forged_pending_final_signature_does_not_resign_a_canceled_run_as_succeeded(tmp_path, monkeypatch):
    """status.json's final_signature "pending" (never signed) made re-signing treat a Canceled run,
    signed as Canceled, as completing: set Succeeded and re-signed with a file dropped into structured/."""
    from benchrun import lifecycle
    from benchrun.rundir import mark_run_canceled

    _synthetic_signing(monkeypatch)
    rd = _sealed_analyzing(tmp_path, "canceled")
    assert mark_run_canceled(tmp_path, "canceled", "canceled by ann")
    assert lifecycle.resign_if_intact(rd, tmp_path) is None  # a move benchrun makes: signed as Canceled
    env = envelope_path(rd).read_bytes()
    _edit_status(rd, phase="Succeeded", outcome="succeeded", final_signature="pending")
    (rd / "structured" / "canceled_trial_statistics.json").write_text('{"forged": true}')
    why = lifecycle.resign_if_intact(rd, tmp_path)
    assert why and "phase (signed 'Canceled', status.json 'Succeeded')" in why, why
    assert envelope_path(rd).read_bytes() == env


def test_a_forged_pending_final_signature_does_not_turn_a_failed_outcome_into_succeeded(tmp_path, monkeypatch):
    """Signed while Analyzing, the sealed outcome failed: finalize would set Failed, never Succeeded."""
    from benchrun import lifecycle

    _synthetic_signing(monkeypatch)
    rd = _sealed_analyzing(tmp_path, "failing", outcome="failed")
    env = envelope_path(rd).read_bytes()
    _edit_status(rd, phase="Succeeded", outcome="succeeded", final_signature="pending", finished_utc="2026-12-01T00:00:00Z")
    why = lifecycle.resign_if_intact(rd, tmp_path)
    assert why and "phase (signed 'Analyzing', status.json 'Succeeded')" in why, why
    assert envelope_path(rd).read_bytes() == env


def test_completing_a_final_signature_signs_only_what_the_analysis_writes(tmp_path, monkeypatch):
    """Even a real completion (killed after finalize) signs only the files the analysis adds after
    sealing: a file dropped into structured/ was signed with them."""
    from benchrun import lifecycle
    from benchrun.rundir import RunDir

    _synthetic_signing(monkeypatch)
    rd = _sealed_analyzing(tmp_path, "killed")
    (rd / "structured" / "killed_trial_statistics.json").write_text("{}")  # the analysis, after sealing
    (rd / "figures" / "killed_utilization_section_0.png").write_bytes(b"png")
    assert lifecycle.finalize(RunDir(tmp_path, "killed"))["phase"] == "Succeeded"
    env = envelope_path(rd).read_bytes()
    (rd / "structured" / "killed_notes.json").write_text('{"verdict": "fine"}')  # dropped in
    why = lifecycle.resign_if_intact(rd, tmp_path)
    assert why and "neither this command nor the run's analysis writes" in why and "killed_notes.json" in why, why
    assert "trial_statistics" not in why and envelope_path(rd).read_bytes() == env
    (rd / "structured" / "killed_notes.json").unlink()
    assert lifecycle.resign_if_intact(rd, tmp_path) is None
    signed = verify_run(rd, tmp_path / "keys" / "ed25519.pub.pem").subjects
    assert {"structured/killed_trial_statistics.json", "figures/killed_utilization_section_0.png"} <= set(signed)


# -- 2. a sealed run with no envelope, "Analyzing" by status.json ----------------------------------


def test_a_tampered_sealed_run_without_envelope_set_to_analyzing_fails_verify(bench_home, monkeypatch):
    """Deleting the envelope and setting the phase back to Analyzing made a tampered sealed run
    "not signed yet" (exit 0) for `verify RUN` and `verify --store`."""
    from benchrun.liveness import beat, liveness_path

    rd = make_sealed_run(bench_home, stored=True)
    sign_run(rd.path, bench_home)
    _edit_status(rd.path, phase="Succeeded")
    result = rd.path / "structured" / f"{RUN_ID}_gemm_r1.json"
    genuine = result.read_text()
    result.write_text(genuine.replace("3.0", "30.0"))
    envelope_path(rd.path).unlink()
    _edit_status(rd.path, phase="Analyzing")
    cli = CliRunner()
    for command in (["verify", RUN_ID], ["verify", "--store"]):
        out = cli.invoke(app, command)
        assert out.exit_code == 1, (command, out.output)
        assert "no live process is analyzing it" in out.output + str(out.exception), (command, out.output)
    # a live process claims it: its files must still be the sealed ones
    beat(bench_home, RUN_ID)
    for command in (["verify", RUN_ID], ["verify", "--store"]):
        out = cli.invoke(app, command)
        assert out.exit_code == 1, (command, out.output)
        text = out.output + str(out.exception)
        assert "its sealed evidence changed" in text and f"structured/{RUN_ID}_gemm_r1.json" in text, text
    # manifest.json rewritten to match: the stored object manifest still says otherwise
    from benchrun.store.base import sha256_file

    manifest = json.loads((rd.path / "manifest.json").read_text())
    manifest["summary"]["sha256"][f"structured/{RUN_ID}_gemm_r1.json"] = sha256_file(result)
    (rd.path / "manifest.json").write_text(json.dumps(manifest))
    out = cli.invoke(app, ["verify", RUN_ID])
    assert out.exit_code == 1 and "differs from the stored manifest" in str(out.exception), out.output
    # untouched and analyzed by a live process: not signed yet, not a failure
    rd2 = make_sealed_run(bench_home, "run-analyzing", stored=True)
    beat(bench_home, rd2.run_id)
    out = cli.invoke(app, ["verify", rd2.run_id])
    assert out.exit_code == 0 and "not signed yet" in out.output, out.output
    liveness_path(bench_home, rd2.run_id).unlink()
    assert cli.invoke(app, ["verify", rd2.run_id]).exit_code == 1


# -- 3. publication grade with a signature that cannot be made -------------------------------------


def test_publication_grade_is_not_granted_when_the_signing_backend_is_unavailable(bench_home, write_spec):
    from benchrun import lifecycle
    from benchrun import submit as sub
    from benchrun.rundir import RunDir
    from conftest import ROOT

    def admitted(signing: dict, offer: tuple) -> dict:
        doc = yaml.safe_load((ROOT / "specs/local/pre-release.yaml").read_text())
        doc["spec"]["provenance"]["signing"].update(signing)
        rd = RunDir.for_run(sub.prepare(write_spec(doc)).run_id)
        st = lifecycle.admit(rd, lifecycle.load_pinned(rd), offer=offer)
        return {"granted": st["benchmark_class_granted"],
                **{c["type"]: c for c in rd.read_status()["conditions"]}}

    can = ("kubernetes", True, "dedicated nodes ...")
    st = admitted({"backend": "sigstore"}, can)
    cond = st["PublicationGuaranteesMet"]
    assert st["granted"] == "realism_grade", st
    assert cond["status"] == "False" and cond["reason"] == "SigningUnavailable", cond
    assert "signing backend 'sigstore' is not available" in cond["message"] and "realism_grade" in cond["message"]
    st = admitted({"attestationFormat": "slsa_provenance"}, can)
    assert st["granted"] == "realism_grade" and "'slsa_provenance'" in st["PublicationGuaranteesMet"]["message"]
    # a local launcher: both reasons said
    st = admitted({"backend": "sigstore"}, ("local", False, "a shared local machine"))
    assert st["granted"] == "realism_grade" and "sigstore" in st["PublicationGuaranteesMet"]["message"]
    # the shipped pre-release spec asks for the local key (local_ed25519): granted where the launcher can
    assert admitted({}, can)["granted"] == "publication_grade"


# -- 4. an encrypted signing key --------------------------------------------------------------------


def test_an_encrypted_signing_key_verifies_what_it_signed(tmp_path, monkeypatch):
    """default_public_key read $BENCHRUN_SIGNING_KEY with no password: "not a PEM ed25519 key"."""
    from benchrun.provenance.keys import default_public_key, home_key_fallback, keyid_of

    key = Ed25519PrivateKey.generate()
    pem = tmp_path / "signing.pem"
    pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.BestAvailableEncryption(b"s3cret")))
    pem.chmod(0o600)
    monkeypatch.setenv(KEY_ENV, str(pem))
    monkeypatch.setenv(KEY_PASSWORD_ENV, "s3cret")
    rd = make_sealed_run(tmp_path / "home", stored=True)
    res = sign_run(rd.path, tmp_path / "home")
    public, where = default_public_key(tmp_path / "home")
    assert keyid_of(public) == res.keyid == load_signing_key(tmp_path / "home").keyid and KEY_ENV in where
    assert home_key_fallback(tmp_path / "home") is None
    assert verify_run(rd.path, home=tmp_path / "home").run_id == RUN_ID
    monkeypatch.setenv(KEY_PASSWORD_ENV, "wrong")
    with pytest.raises(BenchrunError, match="is wrong"):
        default_public_key(tmp_path / "home")


# -- 5. the attestation asset materialized again -----------------------------------------------------


def test_rematerializing_the_attestation_asset_resigns_only_an_intact_run(bench_home, canary_doc):
    import dagster as dg

    from bench_assets.publish_assets import provenance_attestation
    from benchrun.spec import load_spec_bytes

    raw = yaml.safe_dump(canary_doc, sort_keys=False).encode()
    rd = make_sealed_run(bench_home, spec_bytes=raw, spec_digest=load_spec_bytes(raw, "canary.yaml").spec_digest,
                         stored=True)

    def materialize():
        return provenance_attestation(dg.build_asset_context(partition_key=RUN_ID))

    assert materialize().metadata["subjects"]  # signed
    assert materialize().metadata["keyid"] == load_signing_key(bench_home).keyid  # intact: signed again
    env = envelope_path(rd.path).read_bytes()
    (rd.path / "structured" / f"{RUN_ID}_notes.json").write_text('{"verdict": "fine"}')  # dropped in
    with pytest.raises(BenchrunError) as exc:
        materialize()
    assert "already signed" in str(exc.value) and "files were added since signing" in str(exc.value)
    assert envelope_path(rd.path).read_bytes() == env


def test_with_shared_state_an_analyzing_run_is_judged_on_its_sealed_files(bench_home, monkeypatch):
    """Found in review: the claim of a run analyzed in another pod lives in that pod's home, so `verify`
    from any other home read every healthy run being analyzed as a failure. With shared state the sealed
    files decide there: untouched, "not signed yet"; tampered, still a failure."""
    from benchrun import sharedstate

    monkeypatch.setattr(sharedstate, "shared_state", lambda: object())  # configured; nothing is read from it here
    cli = CliRunner()
    healthy = make_sealed_run(bench_home, "run-elsewhere", stored=True)
    out = cli.invoke(app, ["verify", healthy.run_id])
    assert out.exit_code == 0 and "not signed yet" in out.output and "another pod" in out.output, out.output
    rd = make_sealed_run(bench_home, stored=True)
    result = rd.path / "structured" / f"{RUN_ID}_gemm_r1.json"
    result.write_text(result.read_text().replace("3.0", "30.0"))
    out = cli.invoke(app, ["verify", RUN_ID])
    assert out.exit_code == 1 and "its sealed evidence changed" in out.output + str(out.exception), out.output
