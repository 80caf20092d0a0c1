"""Digests: canonical JSON is stable under formatting and key order, and changes with any value."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from benchrun.spec import canonical_json, load_spec, load_spec_bytes, spec_digest, workload_spec_digest

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "specs/examples/publication-inference-stack-b200.yaml"
SEED_DOC = yaml.safe_load(SEED.read_text())


def test_canonical_json_normalises_numbers_and_order() -> None:
    assert canonical_json({"b": 1.0, "a": [0.70, 2, True, None, "é"]}) == '{"a":[0.7,2,true,null,"é"],"b":1}'
    assert canonical_json({"x": 1}) == canonical_json({"x": 1.0})
    assert canonical_json({"x": True}) != canonical_json({"x": 1})
    with pytest.raises(ValueError):
        canonical_json({"x": float("inf")})


def test_digest_is_sha256_of_canonical_json() -> None:
    expected = hashlib.sha256(canonical_json(SEED_DOC["spec"]["workload"]).encode()).hexdigest()
    assert workload_spec_digest(SEED_DOC) == expected
    assert len(spec_digest(SEED_DOC)) == 64


def test_reformatting_keeps_both_digests() -> None:
    loaded = load_spec(SEED)
    # flow style, reversed key order, quoting, comments, 1.0-style numbers: same values
    def reverse(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: reverse(v[k]) for k in reversed(list(v))}
        if isinstance(v, list):
            return [reverse(x) for x in v]
        return v

    variants = [
        yaml.safe_dump(reverse(SEED_DOC), default_flow_style=True, width=10_000),
        "# a comment\n" + yaml.safe_dump(SEED_DOC, sort_keys=True, default_style='"'),
        json.dumps(SEED_DOC, indent=3),  # JSON is YAML
        SEED.read_text().replace("minReplicates: 5", "minReplicates: 5  # five").replace("weight: 0.7", "weight: 0.70"),
    ]
    for text in variants:
        other = load_spec_bytes(text.encode(), "variant.yaml")
        assert other.raw != loaded.raw
        assert (other.spec_digest, other.workload_spec_digest) == (loaded.spec_digest, loaded.workload_spec_digest)


def test_server_metadata_and_status_do_not_change_the_spec_digest() -> None:
    doc = copy.deepcopy(SEED_DOC)
    doc["metadata"].update(uid="abc", resourceVersion="12", generation=3, creationTimestamp="2026-01-01T00:00:00Z")
    doc["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": "{}"}
    doc["status"] = {"phase": "Running"}
    base = copy.deepcopy(SEED_DOC)
    base["metadata"]["annotations"] = {}
    assert spec_digest(doc) == spec_digest(base)


def test_a_benchmarkrun_read_back_from_the_cluster_validates_with_the_same_digests() -> None:
    """The operator adds a finalizer: the object read back (finalizers, ownerReferences,
    deletionTimestamp, generateName) was refused as unknown metadata."""
    import yaml

    doc = copy.deepcopy(SEED_DOC)
    doc["metadata"].update(uid="abc", resourceVersion="12", generation=1, creationTimestamp="2026-01-01T00:00:00Z",
                           finalizers=["benchmarking.aisp.dev/run"], generateName="x-",
                           ownerReferences=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u"}],
                           deletionTimestamp="2026-01-02T00:00:00Z", deletionGracePeriodSeconds=0,
                           selfLink="/apis/benchmarking.aisp.dev/v1alpha1/namespaces/a/benchmarkruns/x")
    read_back = load_spec_bytes(yaml.safe_dump(doc).encode(), "cr.yaml")
    written = load_spec_bytes(yaml.safe_dump(SEED_DOC).encode(), "file.yaml")
    assert read_back.run.metadata.finalizers == ["benchmarking.aisp.dev/run"]
    assert (read_back.spec_digest, read_back.workload_spec_digest) == (written.spec_digest,
                                                                       written.workload_spec_digest)


def _leaf_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaf_paths(v, prefix + (k,))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaf_paths(v, prefix + (i,))]
    return [prefix]


LEAVES = _leaf_paths(SEED_DOC)


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    return str(value) + "x"


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(LEAVES))
def test_any_value_change_changes_the_spec_digest(path: tuple[Any, ...]) -> None:
    doc = copy.deepcopy(SEED_DOC)
    parent: Any = doc
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = _changed(parent[path[-1]])
    assert spec_digest(doc) != spec_digest(SEED_DOC)
    in_workload = path[:2] == ("spec", "workload")
    assert (workload_spec_digest(doc) != workload_spec_digest(SEED_DOC)) == in_workload


def test_list_order_is_a_value() -> None:
    doc = copy.deepcopy(SEED_DOC)
    doc["spec"]["workload"]["sequenceLengthMix"].reverse()
    assert workload_spec_digest(doc) != workload_spec_digest(SEED_DOC)
