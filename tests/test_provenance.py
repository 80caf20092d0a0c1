"""Signed provenance: DSSE PAE, keys, signing a run, verification and tampering, the publish assets."""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import stat
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import typer
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from benchrun.errors import BenchrunError
from benchrun.provenance import (
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    envelope_path,
    sign_run,
    verify_envelope,
    verify_run,
)
from benchrun.provenance import dsse
from benchrun.provenance.commands import register
from benchrun.provenance.keys import KEY_ENV, KEY_PASSWORD_ENV, load_signing_key
from benchrun.rundir import RunDir
from benchrun.suites.result import SCHEMA, metric
from benchrun.fsio import atomic_write_json

RUN_ID = "prov-20261130090000-0123abcd"


@pytest.fixture(autouse=True)
def _no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_PASSWORD_ENV, raising=False)
    monkeypatch.delenv("BENCHRUN_PUSHGATEWAY_URL", raising=False)


def _pin(home: Path) -> tuple[str, ...]:
    """The home's key pinned by fingerprint (the home's own public key is not trusted otherwise)."""
    return (load_signing_key(home).keyid,)


def make_sealed_run(home: Path, run_id: str = RUN_ID, spec_bytes: bytes | None = None,
                    spec_digest: str | None = None, stored: bool = False) -> RunDir:
    """A run directory with results, environment and (optionally) a pinned spec, sealed by manifest.json."""
    rd = RunDir(home, run_id).create()
    status = {"run_id": run_id, "name": "prov", "phase": "Analyzing", "cadence": "canary",
              "spec_digest": spec_digest or "11" * 32, "workload_spec_digest": "22" * 32,
              "benchmark_class_requested": "publication_grade", "benchmark_class_granted": "realism_grade",
              "created_utc": "2026-11-30T09:00:00Z", "started_utc": "2026-11-30T09:00:01Z", "conditions": [],
              "layers": {"micro": {"status": "succeeded", "ok": 2, "failed": 0, "launches": 2}}}
    rd.write_status(status)
    if spec_bytes is not None:
        (rd.path / "structured" / f"{run_id}_spec.yaml").write_bytes(spec_bytes)
    atomic_write_json(rd.path / "structured" / f"{run_id}_environment.json",
                      {"python": "3.11.7", "os": "Linux", "cores": 2, "packages": {"numpy": "2.1", "duckdb": "1.1"}})
    atomic_write_json(rd.path / "structured" / f"{run_id}_launches.json",
                      [{"layer": "micro", "suite": "gemm", "replicate": k, "status": "ok"} for k in (1, 2)])
    for k, v in ((1, 3.0), (2, 5.0)):
        atomic_write_json(rd.path / "structured" / f"{run_id}_gemm_r{k}.json", {
            "schema": SCHEMA, "run_id": run_id, "suite": "gemm", "replicate": k, "status": "ok",
            "metrics": [metric("tflops", v, "TFLOP/s", "higher", case="n=64")]})
        (rd.path / "raw" / f"{run_id}_gemm_r{k}.log").write_text(f"replicate {k}\n")
    rd.write_manifest(status="succeeded", issues=[], suite_steps={"micro": {"planned": 2, "ok": 2}})
    if stored:
        from benchrun.rundir import MUTABLE_FILES
        from benchrun.store import open_store

        digest = open_store(None, home).put_run_dir(rd.path, run_id, exclude=MUTABLE_FILES).digest
    else:
        digest = "33" * 32
    rd.update_status(artifact_manifest_digest=digest)
    return rd


# -- DSSE ---------------------------------------------------------------------------------------


def test_pae_matches_the_dsse_spec_example() -> None:
    # The worked example of the DSSE v1 protocol document.
    assert dsse.pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world")
    assert dsse.pae("", b"") == b"DSSEv1 0  0 "
    # Lengths count bytes, not characters.
    assert dsse.pae("t", "é".encode()) == b"DSSEv1 1 t 2 \xc3\xa9"


def test_envelope_round_trip_and_url_safe_base64() -> None:
    key = Ed25519PrivateKey.generate()
    env = dsse.sign("application/x", b"\xfb\xff payload", key, "kid")
    doc = env.to_json()
    doc["payload"] = base64.urlsafe_b64encode(env.payload).decode().rstrip("=")
    back = dsse.Envelope.from_json(doc)
    assert back.payload == b"\xfb\xff payload" and dsse.verify(back, key.public_key(), "kid")
    assert not dsse.verify(back, Ed25519PrivateKey.generate().public_key(), "kid")
    assert not dsse.verify(dsse.Envelope("application/y", back.payload, back.signatures), key.public_key(), "kid")


