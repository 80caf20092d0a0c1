"""Issue 29 (1): ``spec.workload.dataset`` is pinned: its file's sha256 joins the spec digest, a
written sha256 must match the file, and suites get the resolved path with the pinned digest."""

from __future__ import annotations

import hashlib
from pathlib import Path

import yaml

from benchrun.spec.digest import spec_digest, workload_spec_digest
from benchrun.spec.validation import load_spec, load_spec_bytes, validate_bytes

ROOT = Path(__file__).resolve().parent.parent
SERVING = ROOT / "specs/local/serving.yaml"
SHIPPED = ROOT / "specs/datasets/benchrun-conversations.jsonl"


def _spec_with(tmp_path: Path, dataset: dict) -> Path:
    doc = yaml.safe_load(SERVING.read_text())
    doc["spec"]["workload"]["dataset"] = dataset
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(doc, sort_keys=False))
    return p


def test_the_serving_spec_pins_the_shipped_datasets_sha256(monkeypatch):
    monkeypatch.chdir(ROOT)
    loaded = load_spec(SERVING)
    sha = hashlib.sha256(SHIPPED.read_bytes()).hexdigest()
    ds = loaded.run.workload_env()["dataset"]
    assert ds["sha256"] == sha and ds["path"] == str(SHIPPED.resolve()) and ds["format"] == "sharegpt"
    # the digest covers the document as written plus the file's sha256 (not the absolute path)
    assert loaded.document["spec"]["workload"]["dataset"] == {"path": "specs/datasets/benchrun-conversations.jsonl",
                                                               "format": "sharegpt", "sha256": sha}
    assert loaded.spec_digest == spec_digest(loaded.document)
    assert loaded.raw == SERVING.read_bytes()  # the stored bytes are what was submitted


def test_the_digest_changes_with_the_datasets_bytes(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "one two three"}\n')
    spec = _spec_with(tmp_path, {"path": "d.jsonl"})  # relative: found in the spec's folder
    first = load_spec(spec)
    data.write_text('{"prompt": "one two four"}\n')
    second = load_spec(spec)
    assert first.spec_digest != second.spec_digest
    assert first.workload_spec_digest != second.workload_spec_digest
    data.write_text('{"prompt": "one two three"}\n')
    assert load_spec(spec).spec_digest == first.spec_digest  # the same bytes pin the same digest


def test_a_wrong_sha256_or_a_missing_file_is_an_error_naming_the_field(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "x"}\n')
    bad = _spec_with(tmp_path, {"path": "d.jsonl", "sha256": "0" * 64})
    [res] = validate_bytes(bad.read_bytes(), str(bad))
    assert not res.valid
    assert [e.path for e in res.errors] == ["spec.workload.dataset.sha256"]
    assert "has sha256 " + hashlib.sha256(data.read_bytes()).hexdigest() in res.errors[0].message
    missing = _spec_with(tmp_path, {"path": "nowhere.jsonl"})
    [res] = validate_bytes(missing.read_bytes(), str(missing))
    assert [e.path for e in res.errors] == ["spec.workload.dataset.path"] and "no file at" in res.errors[0].message
    shape = _spec_with(tmp_path, {"path": "d.jsonl", "format": "csv"})
    [res] = validate_bytes(shape.read_bytes(), str(shape))
    assert [e.path for e in res.errors] == ["spec.workload.dataset.format"]


def test_a_spec_without_a_dataset_digests_as_before():
    raw = (ROOT / "specs/local/canary.yaml").read_bytes()
    loaded = load_spec_bytes(raw, "canary.yaml")
    doc = yaml.safe_load(raw)
    assert loaded.spec_digest == spec_digest(doc) and loaded.workload_spec_digest == workload_spec_digest(doc)
    assert "dataset" not in loaded.run.workload_env()


