"""Tests for the S3 artifact store against a real S3 API server (moto) on loopback."""

from __future__ import annotations

import datetime as dt
import hashlib
from pathlib import Path

import boto3
import pytest

from benchrun.errors import BenchrunError
from benchrun.store import S3Store, hash_uri, open_store
from test_store_helpers import free_port, make_run_dir, s3_env  # noqa: F401  (fixture)


def _client(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


def test_put_verify_and_write_once(tmp_path: Path, s3_env: str) -> None:
    client = _client(s3_env)
    client.create_bucket(Bucket="bench-plain")
    run_dir = make_run_dir(tmp_path, "run-s3")
    store = open_store("s3://bench-plain/raw/${RUN_ID}/", tmp_path)
    manifest = store.put_run_dir(run_dir, "run-s3")
    entry = manifest.entry("status.json")
    assert entry.key == f"raw/run-s3/sha256/{entry.sha256[:2]}/{entry.sha256}"
    assert entry.uri == f"s3://bench-plain/{entry.key}"
    body = client.get_object(Bucket="bench-plain", Key=entry.key)
    assert body["Body"].read() == (run_dir / "status.json").read_bytes()
    assert body["Metadata"]["sha256"] == entry.sha256
    assert store.verify(manifest) == len(manifest.objects)
    loaded = open_store("s3://bench-plain/raw/${RUN_ID}/", tmp_path).load_manifest("run-s3")
    assert loaded.digest == manifest.digest
    assert store.list_manifest_run_ids() == ["run-s3"]
    assert hash_uri(entry.uri) == entry.sha256
    # same content again: no-op, same digest
    assert store.put_run_dir(run_dir, "run-s3").digest == manifest.digest


def test_conditional_write_refuses_different_bytes_and_verify_names_object(tmp_path: Path, s3_env: str) -> None:
    client = _client(s3_env)
    client.create_bucket(Bucket="bench-tamper")
    run_dir = make_run_dir(tmp_path, "run-t")
    store = open_store("s3://bench-tamper/raw/${RUN_ID}/", tmp_path)
    manifest = store.put_run_dir(run_dir, "run-t")
    entry = manifest.entry("raw/run-t_gemm_r1.log")
    # the store itself never overwrites: a conditional put on an existing key is refused by the server
    assert store._conditional_put(entry.key, __import__("io").BytesIO(b"x"), {}) is False
    assert client.get_object(Bucket="bench-tamper", Key=entry.key)["Body"].read() == b"gemm ok\n"
    # someone overwrites it out of band (no object lock on this bucket)
    client.put_object(Bucket="bench-tamper", Key=entry.key, Body=b"evil\n")
    with pytest.raises(BenchrunError, match="raw/run-t_gemm_r1.log"):
        store.verify(manifest)
    with pytest.raises(BenchrunError, match="already holds different bytes"):
        store.put_run_dir(run_dir, "run-t")


def test_object_lock_retention_applied(tmp_path: Path, s3_env: str) -> None:
    client = _client(s3_env)
    client.create_bucket(Bucket="bench-locked", ObjectLockEnabledForBucket=True)
    run_dir = make_run_dir(tmp_path, "run-l", replicates=1)
    store = open_store("s3://bench-locked/raw/${RUN_ID}/", tmp_path, retention_days=730, lock_mode="GOVERNANCE")
    manifest = store.put_run_dir(run_dir, "run-l")
    assert store.lock_enabled is True
    entry = manifest.entry("status.json")
    head = client.head_object(Bucket="bench-locked", Key=entry.key)
    assert head["ObjectLockMode"] == "GOVERNANCE"
    until = head["ObjectLockRetainUntilDate"]
    assert until > dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=729)
    # a plain bucket gets no lock arguments
    client.create_bucket(Bucket="bench-nolock")
    assert open_store("s3://bench-nolock/x/", tmp_path, retention_days=730)._lock_args() == {}


