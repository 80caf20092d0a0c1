"""Review fixes (provenance): a pinned keyid is never bypassed by the home-key fallback; an
unsigned run's sealing is not decided by its editable pinned spec alone, and a store that cannot be
read fails it closed; promote refuses a signed Failed/Canceled phase as compare does; every S3 error
is a BenchrunError; links and hidden files are named, and a linked result document is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from benchrun.errors import BenchrunError
from benchrun.provenance import sign_run
from benchrun.provenance.keys import KEY_ENV
from benchrun.rundir import MUTABLE_FILES, RunDir
from benchrun.stats.synthetic import lognormal_replicates, make_run
from benchrun.store import S3Store, open_store
from test_provenance import RUN_ID, make_sealed_run
from test_store_helpers import free_port, s3_env  # noqa: F401  (fixture)

SPEC = {"spec": {"metrics": {"inference": {"primary": ["tokens_per_second"]}},
                 "layers": [{"name": "component", "enabled": True,
                             "suites": [{"name": "serve", "repoCommand": "python -m x"}]}]}}
OTHER_KEYID = "ab" * 32


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (KEY_ENV, "BENCHRUN_TRUSTED_KEYIDS", "BENCHRUN_VERIFY_PUBLIC_KEY", "BENCHRUN_STORE_ROOTS",
                 "BENCHRUN_SHARED_STATE", "BENCHRUN_WAREHOUSE_CATALOG"):
        monkeypatch.delenv(name, raising=False)


def _metrics(seed: int = 1):
    rng = np.random.default_rng(seed)
    return {("serve", "", "tokens_per_second"): (lognormal_replicates(rng, 100, 0.02, 5), "tok/s", "higher")}


def _spec(template: str) -> bytes:
    return f"spec:\n  sinks:\n    rawArtifacts:\n      pathTemplate: {template}\n".encode()


def _unseal(rd: RunDir, spec_template: str | None = None) -> None:
    """The tamper: envelope (if any), manifest.json and the digest gone, phase Failed, a measurement
    edited, and (optionally) the pinned spec's storage pathTemplate changed."""
    env = rd.path / "reports" / f"{rd.run_id}_provenance.dsse.json"
    env.unlink(missing_ok=True)
    (rd.path / "manifest.json").unlink()
    st = json.loads((rd.path / "status.json").read_text())
    st.pop("artifact_manifest_digest", None)
    st.update(phase="Failed", outcome="failed", message="killed")
    (rd.path / "status.json").write_text(json.dumps(st))
    result = rd.path / "structured" / f"{rd.run_id}_gemm_r1.json"
    result.write_text(result.read_text().replace('"ok"', '"ok" ', 1))
    if spec_template is not None:
        (rd.path / "structured" / f"{rd.run_id}_spec.yaml").write_bytes(_spec(spec_template))


# -- 1. a pinned keyid that does not match is the error, not a fallback to the home's key ----------


def test_a_pinned_keyid_that_does_not_match_is_not_bypassed_by_the_home_key(tmp_path, monkeypatch):
    from benchrun.provenance.keys import home_key_fallback
    from benchrun.stats.admit import verification_key
    from benchrun.stats.baseline import promote

    make_run(tmp_path, "good", _metrics(), spec=SPEC, sealed=True)
    # nothing configured: the home's own key, said so (integrity only)
    assert home_key_fallback(tmp_path) is not None
    with pytest.raises(BenchrunError, match="do not match"):
        promote("good", tmp_path, pinned=(OTHER_KEYID,))  # --trust-keyid
    assert not (tmp_path / "published" / "current").exists()
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", OTHER_KEYID)
    with pytest.raises(BenchrunError, match="do not match"):
        home_key_fallback(tmp_path)
    with pytest.raises(BenchrunError, match="do not match"):
        promote("good", tmp_path)
    with pytest.raises(BenchrunError, match="do not match"):
        verification_key(tmp_path)  # what compare checks signatures with
    monkeypatch.setenv("BENCHRUN_VERIFY_PUBLIC_KEY", str(tmp_path / "no-such.pem"))
    monkeypatch.delenv("BENCHRUN_TRUSTED_KEYIDS")
    with pytest.raises(BenchrunError, match="cannot be read"):
        home_key_fallback(tmp_path)  # a configured key that cannot be read is the error too
    monkeypatch.delenv("BENCHRUN_VERIFY_PUBLIC_KEY")
    assert promote("good", tmp_path).is_file()  # nothing configured: published, as before