def test_an_unreadable_dataset_path_is_an_error_naming_the_field_not_a_traceback(tmp_path):
    # a name over NAME_MAX made Path.is_file() raise OSError out of validation: `validate`
    # printed a traceback and every sensor tick after the commit failed (the cursor never moved)
    spec = _spec_with(tmp_path, {"path": "d" * 300 + ".jsonl"})
    [res] = validate_bytes(spec.read_bytes(), str(spec))
    assert not res.valid
    assert [e.path for e in res.errors] == ["spec.workload.dataset.path"] and "cannot read" in res.errors[0].message
    from benchrun.automation.discovery import InvalidSpec, SpecDocument, load_document

    bad = load_document(SpecDocument(path="s.yaml", data=spec.read_bytes(), source=str(spec)))
    assert isinstance(bad, InvalidSpec) and "spec.workload.dataset.path" in bad.errors[0]


def test_a_sha256_of_the_wrong_type_is_refused_not_overwritten(tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text('{"prompt": "x"}\n')
    for given in (5, "ABC", True):
        spec = _spec_with(tmp_path, {"path": "d.jsonl", "sha256": given})
        [res] = validate_bytes(spec.read_bytes(), str(spec))
        assert not res.valid and [e.path for e in res.errors] == ["spec.workload.dataset.sha256"], given


def test_a_defect_in_validation_makes_one_invalid_document_not_a_failed_tick(monkeypatch):
    import benchrun.spec as spec_pkg
    from benchrun.automation.discovery import InvalidSpec, SpecDocument, load_document

    def boom(*_a, **_k):
        raise RuntimeError("a bug of ours")

    monkeypatch.setattr(spec_pkg, "load_spec_bytes", boom)
    out = load_document(SpecDocument(path="s.yaml", data=b"x", source="s.yaml"))
    assert isinstance(out, InvalidSpec) and "RuntimeError: a bug of ours" in out.errors[0]


def test_the_namespace_the_api_server_sets_does_not_change_the_digest():
    # kubectl apply always sets metadata.namespace: the file and the resource pinned differently
    doc = yaml.safe_load((ROOT / "specs/local/canary.yaml").read_text())
    applied = {**doc, "metadata": {**doc["metadata"], "namespace": "default", "uid": "u-1", "generation": 3}}
    assert spec_digest(applied) == spec_digest(doc)


def _errors(raw: bytes, source: str) -> list[tuple[str, str]]:
    import pytest

    from benchrun.spec.validation import SpecInvalid

    with pytest.raises(SpecInvalid) as caught:
        load_spec_bytes(raw, source)
    return [(e.path, e.message) for e in caught.value.errors]


def test_a_dataset_path_outside_the_repository_or_not_a_dataset_is_refused(tmp_path, monkeypatch):
    # `path: ../../../../etc/passwd` validated, and `submit` copied /etc/passwd into the run as
    # structured/<run>_dataset.data with its sha256 recorded
    monkeypatch.chdir(ROOT)
    for written, says in (("../../../../etc/passwd", "'..' is not allowed"), ("/etc/hostname", "is absolute"),
                          ("specs/../../../etc/passwd.jsonl", "'..' is not allowed"),
                          (str(SHIPPED), "is absolute"), ("README.md", "is not a dataset file")):
        spec = _spec_with(tmp_path, {"path": written})
        [(path, message)] = _errors(spec.read_bytes(), str(spec))
        assert path == "spec.workload.dataset.path" and says in message, (written, message)
        assert "give" in message  # the fix


def test_a_resources_dataset_is_read_only_from_the_images_specs_folder(tmp_path, monkeypatch):
    # the operator pinned /etc/hostname (any file of the orchestrator) for a BenchmarkRun resource
    raw = _spec_with(tmp_path, {"path": "specs/datasets/benchrun-conversations.jsonl"}).read_bytes()
    monkeypatch.chdir(ROOT)  # the image's WORKDIR holds specs/
    loaded = load_spec_bytes(raw, "cr:team-a/my-run")
    assert loaded.run.workload_env()["dataset"]["path"] == str(SHIPPED.resolve())
    for written in ("/etc/hostname", "pyproject.json", "benchrun/x.jsonl"):
        doc = yaml.safe_load(raw)
        doc["spec"]["workload"]["dataset"] = {"path": written}
        [(path, message)] = _errors(yaml.safe_dump(doc).encode(), "cr:team-a/my-run")
        assert path == "spec.workload.dataset.path", written
    assert "image's specs/ folder" in message
    # a link under specs/ that leads out of it is refused too
    image = tmp_path / "image"
    (image / "specs").mkdir(parents=True)
    (tmp_path / "secret.jsonl").write_text('{"prompt": "x"}\n')
    (image / "specs" / "d.jsonl").symlink_to(tmp_path / "secret.jsonl")
    monkeypatch.chdir(image)
    doc["spec"]["workload"]["dataset"] = {"path": "specs/d.jsonl"}
    [(path, message)] = _errors(yaml.safe_dump(doc).encode(), "cr:team-a/my-run")
    assert path == "spec.workload.dataset.path" and "leads out of the image's specs/" in message


def test_a_pinned_run_is_read_against_its_copy_whatever_its_path_was(tmp_path):
    # admission's path rules are not applied again to a run pinned before them
    from benchrun.spec.datasets import pinned_finder

    copy = tmp_path / "r_dataset.jsonl"
    copy.write_text('{"prompt": "x"}\n')
    raw = _spec_with(tmp_path, {"path": "/old/host/d.jsonl"}).read_bytes()
    loaded = load_spec_bytes(raw, "spec.yaml", find_dataset=pinned_finder(copy, "spec.yaml"))
    assert loaded.run.workload_env()["dataset"]["path"] == str(copy.resolve())


def test_a_link_in_the_repository_cannot_pin_another_file_of_the_machine(tmp_path, monkeypatch):
    # security review: specs/datasets/conv.jsonl -> /elsewhere/secret.txt was admitted (the suffix was
    # checked on the link's name) and copy_into_run copied the secret into the run
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    (repo / "specs" / "datasets").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP-SECRET-LINE\n")
    (outside / "other.jsonl").write_text('{"prompt": "x"}\n')
    (repo / "specs" / "datasets" / "conv.jsonl").symlink_to(outside / "secret.txt")
    (repo / "specs" / "datasets" / "away.jsonl").symlink_to(outside / "other.jsonl")
    (repo / "specs" / "datasets" / "real.jsonl").write_text('{"prompt": "y"}\n')
    (repo / "specs" / "datasets" / "inside.jsonl").symlink_to(repo / "specs" / "datasets" / "real.jsonl")
    monkeypatch.chdir(repo)
    for written, said in (("specs/datasets/conv.jsonl", "leads out of"), ("specs/datasets/away.jsonl", "leads out of")):
        spec = _spec_with(repo, {"path": written})
        [res] = validate_bytes(spec.read_bytes(), str(spec))
        assert [e.path for e in res.errors] == ["spec.workload.dataset.path"], written
        assert said in res.errors[0].message and "TOP-SECRET" not in res.errors[0].message
    spec = _spec_with(repo, {"path": "specs/datasets/inside.jsonl"})  # a link that stays in the repository
    assert load_spec(spec).run.workload_env()["dataset"]["sha256"] == hashlib.sha256(b'{"prompt": "y"}\n').hexdigest()
    # a link to a file of the repository that is not a dataset
    (repo / "notes.txt").write_text("x\n")
    (repo / "specs" / "datasets" / "n.jsonl").symlink_to(repo / "notes.txt")
    spec = _spec_with(repo, {"path": "specs/datasets/n.jsonl"})
    [res] = validate_bytes(spec.read_bytes(), str(spec))
    assert "which is not a dataset file" in res.errors[0].message