def test_endpoint_down_then_retry_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from moto.server import ThreadedMotoServer

    port = free_port()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "super-secret-value")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("BENCHRUN_S3_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("BENCHRUN_S3_CONNECT_TIMEOUT_S", "1")
    monkeypatch.setenv("BENCHRUN_S3_MAX_ATTEMPTS", "1")
    run_dir = make_run_dir(tmp_path, "run-d", replicates=1)
    store = open_store("s3://bench-down/raw/${RUN_ID}/", tmp_path)
    with pytest.raises(BenchrunError, match="S3 endpoint unreachable") as err:
        store.put_run_dir(run_dir, "run-d")
    assert f"127.0.0.1:{port}" in str(err.value)
    assert "super-secret-value" not in str(err.value)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        _client(f"http://127.0.0.1:{port}").create_bucket(Bucket="bench-down")
        manifest = store.put_run_dir(run_dir, "run-d")  # the same store object retries cleanly
        assert store.verify(manifest) == len(manifest.objects)
        data = store.get(manifest, "status.json")
        assert hashlib.sha256(data).hexdigest() == manifest.entry("status.json").sha256
    finally:
        server.stop()


def test_missing_bucket_and_credentials_are_clear(tmp_path: Path, s3_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = make_run_dir(tmp_path, "run-m", replicates=1)
    store = S3Store("no-such-bucket", "raw/", "${RUN_ID}/")
    with pytest.raises(BenchrunError, match="bucket no-such-bucket does not exist"):
        store.put_run_dir(run_dir, "run-m")


def test_file_changed_after_hashing_is_refused_not_stored_under_a_stale_key(
        tmp_path: Path, s3_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file is rewritten between put_run_dir's hash and the upload (a log still being written):
    the S3 store refuses it as the local store does, and no object holds bytes its key does not name."""
    from benchrun.store import base

    client = _client(s3_env)
    client.create_bucket(Bucket="bench-race")
    run_dir = make_run_dir(tmp_path, "run-r", replicates=1)
    log_file = run_dir / "raw" / "run-r_gemm_r1.log"
    stale = hashlib.sha256(log_file.read_bytes()).hexdigest()
    real_hash = base.sha256_file

    def hash_then_change(path: Path) -> str:
        digest = real_hash(path)
        if path == log_file:
            path.write_bytes(b"gemm ok\nmore output\n")  # after the hash, before the upload
        return digest

    monkeypatch.setattr(base, "sha256_file", hash_then_change)
    store = open_store("s3://bench-race/raw/${RUN_ID}/", tmp_path)
    with pytest.raises(BenchrunError, match="run-r_gemm_r1.log: changed while being stored; store the run again"):
        store.put_run_dir(run_dir, "run-r")
    keys = {o["Key"] for o in client.list_objects_v2(Bucket="bench-race").get("Contents", [])}
    assert f"raw/run-r/sha256/{stale[:2]}/{stale}" not in keys
    for key in keys:  # whatever else went up is named by its own bytes
        assert hashlib.sha256(client.get_object(Bucket="bench-race", Key=key)["Body"].read()).hexdigest() == key.rsplit("/", 1)[1]
    # once the file is finished, storing the run again works and verifies
    monkeypatch.setattr(base, "sha256_file", real_hash)
    manifest = store.put_run_dir(run_dir, "run-r")
    assert store.verify(manifest) == len(manifest.objects)
    assert store.get(manifest, "raw/run-r_gemm_r1.log") == b"gemm ok\nmore output\n"
    entry = manifest.entry("raw/run-r_gemm_r1.log")
    head = client.head_object(Bucket="bench-race", Key=entry.key, ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == __import__("base64").b64encode(bytes.fromhex(entry.sha256)).decode()


def test_a_file_over_the_single_put_limit_goes_up_in_parts_write_once(tmp_path: Path, s3_env: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Found in review: one PutObject per file, which S3 caps at 5 GiB, so a larger trace or profile failed
    the run's evidence. Above MULTIPART_THRESHOLD (here 6 MiB, parts of 5 MiB) the file goes up in parts,
    each checked by the server, the whole file hashed before completing, the completion write-once."""
    import os

    from benchrun.store import s3 as s3mod

    monkeypatch.setattr(s3mod, "MULTIPART_THRESHOLD", 6 << 20)
    monkeypatch.setattr(s3mod, "PART_SIZE", 5 << 20)
    client = _client(s3_env)
    client.create_bucket(Bucket="bench-parts")
    run_dir = make_run_dir(tmp_path, "run-p")
    big = run_dir / "raw" / "run-p_trace.bin"
    big.write_bytes(os.urandom(12 << 20))  # three parts: 5 + 5 + 2 MiB
    store = open_store("s3://bench-parts/raw/${RUN_ID}/", tmp_path)
    manifest = store.put_run_dir(run_dir, "run-p")
    entry = manifest.entry("raw/run-p_trace.bin")
    obj = client.get_object(Bucket="bench-parts", Key=entry.key)
    assert hashlib.sha256(obj["Body"].read()).hexdigest() == entry.sha256 and obj["Metadata"]["sha256"] == entry.sha256
    assert store.verify(manifest) == len(manifest.objects)
    assert store.put_run_dir(run_dir, "run-p").digest == manifest.digest  # again: nothing overwritten
    assert not client.list_multipart_uploads(Bucket="bench-parts").get("Uploads")  # none left open
    # the same key holding other bytes (overwritten out of band) is refused, never replaced
    client.put_object(Bucket="bench-parts", Key=entry.key, Body=b"evil")
    with pytest.raises(BenchrunError, match="already holds different bytes"):
        store._put_file(entry.key, big, entry.sha256)
    assert not client.list_multipart_uploads(Bucket="bench-parts").get("Uploads")
