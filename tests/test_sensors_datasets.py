"""A committed spec's dataset is read from the same commit, and a run keeps its own copy of
it (``structured/<run_id>_dataset.<ext>``), read from then on: the sensors' pin does not
depend on the daemon's working directory or working tree, a retried tick makes the same run,
and a commit that changes only a dataset runs the specs that name it."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml

from benchrun.lifecycle import load_pinned
from benchrun.rundir import RunDir
from sensors.canary import canary_sensor
from sensors.spec_commit import spec_commit_sensor
from test_sensors_commits import defs, instance, repo, started, tick  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parent.parent
DATA_1 = b'{"conversations": [{"from": "human", "value": "one two three"}]}\n'
DATA_2 = b'{"conversations": [{"from": "human", "value": "four five six"}]}\n'


def serving_spec(path: str = "specs/datasets/d.jsonl", canary: bool = False) -> bytes:
    doc = yaml.safe_load((ROOT / "specs/local/serving.yaml").read_text())
    doc["spec"]["workload"]["dataset"] = {"path": path, "format": "sharegpt"}
    if canary:
        doc["spec"]["intent"]["cadence"] = "canary"
        doc["spec"].setdefault("automation", {}).setdefault("ci", {})["canary"] = True
    return yaml.safe_dump(doc, sort_keys=False).encode()


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The daemon's working directory: not the watched clone (the image's WORKDIR)."""
    d = tmp_path / "workdir"
    d.mkdir()
    monkeypatch.chdir(d)
    return d


def test_a_committed_dataset_is_read_from_the_commit_and_kept_in_the_run(repo, instance, defs, bench_home,
                                                                        elsewhere) -> None:
    cursor = started(spec_commit_sensor, instance, defs, repo)
    repo.commit("serving spec", {"specs/local/serving.yaml": serving_spec(), "specs/datasets/d.jsonl": DATA_1})
    data = tick(spec_commit_sensor, instance, defs, cursor)
    assert data.skip_message is None, data.skip_message  # was: "no file at <cwd>/specs/datasets/d.jsonl"
    [req] = data.run_requests
    rd = RunDir(bench_home, req.partition_key)
    status = json.loads(rd.status_path.read_text())
    assert status["dataset"] == {"path": "specs/datasets/d.jsonl", "sha256": hashlib.sha256(DATA_1).hexdigest(),
                                 "copy": f"{rd.run_id}_dataset.jsonl"}
    copy = rd.path / "structured" / status["dataset"]["copy"]
    assert copy.read_bytes() == DATA_1 and not os.access(copy, os.W_OK) or os.geteuid() == 0
    # the run reads its own copy, from any working directory
    loaded = load_pinned(rd)
    assert loaded.run.workload_env()["dataset"]["path"] == str(copy.resolve())
    assert loaded.spec_digest == status["spec_digest"]


def test_the_pin_is_the_commits_bytes_not_the_working_trees(repo, instance, defs, bench_home,
                                                           monkeypatch) -> None:
    monkeypatch.chdir(repo.path)  # the daemon runs in the watched clone ...
    cursor = started(spec_commit_sensor, instance, defs, repo)
    repo.commit("serving spec", {"specs/local/serving.yaml": serving_spec(), "specs/datasets/d.jsonl": DATA_1})
    (repo.path / "specs/datasets/d.jsonl").write_bytes(DATA_2)  # ... whose working tree has moved on
    first = tick(spec_commit_sensor, instance, defs, cursor)
    retried = tick(spec_commit_sensor, instance, defs, cursor)  # the cursor was not stored
    assert [r.partition_key for r in retried.run_requests] == [r.partition_key for r in first.run_requests]
    assert len(list((bench_home / "runs").iterdir())) == 1
    status = json.loads((bench_home / "runs" / first.run_requests[0].partition_key / "status.json").read_text())
    assert status["dataset"]["sha256"] == hashlib.sha256(DATA_1).hexdigest()


def test_a_commit_that_changes_only_a_dataset_runs_the_spec_that_names_it(repo, instance, defs, bench_home,
                                                                          elsewhere) -> None:
    # the dataset's path from the spec's folder (specs/), not from the repository root
    repo.commit("serving spec", {"specs/serving.yaml": serving_spec("datasets/d.jsonl"),
                                 "specs/datasets/d.jsonl": DATA_1})
    cursor = started(spec_commit_sensor, instance, defs, repo)
    sha = repo.commit("new prompts", {"specs/datasets/d.jsonl": DATA_2})
    data = tick(spec_commit_sensor, instance, defs, cursor)
    [req] = data.run_requests  # was: "touches no spec"
    assert req.run_key.startswith(f"spec-commit:{sha}:specs/serving.yaml:")
    status = json.loads((bench_home / "runs" / req.partition_key / "status.json").read_text())
    assert status["dataset"]["sha256"] == hashlib.sha256(DATA_2).hexdigest()
    # a commit that changes another file runs nothing
    repo.commit("docs", {"README.md": "more\n"})
    after = tick(spec_commit_sensor, instance, defs, data.cursor)
    assert after.run_requests in (None, []) and "touches no spec" in after.skip_message


def test_the_canary_pins_each_commits_dataset(repo, instance, defs, bench_home, elsewhere) -> None:
    repo.commit("canary", {"specs/local/serving.yaml": serving_spec(canary=True), "specs/datasets/d.jsonl": DATA_1})
    cursor = started(canary_sensor, instance, defs, repo)
    repo.commit("touch", {"src.py": "1\n"})
    repo.commit("new prompts", {"specs/datasets/d.jsonl": DATA_2})
    data = tick(canary_sensor, instance, defs, cursor)
    digests = [r.run_key.rsplit(":", 1)[1] for r in data.run_requests]
    assert len(digests) == 2 and digests[0] != digests[1]  # the same spec blob, two datasets


def test_an_absolute_or_escaping_path_in_a_committed_spec_is_refused(repo, instance, defs, elsewhere) -> None:
    cursor = started(spec_commit_sensor, instance, defs, repo)
    outside = elsewhere / "d.jsonl"
    outside.write_bytes(DATA_1)
    repo.commit("bad", {"specs/a.yaml": serving_spec(str(outside)), "specs/b.yaml": serving_spec("../../d.jsonl")})
    data = tick(spec_commit_sensor, instance, defs, cursor)
    assert data.run_requests in (None, [])
    assert "is absolute" in data.skip_message and "'..' is not allowed" in data.skip_message


def test_a_dataset_cache_that_cannot_be_written_fails_the_tick_not_the_spec(repo, instance, defs, bench_home,
                                                                          elsewhere) -> None:
    # a full disk or a bad permission on the sensor's machine reported the spec invalid, and the
    # cursor moved past its commit: a valid spec was never submitted
    cursor = started(spec_commit_sensor, instance, defs, repo)
    repo.commit("serving spec", {"specs/local/serving.yaml": serving_spec(), "specs/datasets/d.jsonl": DATA_1})
    (bench_home / "cache").write_text("a file where the cache folder goes")
    with pytest.raises(Exception, match="dataset cache"):
        tick(spec_commit_sensor, instance, defs, cursor)
    (bench_home / "cache").unlink()
    data = tick(spec_commit_sensor, instance, defs, cursor)  # the same cursor: tried again
    assert len(data.run_requests) == 1
