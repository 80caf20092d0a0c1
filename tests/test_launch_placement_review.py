"""Placement knobs found in review: slurm-bridge annotations on the workload object (not its
templates), the launcher settings that reach every Placement/GangOptions field, quantities checked at
settings load, and a publication-grade gang that is approved only when it can be built."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

import dagster as dg
import pytest
import yaml

from benchrun.errors import BenchrunError
from benchrun.launch.jobset import jobset_manifest
from benchrun.launch.k8s_objects import job_model
from benchrun.launch.kubernetes import KubernetesLauncher
from benchrun.launch.placement import SCHEDULER_PATH_SLINKY
from benchrun.launch.podspec import SLURM_BRIDGE_SCHEDULER, Placement, job_manifest, layer_job_manifest
from benchrun.launch.settings import LauncherSettings
from benchrun.plan import plan_run
from benchrun.spec import load_spec
from crdschemas import crd_validator
from resources.launcher import LauncherResource

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "specs/examples/training-llama-8b-pretrain-h100.yaml"
GANG = "pretrain-token-budget"
PINNED = "registry.example.com/benchrun@sha256:" + "a" * 64
SLURM = Placement(queue_name="training", scheduler_name=SLURM_BRIDGE_SCHEDULER, slurm_partition="h100",
                  slurm_constraints="ib&h100", slurm_reservation="bench", slurm_qos="high")
PUBLICATION = replace(SLURM, publication_grade=True, node_selector={"benchrun.dev/pool": "h100"},
                      topology_label="topology.example.com/rack", topology_values=("r7",))
# the example asks for schedulerPath: slinky, so its launcher declares slurm-bridge
K8S_ENV = {"BENCHRUN_LAUNCHER_KIND": "kubernetes", "BENCHRUN_LAUNCHER_IMAGE": PINNED,
           "BENCHRUN_LAUNCHER_NODE_SELECTOR": '{"pool": "bench"}', "BENCHRUN_LAUNCHER_OUTPUTS_URI": "s3://bench/runs",
           "BENCHRUN_LAUNCHER_SLINKY_SCHEDULER_NAME": SLURM_BRIDGE_SCHEDULER}


@pytest.fixture(scope="module")
def validator():
    return crd_validator("jobset.x-k8s.io_jobsets.yaml", "v1alpha2")


def _invocations(tmp_path: Path, spec: Path = EXAMPLE) -> list[Any]:
    plans = plan_run(load_spec(spec).run, "training-llama-8b-20261201000000-abcdef12", tmp_path / "run",
                     environ={"PATH": "/usr/bin", "BENCHRUN_VAR_SSH_USER": "bench"})
    return [i for p in plans for i in p.invocations]


def _gang(tmp_path: Path) -> Any:
    return next(i for i in _invocations(tmp_path) if i.suite == GANG and i.replicate == 1)


def _templates_metadata(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The metadata of every template in a Job or JobSet (slurm-bridge ignores theirs)."""
    spec = obj["spec"]
    if obj["kind"] == "Job":
        yield spec["template"].get("metadata") or {}
    for rj in spec.get("replicatedJobs") or []:
        yield rj["template"].get("metadata") or {}
        yield rj["template"]["spec"]["template"].get("metadata") or {}


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "JobSet":
        return obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


def _set_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    import os

    for key in [k for k in os.environ if k.startswith("BENCHRUN_LAUNCHER_")]:
        monkeypatch.delenv(key)
    for key, value in {**env, "BENCHRUN_VAR_SSH_USER": "bench"}.items():
        monkeypatch.setenv(key, value)


# -- 1. slurm-bridge annotations: on the Job / JobSet, none on a template ---------------------------

