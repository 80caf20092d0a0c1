"""JobSet manifests for multi-node suites, validated against the published JobSet CRD schema."""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from benchrun.errors import BenchrunError
from benchrun.launch.jobset import GangOptions, jobset_manifest, jobset_name, pod_hostname
from benchrun.launch.podspec import KUEUE_QUEUE_LABEL, Placement
from benchrun.plan import gang_mark, plan_run
from benchrun.spec import load_spec
from crdschemas import crd_validator

ROOT = Path(__file__).resolve().parents[1]
RUN_ID = "training-llama-8b-pretrain-h100-20261201000000-abcdef12"
PUBLICATION = Placement(queue_name="training", publication_grade=True, node_selector={"benchrun.dev/pool": "h100"},
                        cpu="96", memory="1600Gi")
RACK = GangOptions(exclusive_topology_key="topology.example.com/rack")


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft4Validator:
    return crd_validator("jobset.x-k8s.io_jobsets.yaml", "v1alpha2")


def _gang(spec: str, suite: str, tmp_path: Path, run_id: str = RUN_ID):
    plans = plan_run(load_spec(ROOT / spec).run, run_id, tmp_path / "run",
                     environ={"PATH": "/usr/bin", "BENCHRUN_VAR_SSH_USER": "bench"})
    return next(i for p in plans for i in p.invocations if i.suite == suite and i.replicate == 1)