# -- keys ---------------------------------------------------------------------------------------


def test_local_key_is_made_once_private_and_keyid_is_sha256_of_raw_public(tmp_path: Path) -> None:
    k1 = load_signing_key(tmp_path)
    priv, pub = tmp_path / "keys" / "ed25519.pem", tmp_path / "keys" / "ed25519.pub.pem"
    assert stat.S_IMODE(priv.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    raw = k1.public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert k1.keyid == hashlib.sha256(raw).hexdigest() and len(raw) == 32
    loaded_pub = serialization.load_pem_public_key(pub.read_bytes())
    assert loaded_pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw) == raw
    k2 = load_signing_key(tmp_path)
    assert k2.keyid == k1.keyid and "PRIVATE" not in repr(k2)
    assert [p.name for p in sorted((tmp_path / "keys").iterdir())] == ["ed25519.pem", "ed25519.pub.pem"]


def test_a_local_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    load_signing_key(tmp_path)
    os.chmod(tmp_path / "keys" / "ed25519.pem", 0o644)
    with pytest.raises(BenchrunError, match=r"readable by others \(mode 644\); run `chmod 600 "):
        load_signing_key(tmp_path)


def _pem(key: Any, password: bytes | None = None) -> bytes:
    enc = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def test_env_key_is_used_and_bad_keys_are_clear_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "mine.pem"
    path.write_bytes(_pem(key))
    monkeypatch.setenv(KEY_ENV, str(path))
    sk = load_signing_key(tmp_path / "home")
    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert sk.keyid == hashlib.sha256(raw).hexdigest()
    assert not (tmp_path / "home" / "keys").exists()  # no local key made when one is given

    path.write_bytes(_pem(ec.generate_private_key(ec.SECP256R1())))
    with pytest.raises(BenchrunError, match="not ed25519"):
        load_signing_key(tmp_path)
    path.write_bytes(_pem(key, b"s3cret"))
    with pytest.raises(BenchrunError, match=KEY_PASSWORD_ENV):
        load_signing_key(tmp_path)
    monkeypatch.setenv(KEY_PASSWORD_ENV, "s3cret")
    assert load_signing_key(tmp_path).keyid == sk.keyid
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "absent.pem"))
    with pytest.raises(BenchrunError, match="absent.pem does not exist"):
        load_signing_key(tmp_path)


# -- signing a run ------------------------------------------------------------------------------


def test_sign_run_writes_a_verifiable_in_toto_dsse_envelope(tmp_path: Path) -> None:
    rd = make_sealed_run(tmp_path)
    res = sign_run(rd.path, tmp_path, backend_requested="sigstore", attestation_format="in_toto")
    assert res.path == rd.path / "reports" / f"{RUN_ID}_provenance.dsse.json" == envelope_path(rd.path)
    assert (res.backend_requested, res.backend_used, res.satisfied_request) == ("sigstore", "local-ed25519", False)
    ok, reason, message = res.condition()
    assert ok is False and reason == "RequestedBackendUnavailable"
    assert "no sigstore signature was made" in message and "local-ed25519" in message

    # Verify independently of our dsse module: the spec's PAE by hand, cryptography's verify.
    env = json.loads(res.path.read_text())
    assert env["payloadType"] == "application/vnd.in-toto+json" and len(env["signatures"]) == 1
    body = base64.b64decode(env["payload"])
    ptype = env["payloadType"].encode()
    message_bytes = b"DSSEv1 " + str(len(ptype)).encode() + b" " + ptype + b" " + str(len(body)).encode() + b" " + body
    pub = serialization.load_pem_public_key((tmp_path / "keys" / "ed25519.pub.pem").read_bytes())
    pub.verify(base64.b64decode(env["signatures"][0]["sig"]), message_bytes)  # raises if invalid
    assert env["signatures"][0]["keyid"] == res.keyid

    stmt = json.loads(body)
    assert stmt["_type"] == STATEMENT_TYPE == "https://in-toto.io/Statement/v1"
    assert stmt["predicateType"] == PREDICATE_TYPE
    manifest = json.loads((rd.path / "manifest.json").read_text())
    subjects = {s["name"]: s["digest"]["sha256"] for s in stmt["subject"]}
    assert subjects.pop("manifest.json") == hashlib.sha256((rd.path / "manifest.json").read_bytes()).hexdigest()
    assert subjects == manifest["summary"]["sha256"] and f"raw/{RUN_ID}_gemm_r2.log" in subjects
    assert "status.json" not in subjects  # live status, not sealed evidence
    pred = stmt["predicate"]
    assert pred["run_id"] == RUN_ID and pred["artifact_manifest_digest"] == "33" * 32
    assert pred["workload_spec_digest"] == "22" * 32
    assert pred["benchmark_class"] == {"requested": "publication_grade", "granted": "realism_grade"}
    assert pred["signing"] == {"backend_requested": "sigstore", "backend_used": "local-ed25519"}
    assert pred["environment"]["python"] == "3.11.7" and pred["environment"]["packages_count"] == 2
    assert "packages" not in pred["environment"]
    assert pred["builder"]["version"] and pred["timestamps"]["started_utc"] == "2026-11-30T09:00:01Z"
    assert pred["timestamps"]["signed_utc"] and pred["outcome"] == "succeeded"

    st = verify_run(rd.path, home=tmp_path, pinned=_pin(tmp_path))
    assert st.run_id == RUN_ID and len(st.subjects) == len(manifest["files"]) + 1


