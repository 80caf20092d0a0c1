"""Launcher settings: one model for the Dagster resource and `benchrun render`; admission asks it."""

from __future__ import annotations

import pytest

from benchrun.errors import BenchrunError
from benchrun.launch.settings import LauncherSettings

DIGEST = "ghcr.io/x/bench@sha256:" + "a" * 64


def test_from_env_reads_every_field_kind() -> None:
    s = LauncherSettings.from_env({
        "BENCHRUN_LAUNCHER_KIND": "kubernetes", "BENCHRUN_LAUNCHER_QUEUE_NAME": "gpu-lq",
        "BENCHRUN_LAUNCHER_GPUS": "8", "BENCHRUN_LAUNCHER_NODE_SELECTOR": '{"pool": "h200"}',
        "BENCHRUN_LAUNCHER_TOLERATIONS": '[{"key": "nvidia.com/gpu", "operator": "Exists"}]',
        "BENCHRUN_LAUNCHER_IMAGE_PULL_SECRETS": '["regcred"]', "BENCHRUN_LAUNCHER_PENDING_TIMEOUT_S": "600",
        "BENCHRUN_LAUNCHER_DELETE_FINISHED": "false", "BENCHRUN_LAUNCHER_PRIORITY_CLASS": "nightly",
    })
    assert (s.kind, s.queue_name, s.gpus, s.node_selector, s.pending_timeout_s, s.delete_finished) == (
        "kubernetes", "gpu-lq", 8, {"pool": "h200"}, 600.0, False)
    assert s.tolerations == [{"key": "nvidia.com/gpu", "operator": "Exists"}] and s.image_pull_secrets == ["regcred"]
    p = s.placement(run_home="/srv/home")
    assert p.queue_name == "gpu-lq" and p.priority_class == "nightly" and p.run_home == "/srv/home"
    assert LauncherSettings.from_env({}, kind="kubernetes").kind == "kubernetes"  # an override wins


def test_bad_setting_names_the_variable() -> None:
    with pytest.raises(BenchrunError, match=r"BENCHRUN_LAUNCHER_KIND"):
        LauncherSettings.from_env({"BENCHRUN_LAUNCHER_KIND": "slurm"})
    with pytest.raises(BenchrunError, match=r"BENCHRUN_LAUNCHER_GPUS"):
        LauncherSettings.from_env({"BENCHRUN_LAUNCHER_GPUS": "many"})


def test_an_outputs_uri_with_credentials_is_refused_without_echoing_them() -> None:
    """Found in review: the outputs URI is written into replicates' reasons (the run directory) and pods'
    env unredacted; one carrying credentials leaked them there. Refused at load, the secret not echoed."""
    from resources.launcher import LauncherResource

    with pytest.raises(BenchrunError) as exc:
        LauncherSettings.from_env({"BENCHRUN_LAUNCHER_OUTPUTS_URI": "s3://AKIAXYZ:s3cr3t@bucket/outputs"})
    assert "BENCHRUN_LAUNCHER_OUTPUTS_URI" in str(exc.value) and "credentials" in str(exc.value)
    assert "s3cr3t" not in str(exc.value)
    import dagster as dg

    with pytest.raises(dg.Failure) as failure:
        LauncherResource(outputs_uri="s3://AKIAXYZ:s3cr3t@bucket/outputs").settings()
    assert "s3cr3t" not in str(failure.value)
    assert LauncherSettings.from_env({"BENCHRUN_LAUNCHER_OUTPUTS_URI": "s3://bucket/outputs"}).outputs_uri


def test_publication_is_offered_only_with_its_guarantees() -> None:
    local = LauncherSettings()
    ok, why = local.publication_offer([DIGEST], True)
    assert not ok and "shared local machine" in why
    k8s = LauncherSettings(kind="kubernetes", node_selector={"pool": "bench"})
    assert k8s.publication_offer([DIGEST], True)[0]
    ok, why = k8s.publication_offer(["ghcr.io/x/bench:latest"], False)
    assert not ok and "pinned by digest" in why and "Guaranteed QoS" in why
    ok, why = LauncherSettings(kind="kubernetes").publication_offer([DIGEST], True)
    assert not ok and "dedicated nodes" in why


