"""intent.schedulerPath places a run (found in review): on the Kubernetes launcher a run asking for slinky goes
through slurm-bridge, a run asking for kueue never does, one the launcher cannot place as asked is refused at
admission (and by render) naming the field and the setting, and status records the path that was taken
(``selected_scheduler_path``, which the one-variable gate compares). Admission, render and preflight grant
one class and check the queue of that class."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from benchrun.errors import BenchrunError
from benchrun.launch.jobset import jobset_manifest
from benchrun.launch.placement import SCHEDULER_PATH_KUEUE, SCHEDULER_PATH_SLINKY, SLURM_BRIDGE_SCHEDULER
from benchrun.launch.podspec import job_manifest
from benchrun.launch.settings import LauncherSettings
from benchrun.plan import plan_run
from benchrun.spec import load_spec
from conftest import ROOT
from crdschemas import crd_validator
from resources.launcher import LauncherResource

SLINKY_EXAMPLE = ROOT / "specs/examples/training-llama-8b-pretrain-h100.yaml"  # schedulerPath: slinky, a 2-node gang
KUEUE_EXAMPLE = ROOT / "deploy/examples/canary-gpu.yaml"  # schedulerPath: kueue
PINNED = "registry.example.com/benchrun@sha256:" + "a" * 64
SLURM = "slurmjob.slinky.slurm.net/"
REFUSED = (r"intent\.schedulerPath: '{}' asks for Slinky's slurm-bridge, and this launcher does not declare it: set "
           r"the launcher's slinky_scheduler_name \(BENCHRUN_LAUNCHER_SLINKY_SCHEDULER_NAME\)")


def _invocations(tmp_path: Path, spec: Path = SLINKY_EXAMPLE) -> list[Any]:
    plans = plan_run(load_spec(spec).run, "training-llama-8b-20261201000000-abcdef12", tmp_path / "run",
                     environ={"PATH": "/usr/bin", "BENCHRUN_VAR_SSH_USER": "bench"})
    return [i for p in plans for i in p.invocations]


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "JobSet":
        return obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]


def _slurm(obj: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in (obj["metadata"].get("annotations") or {}).items() if k.startswith(SLURM)}


@pytest.fixture
def no_cluster(monkeypatch):
    """The resource's admission offer without a cluster: the LocalQueue it checks is recorded."""
    checked: list[str] = []
    monkeypatch.setattr(LauncherResource, "_apis", lambda self: (None, None, None, False))
    monkeypatch.setattr("benchrun.launch.queues.check_queue", lambda api, ns, queue: checked.append(queue))
    return checked