def test_slurm_bridge_annotations_are_on_the_workload_object_and_cover_the_pod_deadline(tmp_path, validator):
    """slurm-bridge (docs/workload.md) reads a Job's or JobSet's own annotations for each pod's Slurm
    external job and ignores those of the pod template and of generated Jobs: before, they sat on
    spec.template.metadata, so partition, timelimit and exclusive never reached Slurm. The time limit
    covers the pod's deadline (the suite's timeout plus the pull allowance), not the timeout alone."""
    invs = _invocations(tmp_path)
    gang = next(i for i in invs if i.suite == GANG and i.replicate == 1)
    single = next(i for i in invs if i.suite == "gemm" and i.replicate == 1)
    prefix = "slurmjob.slinky.slurm.net/"
    for placement in (SLURM, PUBLICATION):
        job = job_manifest(replace(single, image=PINNED, cpu="8", memory="64Gi"), namespace="bench",
                           placement=placement)
        js = jobset_manifest(gang, namespace="bench", placement=placement)
        layer = layer_job_manifest([replace(i, image=PINNED, cpu="8", memory="64Gi") for i in invs
                                    if i.layer == single.layer and not i.is_gang], namespace="bench",
                                   placement=placement)
        for obj in (job, js, layer):
            deadline = _pod_spec(obj)["activeDeadlineSeconds"]
            ann = obj["metadata"]["annotations"]
            assert {k: v for k, v in ann.items() if k.startswith(prefix)} == {
                prefix + "timelimit": str(math.ceil(deadline / 60)), prefix + "partition": "h100",
                prefix + "constraints": "ib&h100", prefix + "reservation": "bench", prefix + "qos": "high",
                **({prefix + "exclusive": "true"} if placement.publication_grade else {})}, obj["kind"]
            for meta in _templates_metadata(obj):
                assert not [k for k in meta.get("annotations") or {} if "slurm" in k], (obj["kind"], meta)
            if obj["kind"] == "Job":
                job_model(obj)  # still a valid batch/v1 Job
            else:
                assert not list(validator.iter_errors(obj))
    # the pod's deadline is the suite's timeout plus the pull allowance: 21600 + 600 s = 370 minutes
    js = jobset_manifest(gang, namespace="bench", placement=SLURM)
    assert gang.timeout_s == 21600 and SLURM.pull_allowance_s == 600
    assert js["metadata"]["annotations"][prefix + "timelimit"] == str(math.ceil((21600 + 600) / 60)) == "370"
    # a publication gang keeps its exclusive-topology annotation beside them
    pub = jobset_manifest(gang, namespace="bench", placement=PUBLICATION)
    assert pub["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"] == "topology.example.com/rack"
    # no slurm-bridge: no annotation at all
    plain = jobset_manifest(gang, namespace="bench", placement=Placement(queue_name="training"))
    assert "annotations" not in plain["metadata"]


# -- 2. every Placement field the docstring lists has a launcher setting ---------------------------

def test_slurm_and_gpu_resource_settings_reach_the_pods(tmp_path, validator):
    settings = LauncherSettings.from_env({
        **K8S_ENV, "BENCHRUN_LAUNCHER_SCHEDULER_NAME": SLURM_BRIDGE_SCHEDULER,
        "BENCHRUN_LAUNCHER_SLURM_PARTITION": "mi300", "BENCHRUN_LAUNCHER_SLURM_CONSTRAINTS": "mi300x",
        "BENCHRUN_LAUNCHER_SLURM_RESERVATION": "bench-week", "BENCHRUN_LAUNCHER_SLURM_QOS": "bench",
        "BENCHRUN_LAUNCHER_SLINKY_ANNOTATION_PREFIX": "slinky.slurm.net/",
        "BENCHRUN_LAUNCHER_GPU_RESOURCE": "amd.com/gpu"})
    placement = settings.placement(cadence="nightly", scheduler_path=SCHEDULER_PATH_SLINKY)  # a run asking for slinky
    assert (placement.slurm_constraints, placement.slurm_reservation, placement.slurm_qos,
            placement.slinky_annotation_prefix, placement.gpu_resource) == (
        "mi300x", "bench-week", "bench", "slinky.slurm.net/", "amd.com/gpu")
    js = KubernetesLauncher(None, None, "bench", placement, gang=settings.gang_options()).manifest(_gang(tmp_path))
    assert not list(validator.iter_errors(js))
    assert {k: v for k, v in js["metadata"]["annotations"].items() if k != "slinky.slurm.net/timelimit"} == {
        "slinky.slurm.net/partition": "mi300", "slinky.slurm.net/constraints": "mi300x",
        "slinky.slurm.net/reservation": "bench-week", "slinky.slurm.net/qos": "bench"}
    limits = _pod_spec(js)["containers"][0]["resources"]["limits"]
    assert limits["amd.com/gpu"] == "8" and "nvidia.com/gpu" not in limits
    # the Dagster resource has them too, and hands them to its settings
    resource = LauncherResource(slurm_qos="bench", gpu_resource="amd.com/gpu", slinky_annotation_prefix="slinky.slurm.net/")
    assert resource.settings().placement(cadence="nightly").gpu_resource == "amd.com/gpu"