def test_the_dagster_resource_has_the_same_fields() -> None:
    from resources.launcher import LauncherResource

    assert set(LauncherResource.model_fields) == set(LauncherSettings.model_fields)
    assert LauncherResource().settings() == LauncherSettings()


def test_admit_grants_what_the_launcher_offers(bench_home, write_spec) -> None:
    import yaml

    from benchrun import lifecycle
    from benchrun import submit as sub
    from benchrun.rundir import RunDir
    from conftest import ROOT

    doc = yaml.safe_load((ROOT / "specs/local/pre-release.yaml").read_text())
    assert doc["spec"]["intent"]["benchmarkClass"] == "publication_grade"
    prepared = sub.prepare(write_spec(doc))
    rd = RunDir.for_run(prepared.run_id)
    loaded = lifecycle.load_pinned(rd)
    st = lifecycle.admit(rd, loaded, offer=("kueue", True, "dedicated nodes ..."))
    assert st["benchmark_class_granted"] == "publication_grade" and st["selected_scheduler_path"] == "kueue"
    st = lifecycle.admit(rd, loaded, offer=("kueue", False, "the Kubernetes launcher cannot guarantee: x"))
    assert st["benchmark_class_granted"] == "realism_grade"
    cond = {c["type"]: c for c in rd.read_status()["conditions"]}["PublicationGuaranteesMet"]
    assert cond["status"] == "False" and cond["reason"] == "LauncherCannotGuarantee" and "cannot guarantee: x" in cond["message"]


def test_a_topology_label_without_values_is_refused_when_the_settings_load() -> None:
    """Found in review: topology_label without topology_values loaded, and building any pod then failed (the
    required node affinity has no value to pin to); values without a label were ignored. Both refused at load,
    naming both settings; the label and values are checked as Kubernetes label key and values there too."""
    import dagster as dg

    from resources.launcher import LauncherResource

    label = {"BENCHRUN_LAUNCHER_TOPOLOGY_LABEL": "topology.example.com/rack"}
    with pytest.raises(BenchrunError, match=r"^launcher setting topology_values \(BENCHRUN_LAUNCHER_TOPOLOGY_VALUES\): "
                                            r".*empty while topology_label \(BENCHRUN_LAUNCHER_TOPOLOGY_LABEL\)"):
        LauncherSettings.from_env(label)
    with pytest.raises(dg.Failure, match=r"(?s)topology_values.*empty while topology_label"):
        LauncherResource(kind="kubernetes", topology_label="topology.example.com/rack").settings()
    with pytest.raises(BenchrunError, match=r"TOPOLOGY_VALUES\): .*set without topology_label"):
        LauncherSettings.from_env({"BENCHRUN_LAUNCHER_TOPOLOGY_VALUES": '["rack-1"]'})
    with pytest.raises(BenchrunError, match=r"TOPOLOGY_VALUES\): .*'rack 1' is not a valid Kubernetes label value"):
        LauncherSettings.from_env({**label, "BENCHRUN_LAUNCHER_TOPOLOGY_VALUES": '["rack 1"]'})
    with pytest.raises(BenchrunError, match=r"TOPOLOGY_LABEL\): .*not a valid Kubernetes label key"):
        LauncherSettings.from_env({"BENCHRUN_LAUNCHER_TOPOLOGY_LABEL": "a rack",
                                   "BENCHRUN_LAUNCHER_TOPOLOGY_VALUES": '["rack-1"]'})
    ok = LauncherSettings.from_env({**label, "BENCHRUN_LAUNCHER_TOPOLOGY_VALUES": '["rack-1"]'})
    assert ok.placement(cadence="nightly").topology_values == ("rack-1",)


def test_a_fractional_launcher_cpu_is_refused_when_the_settings_load() -> None:
    with pytest.raises(BenchrunError, match=r"^launcher setting cpu \(BENCHRUN_LAUNCHER_CPU\): .*'500m' is not a whole "
                                            r"number of CPUs"):
        LauncherSettings.from_env({"BENCHRUN_LAUNCHER_CPU": "500m"})
    assert LauncherSettings.from_env({"BENCHRUN_LAUNCHER_CPU": "2000m"}).cpu == "2000m"
