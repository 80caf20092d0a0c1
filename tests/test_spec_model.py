"""The BenchmarkRun model: the seed validates unchanged, typed access, extensions, the reference template."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from benchrun.spec import BenchmarkRun, load_spec, validate_bytes
from benchrun.spec.model import LAYER_NAMES, Suite

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "specs/examples/publication-inference-stack-b200.yaml"
SHARED_SEED = ROOT.parent / "shared/seeds/benchmark_run.yaml"
SHARED_2NODE = ROOT.parent / "shared/reference/canonical_2node_inference_benchmark_run.yaml"
# sha256 of the seed template's bytes (seeds/benchmark_run.yaml of the service design). CI clones
# only this repository, so the tests below check the committed example against this hash, not
# against ../shared, which exists only in the workspace the project was written in.
SEED_SHA256 = "f809ada93b37579b80b9ea65b65a21f9375739f25bb2a33380818af9e03dc2c2"
# A byte-for-byte copy of the second reference template (reference/canonical_2node_inference_
# benchmark_run.yaml), committed as a test fixture for the same reason: without it the check that
# the model covers every field that template uses would be skipped in CI.
TWO_NODE = ROOT / "tests/fixtures/canonical_2node_inference_benchmark_run.yaml"
ALL_SPECS = sorted((ROOT / "specs/examples").glob("*.yaml")) + sorted((ROOT / "specs/local").glob("*.yaml"))


def test_seed_example_is_the_seed_template_unchanged_and_valid() -> None:
    data = EXAMPLE.read_bytes()
    assert hashlib.sha256(data).hexdigest() == SEED_SHA256, f"{EXAMPLE} must stay byte-equal to the seed template"
    loaded = load_spec(EXAMPLE)  # raises SpecInvalid if any admission rule fails
    assert loaded.raw == data
    assert loaded.run.metadata.name == "publication-inference-stack-b200"


def test_fixture_copies_equal_the_shared_originals() -> None:
    if not SHARED_SEED.exists() or not SHARED_2NODE.exists():
        pytest.skip("../shared is not present in this checkout (the committed copies are checked by hash above)")
    assert hashlib.sha256(SHARED_SEED.read_bytes()).hexdigest() == SEED_SHA256
    assert TWO_NODE.read_bytes() == SHARED_2NODE.read_bytes()


def test_example_equals_the_seed_template() -> None:
    if not SHARED_SEED.exists():
        pytest.skip(f"{SHARED_SEED} is not present in this checkout")
    assert yaml.safe_load(EXAMPLE.read_text()) == yaml.safe_load(SHARED_SEED.read_text())
    assert load_spec(SHARED_SEED).run.metadata.name == "publication-inference-stack-b200"


@pytest.mark.parametrize("path", ALL_SPECS, ids=[p.name for p in ALL_SPECS])
def test_every_committed_spec_is_valid(path: Path) -> None:
    loaded = load_spec(path)
    assert loaded.raw == path.read_bytes()
    assert loaded.source == str(path)


def test_typed_access_with_snake_case_names() -> None:
    run = load_spec(EXAMPLE).run
    assert run.metadata.name == "publication-inference-stack-b200"
    assert run.spec.trials.min_replicates == 5
    assert run.spec.trials.confidence_level == 0.95
    assert run.spec.intent.benchmark_class == "publication_grade"
    assert run.spec.layers[0].suites[1].repo_command.startswith("cluster/scripts/run_fio_all_nodes.sh")
    assert run.spec.workload.sequence_length_mix[1].input_tokens == 1024
    assert run.spec.distributed.node_diagnosis.validations[0] == "rdma_pathing"
    assert run.spec.automation.ci.pre_release is True
    assert run.spec.comparison.delta_pct == 3.0 and run.spec.comparison.delta_pct_by_metric == {}
    assert [layer.name for layer in run.enabled_layers()] == list(LAYER_NAMES)
    suite = run.spec.layers[0].suites[0]
    assert (suite.image, suite.timeout_seconds, suite.replicates, suite.parameters) == (None, None, None, {})
    assert run.replicates_for(suite) == 5
    with pytest.raises(ValidationError):
        run.spec.trials.min_replicates = 9  # frozen


def test_round_trip_by_alias_reproduces_the_document() -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    run = BenchmarkRun.model_validate(doc)
    dumped = run.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    assert dumped == doc
    assert BenchmarkRun.model_validate(dumped) == run


def test_workload_env_without_extensions() -> None:
    run = load_spec(EXAMPLE).run
    env = run.workload_env()
    assert env["model"] == "openai/gpt-oss-20b"
    assert env["sequenceLengthMix"][0] == {"inputTokens": 512, "outputTokens": 128, "weight": 0.7}
    assert env["concurrencyModel"] == "closed_loop"
    assert env["slo"] is None and env["pricing"] is None


def test_workload_env_with_slo_and_pricing() -> None:
    run = load_spec(ROOT / "specs/local/canary.yaml").run
    env = run.workload_env()
    assert env["slo"] == {"ttft_ms": 200.0, "decode_ms_per_token": 30.0}
    assert env["pricing"] == {"pricePerNodeHourUsd": 98.32, "nodes": 1}
    assert '"pricing":{"nodes":1,"pricePerNodeHourUsd":98.32}' in run.workload_env_json()


def test_local_specs_follow_their_cadence() -> None:
    expected = {"canary": "realism_grade", "nightly": "realism_grade", "pre-release": "publication_grade"}
    for stem, klass in expected.items():
        run = load_spec(ROOT / f"specs/local/{stem}.yaml").run
        cadence = stem.replace("-", "_")
        assert run.spec.intent.scheduler_path == "local"
        assert run.spec.intent.benchmark_class == klass
        assert run.spec.intent.cadence == cadence
        ci = run.spec.automation.ci
        assert {"canary": ci.canary, "nightly": ci.nightly, "pre_release": ci.pre_release} == {
            c: c == cadence for c in ("canary", "nightly", "pre_release")
        }
        for layer in run.spec.layers:
            assert layer.enabled and layer.suites
            for suite in layer.suites:
                assert suite.repo_command == f"python -m benchrun.suites.{suite.name}"
    canary = load_spec(ROOT / "specs/local/canary.yaml").run
    assert canary.spec.trials.min_replicates == 5  # one-sided exact gate over 6 qualified primaries
    names = {s.name: s.parameters for layer in canary.spec.layers for s in layer.suites}
    assert set(names) == {"gemm", "membw", "fio", "allreduce", "serving_sweep", "dataloader", "job_startup", "serving_workflow"}
    assert names["gemm"] == {"sizes": [512], "iterations": 10}
    assert names["fio"] == {"size_mb": 16, "runtime_s": 0.15, "ramp_s": 0.05}


def test_suite_extensions_validate() -> None:
    suite = Suite.model_validate(
        {"name": "gemm", "repoCommand": "python -m x", "image": "img:1", "timeoutSeconds": 30, "replicates": 7,
         "parameters": {"sizes": [1, 2], "dtype": "float32", "flag": True, "ratio": 0.5}}
    )
    assert suite.timeout_seconds == 30 and suite.parameters["sizes"] == [1, 2]
    for bad in ({"p": None}, {"p": [[1]]}, {"p": {"a": 1}}, {"p": [1, None]}):
        with pytest.raises(ValidationError):
            Suite.model_validate({"name": "g", "repoCommand": "x", "parameters": bad})


def test_suite_nodes_default_to_one_and_validate() -> None:
    plain = Suite.model_validate({"name": "g", "repoCommand": "x"})
    assert plain.nodes == 1 and plain.gpus_per_node is None and not plain.multi_node
    # a document without the fields dumps exactly as written (digests and round trips unchanged)
    assert plain.model_dump(by_alias=True, exclude_defaults=True) == {"name": "g", "repoCommand": "x"}
    gang = Suite.model_validate({"name": "t", "repoCommand": "x", "nodes": 2, "gpusPerNode": 8})
    assert gang.nodes == 2 and gang.gpus_per_node == 8 and gang.multi_node
    for bad in ({"nodes": 0}, {"nodes": "2"}, {"gpusPerNode": -1}, {"nodes": 1.5}):
        with pytest.raises(ValidationError):
            Suite.model_validate({"name": "g", "repoCommand": "x", **bad})


def test_two_node_reference_fails_only_on_site_keys_in_fixed_across_trials() -> None:
    [result] = validate_bytes(TWO_NODE.read_bytes(), "2node.yaml")
    assert [e.path for e in result.errors] == [f"spec.workload.fixedAcrossTrials[{i}]" for i in range(5, 9)]
    doc = yaml.safe_load(TWO_NODE.read_text())
    doc["spec"]["workload"]["fixedAcrossTrials"] = doc["spec"]["workload"]["fixedAcrossTrials"][:5]
    run = BenchmarkRun.model_validate(doc)  # every other field of the template is modelled
    assert run.spec.sinks.curated_warehouse.lineage.artifact_root_column is True
    assert run.layer("micro") is not None and run.layer("micro").suites == []
    [result] = validate_bytes(yaml.safe_dump(doc).encode(), "2node-fixed.yaml")
    assert result.valid, [str(e) for e in result.errors]


def test_model_rejects_what_the_contract_forbids() -> None:
    doc = yaml.safe_load(EXAMPLE.read_text())
    for mutate in (
        lambda d: d["spec"].pop("automation"),
        lambda d: d["spec"]["intent"].update(benchmarkClass="gold"),
        lambda d: d["spec"]["trials"].update(minReplicates=True),
        lambda d: d["spec"]["workload"].update(extra=1),
    ):
        bad = copy.deepcopy(doc)
        mutate(bad)
        with pytest.raises(ValidationError):
            BenchmarkRun.model_validate(bad)


def test_a_suite_name_that_cannot_be_a_label_value_is_refused_at_admission(canary_doc) -> None:
    # every pod carries benchrun.dev/suite=<name>: the CRD allowed 128 characters ending in . _ -,
    # which passed admission and failed only at the launcher's preflight
    for bad in ("gemm_", "g" * 64, "gemm."):
        doc = copy.deepcopy(canary_doc)
        doc["spec"]["layers"][0]["suites"][0]["name"] = bad
        [res] = validate_bytes(yaml.safe_dump(doc).encode(), "spec.yaml")
        assert not res.valid and any(e.path.endswith(".name") and "suites[0]" in e.path for e in res.errors), bad
    ok = copy.deepcopy(canary_doc)
    ok["spec"]["layers"][0]["suites"][0]["name"] = "g" * 63
    [res] = validate_bytes(yaml.safe_dump(ok).encode(), "spec.yaml")
    assert res.valid, res.errors


def test_a_fractional_cpu_is_refused_at_validation(canary_doc) -> None:
    """Found in review: the cpu field's description gave '500m' as its example while every Kubernetes launch refuses
    a fraction (Guaranteed QoS, whole CPUs): the spec refuses it when validated, with that reason."""
    for cpu, valid in (("500m", False), ("1.5", False), ("0", False), ("2000m", True), ("4", True), ("1k", True)):
        doc = copy.deepcopy(canary_doc)
        doc["spec"]["layers"][0]["suites"][0]["cpu"] = cpu
        [res] = validate_bytes(yaml.safe_dump(doc).encode(), "spec.yaml")
        assert res.valid == valid, (cpu, [str(e) for e in res.errors])
        if not valid:
            [err] = res.errors
            assert err.path == "spec.layers[0].suites[0].cpu" and f"'{cpu}' is not a whole number of CPUs" in err.message
            assert "exclusive cores" in err.message
    description = Suite.model_fields["cpu"].description or ""
    assert "whole CPUs" in description and "'500m' is refused" in description
    gpus_per_node = Suite.model_fields["gpus_per_node"].description or ""
    assert "the node's GPUs" not in gpus_per_node  # the launcher never gives a pod the node's GPUs unasked


def test_every_key_of_the_workload_may_be_named_fixed_across_trials() -> None:
    """Review 2026-12-07: `fixedAcrossTrials: [..., dataset]` was refused ("not a workload key (did you
    mean 'datasetRef'?)"): the list of workload keys had been written by hand and missed `dataset`."""
    from benchrun.spec.model import WORKLOAD_KEYS, Workload

    assert set(WORKLOAD_KEYS) == {f.alias or name for name, f in Workload.model_fields.items()}
    doc = yaml.safe_load(TWO_NODE.read_text())
    doc["spec"]["workload"]["fixedAcrossTrials"] = [*doc["spec"]["workload"]["fixedAcrossTrials"][:5], "dataset"]
    [result] = validate_bytes(yaml.safe_dump(doc).encode(), "2node-dataset.yaml")
    assert result.valid, [str(e) for e in result.errors]
