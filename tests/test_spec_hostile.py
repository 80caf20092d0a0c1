"""Hostile or unusual documents that `benchrun validate` must answer with errors at their paths,
in time, and read as kubectl reads them: a path that made the path regex backtrack
exponentially, snake_case keys, non-finite numbers where the model took any value or a suite
converts to int, YAML 1.2 floats, the default bound of ``replicates: auto`` and a trailing ``---``."""

from __future__ import annotations

import copy
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchrun.spec import load_spec_bytes, paths, spec_digest, validate_bytes
from benchrun.spec.builtin_suites import rule_builtin_suite
from benchrun.spec.crd import open_api_schema
from benchrun.spec.loader import format_path, load_documents

ROOT = Path(__file__).resolve().parents[1]
CANARY = ROOT / "specs/local/canary.yaml"
SPEC_FILES = sorted((ROOT / "specs/examples").glob("*.yaml")) + sorted((ROOT / "specs/local").glob("*.yaml"))


def result_of(doc: Any = None, *, text: str | None = None):
    data = text.encode() if text is not None else yaml.safe_dump(doc, sort_keys=False).encode()
    [result] = validate_bytes(data, "t.yaml")
    return result


def errors_by_path(doc: Any = None, *, text: str | None = None) -> dict[str, str]:
    return {e.path: e.message for e in result_of(doc, text=text).errors}