@pytest.mark.parametrize(("var", "value", "example"), [
    ("GPU_RESOURCE", "gpu", "nvidia.com/gpu, amd.com/gpu"), ("GPU_RESOURCE", "kubernetes.io/gpu", "amd.com/gpu"),
    ("GPU_RESOURCE", "nvidia.com/g pu", "nvidia.com/gpu"), ("RDMA_RESOURCE", "ib", "rdma/ib"),
    ("RDMA_PER_POD", "0", "greater than or equal to 1"),
    ("SLINKY_ANNOTATION_PREFIX", "slurmjob.slinky.slurm.net", "slurmjob.slinky.slurm.net/"),
])
def test_a_bad_resource_or_prefix_setting_is_refused_naming_it(var, value, example):
    with pytest.raises(BenchrunError, match=rf"^launcher setting \w+ \(BENCHRUN_LAUNCHER_{var}\): .*{re.escape(example)}"):
        LauncherSettings.from_env({"BENCHRUN_LAUNCHER_" + var: value})
    LauncherSettings.from_env({"BENCHRUN_LAUNCHER_GPU_RESOURCE": "deviceclass.resource.kubernetes.io/gpu.nvidia.com"})


# -- 3. the RDMA resource is a setting, and the launcher (and render) use it -----------------------

def test_the_rdma_resource_setting_reaches_the_gang_and_render(tmp_path, bench_home, monkeypatch, validator):
    from benchrun.launch.render import render_objects

    env = {**K8S_ENV, "BENCHRUN_LAUNCHER_RDMA_RESOURCE": "rdma/rdma_shared_device_a",
           "BENCHRUN_LAUNCHER_RDMA_PER_POD": "2"}
    settings = LauncherSettings.from_env(env)
    assert (settings.rdma_resource, settings.rdma_per_pod) == ("rdma/rdma_shared_device_a", 2)
    js = KubernetesLauncher(None, None, "bench", settings.placement(cadence="nightly"),
                            gang=settings.gang_options()).manifest(_gang(tmp_path))
    res = _pod_spec(js)["containers"][0]["resources"]
    assert res["limits"]["rdma/rdma_shared_device_a"] == res["requests"]["rdma/rdma_shared_device_a"] == "2"
    assert "rdma/ib" not in res["limits"]
    _set_env(monkeypatch, env)
    gangs = [o for o in render_objects(EXAMPLE) if o["kind"] == "JobSet"]
    assert gangs
    for js in gangs:
        assert not list(validator.iter_errors(js))
        limits = _pod_spec(js)["containers"][0]["resources"]["limits"]
        assert limits.get("rdma/rdma_shared_device_a") == "2" and "rdma/ib" not in limits


# -- 4. memory and shm_size are Kubernetes quantities, checked when the settings load --------------

@pytest.mark.parametrize("var", ["MEMORY", "SHM_SIZE"])
def test_a_launcher_quantity_that_is_not_one_is_refused_at_load(var):
    with pytest.raises(BenchrunError, match=rf"BENCHRUN_LAUNCHER_{var}\).*Kubernetes quantity such as 64Gi"):
        LauncherSettings.from_env({"BENCHRUN_LAUNCHER_" + var: "16GB"})
    with pytest.raises(dg.Failure, match=r"Kubernetes quantity"):
        LauncherResource(**{var.lower(): "16GB"}).settings()
    assert getattr(LauncherSettings.from_env({"BENCHRUN_LAUNCHER_" + var: "16Gi"}), var.lower()) == "16Gi"


# -- 5. a publication gang is approved only when its JobSet can be built ---------------------------

