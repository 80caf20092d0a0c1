"""A publication-grade layer Job is sized for its largest suite, as each suite's own Job would be sized."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from benchrun.errors import BenchrunError
from benchrun.launch.podspec import Placement, job_manifest, layer_job_manifest
from benchrun.plan import Invocation, plan_run
from benchrun.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
RUN_ID = "canary-gpu-20261206000000-c6fd37b0"
# the launcher the reviewer had: an image pinned by digest, dedicated nodes, CPU=8, MEMORY=64Gi
PUBLICATION = Placement(queue_name="canary", publication_grade=True, node_selector={"pool": "bench"},
                        image="registry.example/benchrun@sha256:" + "a" * 64, cpu="8", memory="64Gi",
                        outputs_uri="s3://bench/runs")


def _micro(tmp_path: Path) -> list[Invocation]:
    """The micro layer of deploy/examples/canary-gpu.yaml (gemm on CUDA, then membw, fio, allreduce)."""
    plans = plan_run(load_spec(ROOT / "deploy/examples/canary-gpu.yaml").run, RUN_ID, tmp_path / "run",
                     environ={"PATH": "/usr/bin"})
    return list(next(p for p in plans if p.invocations[0].layer == "micro").invocations)


def _limits(job: dict) -> dict[str, str]:
    [c] = job["spec"]["template"]["spec"]["containers"]
    assert c["resources"]["requests"] == c["resources"]["limits"]  # Guaranteed QoS
    return c["resources"]["limits"]


def _env(job: dict) -> dict[str, str]:
    [c] = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in c["env"]}


@pytest.mark.parametrize("gemm_first", [True, False])
def test_a_cuda_suite_without_gpus_gets_its_gpu_in_the_layer_job(tmp_path: Path, gemm_first: bool) -> None:
    """gemm (device: cuda) with no ``gpus`` gets 1 GPU in its own Job, so the layer pod that
    runs it needs one too, wherever gemm is in the layer."""
    invs = [replace(i, gpus=None) for i in _micro(tmp_path)]
    gemm = [i for i in invs if i.suite == "gemm"]
    assert gemm and gemm[0].gpus is None
    assert _limits(job_manifest(gemm[0], namespace="bench", placement=PUBLICATION))["nvidia.com/gpu"] == "1"
    if not gemm_first:
        invs = [i for i in invs if i.suite != "gemm"] + gemm
    assert invs[0].suite == ("gemm" if gemm_first else "membw")
    job = layer_job_manifest(invs, namespace="bench", placement=PUBLICATION)
    assert _limits(job) == {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}
    assert "NVIDIA_VISIBLE_DEVICES" not in _env(job)
    # a layer with no CUDA suite asks for none (and hides the node's GPUs)
    job = layer_job_manifest([i for i in invs if i.suite != "gemm"], namespace="bench", placement=PUBLICATION)
    assert "nvidia.com/gpu" not in _limits(job) and _env(job)["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_a_suite_on_the_launchers_size_is_not_squeezed_by_a_smaller_explicit_one(tmp_path: Path) -> None:
    """Some suites set cpu/memory, the others take the launcher's (8, 64Gi): the layer pod gets
    the largest of the sizes each suite's own Job has, not the largest explicit one."""
    invs = [replace(i, cpu="2", memory="4Gi") if i.suite == "membw" else i for i in _micro(tmp_path)]
    own = [_limits(job_manifest(i, namespace="bench", placement=PUBLICATION)) for i in invs]
    assert {(o["cpu"], o["memory"]) for o in own} == {("2", "4Gi"), ("8", "64Gi")}
    assert _limits(layer_job_manifest(invs, namespace="bench", placement=PUBLICATION)) == {
        "cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}
    # and a suite larger than the launcher's size sets the layer's
    invs = [replace(i, cpu="16", memory="96Gi") if i.suite == "fio" else i for i in invs]
    assert _limits(layer_job_manifest(invs, namespace="bench", placement=PUBLICATION)) == {
        "cpu": "16", "memory": "96Gi", "nvidia.com/gpu": "1"}
    # a suite with no size at all is refused as its own Job would be
    bare = replace(PUBLICATION, cpu=None, memory=None)
    with pytest.raises(BenchrunError, match="publication grade needs Guaranteed QoS"):
        layer_job_manifest(invs, namespace="bench", placement=bare)