def test_signing_a_local_request_satisfies_it(tmp_path: Path) -> None:
    rd = make_sealed_run(tmp_path)
    for backend in (None, "local-ed25519"):
        res = sign_run(rd.path, tmp_path, backend_requested=backend)
        assert res.satisfied_request and res.condition()[0] is True
    res = sign_run(rd.path, tmp_path, backend_requested="local", attestation_format="slsa_v1")
    assert not res.satisfied_request and "slsa_v1 was not produced" in res.condition()[2]


def _rewrite(path: Path, change) -> None:
    env = json.loads(path.read_text())
    change(env)
    path.write_text(json.dumps(env))


def test_tampered_envelopes_are_refused_naming_the_file(tmp_path: Path) -> None:
    rd = make_sealed_run(tmp_path)
    path = sign_run(rd.path, tmp_path).path
    original = path.read_text()

    def swap_digest(env: dict) -> None:
        stmt = json.loads(base64.b64decode(env["payload"]))
        stmt["subject"][0]["digest"]["sha256"] = "00" * 32
        env["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()

    def flip_sig(env: dict) -> None:
        sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
        sig[0] ^= 1
        env["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()

    for change in (swap_digest, flip_sig, lambda e: e.update(payloadType="application/vnd.in-toto+jsonx")):
        path.write_text(original)
        _rewrite(path, change)
        with pytest.raises(BenchrunError, match=rf"{path.name}: (the signature does not verify|payloadType)"):
            verify_envelope(path, home=tmp_path, pinned=_pin(tmp_path))
    path.write_text(original)
    other = tmp_path / "other.pub.pem"
    other.write_bytes(Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(BenchrunError, match="does not verify with the key .*other.pub.pem"):
        verify_envelope(path, other)
    assert verify_envelope(path, tmp_path / "keys" / "ed25519.pub.pem").run_id == RUN_ID
    path.write_text("{}")
    with pytest.raises(BenchrunError, match=rf"{path.name}: not a DSSE envelope"):
        verify_envelope(path, home=tmp_path, pinned=_pin(tmp_path))


def test_changed_evidence_is_found_after_signing_and_refused_before(tmp_path: Path) -> None:
    rd = make_sealed_run(tmp_path)
    sign_run(rd.path, tmp_path)
    log = rd.path / "raw" / f"{RUN_ID}_gemm_r1.log"
    log.write_text("replicate 1, edited\n")
    with pytest.raises(BenchrunError, match=rf"signature valid, but 1 signed file\(s\) changed.*{log.name} \(sha256"):
        verify_run(rd.path, home=tmp_path, pinned=_pin(tmp_path))
    # Signing now refuses: the sealed evidence no longer matches its manifest.
    envelope_path(rd.path).unlink()
    with pytest.raises(BenchrunError, match=rf"sealed evidence changed: raw/{log.name}; nothing was signed"):
        sign_run(rd.path, tmp_path)
    assert not envelope_path(rd.path).exists()


def test_unstored_evidence_is_not_signed(tmp_path: Path) -> None:
    rd = make_sealed_run(tmp_path)
    rd.update_status(artifact_manifest_digest=None)
    with pytest.raises(BenchrunError, match="no artifact_manifest_digest"):
        sign_run(rd.path, tmp_path)


def test_key_material_is_never_logged_or_written(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rd = make_sealed_run(tmp_path)
    with caplog.at_level(logging.DEBUG):
        res = sign_run(rd.path, tmp_path)
        verify_run(rd.path, home=tmp_path, pinned=_pin(tmp_path))
    pem = (tmp_path / "keys" / "ed25519.pem").read_text()
    secret_lines = [ln for ln in pem.splitlines() if ln and not ln.startswith("-----")]
    raw = load_signing_key(tmp_path).private.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    assert res.keyid in caplog.text
    for blob in (caplog.text, res.path.read_text()):
        assert not any(s in blob for s in secret_lines)
        assert raw.hex() not in blob and base64.b64encode(raw).decode() not in blob


def test_verify_command(tmp_path: Path, bench_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    register(app)
    rd = make_sealed_run(bench_home, stored=True)
    sign_run(rd.path, bench_home, backend_requested="sigstore")
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", _pin(bench_home)[0])
    out = CliRunner().invoke(app, ["verify", RUN_ID])
    assert out.exit_code == 0, out.output
    assert "signed files unchanged" in out.output and "local-ed25519 (requested: sigstore)" in out.output
    (rd.path / "manifest.json").write_text("{}")
    out = CliRunner().invoke(app, ["verify", RUN_ID])
    assert isinstance(out.exception, BenchrunError) and "manifest.json (sha256 differs)" in str(out.exception)


def test_verify_command_says_when_no_backend_was_requested(bench_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    register(app)
    rd = make_sealed_run(bench_home, stored=True)
    sign_run(rd.path, bench_home)  # the spec asked for no backend
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", _pin(bench_home)[0])
    out = CliRunner().invoke(app, ["verify", RUN_ID])
    assert out.exit_code == 0, out.output
    assert "(the spec requested no backend)" in out.output and "None" not in out.output


# -- the publish assets -------------------------------------------------------------------------


@pytest.mark.slow
def test_publish_assets_through_dagster(bench_home: Path, canary_doc: dict[str, Any]) -> None:
    from bench_assets.partitions import benchmark_run_partitions
    from bench_assets.publish_assets import hot_metrics, provenance_attestation, publish_assets
    from benchrun.spec import load_spec_bytes

    canary_doc["spec"]["provenance"]["signing"] = {"required": True, "backend": "sigstore",
                                                   "attestationFormat": "in_toto"}
    canary_doc["spec"]["sinks"]["hotMetrics"]["cardinalityBudget"]["maxActiveSeries"] = 6
    raw = yaml.safe_dump(canary_doc, sort_keys=False).encode()
    loaded = load_spec_bytes(raw, "canary.yaml")
    rd = make_sealed_run(bench_home, spec_bytes=raw, spec_digest=loaded.spec_digest)
    assert publish_assets == [hot_metrics, provenance_attestation]

    run_evidence = dg.AssetSpec("run_evidence", partitions_def=benchmark_run_partitions)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(benchmark_run_partitions.name, [RUN_ID])
        result = dg.materialize([run_evidence, *publish_assets], instance=instance, partition_key=RUN_ID)
    assert result.success
    hm_meta = {k: v.value for k, v in result.asset_materializations_for_node("hot_metrics")[0].metadata.items()}
    assert hm_meta["series"] == 6 and hm_meta["series_dropped"] > 0 and hm_meta["pushed_to"] == "not pushed"
    prom = (bench_home / "metrics" / f"{RUN_ID}.prom").read_text()
    assert prom.count("\nbenchrun_") == 6 and "benchrun_run_phase{" in prom
    pv_meta = {k: v.value for k, v in
               result.asset_materializations_for_node("provenance_attestation")[0].metadata.items()}
    assert pv_meta["backend_requested"] == "sigstore" and pv_meta["backend_used"] == "local-ed25519"
    assert pv_meta["satisfied_request"] is False and pv_meta["subjects"] > 5
    st = rd.read_status()
    signed = {c["type"]: c for c in st["conditions"]}["Signed"]
    assert signed["status"] == "False" and signed["reason"] == "RequestedBackendUnavailable"
    assert st["provenance_ref"] == str(envelope_path(rd.path))
    assert st["hot_metrics_ref"] == str(bench_home / "metrics" / f"{RUN_ID}.prom")
    assert verify_run(rd.path, pinned=_pin(bench_home)).predicate["spec_digest"] == loaded.spec_digest


def test_a_configured_key_readable_by_others_is_warned_about(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    # only the local key's mode was checked: a world-readable $BENCHRUN_SIGNING_KEY went unsaid
    path = tmp_path / "mine.pem"
    path.write_bytes(_pem(Ed25519PrivateKey.generate()))
    os.chmod(path, 0o644)
    monkeypatch.setenv(KEY_ENV, str(path))
    with caplog.at_level("WARNING"):
        load_signing_key(tmp_path / "home")
    assert any("readable by others (mode 644)" in r.getMessage() and str(path) in r.getMessage() for r in caplog.records)
    caplog.clear()
    os.chmod(path, 0o600)
    with caplog.at_level("WARNING"):
        load_signing_key(tmp_path / "home")
    assert not [r for r in caplog.records if "readable by others" in r.getMessage()]