_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def _assert_webhook_names(js: dict[str, Any]) -> None:
    """The names JobSet's webhook (ValidateCreate) holds to DNS-1035 labels of at most 63: the
    subdomain (also the headless Service's name), the longest Job name ``<js>-<rj>-<job index>``
    and the longest pod name ``<job>-<pod index>-<5 random>``."""
    name = js["metadata"]["name"]
    names = [name, js["spec"]["network"]["subdomain"]]
    for rj in js["spec"]["replicatedJobs"]:
        job = f"{name}-{rj['name']}-{rj['replicas'] - 1}"
        names += [job, f"{job}-{rj['template']['spec']['completions'] - 1}-abcde"]
    for n in names:
        assert len(n) <= 63 and _DNS1035.fullmatch(n), n


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_h100_training_example_renders_a_valid_publication_jobset(tmp_path: Path, validator) -> None:
    inv = _gang("specs/examples/training-llama-8b-pretrain-h100.yaml", "pretrain-token-budget", tmp_path)
    js = jobset_manifest(inv, namespace="bench", placement=PUBLICATION, options=RACK)
    errors = sorted(validator.iter_errors(js), key=str)
    assert not errors, [e.message for e in errors[:3]]
    name = js["metadata"]["name"]
    assert name == jobset_name(inv) and len(pod_hostname(name, 1).split(".")[0]) <= 63
    _assert_webhook_names(js)
    assert js["apiVersion"] == "jobset.x-k8s.io/v1alpha2" and js["spec"]["suspend"] is True
    assert js["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "training"
    assert js["metadata"]["annotations"] == {"alpha.jobset.sigs.k8s.io/exclusive-topology": "topology.example.com/rack"}
    assert js["spec"]["network"] == {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True}
    [rj] = js["spec"]["replicatedJobs"]
    job = rj["template"]["spec"]
    assert (rj["replicas"], job["parallelism"], job["completions"], job["completionMode"], job["backoffLimit"]) == (
        1, 2, 2, "Indexed", 0)
    pod = job["template"]
    assert KUEUE_QUEUE_LABEL not in pod["metadata"]["labels"]  # one Workload for the gang, not one per pod
    [c] = pod["spec"]["containers"]
    master = f"{name}-node-0-0.{name}"
    assert c["command"] == ["torchrun"]
    assert c["args"][:6] == ["--nnodes", "2", "--nproc-per-node", "8", "--node-rank", "$(NODE_RANK)"]
    assert c["args"][8:10] == ["--rdzv-endpoint", f"{master}:29500"]
    env = _env(c)
    index = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert env["NODE_RANK"] == index and env["MASTER_ADDR"] == master and env["MASTER_PORT"] == "29500"
    assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"], env["NNODES"]) == ("16", "8", "2")
    assert "RANK" not in env  # 8 ranks per node: torchrun assigns them
    assert env["BENCHRUN_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    res = c["resources"]
    assert res["limits"] == res["requests"] == {"cpu": "96", "memory": "1600Gi", "nvidia.com/gpu": "8", "rdma/ib": "1"}
    assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert pod["spec"]["affinity"]["podAntiAffinity"]  # one benchrun pod per node
    # the check has teeth: a misspelt field and a wrong type are refused
    broken = copy.deepcopy(js)
    broken["spec"]["replicatedJobs"][0]["template"]["spec"]["paralelism"] = 2
    assert list(validator.iter_errors(broken))
    broken = copy.deepcopy(js)
    broken["spec"]["replicatedJobs"][0]["replicas"] = "one"
    assert list(validator.iter_errors(broken))


def test_local_two_node_training_spec_renders_a_valid_jobset(tmp_path: Path, validator) -> None:
    inv = _gang("specs/local/training.yaml", "training", tmp_path, "local-training-20261201000000-abcdef12")
    js = jobset_manifest(inv, namespace="bench", placement=Placement(queue_name="canary"))
    assert not list(validator.iter_errors(js))
    assert "annotations" not in js["metadata"] and js["metadata"]["labels"]["benchrun.dev/nodes"] == "2"
    [c] = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    assert c["command"] == ["python"] and c["args"] == ["-m", "benchrun.suites.training"]
    env = _env(c)
    assert env["RANK"] == env["NODE_RANK"] and env["LOCAL_RANK"] == "0" and env["WORLD_SIZE"] == "2"
    # the restricted context (benchrun.launch.podsecurity) and no capability added (RDMA's IPC_LOCK is not asked)
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert "PYTHONPATH" not in env
    # gpusPerNode: 1; cpu and memory: the training suite's default (Guaranteed QoS)
    assert c["resources"]["limits"] == c["resources"]["requests"] == {"nvidia.com/gpu": "1", "cpu": "16", "memory": "64Gi"}


@pytest.mark.parametrize("run_id", ["8b-gang-20261201000000-abcdef12", "8" * 60])
def test_a_run_id_that_starts_with_a_digit_gets_jobset_names_the_webhook_accepts(
        run_id: str, tmp_path: Path, validator) -> None:
    """JobSet refuses a subdomain, Job or pod name that does not start with a letter; a
    BenchmarkRun may be named "8b-gang". The name stays deterministic and apart from the run
    whose id already carries the prefix."""
    inv = _gang("specs/local/training.yaml", "training", tmp_path, run_id)
    js = jobset_manifest(inv, namespace="bench", placement=Placement(queue_name="canary"))
    assert not list(validator.iter_errors(js))
    _assert_webhook_names(js)
    name = js["metadata"]["name"]
    assert name == jobset_name(inv) and name.startswith("js-8")
    assert js["spec"]["network"]["subdomain"] == name
    env = _env(js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0])
    assert env["MASTER_ADDR"] == f"{name}-node-0-0.{name}"
    assert jobset_name(replace(inv, run_id="js-" + run_id)) != name


def test_gang_argument_escaping_and_refusals(tmp_path: Path) -> None:
    inv = _gang("specs/local/training.yaml", "training", tmp_path, "local-training-20261201000000-abcdef12")
    shell_like = replace(inv, argv=inv.argv + ("--note=$(whoami)",))
    [c] = jobset_manifest(shell_like, namespace="bench", placement=Placement(queue_name="q"))[
        "spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"]
    assert c["args"][-1] == "--note=$$(whoami)"  # Kubernetes must not expand what the spec wrote
    with pytest.raises(BenchrunError, match="disagree"):
        jobset_manifest(replace(inv, gpus=4), namespace="bench", placement=Placement(queue_name="q"))
    with pytest.raises(BenchrunError, match="nodes > 1"):
        jobset_manifest(replace(inv, nodes=1), namespace="bench", placement=Placement(queue_name="q"))
    pinned = replace(inv, image="registry.example.com/benchrun@sha256:" + "a" * 64)
    with pytest.raises(BenchrunError, match="exclusive_topology_key"):
        jobset_manifest(pinned, namespace="bench", placement=PUBLICATION)
    pinned_rack = replace(PUBLICATION, topology_label="topology.example.com/rack", topology_values=("r7",))
    js = jobset_manifest(pinned, namespace="bench", placement=pinned_rack)
    assert js["metadata"]["annotations"] == {"alpha.jobset.sigs.k8s.io/exclusive-topology": "topology.example.com/rack"}
    with pytest.raises(BenchrunError, match="Guaranteed QoS"):
        jobset_manifest(pinned, namespace="bench", placement=replace(PUBLICATION, cpu=None), options=RACK)


def test_launch_manifest_picks_a_jobset_only_for_gangs(tmp_path: Path) -> None:
    from benchrun.launch.jobset import launch_manifest

    inv = _gang("specs/local/training.yaml", "training", tmp_path, "local-training-20261201000000-abcdef12")
    assert launch_manifest(inv, namespace="b", placement=Placement(queue_name="q"))["kind"] == "JobSet"
    single = replace(inv, nodes=1, argv=("python", "-m", "benchrun.suites.training"))
    assert launch_manifest(single, namespace="b", placement=Placement(queue_name="q"))["kind"] == "Job"


def test_a_gang_is_never_rendered_as_a_single_pod(tmp_path: Path) -> None:
    from benchrun.launch.podspec import pod_manifest

    inv = _gang("specs/local/training.yaml", "training", tmp_path, "local-training-20261201000000-abcdef12")
    with pytest.raises(BenchrunError, match="runs as one JobSet"):
        pod_manifest(replace(inv, argv=inv.argv + ("--rank=" + gang_mark("NODE_RANK"),)), namespace="b",
                     placement=Placement(queue_name="q"))


def test_the_launchers_jobset_expires_and_is_owned_like_its_jobs(tmp_path: Path, validator) -> None:
    """A gang left by a dead orchestrator must not hold its GPUs: the JobSet the launcher
    creates has ``ttlSecondsAfterFinished`` and the run worker's pod as its owner, as a
    suite's Job does, and both fields validate against the published JobSet CRD."""
    from benchrun.launch.kubernetes import KubernetesLauncher

    inv = _gang("specs/local/training.yaml", "training", tmp_path, "local-training-20261201000000-abcdef12")
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "run-worker", "uid": "u-1"}
    launcher = KubernetesLauncher(None, None, "bench", Placement(queue_name="canary", ttl_seconds_after_finished=900),
                                  owner=owner)
    js = launcher.manifest(inv)
    assert js["kind"] == "JobSet" and not list(validator.iter_errors(js))
    assert js["spec"]["ttlSecondsAfterFinished"] == 900
    assert js["metadata"]["ownerReferences"] == [owner]
    # and the CRD's schema would catch a wrong type there (the check is not vacuous)
    bad = copy.deepcopy(js)
    bad["spec"]["ttlSecondsAfterFinished"] = -1
    assert list(validator.iter_errors(bad))