def test_a_publication_gang_needs_a_topology_label_to_be_offered(bench_home, monkeypatch, validator):
    """The shipped training example (a 2-node gang) on a launcher with dedicated nodes, digests and
    cpu/memory but no topology_label: before, publication grade was granted and building the gang's
    JobSet then failed (no exclusive-topology key). Now the offer says why not and the run is
    realism grade, rendered as such."""
    from benchrun.launch.render import render_objects

    env = {**K8S_ENV, "BENCHRUN_LAUNCHER_CPU": "8", "BENCHRUN_LAUNCHER_MEMORY": "64Gi"}
    _set_env(monkeypatch, env)
    objs = render_objects(EXAMPLE)
    gang = [o for o in objs if o["kind"] == "JobSet"]
    assert gang and all(o["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "pre-release" for o in objs)
    assert not any("alpha.jobset.sigs.k8s.io/exclusive-topology" in (o["metadata"].get("annotations") or {})
                   for o in gang)  # no exclusive-topology: realism
    settings = LauncherSettings.from_env(env)
    suites = [s for layer in load_spec(EXAMPLE).run.spec.layers if layer.enabled for s in layer.suites]
    ok, why = settings.publication_offer_for(suites)
    assert not ok and "multi-node gang" in why and "topology_label" in why
    ok, why = settings.publication_offer([PINNED], True, gang=True)
    assert not ok and "topology_label" in why
    # the Dagster resource's offer, which admission turns into PublicationGuaranteesMet=False and realism grade
    monkeypatch.setattr(LauncherResource, "_apis", lambda self: (None, None, None, False))
    monkeypatch.setattr("benchrun.launch.queues.check_queue", lambda *args: None)
    resource = LauncherResource(kind="kubernetes", image=PINNED, node_selector={"pool": "bench"}, cpu="8", memory="64Gi",
                                slinky_scheduler_name=SLURM_BRIDGE_SCHEDULER)
    path, ok, why = resource.admission_offer(load_spec(EXAMPLE))
    assert path == SCHEDULER_PATH_SLINKY and not ok and "topology_label" in why
    pinned = LauncherSettings.from_env({**env, "BENCHRUN_LAUNCHER_TOPOLOGY_LABEL": "topology.example.com/rack",
                                        "BENCHRUN_LAUNCHER_TOPOLOGY_VALUES": '["r1"]'})
    assert pinned.publication_offer_for(suites)[0]


def test_a_publication_gang_takes_cpu_and_memory_from_its_suite(tmp_path, bench_home, monkeypatch, validator):
    """The shipped example sets cpu and memory on its gang suite: the offer counted them (as single-pod
    Jobs do), but the JobSet then refused a gang whose cpu/memory were not the launcher's."""
    from benchrun.launch.render import render_objects

    gang = _gang(tmp_path)
    assert (gang.cpu, gang.memory) == ("96", "1600Gi")
    placement = replace(PUBLICATION, scheduler_name=None, slurm_partition=None, slurm_constraints=None,
                        slurm_reservation=None, slurm_qos=None)
    assert placement.cpu is None and placement.memory is None
    js = jobset_manifest(gang, namespace="bench", placement=placement)
    assert not list(validator.iter_errors(js))
    assert _pod_spec(js)["containers"][0]["resources"]["limits"]["cpu"] == "96"
    with pytest.raises(BenchrunError, match=r"suites\[pretrain-token-budget\].*Guaranteed QoS"):
        jobset_manifest(replace(gang, cpu=None), namespace="bench", placement=placement)
    # end to end: the example's gang layer alone, the launcher without cpu/memory, granted publication grade
    doc = yaml.safe_load(EXAMPLE.read_text())
    for layer in doc["spec"]["layers"]:
        layer["enabled"] = layer["name"] == "end_to_end"
    # a signature this installation makes (the example asks for sigstore, which downgrades the run as admission does)
    doc["spec"]["provenance"]["signing"]["backend"] = "local_ed25519"
    spec = bench_home / "gang.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    _set_env(monkeypatch, {**K8S_ENV, "BENCHRUN_LAUNCHER_TOPOLOGY_LABEL": "topology.example.com/rack",
                           "BENCHRUN_LAUNCHER_TOPOLOGY_VALUES": '["r1"]'})
    objs = render_objects(spec)
    assert objs and all(o["kind"] == "JobSet" for o in objs)
    for js in objs:
        assert not list(validator.iter_errors(js))
        assert js["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "publication"
        ann = js["metadata"]["annotations"]
        assert {k: v for k, v in ann.items() if not k.startswith("slurmjob.slinky.slurm.net/")} == {
            "alpha.jobset.sigs.k8s.io/exclusive-topology": "topology.example.com/rack"}
        assert ann["slurmjob.slinky.slurm.net/exclusive"] == "true"  # schedulerPath: slinky, through slurm-bridge
        assert _pod_spec(js)["containers"][0]["resources"]["limits"]["memory"] == "1600Gi"
