"""The CRD: generated from the model, committed without drift, structural, accepted by validators."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import jsonschema
import kubernetes_validate
import pytest
import yaml

from benchrun.spec.crd import crd, crd_yaml, open_api_schema

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "specs/crd/benchmarkrun-crd.yaml"
ALL_SPECS = sorted((ROOT / "specs/examples").glob("*.yaml")) + sorted((ROOT / "specs/local").glob("*.yaml"))


def test_committed_crd_matches_the_model() -> None:
    assert COMMITTED.read_text() == crd_yaml(), "regenerate: benchrun crd --write"


def test_crd_passes_kubernetes_validate() -> None:
    document = yaml.safe_load(COMMITTED.read_text())
    version = kubernetes_validate.latest_version()
    kubernetes_validate.validate(document, version, strict=True)
    broken = yaml.safe_load(COMMITTED.read_text())
    # the check has teeth: a misplaced schema keyword is refused
    broken["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["minimum3"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, version, strict=True)


def _nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for key, sub in schema.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{key}")
    if isinstance(schema.get("items"), dict):
        yield from _nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _nodes(schema["additionalProperties"], f"{path}{{}}")


def test_schema_is_structural() -> None:
    nodes = list(_nodes(open_api_schema()))
    assert len(nodes) > 150
    preserved = []
    for path, node in nodes:
        assert not {"$ref", "anyOf", "oneOf", "allOf", "not", "default"} & set(node), path
        if node.get("x-kubernetes-preserve-unknown-fields"):
            preserved.append(path)
            continue
        assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}, path
        if "additionalProperties" in node:
            assert "properties" not in node, path
    assert preserved == [
        ".spec.layers[].suites[].parameters{}",
        ".spec.comparison.controls.fixed.sequenceLengthMix",
    ]


def test_crd_shape() -> None:
    doc = crd()
    assert doc["metadata"]["name"] == "benchmarkruns.benchmarking.aisp.dev"
    spec = doc["spec"]
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["plural"] == "benchmarkruns" and spec["names"]["shortNames"] == ["brun"]
    [version] = spec["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    # kubectl get benchmarkruns: NAME, then phase, class granted and age (priority 0)
    assert [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")] == ["Phase", "Class", "Age"]
    assert columns["Class"]["jsonPath"] == ".status.benchmarkClassGranted"
    assert columns["Phase"]["jsonPath"] == ".status.phase" and columns["Age"]["type"] == "date"
    for column in columns.values():  # every column points at a field the schema has
        parts = column["jsonPath"].strip(".").split(".")
        if parts[0] == "metadata":
            continue
        node = version["schema"]["openAPIV3Schema"]
        for part in parts:
            node = node["properties"][part]
    schema = version["schema"]["openAPIV3Schema"]
    assert schema["properties"]["spec"]["required"] == [
        "intent", "layers", "workload", "comparison", "metrics", "trials", "bottleneckAnalysis",
        "distributed", "observability", "provenance", "executionPolicy", "sinks", "automation",
    ]
    status = schema["properties"]["status"]["properties"]
    assert status["phase"]["enum"] == ["Pending", "Admitted", "Running", "Analyzing", "Succeeded", "Failed", "Rejected",
                                      "Canceled"]
    assert set(status["conditions"]["items"]["properties"]) == {"type", "status", "reason", "message", "lastTransitionTime"}
    for key in ("runId", "runDirectory", "selectedSchedulerPath", "hotMetricsRef", "warehouseRef",
                "outlierSummary", "stragglerNodes", "provenanceRef"):
        assert key in status, key
    layers = schema["properties"]["spec"]["properties"]["layers"]
    assert "minItems" not in layers["items"]["properties"]["suites"]  # a disabled layer may have none
    trials = schema["properties"]["spec"]["properties"]["trials"]["properties"]
    assert trials["minReplicates"]["minimum"] == 3
    assert trials["confidenceLevel"] == {"type": "number", "format": "double", "minimum": 0.8, "maximum": 1, "exclusiveMaximum": True}


@pytest.mark.parametrize("path", ALL_SPECS, ids=[p.name for p in ALL_SPECS])
def test_examples_validate_against_the_crd_schema(path: Path) -> None:
    # OpenAPI v3.0 schemas use draft-4 semantics (boolean exclusiveMinimum/Maximum)
    jsonschema.Draft4Validator.check_schema(open_api_schema())
    jsonschema.Draft4Validator(open_api_schema()).validate(yaml.safe_load(path.read_text()))


def test_crd_schema_rejects_what_the_model_rejects() -> None:
    doc = yaml.safe_load(ALL_SPECS[0].read_text())
    doc["spec"]["trials"]["minReplicates"] = 2
    doc["spec"]["intent"]["cadence"] = "weekly"
    del doc["spec"]["sinks"]
    errors = {tuple(e.absolute_path)[-1] if e.absolute_path else e.validator for e in jsonschema.Draft4Validator(open_api_schema()).iter_errors(doc)}
    assert errors == {"minReplicates", "cadence", "spec"}  # spec: required key sinks missing


def test_the_crd_refuses_a_name_no_run_id_can_be_made_of() -> None:
    """metadata was an open object: the API server took "gemm.v2" (a valid subdomain) and a 64–253
    character name, and the operator then set Rejected, "fix the spec and apply it again" — which a
    name, immutable, never can be. The CRD now holds the name to the model's DNS label."""
    validator = jsonschema.Draft4Validator(open_api_schema())
    doc = yaml.safe_load(ALL_SPECS[0].read_text())
    for bad in ("gemm.v2", "a" * 64, "Gemm", "-gemm"):
        doc["metadata"]["name"] = bad
        assert [tuple(e.absolute_path) for e in validator.iter_errors(doc)] == [("metadata", "name")], bad
    doc["metadata"]["name"] = "gemm-v2"
    assert list(validator.iter_errors(doc)) == []
