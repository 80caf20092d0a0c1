"""Queue and priority per run: cadence and granted class map to deploy/'s LocalQueues and
WorkloadPriorityClasses; a run whose LocalQueue does not exist fails at admission, naming it."""

from __future__ import annotations

import shutil
import subprocess
import typing

import dagster as dg
import pytest
import yaml

from benchrun.errors import BenchrunError
from benchrun.launch.settings import DEFAULT_NAMESPACE, DEFAULT_PRIORITY_CLASSES, DEFAULT_QUEUES, LauncherSettings
from benchrun.spec.model import Cadence
from conftest import ROOT


def test_cadence_and_class_pick_the_queue_and_priority() -> None:
    s = LauncherSettings(kind="kubernetes")
    assert s.queue_for("nightly") == ("nightly", "benchrun-nightly")
    assert s.queue_for("pre_release", "realism_grade") == ("pre-release", "benchrun-pre-release")
    assert s.queue_for("canary", "publication_grade") == ("publication", "benchrun-publication")
    p = s.placement(publication_grade=True, cadence="nightly")
    assert (p.queue_name, p.priority_class) == ("publication", "benchrun-publication")
    one = LauncherSettings(queue_name="gpu-lq", priority_class="low")
    assert one.queue_for("nightly", "publication_grade") == ("gpu-lq", "low")
    with pytest.raises(BenchrunError, match=r"no LocalQueue for nightly; map it in BENCHRUN_LAUNCHER_QUEUES"):
        LauncherSettings(queues={"canary": "c"}).queue_for("nightly")
    env = LauncherSettings.from_env({"BENCHRUN_LAUNCHER_QUEUES": '{"nightly": "gpu-nightly"}'})
    assert env.queue_for("nightly")[0] == "gpu-nightly"


def test_an_unknown_setting_names_the_nearest_valid_one() -> None:
    with pytest.raises(BenchrunError, match=r"BENCHRUN_LAUNCHER_NAMESPCE: not a launcher setting; "
                                            r"did you mean BENCHRUN_LAUNCHER_NAMESPACE\?"):
        LauncherSettings.from_env({"BENCHRUN_LAUNCHER_NAMESPCE": "x"})
    with pytest.raises(BenchrunError, match=r"BENCHRUN_LAUNCHER_ZZZ: not a launcher setting; valid: "):
        LauncherSettings.from_env({"BENCHRUN_LAUNCHER_ZZZ": "x"})
    assert LauncherSettings.from_env({"BENCHRUN_OTHER": "x"}).namespace == DEFAULT_NAMESPACE


def test_the_defaults_are_deploys_queues() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    out = subprocess.run([kubectl, "kustomize", str(ROOT / "deploy/kustomize/base")], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    lqs = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "LocalQueue"}
    wpcs = {d["metadata"]["name"] for d in docs if d["kind"] == "WorkloadPriorityClass"}
    assert {(DEFAULT_NAMESPACE, q) for q in DEFAULT_QUEUES.values()} == lqs
    assert set(DEFAULT_PRIORITY_CLASSES.values()) == wpcs
    assert set(typing.get_args(Cadence)) | {"publication_grade"} == set(DEFAULT_QUEUES) == set(DEFAULT_PRIORITY_CLASSES)
    assert LauncherSettings().namespace == DEFAULT_NAMESPACE
    assert DEFAULT_NAMESPACE in {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"}


def test_a_run_whose_queue_does_not_exist_fails_at_admission(kcluster_factory, monkeypatch) -> None:
    from benchrun.spec import load_spec
    from resources.launcher import LauncherResource

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    loaded = load_spec(ROOT / "specs/local/canary.yaml")  # cadence canary
    kcluster_factory(namespace="benchrun-runs", queues={"nightly": {"cpu": "8"}})  # no LocalQueue "canary"
    launcher = LauncherResource(kind="kubernetes")
    with pytest.raises(dg.Failure, match=r"admission: LocalQueue 'canary' does not exist in namespace 'benchrun-runs'"
                                         r".*apply deploy/kustomize/base"):
        launcher.admission_offer(loaded)
    kcluster_factory(namespace="benchrun-runs", queues={"canary": {"cpu": "8"}})
    assert launcher.admission_offer(loaded)[0] == "kueue"


def test_no_kueue_is_said_at_admission() -> None:
    from benchrun.launch.queues import check_queue
    from kubernetes.client.exceptions import ApiException

    class NoKueue:
        def get_namespaced_custom_object(self, *args):
            exc = ApiException(status=404, reason="Not Found")
            exc.body = '{"message": "the server could not find the requested resource"}'
            raise exc

    with pytest.raises(BenchrunError, match=r"Kueue is not installed"):
        check_queue(NoKueue(), "benchrun-runs", "canary")
