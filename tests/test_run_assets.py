"""The run graph through Dagster: real suites, faults kept as failed replicates, status."""

import json

import pytest

from bench_assets.definitions import defs
from benchrun import submit as sub
from benchrun.rundir import RunDir
from helpers import tiny_spec

PY = "python"
FAIL = {"name": "exits-one", "repoCommand": f"{PY} -c 'import sys; print(\"failing now\"); sys.exit(1)'"}
HANG = {"name": "hangs", "repoCommand": f"{PY} -c 'import time; print(\"hanging\", flush=True); time.sleep(60)'",
        "timeoutSeconds": 2}  # long enough for the interpreter to print first on a loaded machine
KILLED = {"name": "sigkilled", "repoCommand": f"{PY} -c 'import os, signal; os.kill(os.getpid(), signal.SIGKILL)'"}
GEMM = {"name": "gemm", "repoCommand": f"{PY} -m benchrun.suites.gemm", "parameters": {"sizes": [64], "iterations": 3}}


def _materialize(prepared):
    instance = sub.get_instance()
    sub.register_partition(instance, prepared.run_id)
    return sub.execute(prepared, instance=instance)


@pytest.mark.slow
def test_faulty_suites_are_failed_replicates_and_the_run_is_partial(bench_home, canary_doc, write_spec):
    canary_doc["metadata"]["name"] = "faults"
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [GEMM], [FAIL, HANG, KILLED])
    prepared = sub.prepare(write_spec(canary_doc))
    result = _materialize(prepared)
    assert result.success
    rd = RunDir.for_run(prepared.run_id)
    st = rd.read_status()
    assert st["phase"] == "Succeeded" and st["outcome"] == "partial"
    layers = st["layers"]
    assert layers["micro"]["status"] == "succeeded" and layers["micro"]["ok"] == 3
    assert layers["component"]["status"] == "failed" and layers["component"]["failed"] == 9
    assert layers["end_to_end"]["status"] == "skipped"
    launches = json.loads(rd.file("structured", "launches", "", "json").read_text())
    reasons = {(r["suite"], r["replicate"]): r["reason"] for r in launches}
    assert reasons[("exits-one", 1)].startswith("exited with code 1")
    assert reasons[("hangs", 2)].startswith("timed out after 2s")
    assert reasons[("sigkilled", 3)] == "killed by SIGKILL"
    # Every failed replicate keeps its log.
    assert "failing now" in (rd.path / f"raw/{prepared.run_id}_exits-one_r2.log").read_text()
    assert "hanging" in (rd.path / f"raw/{prepared.run_id}_hangs_r1.log").read_text()
    # Real measurements from the suite that worked.
    gemm = [json.loads((rd.path / f"structured/{prepared.run_id}_gemm_r{k}.json").read_text()) for k in (1, 2, 3)]
    assert all(d["status"] == "ok" and any(m["value"] > 0 for m in d["metrics"]) for d in gemm)
    # The evidence is sealed and stored.
    manifest = json.loads((rd.path / "manifest.json").read_text())
    assert manifest["manifest_version"] == 2 and manifest["status"] == "partial"
    assert f"raw/{prepared.run_id}_hangs_r3.log" in manifest["summary"]["sha256"]
    assert st["artifact_manifest_digest"]
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["ComponentComplete"]["status"] == "False"
    assert conds["MicroComplete"]["status"] == "True"
    # the hot metrics say the final phase (found in review: pushed while Analyzing and never again)
    prom = (bench_home / "metrics" / f"{prepared.run_id}.prom").read_text()
    assert 'phase="Succeeded"' in prom and 'phase="Analyzing"' not in prom


@pytest.mark.slow
def test_upstream_layer_failing_entirely_fails_the_run(bench_home, canary_doc, write_spec):
    canary_doc["metadata"]["name"] = "allfail"
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [FAIL], [GEMM])
    prepared = sub.prepare(write_spec(canary_doc))
    _materialize(prepared)
    st = RunDir.for_run(prepared.run_id).read_status()
    assert st["outcome"] == "failed" and st["phase"] == "Failed"
    assert st["layers"]["component"]["ok"] == 3  # later layers still ran and kept evidence


@pytest.mark.slow
def test_publication_grade_is_downgraded_locally(bench_home, write_spec):
    import yaml

    from conftest import ROOT

    doc = yaml.safe_load((ROOT / "specs/local/pre-release.yaml").read_text())
    assert doc["spec"]["intent"]["benchmarkClass"] == "publication_grade"
    doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(doc, [GEMM])
    prepared = sub.prepare(write_spec(doc))
    _materialize(prepared)
    st = RunDir.for_run(prepared.run_id).read_status()
    assert st["benchmark_class_requested"] == "publication_grade"
    assert st["benchmark_class_granted"] == "realism_grade"
    cond = next(c for c in st["conditions"] if c["type"] == "PublicationGuaranteesMet")
    assert cond["status"] == "False" and "dedicated nodes" in cond["message"]


def test_definitions_load_and_job_exists():
    job = defs.resolve_job_def("benchmark_run_job")
    assert job.partitions_def.name == "benchmark_run"
    keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    assert {"pinned_spec", "micro_layer", "component_layer", "end_to_end_layer", "run_evidence", "run_status"} <= keys


def test_invalid_spec_is_rejected_with_exit_2_and_no_partition(bench_home, canary_doc, write_spec):
    from typer.testing import CliRunner

    from benchrun.cli import app

    canary_doc["spec"]["trials"]["minReplicates"] = 1
    canary_doc["spec"]["workload"]["precison"] = "bf16"
    path = write_spec(canary_doc)
    res = CliRunner().invoke(app, ["run", str(path)])
    assert res.exit_code == 2, res.output
    assert "spec.trials.minReplicates" in res.output
    assert "precison" in res.output
    instance = sub.get_instance()
    assert instance.get_dynamic_partitions("benchmark_run") == []
    assert not (bench_home / "runs").exists() or not any((bench_home / "runs").iterdir())