def suite_of(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(s for layer in doc["spec"]["layers"] for s in layer["suites"] if s["name"] == name)


# -- 1. spec paths are read in linear time, and capped -----------------------------------------

HOSTILE = "a" + ".a" * 60 + "!"


def test_a_hostile_spec_path_is_refused_in_well_under_a_second(canary_doc, tmp_path: Path) -> None:
    canary_doc["spec"]["comparison"]["variableUnderTest"] = HOSTILE
    spec = tmp_path / "hostile.yaml"
    spec.write_text(yaml.safe_dump(canary_doc, sort_keys=False))
    cli = [sys.executable, "-c", "from benchrun.cli import app; app()", "validate", str(spec)]
    try:  # in a process of its own: the exponential regex would never come back
        done = subprocess.run(cli, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("benchrun validate did not finish in 60 s on a 60-segment path")
    assert done.returncode == 1 and "is not a spec path" in done.stdout, done.stdout + done.stderr
    started = time.perf_counter()
    with pytest.raises(ValueError, match="is not a spec path"):
        paths.parse(HOSTILE)
    canary_doc["spec"]["comparison"]["allowDifferences"] = [HOSTILE, "x" + ".x-" * 60 + "[" + "y" * 100]
    errors = errors_by_path(canary_doc)
    assert time.perf_counter() - started < 0.5
    assert {"spec.comparison.variableUnderTest", "spec.comparison.allowDifferences[0]",
            "spec.comparison.allowDifferences[1]"} <= set(errors), errors


def test_a_spec_path_longer_than_512_characters_is_refused_and_the_crd_says_so(canary_doc) -> None:
    long_path = "layers.micro.suites[gemm].parameters." + "p" * 500
    with pytest.raises(ValueError, match="at most 512"):
        paths.parse(long_path)
    assert paths.parse("spec.layers.micro.suites[gemm].env.OMP_NUM_THREADS") == (
        "layers", "micro", "suites", "gemm", "env", "OMP_NUM_THREADS")
    canary_doc["spec"]["comparison"]["variableUnderTest"] = long_path
    canary_doc["spec"]["comparison"]["allowDifferences"] = [long_path]
    errors = errors_by_path(canary_doc)
    assert "512" in errors["spec.comparison.variableUnderTest"]
    assert "512" in errors["spec.comparison.allowDifferences[0]"]
    comparison = open_api_schema()["properties"]["spec"]["properties"]["comparison"]["properties"]
    assert comparison["variableUnderTest"]["maxLength"] == 512
    assert comparison["allowDifferences"]["items"]["maxLength"] == 512


# -- 2. keys by their camelCase spelling only ------------------------------------------------


def test_a_snake_case_key_is_an_error_naming_its_camel_case_spelling(canary_doc) -> None:
    controls = canary_doc["spec"]["comparison"]["controls"]
    del controls["compareOneVariableAtATime"]
    controls["compare_one_variable_at_a_time"] = False
    canary_doc["spec"]["trials"]["min_replicates"] = canary_doc["spec"]["trials"].pop("minReplicates")
    result = result_of(canary_doc)
    errors = {e.path: e.message for e in result.errors}
    assert not result.valid
    key = "spec.comparison.controls.compare_one_variable_at_a_time"
    assert "unknown key 'compare_one_variable_at_a_time'" in errors[key] and "'compareOneVariableAtATime'" in errors[key]
    assert "camelCase" in errors[key]  # says why, beyond a did-you-mean
    assert "'minReplicates'" in errors["spec.trials.min_replicates"]
    # the Python name of a renamed key suggests the YAML key too
    diagnosis = canary_doc["spec"]["distributed"]["nodeDiagnosis"]
    diagnosis["validations"] = diagnosis.pop("validate")
    assert "'validate'" in errors_by_path(canary_doc)["spec.distributed.nodeDiagnosis.validations"]


# -- 3. non-finite numbers: errors at their paths, never a traceback ---------------------------


def test_the_list_form_of_controls_fixed_mix_is_checked_like_the_workload_mix(canary_doc) -> None:
    mix = canary_doc["spec"]["workload"]["sequenceLengthMix"]
    fixed = canary_doc["spec"]["comparison"]["controls"]["fixed"]
    fixed["sequenceLengthMix"] = copy.deepcopy(mix)
    assert result_of(canary_doc).valid  # the list form equal to the workload's
    fixed["sequenceLengthMix"] = [dict(mix[0], note=float("nan")), mix[1]]
    errors = errors_by_path(canary_doc)
    assert "unknown key 'note'" in errors["spec.comparison.controls.fixed.sequenceLengthMix[0].note"], errors
    fixed["sequenceLengthMix"] = [dict(mix[0], wieght=5), mix[1]]
    errors = errors_by_path(canary_doc)
    assert "did you mean 'weight'" in errors["spec.comparison.controls.fixed.sequenceLengthMix[0].wieght"], errors
    fixed["sequenceLengthMix"] = 5
    assert "compact form" in errors_by_path(canary_doc)["spec.comparison.controls.fixed.sequenceLengthMix"]


@pytest.mark.parametrize("suite,key,value", [
    ("gemm", "iterations", float("inf")),
    ("gemm", "sizes", [float("inf")]),
    ("serving_sweep", "requests_per_point", float("inf")),
])
def test_a_non_finite_suite_parameter_is_an_error_at_its_path(canary_doc, suite: str, key: str, value: Any) -> None:
    suite_of(canary_doc, suite)["parameters"][key] = value
    errors = errors_by_path(canary_doc)
    where = next(p for p in errors if p.endswith(f".parameters.{key}"))
    assert "finite" in errors[where], errors
    # the rule itself (run on the document as written, whatever the model said) names the field
    found = {format_path(p): m for p, m in rule_builtin_suite(canary_doc)}
    assert [m for p, m in found.items() if p.startswith(where) and "finite" in m], found


def test_a_non_finite_token_count_in_the_workload_is_an_error_at_its_path(canary_doc) -> None:
    canary_doc["spec"]["workload"]["sequenceLengthMix"][0]["inputTokens"] = float("inf")
    where = "spec.workload.sequenceLengthMix[0].inputTokens"
    assert where in errors_by_path(canary_doc)
    found = {format_path(p): m for p, m in rule_builtin_suite(canary_doc)}
    assert "finite" in found[where], found


# -- 4. YAML 1.2 floats ------------------------------------------------------------------


def test_yaml_1_2_floats_are_numbers() -> None:
    [doc] = load_documents(b"a: 1e2\nb: 1.0e5\nc: -.5\nd: .5E-3\ne: 2.E1\n"
                           b"f: 089\ng: 12\nh: 1.5\ni: 1_000\nj: .inf\nk: 1.0e+5\nl: 0x1F\nm: e5\nn: 1e\n")
    assert doc.data == {"a": 100.0, "b": 100000.0, "c": -0.5, "d": 0.0005, "e": 20.0, "f": "089", "g": 12,
                        "h": 1.5, "i": 1000, "j": float("inf"), "k": 100000.0, "l": 31, "m": "e5", "n": "1e"}
    text = CANARY.read_text()
    assert "pricePerNodeHourUsd: 98.32" in text and "deltaPct: 5\n" in text
    text = text.replace("pricePerNodeHourUsd: 98.32", "pricePerNodeHourUsd: 1e2").replace("deltaPct: 5\n", "deltaPct: 5e0\n")
    run = load_spec_bytes(text.encode(), "t.yaml").run
    assert run.spec.metrics.inference.pricing.price_per_node_hour_usd == 100.0
    assert run.spec.comparison.delta_pct == 5.0
    errors = errors_by_path(text=text.replace("deltaPct: 5e0\n", "deltaPct: 1.0e5\n"))
    assert "string" not in errors["spec.comparison.deltaPct"] and "100000" in errors["spec.comparison.deltaPct"]


@pytest.mark.parametrize("spec", SPEC_FILES, ids=lambda p: p.name)
def test_the_digest_of_a_spec_without_yaml_1_2_floats_is_unchanged(spec: Path) -> None:
    data = spec.read_bytes()
    [doc] = load_documents(data)
    assert doc.data == yaml.safe_load(data) and spec_digest(doc.data) == spec_digest(yaml.safe_load(data))


# -- 5. the default bound of replicates: auto ------------------------------------------------


def test_auto_replicates_are_bounded_by_the_default_max_replicates(canary_doc) -> None:
    trials = canary_doc["spec"]["trials"]
    trials.update(minReplicates=20, replicates="auto")
    trials.pop("maxReplicates", None)
    implicit = errors_by_path(canary_doc)
    trials["maxReplicates"] = 10
    explicit = errors_by_path(canary_doc)
    assert "spec.trials.maxReplicates" in implicit and "spec.trials.maxReplicates" in explicit, (implicit, explicit)
    assert "is 10" in implicit["spec.trials.maxReplicates"] and "default" in implicit["spec.trials.maxReplicates"]
    del trials["replicates"], trials["maxReplicates"]  # no auto: the bound is not used
    assert "spec.trials.maxReplicates" not in errors_by_path(canary_doc)


# -- 6. empty documents --------------------------------------------------------------------


def test_an_empty_trailing_document_is_ignored() -> None:
    text = CANARY.read_text()
    for wrapped in (text + "---\n", "---\n" + text + "---\n# nothing more\n---\n"):
        results = validate_bytes(wrapped.encode(), "t.yaml")
        assert [r.valid for r in results] == [True], [str(e) for r in results for e in r.errors]
        assert load_spec_bytes(wrapped.encode(), "t.yaml").spec_digest == load_spec_bytes(text.encode(), "t.yaml").spec_digest
    two = validate_bytes((text + "---\n" + text).encode(), "t.yaml")
    assert two[0].fatal and "2 YAML documents" in two[0].errors[0].message
    assert "must be a mapping" in validate_bytes(b"~\n", "t.yaml")[0].errors[0].message  # an explicit null is content


@pytest.mark.parametrize("section", ["workload", "layers", "trials"])
def test_a_whole_section_is_not_one_variable_under_test(section):
    # review 2026-12-07: `variableUnderTest: workload` (or layers) was valid: a "single variable"
    # that lets the whole frozen workload, or every suite, differ defeats the one-variable gate
    doc = yaml.safe_load(CANARY.read_text())
    doc["spec"]["comparison"]["variableUnderTest"] = section
    got = errors_by_path(doc)
    assert f"names the whole spec.{section} section" in got.get("spec.comparison.variableUnderTest", ""), got
    doc["spec"]["comparison"]["variableUnderTest"] = "workload.model"
    assert "spec.comparison.variableUnderTest" not in errors_by_path(doc)


def test_a_pattern_error_says_the_rule_in_words_not_the_regex():
    # review 2026-12-07: `metadata.name: Canary_X` answered "'Canary_X' does not match the pattern
    # ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    doc = yaml.safe_load(CANARY.read_text())
    doc["metadata"]["name"] = "Canary_X"
    got = errors_by_path(doc)
    assert got["metadata.name"].startswith("is 'Canary_X'; must be a DNS label: lowercase letters"), got
    assert not any("pattern ^" in m for m in got.values())