def _launcher_env(monkeypatch, **settings: str) -> None:
    for key in [k for k in os.environ if k.startswith("BENCHRUN_LAUNCHER_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("BENCHRUN_VAR_SSH_USER", "bench")  # the examples' site variable
    for key, value in {"KIND": "kubernetes", **settings}.items():
        monkeypatch.setenv("BENCHRUN_LAUNCHER_" + key, value)


# -- the path each request gets, and what it puts in the pods --------------------------------------

def test_the_launcher_places_a_run_through_the_path_its_spec_asks_for(tmp_path):
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    jobsets = crd_validator("jobset.x-k8s.io_jobsets.yaml", "v1alpha2")
    version = kubernetes_validate.latest_version()
    invs = _invocations(tmp_path)
    gang = next(i for i in invs if i.nodes > 1)
    single = next(i for i in invs if i.nodes == 1)
    # slurm-bridge named globally, as before: only runs asking for slinky go through it now
    settings = LauncherSettings(kind="kubernetes", image=PINNED, scheduler_name=SLURM_BRIDGE_SCHEDULER,
                                slurm_partition="h100")
    assert settings.scheduler_path_for("kueue") == settings.scheduler_path_for("local") == SCHEDULER_PATH_KUEUE
    assert settings.scheduler_path_for("slinky") == settings.scheduler_path_for("Slinky-Kueue") == SCHEDULER_PATH_SLINKY
    for path, through in ((SCHEDULER_PATH_KUEUE, False), (SCHEDULER_PATH_SLINKY, True)):
        placement = settings.placement(cadence="nightly", scheduler_path=path)
        objs = [job_manifest(single, namespace="bench", placement=placement),
                jobset_manifest(gang, namespace="bench", placement=placement)]
        for obj in objs:
            if obj["kind"] == "Job":
                kubernetes_validate.validate(obj, version, strict=True)
            else:
                assert not list(jobsets.iter_errors(obj))
            assert obj["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "nightly"  # Kueue admits either way
            if through:
                assert _pod(obj)["schedulerName"] == SLURM_BRIDGE_SCHEDULER, obj["kind"]
                assert _slurm(obj)[SLURM + "partition"] == "h100" and _slurm(obj)[SLURM + "timelimit"]
            else:
                assert "schedulerName" not in _pod(obj) and not _slurm(obj), obj["kind"]
    # slurm-bridge declared under another name: its runs carry the Slurm job annotations all the same
    renamed = LauncherSettings(kind="kubernetes", slinky_scheduler_name="slurm-bridge-gpu")
    placement = renamed.placement(cadence="nightly", scheduler_path=SCHEDULER_PATH_SLINKY)
    job = job_manifest(single, namespace="bench", placement=placement)
    assert _pod(job)["schedulerName"] == "slurm-bridge-gpu" and set(_slurm(job)) == {SLURM + "timelimit"}
    # another scheduler named for the other runs stays theirs
    other = LauncherSettings(kind="kubernetes", scheduler_name="gpu-binpack", slinky_scheduler_name=SLURM_BRIDGE_SCHEDULER)
    assert other.placement(cadence="nightly").scheduler_name == "gpu-binpack"
    assert other.placement(cadence="nightly", scheduler_path=SCHEDULER_PATH_SLINKY).scheduler_name == SLURM_BRIDGE_SCHEDULER
    with pytest.raises(BenchrunError, match=REFUSED.format("slinky")):
        LauncherSettings(kind="kubernetes").placement(cadence="nightly", scheduler_path=SCHEDULER_PATH_SLINKY)


def test_a_slinky_run_on_a_launcher_without_slurm_bridge_is_refused_at_admission_and_by_render(
        bench_home, monkeypatch, no_cluster):
    loaded = load_spec(SLINKY_EXAMPLE)
    with pytest.raises(dg.Failure, match="admission: " + REFUSED.format("slinky")):
        LauncherResource(kind="kubernetes").admission_offer(loaded)
    assert no_cluster == []  # refused before its queue is looked at
    path, _ok, _why = LauncherResource(kind="kubernetes", slinky_scheduler_name=SLURM_BRIDGE_SCHEDULER).admission_offer(loaded)
    assert path == SCHEDULER_PATH_SLINKY
    assert LauncherResource(kind="kubernetes", scheduler_name=SLURM_BRIDGE_SCHEDULER).admission_offer(loaded)[0] == path
    # a run asking for kueue is never placed through slurm-bridge, even where it is the launcher's scheduler_name
    kueue = load_spec(KUEUE_EXAMPLE)
    assert LauncherResource(kind="kubernetes", scheduler_name=SLURM_BRIDGE_SCHEDULER).admission_offer(kueue)[0] == "kueue"
    assert LauncherResource().admission_offer(loaded)[0] == "local"  # schedulerPath means nothing on this machine

    from benchrun.launch.render import render_objects, render_run

    _launcher_env(monkeypatch, IMAGE=PINNED)
    with pytest.raises(BenchrunError, match=REFUSED.format("slinky")):
        render_objects(SLINKY_EXAMPLE)
    _launcher_env(monkeypatch, IMAGE=PINNED, SCHEDULER_NAME=SLURM_BRIDGE_SCHEDULER)
    rendered = render_run(SLINKY_EXAMPLE)
    assert rendered.scheduler_path == SCHEDULER_PATH_SLINKY and rendered.objects
    for obj in rendered.objects:
        assert _pod(obj)["schedulerName"] == SLURM_BRIDGE_SCHEDULER and _slurm(obj)[SLURM + "timelimit"]
    kueue_run = render_run(KUEUE_EXAMPLE)
    assert kueue_run.scheduler_path == SCHEDULER_PATH_KUEUE
    assert all("schedulerName" not in _pod(o) and not _slurm(o) for o in kueue_run.objects)


# -- what status records, and the run's Jobs follow ------------------------------------------------

def _slinky_canary(canary_doc: dict[str, Any], path: str) -> dict[str, Any]:
    doc = copy.deepcopy(canary_doc)
    doc["spec"]["intent"]["schedulerPath"] = path
    doc["spec"]["observability"]["telemetrySources"]["scheduler"] = ["kubernetes_events", "kueue", "slinky"]
    return doc


def test_status_records_the_path_taken_and_the_run_layer_places_its_jobs_there(bench_home, canary_doc, write_spec,
                                                                                no_cluster):
    from benchrun import lifecycle
    from benchrun import submit as sub
    from benchrun.rundir import RunDir
    from benchrun.stats.gate import ALLOWED, categorize

    bridge = LauncherResource(kind="kubernetes", slinky_scheduler_name=SLURM_BRIDGE_SCHEDULER)
    took = {}
    for asked in ("slinky-kueue", "kueue"):
        prepared = sub.prepare(write_spec(_slinky_canary(canary_doc, asked), f"{asked}.yaml"))
        rd = RunDir.for_run(prepared.run_id)
        loaded = lifecycle.load_pinned(rd)
        st = lifecycle.admit(rd, loaded, offer=bridge.admission_offer(loaded))
        took[asked] = st["selected_scheduler_path"]
        admitted = {c["type"]: c for c in st["conditions"]}["Admitted"]
        assert ("slurm-bridge" in admitted["message"]) == (asked != "kueue"), admitted
        placement = bridge._k8s_launcher(bridge.settings(), rd, False).placement
        assert placement.scheduler_name == (SLURM_BRIDGE_SCHEDULER if asked != "kueue" else None)
        assert placement.slinky == (asked != "kueue")
        if asked != "kueue":
            # the launcher reconfigured without slurm-bridge after admission: the layer fails, naming the setting
            with pytest.raises(dg.Failure, match=REFUSED.format(asked)):
                LauncherResource(kind="kubernetes")._k8s_launcher(LauncherSettings(kind="kubernetes"), rd, False)
            # an offer that is not the path the spec asks for is refused, not recorded
            with pytest.raises(BenchrunError, match=r"intent\.schedulerPath: 'slinky-kueue' is not what the launcher"):
                lifecycle.admit(rd, loaded, offer=("kueue", False, "x"))
    assert took == {"slinky-kueue": SCHEDULER_PATH_SLINKY, "kueue": SCHEDULER_PATH_KUEUE}
    # the gate compares it as the scheduler's: only scheduler_path may change it
    assert categorize("status.selected_scheduler_path") == "scheduler"
    assert [v for v, cats in ALLOWED.items() if "scheduler" in cats] == ["scheduler_path"]


def test_locally_the_path_is_local_and_the_local_specs_ask_for_it(bench_home, canary_doc, write_spec):
    from benchrun import lifecycle
    from benchrun import submit as sub
    from benchrun.rundir import RunDir

    for spec in sorted((ROOT / "specs/local").glob("*.yaml")):  # make run's canary and its siblings
        assert load_spec(spec).run.spec.intent.scheduler_path == "local", spec.name
    prepared = sub.prepare(write_spec(_slinky_canary(canary_doc, "slinky")))
    rd = RunDir.for_run(prepared.run_id)
    st = lifecycle.admit(rd, lifecycle.load_pinned(rd))  # the local launcher: no offer
    assert st["selected_scheduler_path"] == "local"
    admitted = {c["type"]: c for c in st["conditions"]}["Admitted"]
    assert "intent.schedulerPath 'slinky' is the Kubernetes launcher's placement" in admitted["message"]


# -- one class for admission, its queue and render -------------------------------------------------

def _sigstore(bench_home: Path) -> Path:
    doc = yaml.safe_load((ROOT / "specs/local/pre-release.yaml").read_text())  # publication_grade, cadence pre_release
    doc["spec"]["provenance"]["signing"]["backend"] = "sigstore"  # a signature this installation cannot make
    path = bench_home / "sigstore.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_admission_checks_the_queue_of_the_class_it_grants(bench_home, no_cluster):
    """Found in review: the publication LocalQueue was checked whenever the launcher could offer publication
    grade, but a run whose signature cannot be made is admitted as realism grade in its cadence's queue,
    which was never checked."""
    capable = LauncherResource(kind="kubernetes", image=PINNED, node_selector={"pool": "bench"}, cpu="8", memory="64Gi")
    path, ok, _why = capable.admission_offer(load_spec(_sigstore(bench_home)))
    assert path == "kueue" and ok and no_cluster == ["pre-release"]
    capable.admission_offer(load_spec(ROOT / "specs/local/pre-release.yaml"))  # local_ed25519: granted
    assert no_cluster[-1] == "publication"


def test_render_downgrades_as_admission_does_and_says_so(bench_home, monkeypatch):
    """Found in review: render raised on a publication-grade spec with a moving tag (and rendered a signature
    that cannot be made as publication grade), while a run of it is admitted downgraded to realism grade."""
    from benchrun import lifecycle
    from benchrun.launch import render

    _launcher_env(monkeypatch, IMAGE=PINNED, NODE_SELECTOR='{"pool": "bench"}', CPU="8", MEMORY="64Gi")
    # before: the publication queue's layer Jobs, though no run of it is granted publication grade
    objects = render.render_objects(_sigstore(bench_home))
    assert {o["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] for o in objects} == {"pre-release"}
    rendered = render.render_run(_sigstore(bench_home))
    assert rendered.benchmark_class == "realism_grade"
    [warning] = rendered.warnings
    loaded = load_spec(_sigstore(bench_home))
    suites = [s for layer in loaded.run.spec.layers if layer.enabled for s in layer.suites]
    ok, why = LauncherSettings.from_env().publication_offer_for(suites)
    assert lifecycle.downgrade_reason(loaded.run.spec, ok, why) in warning and "'sigstore'" in warning
    assert {o["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] for o in rendered.objects} == {"pre-release"}
    # the command: the objects on stdout, the downgrade on stderr
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("BENCHRUN_LAUNCHER_")}, "PYTHONPATH": str(ROOT),
           "BENCHRUN_LAUNCHER_KIND": "kubernetes", "BENCHRUN_LAUNCHER_IMAGE": "registry.example.com/benchrun:0.1.0",
           "BENCHRUN_LAUNCHER_OUTPUTS_URI": "s3://bench/runs"}
    out = subprocess.run([sys.executable, "-m", "benchrun.cli", "render", str(ROOT / "specs/local/pre-release.yaml")],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "warning: publication_grade asked for, realism_grade granted:" in out.stderr
    assert "every suite image pinned by digest" in out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    assert docs and {d["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] for d in docs} == {"pre-release"}


def test_a_baseline_recorded_before_per_run_paths_still_compares_with_a_kueue_run(tmp_path):
    # before this rule: every Kubernetes baseline promoted before the per-run paths ('kubernetes') was
    # refused against a new Kueue candidate ('kueue'): scheduler differs
    from benchrun.stats.gate import LEGACY_PATH, check_gate
    from benchrun.stats.load import load_run
    from benchrun.stats.synthetic import make_run

    metrics = {("s", "", "x"): ([1.0, 2.0, 3.0, 4.0, 5.0], "u", "higher")}

    def run(name, path):
        return load_run(make_run(tmp_path, name, metrics, status={"selected_scheduler_path": path}))

    old, kueue, slinky = run("old", "kubernetes"), run("kueue", "kueue"), run("slinky", "kueue+slinky")
    gate = check_gate(old, kueue, variable="runtime_version")
    assert gate.passed and LEGACY_PATH in gate.message() and "changed: nothing" in gate.message()
    # beside a slurm-bridge run it stays a difference: the old record cannot say it went through one
    assert not check_gate(old, slinky, variable="runtime_version").passed
    assert check_gate(old, slinky, variable="scheduler_path").passed
    assert not check_gate(kueue, slinky, variable="runtime_version").passed