def test_a_pin_meant_for_imported_baselines_does_not_block_re_signing_this_homes_runs(bench_home, monkeypatch):
    """Found in the re-review: with the stricter fallback, BENCHRUN_TRUSTED_KEYIDS naming a CI key blocked
    every re-sign of this home's own runs (the report worker's, `benchrun report`'s): their rewritten
    report and figures were left outside the signature. Re-signing checks the files with the key that
    signed them, as before; promote and compare keep refusing the mismatch."""
    from benchrun.lifecycle import resign_checked

    rd = make_sealed_run(bench_home, stored=True)
    sign_run(rd.path, bench_home)
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", OTHER_KEYID)
    why, _signed = resign_checked(rd.path, bench_home)
    # the current signature is checked with the home's key, as before the pin (was: "not signed again: the
    # current signature cannot be checked (the keyid(s) pinned ... do not match it"); this hand-made run then
    # stops at its missing pinned spec, which signing the run's publication needs
    assert why is None or "cannot be checked" not in why, why
    assert why is None or "pinned spec" in why, why


# -- 4. promote refuses a signed Failed/Canceled phase that status.json contradicts, as compare does --


def test_promote_refuses_a_signed_canceled_run_whose_status_json_says_succeeded(tmp_path):
    from benchrun.stats.admit import evidence_problems
    from benchrun.stats.baseline import promote
    from benchrun.stats.load import load_run

    rd = make_run(tmp_path, "canceled", _metrics(), spec=SPEC, status={"phase": "Canceled", "outcome": "canceled"},
                  sealed=True)
    st = json.loads((rd / "status.json").read_text())
    (rd / "status.json").write_text(json.dumps({**st, "phase": "Succeeded", "outcome": "succeeded"}))
    assert any("signed statement records phase 'Canceled'" in p for p in evidence_problems(load_run(rd), tmp_path))
    with pytest.raises(BenchrunError, match="signed statement records phase 'Canceled'"):
        promote("canceled", tmp_path)
    assert not (tmp_path / "published" / "current").exists()


# -- 2. the pinned spec (unsigned, editable) does not decide alone whether a run sealed evidence ------


def _stored_then_unsealed(home: Path, template: str, edit_to: str | None) -> RunDir:
    rd = make_sealed_run(home, spec_bytes=_spec(template))
    open_store(template, home).put_run_dir(rd.path, RUN_ID, exclude=MUTABLE_FILES)
    sign_run(rd.path, home)
    _unseal(rd, edit_to)
    return rd


def test_an_edited_pinned_spec_does_not_hide_a_run_sealed_in_a_local_layout(bench_home):
    from benchrun.provenance.store_walk import unsigned, walk_store

    rd = _stored_then_unsealed(bench_home, "objects/${RUN_ID}/", "elsewhere/${RUN_ID}/")
    failed, why = unsigned(rd)
    assert failed and "sealed its evidence" in why and "objects/${RUN_ID}/" in why, why
    report = walk_store(bench_home / "keys" / "ed25519.pub.pem", (), bench_home)
    assert any(f"run {RUN_ID}" in f and "sealed its evidence" in f for f in report.failures), report.lines
    # its stored manifest is walked though the pinned spec no longer names the store
    assert any(line.startswith(f"stored run {RUN_ID}") for line in report.lines), report.lines


def test_rows_in_the_warehouse_show_a_run_sealed_its_evidence(bench_home, monkeypatch):
    from benchrun.provenance import store_walk
    from benchrun.provenance.store_walk import unsigned
    from benchrun.warehouse.writer import warehouse_root

    monkeypatch.setenv("BENCHRUN_WAREHOUSE_FORMAT", "parquet")
    rd = _stored_then_unsealed(bench_home, "mine/${RUN_ID}/", "elsewhere/${RUN_ID}/")
    assert unsigned(rd)[0] is False  # no store says so now: nothing but the warehouse could
    part = warehouse_root(bench_home) / "benchmark_run_fact" / f"run_id={RUN_ID}" / "part.parquet"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"PAR1")  # curated: rows of the run (curation comes only after sealing)
    failed, why = unsigned(rd)
    assert failed and "rows in the warehouse (benchmark_run_fact)" in why, why
    assert store_walk.warehouse_tables_of(bench_home, RUN_ID) == ["benchmark_run_fact"]


def test_a_run_never_sealed_still_has_nothing_to_verify(bench_home):
    from benchrun.provenance.store_walk import unsigned

    rd = make_sealed_run(bench_home, spec_bytes=_spec("objects/${RUN_ID}/"))
    _unseal(rd)
    failed, why = unsigned(rd)
    assert not failed and "never finished" in why, why


# -- 3. a store that cannot be read fails the run closed ----------------------------------------------


