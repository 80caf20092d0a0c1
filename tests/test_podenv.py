"""What a Kubernetes run records of its image: the reference by digest, whatever tag it was asked by."""

from __future__ import annotations

from benchrun.launch.podenv import image_digest, pinned_reference

D = "sha256:" + "e" * 64


def test_the_image_is_recorded_by_digest_with_its_tag_dropped():
    assert pinned_reference("registry.example.com/benchrun:0.1.0-cuda", D) == f"registry.example.com/benchrun@{D}"
    assert pinned_reference("registry.example.com:5000/team/benchrun:latest", D) == \
        f"registry.example.com:5000/team/benchrun@{D}"
    assert pinned_reference("benchrun", D) == f"benchrun@{D}"
    assert pinned_reference(f"r.example/b:1@sha256:{'a' * 64}", D) == f"r.example/b@{D}"  # what ran wins
    assert pinned_reference("benchrun:1", None) is None and pinned_reference(None, D) is None
    assert image_digest(f"docker-pullable://r.example/b@{D}") == D and image_digest("") is None


def _load(value: float, when: str) -> dict:
    return {"sampled_utc": when, "interval_s": 0.5, "load_average_1m": value, "load_average_5m": value,
            "load_average_15m": value, "cpu_busy_share": value / 10, "other_processes_cpu_share": value / 20,
            "top_other_processes": []}


def _env(hostname: str, load: float, **extra) -> dict:
    return {"schema": "benchrun.environment/v1", "hostname": hostname, "hardware_key": f"hw-{hostname}",
            "software_key": f"sw-{hostname}", "cpu": {"logical_cores": 8 if load < 5 else 2},
            "memory": {"total_bytes": 2**30}, "gpus": [],
            "background_load": {"before": _load(load, "2026-01-01T00:00:01.000+00:00"), "after": None}, **extra}


def _telemetry(run_dir, run_id: str, env: dict) -> list[dict]:
    from benchrun.warehouse.curate import telemetry_rows
    from benchrun.warehouse.sources import RunSources

    status = {"run_id": run_id, "started_utc": "2026-01-01T00:00:00+00:00", "finished_utc": "2026-01-01T01:00:00+00:00"}
    return telemetry_rows(RunSources(run_id, run_dir, status, env, {}, [], [], None))


def test_a_pods_environment_is_the_nodes_and_the_orchestrators_samples_stay_apart(tmp_path, monkeypatch):
    import json

    from benchrun import envcapture
    from benchrun.fsio import atomic_write_json
    from benchrun.launch.podenv import record_pod_environment
    from benchrun.plan import Invocation
    from benchrun.suites.result import raw_path

    run_id = "run-k8s-1"
    run_dir = tmp_path / "runs" / run_id
    atomic_write_json(envcapture.environment_path(run_dir, run_id), {**_env("orch", 9.0), "run_id": run_id})
    pod_doc = _env("job-abc-xyz", 1.0, pod={"node_name": "gpu-7", "pod_name": "job-abc-xyz", "pod_uid": "u-1"},
                   gpus=[{"index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-1", "memory_total_mib": 81559}])
    atomic_write_json(raw_path(run_dir, run_id, "gemm", 1, "environment", "json"), pod_doc)
    inv = Invocation(run_id=run_id, layer="micro", suite="gemm", replicate=1, benchmark_case_id="c", argv=(),
                     env={}, timeout_s=60.0)
    record_pod_environment(run_dir, inv, {})
    # the run worker's after-run sample, taken on the orchestrator's host
    monkeypatch.setattr(envcapture, "sample_background_load", lambda *a, **k: _load(7.0, "2026-01-01T00:59:00.000+00:00"))
    envcapture.write_environment(run_dir, run_id, when="after")

    env = json.loads(envcapture.environment_path(run_dir, run_id).read_text())
    assert env["hostname"] == "job-abc-xyz" and env["captured_in"] == "pod"
    assert env["background_load"] == pod_doc["background_load"]  # the pod's own, before; no after on the node
    assert env["orchestrator"]["hostname"] == "orch" and env["orchestrator"]["hardware_key"] == "hw-orch"
    assert env["orchestrator"]["background_load"]["before"]["load_average_1m"] == 9.0
    assert env["orchestrator"]["background_load"]["after"]["load_average_1m"] == 7.0
    assert env["nodes"] == [{"node_name": "gpu-7", "hardware_key": "hw-job-abc-xyz", "software_key": "sw-job-abc-xyz"}]

    rows = _telemetry(run_dir, run_id, env)
    assert rows and {r["node_name"] for r in rows} == {"gpu-7"}  # the node, not the pod's hostname
    load = {r["metric"]: r["value"] for r in rows if r["metric"].startswith("background_")}
    assert load["background_load_average_1m"] == 1.0 and load["background_cpu_busy_share"] == 0.1  # the pod's
    assert {r["source"] for r in rows if r["metric"].startswith("background_")} == {"environment.background_load.before"}
    assert {r["metric"]: r["value"] for r in rows}["cpu_logical_cores"] == 8
    assert [r["gpu_uuid"] for r in rows if r["scope"] == "gpu"] == ["GPU-1"]


def test_an_earlier_promotions_rows_stay_those_its_signed_digests_cover(tmp_path):
    # promoted before the orchestrator's samples were kept apart (``orchestrator`` has no
    # ``background_load``): curated as it was then, hostname and samples as recorded, so a run signed
    # before still verifies after a rebuild (found in review: its 12 rows became 2 under another name)
    env = _env("job-abc-xyz", 9.0, captured_in="pod", pod={"node_name": "gpu-7"},
               orchestrator={"hostname": "orch", "hardware_key": "hw-orch", "software_key": "sw-orch"})
    rows = _telemetry(tmp_path, "run-old", env)
    assert {r["node_name"] for r in rows} == {"job-abc-xyz"}
    assert [r["value"] for r in rows if r["metric"] == "background_load_average_1m"] == [9.0]
    # a capture on the machine that ran the suites (local launcher) keeps its samples, named by hostname
    local = _telemetry(tmp_path, "run-local", _env("bench-host", 1.0))
    assert {r["node_name"] for r in local} == {"bench-host"}
    assert [r["value"] for r in local if r["metric"] == "background_load_average_1m"] == [1.0]
