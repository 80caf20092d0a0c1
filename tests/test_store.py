"""Tests for the local artifact store: content addressing, write-once, read-only, verify."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from benchrun.errors import BenchrunError
from benchrun.store import LocalStore, S3Store, hash_uri, manifest_digest, open_store
from test_store_helpers import make_run_dir


def test_open_store_picks_backend(tmp_path: Path) -> None:
    default = open_store(None, tmp_path)
    assert isinstance(default, LocalStore) and default.root == (tmp_path / "objects").resolve()
    assert default.run_prefix("r1") == ""
    plain = open_store("evidence/${RUN_ID}/", tmp_path)
    assert isinstance(plain, LocalStore)
    assert plain.root == (tmp_path / "evidence").resolve() and plain.run_prefix("r1") == "r1/"
    uri = open_store(f"file://{tmp_path}/abs/${{RUN_ID}}/", tmp_path)
    assert uri.root == (tmp_path / "abs").resolve()
    s3 = open_store("s3://benchmarks/raw/${RUN_ID}/", tmp_path)
    assert isinstance(s3, S3Store) and s3.bucket == "benchmarks"
    assert s3.run_prefix("run-1") == "raw/run-1/"
    with pytest.raises(BenchrunError, match="gs://"):
        open_store("gs://b/x/", tmp_path)
    with pytest.raises(BenchrunError, match=r"\$\{DATE\}"):
        open_store("s3://b/${DATE}/", tmp_path)


def test_put_run_dir_is_content_addressed_and_read_only(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path, "run-a")
    store = open_store(None, tmp_path)
    manifest = store.put_run_dir(run_dir, "run-a")
    status = manifest.entry("status.json")
    assert status.sha256 == hashlib.sha256((run_dir / "status.json").read_bytes()).hexdigest()
    stored = store.path_of(status.key)
    assert stored.read_bytes() == (run_dir / "status.json").read_bytes()
    assert status.key == f"sha256/{status.sha256[:2]}/{status.sha256}"
    assert status.uri == stored.as_uri()
    assert not stored.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    files = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file())
    assert [o.path for o in manifest.objects] == files
    # digest: sha256 of the canonical sorted (path, sha256, size) JSON
    rows = [{"path": o.path, "sha256": o.sha256, "size": o.size} for o in manifest.objects]
    canonical = json.dumps(sorted(rows, key=lambda r: r["path"]), sort_keys=True, separators=(",", ":"))
    assert manifest.digest == hashlib.sha256(canonical.encode()).hexdigest() == manifest_digest(manifest.objects)
    # the manifest is saved and loads by run id (latest and by digest)
    assert store.load_manifest("run-a") == manifest
    assert store.load_manifest("run-a", manifest.digest).digest == manifest.digest
    assert store.list_manifest_run_ids() == ["run-a"]
    assert store.verify(manifest) == len(files)
    assert store.get(manifest, "status.json") == (run_dir / "status.json").read_bytes()
    assert hash_uri(status.uri) == status.sha256


def test_the_store_keeps_what_manifest_json_lists_hidden_files_left_out(tmp_path: Path) -> None:
    """Found in review: a suite's ``raw/.x.json`` was stored and signed but missing from manifest.json
    (which, like the shared state, leaves hidden files out)."""
    from benchrun.rundir import RunDir

    run_dir = make_run_dir(tmp_path, "run-h")
    (run_dir / "raw" / ".x.json").write_text("{}")
    manifest = open_store(None, tmp_path).put_run_dir(run_dir, "run-h")
    assert "raw/.x.json" not in [o.path for o in manifest.objects]
    sealed = RunDir(tmp_path, "run-h").write_manifest(status="succeeded", issues=[], suite_steps={})
    listed = sealed["files"] if isinstance(sealed, dict) else json.loads((run_dir / "manifest.json").read_text())["files"]
    assert "raw/.x.json" not in listed
    assert {o.path for o in manifest.objects} - {"manifest.json"} <= set(listed) | {"status.json"}


def test_put_again_is_a_no_op_and_shares_objects(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path, "run-a")
    store = open_store(None, tmp_path)
    first = store.put_run_dir(run_dir, "run-a")
    mtimes = {o.key: store.path_of(o.key).stat().st_mtime_ns for o in first.objects}
    second = store.put_run_dir(run_dir, "run-a")
    assert second.digest == first.digest
    assert {o.key: store.path_of(o.key).stat().st_mtime_ns for o in second.objects} == mtimes
    # identical bytes in another run are one object
    other = make_run_dir(tmp_path, "run-b")
    third = store.put_run_dir(other, "run-b")
    assert third.entry("raw/run-b_gemm_r1.log").key == first.entry("raw/run-a_gemm_r1.log").key


def test_different_bytes_under_existing_key_refused(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path, "run-a")
    store = open_store(None, tmp_path)
    manifest = store.put_run_dir(run_dir, "run-a")
    entry = manifest.entry("raw/run-a_gemm_r1.log")
    target = store.path_of(entry.key)
    os.chmod(target, 0o644)
    target.write_bytes(b"tampered\n")
    with pytest.raises(BenchrunError, match="already holds different bytes"):
        store.put_run_dir(run_dir, "run-a")
    with pytest.raises(BenchrunError, match="raw/run-a_gemm_r1.log") as err:
        store.verify(manifest)
    assert entry.uri in str(err.value)
    with pytest.raises(BenchrunError, match="tampered"):
        store.get(manifest, "raw/run-a_gemm_r1.log")


def test_manifest_altered_is_refused(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path, "run-a")
    store = open_store(None, tmp_path)
    store.put_run_dir(run_dir, "run-a")
    path = store.path_of(store.manifest_key("run-a"))
    doc = json.loads(path.read_text())
    doc["objects"][0]["sha256"] = "0" * 64
    os.chmod(path, 0o644)
    path.write_text(json.dumps(doc))
    with pytest.raises(BenchrunError, match="manifest was altered"):
        store.load_manifest("run-a")


def test_bad_inputs(tmp_path: Path) -> None:
    store = open_store(None, tmp_path)
    with pytest.raises(BenchrunError, match="does not exist"):
        store.put_run_dir(tmp_path / "nope", "run-x")
    with pytest.raises(BenchrunError, match="run id"):
        store.put_run_dir(tmp_path, "Bad_ID")
    with pytest.raises(BenchrunError, match="no object manifest"):
        store.load_manifest("run-missing")
    with pytest.raises(BenchrunError, match="escapes"):
        store.path_of("../../etc/passwd")


def test_run_prefixed_local_template(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path, "run-p", replicates=1)
    store = open_store(f"file://{tmp_path}/raw/${{RUN_ID}}/", tmp_path)
    manifest = store.put_run_dir(run_dir, "run-p")
    entry = manifest.entry("status.json")
    assert entry.key.startswith("run-p/sha256/")
    assert (tmp_path / "raw" / "run-p" / "manifests" / "run-p.json").is_file()
    assert Path(entry.uri.removeprefix("file://")) == tmp_path / "raw" / entry.key
    assert store.list_manifest_run_ids() == ["run-p"]
    assert open_store(f"file://{tmp_path}/raw/${{RUN_ID}}/", tmp_path).load_manifest("run-p").digest == manifest.digest


def test_store_resource_seals_like_the_run_does(tmp_path: Path) -> None:
    """The Dagster resource stores what record_evidence stores: every file but status.json."""
    from resources.store import ArtifactStoreResource

    run_dir = make_run_dir(tmp_path, "run-r", replicates=1)
    manifest = ArtifactStoreResource(home=str(tmp_path)).put_run_dir(run_dir, "run-r")
    paths = {o.path for o in manifest.objects}
    assert "status.json" not in paths and "manifest.json" in paths
    assert manifest == ArtifactStoreResource(home=str(tmp_path)).load_manifest("run-r")


def test_put_sweeps_temporaries_a_dead_put_left(tmp_path: Path) -> None:
    """A put that died mid-copy left a full-size ``sha256/xx/.<hash>.<rand>.tmp``: the next put removes
    it (an hour old: the put died), never a temporary a put running now is writing, and only with
    the store's lock held exclusively."""
    import os
    import time

    run_dir = make_run_dir(tmp_path, "run-sw", replicates=1)
    store = open_store(None, tmp_path)
    stale = store.root / "sha256" / "ab" / f".{'ab' * 32}.x1y2z3.tmp"
    live = store.root / "sha256" / "cd" / f".{'cd' * 32}.a1b2c3.tmp"
    left_manifest = store.root / "manifests" / ".run-old.json.q9w8e7.tmp"
    for tmp in (stale, live, left_manifest):
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(b"\0" * 4096)
    hour_ago = time.time() - 3700
    for tmp in (stale, left_manifest):
        os.utime(tmp, (hour_ago, hour_ago))
    manifest = store.put_run_dir(run_dir, "run-sw")
    assert not stale.exists() and not left_manifest.exists()
    assert live.exists()  # a put running now
    assert store.verify(manifest) == len(manifest.objects)
    # at most once an hour: the next put does not list the store again
    os.utime(live, (hour_ago, hour_ago))
    assert store.sweep_stale_temps() == 0 and live.exists()
    os.utime(store.root / ".swept", (hour_ago, hour_ago))
    # another put holds the lock shared: no sweep now (and no wait for it)
    with store.lock(exclusive=False):
        assert store.sweep_stale_temps() == 0 and live.exists()
    assert store.sweep_stale_temps() == 1 and not live.exists()


def test_a_source_that_changed_while_copied_is_never_linked_into_the_store(tmp_path: Path) -> None:
    """Found in review: the local store linked the object in first and hashed it after, so a copy of a file
    that changed meanwhile was readable under the wrong key until it was removed."""
    store = open_store(None, tmp_path)
    src = tmp_path / "f.bin"
    src.write_bytes(b"new bytes")
    key = "sha256/00/" + "0" * 64
    links: list[bool] = []
    real = store._link_new
    store._link_new = lambda target, write: links.append(real(target, write)) or links[-1]  # type: ignore[method-assign]
    with pytest.raises(BenchrunError, match="changed while being stored"):
        store._put_file(key, src, "0" * 64)
    assert links == [] and not store.path_of(key).exists()