def test_an_unreadable_s3_store_fails_an_unsigned_run_closed(bench_home, s3_env, monkeypatch):
    import boto3

    from benchrun.provenance.store_walk import unsigned

    boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1").create_bucket(Bucket="bench-unsealed")
    monkeypatch.setenv("BENCHRUN_S3_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("BENCHRUN_S3_CONNECT_TIMEOUT_S", "1")
    rd = _stored_then_unsealed(bench_home, "s3://bench-unsealed/raw/${RUN_ID}/", None)
    failed, why = unsigned(rd)
    assert failed and "sealed its evidence" in why, why  # reachable: its store shows it
    # the endpoint down
    monkeypatch.setenv("BENCHRUN_S3_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    failed, why = unsigned(rd)
    assert failed and "cannot tell whether it sealed evidence" in why and "unreachable" in why, why
    # no credentials
    monkeypatch.setenv("BENCHRUN_S3_ENDPOINT_URL", s3_env)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # it keeps the credentials it found first
    failed, why = unsigned(rd)
    assert failed and "cannot tell whether it sealed evidence" in why and "credentials" in why, why


# -- 5. every S3 error is a BenchrunError; verify names each object and goes on ------------------------


def _stubbed_store():
    import boto3
    from botocore.stub import Stubber

    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    return S3Store("bench", "", "raw/${RUN_ID}/", client=client), Stubber(client)


def test_s3_403_on_head_5xx_and_a_broken_stream_are_benchrun_errors(monkeypatch):
    import botocore.exceptions as bex

    store, stub = _stubbed_store()
    with stub:
        stub.add_client_error("head_object", service_error_code="403", service_message="Forbidden",
                              http_status_code=403)
        with pytest.raises(BenchrunError, match="access denied"):
            store.exists("raw/r/manifests/r.json")
        stub.add_client_error("head_object", service_error_code="InternalError", service_message="We are down",
                              http_status_code=500)
        with pytest.raises(BenchrunError, match="InternalError"):
            store.exists("raw/r/manifests/r.json")
        stub.add_client_error("get_object", service_error_code="SlowDown", http_status_code=503)
        with pytest.raises(BenchrunError, match="SlowDown"):
            store.hash_key("raw/r/sha256/aa/aa")

    class Broken:
        def iter_chunks(self, size):
            yield b"part"
            raise bex.ResponseStreamingError(error="connection reset")

        def read(self, *args):
            raise bex.ResponseStreamingError(error="connection reset")

        def close(self):
            pass

    monkeypatch.setattr(store.client, "get_object", lambda **kw: {"Body": Broken()})
    with pytest.raises(BenchrunError, match="ResponseStreamingError"):
        store.hash_key("raw/r/sha256/aa/aa")
    with pytest.raises(BenchrunError, match="ResponseStreamingError"):
        with store.open_key("raw/r/sha256/aa/aa") as fh:
            fh.read()


def test_store_verify_names_each_failing_object_and_checks_the_rest(monkeypatch):
    import hashlib

    from benchrun.store.base import ObjectEntry, ObjectManifest

    store, stub = _stubbed_store()
    good = hashlib.sha256(b"ok").hexdigest()
    entries = tuple(ObjectEntry(f"f{i}", good, 2, f"raw/r/sha256/{i}", f"s3://bench/raw/r/sha256/{i}") for i in range(3))
    calls = []

    def hash_key(key):
        calls.append(key)
        if key.endswith("/0"):
            raise BenchrunError("head: refused access (403: access denied)")
        return good

    monkeypatch.setattr(store, "hash_key", hash_key)
    with pytest.raises(BenchrunError, match=r"1 stored object\(s\) fail verification: f0 "):
        store.verify(ObjectManifest("r", store.uri, entries))
    assert len(calls) == 3  # one failure recorded; the others were checked
    with stub:  # and through the real client: a 403 on one object is that object's failure
        stub.add_client_error("get_object", service_error_code="403", http_status_code=403)
        monkeypatch.undo()
        with pytest.raises(BenchrunError, match=r"f0 \(s3://bench/raw/r/sha256/0\): .*access denied"):
            store.verify(ObjectManifest("r", store.uri, entries[:1]))


# -- 6. links and hidden files are named; a linked result document is refused --------------------------


def test_links_and_hidden_files_are_named_not_covered(bench_home, tmp_path):
    from benchrun.provenance.store_walk import walk_store
    from benchrun.store.base import unlisted_run_files

    rd = make_sealed_run(bench_home, stored=True)
    sign_run(rd.path, bench_home)
    outside = tmp_path / "outside.json"
    outside.write_text("{}")
    os.symlink(outside, rd.path / "structured" / f"{RUN_ID}_gemm_r9.json")
    (rd.path / "raw" / ".hidden.log").write_text("x")
    assert unlisted_run_files(rd.path) == [("raw/.hidden.log", "hidden"),
                                           (f"structured/{RUN_ID}_gemm_r9.json", "link")]
    report = walk_store(bench_home / "keys" / "ed25519.pub.pem", (), bench_home)
    assert f"run {RUN_ID}: not covered (link): structured/{RUN_ID}_gemm_r9.json" in report.lines, report.lines
    assert f"run {RUN_ID}: not covered (hidden): raw/.hidden.log" in report.lines
    from benchrun.provenance.commands import _verify_one

    lines = _verify_one(RUN_ID, bench_home / "keys" / "ed25519.pub.pem", ())
    assert f"  not covered (link): structured/{RUN_ID}_gemm_r9.json" in lines, lines  # plain verify too


def test_a_symlinked_result_document_is_refused_naming_it(tmp_path):
    from benchrun.stats.load import suite_results

    rd = make_run(tmp_path, "linked", _metrics(), spec=SPEC, sealed=False)
    outside = tmp_path / "forged.json"
    outside.write_text((rd / "structured" / "linked_serve_r1.json").read_text())
    os.symlink(outside, rd / "structured" / "linked_serve_r9.json")
    with pytest.raises(BenchrunError, match=r"linked_serve_r9\.json: a symbolic link"):
        suite_results(rd)


def test_rows_in_the_iceberg_tables_show_a_run_sealed_its_evidence(bench_home):
    from benchrun.provenance.store_walk import unsigned
    from benchrun.warehouse.curate import curate_run

    rd = make_sealed_run(bench_home, spec_bytes=_spec("mine/${RUN_ID}/"))
    open_store("mine/${RUN_ID}/", bench_home).put_run_dir(rd.path, RUN_ID, exclude=MUTABLE_FILES)
    curate_run(rd.path, bench_home)  # the Iceberg tables (the default warehouse)
    sign_run(rd.path, bench_home)
    _unseal(rd, "elsewhere/${RUN_ID}/")
    failed, why = unsigned(rd)
    assert failed and "rows in the warehouse (" in why and "benchmark_run_fact" in why, why


def test_a_missing_private_key_is_refused_not_replaced_over_the_public_key_that_signed_the_runs(tmp_path, monkeypatch):
    """With keys/ed25519.pem gone (a copy that skipped a 0600 file, a deletion), the next signing made a
    new key and overwrote ed25519.pub.pem: promote and compare then refused every earlier run."""
    from benchrun.provenance.keys import load_signing_key, local_key_paths

    monkeypatch.delenv(KEY_ENV, raising=False)
    home = tmp_path / "home"
    first = load_signing_key(home)
    priv, pub = local_key_paths(home)
    old_pub = pub.read_text()
    priv.unlink()
    with pytest.raises(BenchrunError) as err:
        load_signing_key(home)
    said = str(err.value)
    assert f"signing key {priv} is missing, but {pub} (keyid {first.keyid}) is there" in said
    assert "Restore ed25519.pem from a backup (mode 0600)" in said and "--public-key THAT_FILE" in said
    assert pub.read_text() == old_pub and not priv.exists()
    # moved aside on purpose, a new key is made
    pub.rename(tmp_path / "old.pub.pem")
    assert load_signing_key(home).keyid != first.keyid


def test_a_replaced_private_key_keeps_the_earlier_public_key_beside_the_new_one(tmp_path, monkeypatch):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from benchrun.provenance.keys import load_public_key, keyid_of, load_signing_key, local_key_paths

    monkeypatch.delenv(KEY_ENV, raising=False)
    home = tmp_path / "home"
    first = load_signing_key(home)
    priv, pub = local_key_paths(home)
    priv.write_bytes(Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    second = load_signing_key(home)
    assert second.keyid != first.keyid and keyid_of(load_public_key(pub)) == second.keyid
    kept = pub.with_name(f"ed25519.{first.keyid}.pub.pem")
    assert keyid_of(load_public_key(kept)) == first.keyid


def test_a_damaged_public_key_beside_the_private_key_is_kept_aside_and_made_again(tmp_path, monkeypatch):
    """An unreadable ed25519.pub.pem (truncated, edited) made every signing raise ValueError (its keeping name
    held the error text, a '/' in it); before the earlier-key change it was simply written again."""
    from benchrun.provenance.keys import keyid_of, load_public_key, load_signing_key, local_key_paths

    monkeypatch.delenv(KEY_ENV, raising=False)
    home = tmp_path / "home"
    first = load_signing_key(home)
    _priv, pub = local_key_paths(home)
    pub.write_text("-----BEGIN PUBLIC KEY-----\ntrunc")
    again = load_signing_key(home)
    assert again.keyid == first.keyid and keyid_of(load_public_key(pub)) == first.keyid
    [kept] = pub.parent.glob("ed25519.unreadable-*.pub.pem")
    assert kept.read_text().endswith("trunc")
