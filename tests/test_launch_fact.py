"""launch_fact: one row per replicate with the scheduler timeline (queue wait is a query)."""

from __future__ import annotations

import json
from pathlib import Path

from benchrun.warehouse import curate_run, query
from test_store_helpers import make_run_dir


def test_launch_fact_holds_the_scheduler_timeline(tmp_path: Path) -> None:
    run_dir = make_run_dir(tmp_path, "run-k")
    pod = {"kind": "pod", "job_name": "run-k-gemm-r1", "workload_name": "job-run-k-gemm-r1-abcde",
           "cluster_queue": "benchrun-cq", "job_created_utc": "2026-12-01T00:00:00Z",
           "quota_reserved_utc": "2026-12-01T00:00:07Z", "admitted_utc": "2026-12-01T00:00:07Z",
           "scheduled_utc": "2026-12-01T00:00:08Z", "container_started_utc": "2026-12-01T00:00:10Z",
           "container_finished_utc": "2026-12-01T00:00:20Z", "queue_wait_s": 7.0, "scheduled_s": 8.0,
           "started_s": 10.0, "run_s": 10.0, "image_id": "docker-pullable://b@sha256:" + "a" * 64,
           "evicted": None}
    launches = [
        {"run_id": "run-k", "layer": "micro", "suite": "gemm", "replicate": 1, "benchmark_case_id": "bc-1",
         "status": "ok", "reason": None, "exit_code": 0, "wall_s": 21.0, "t_request": 1796083200.0,
         "t_spawned": 1796083210.0, "t_finished": 1796083221.0, "log": "raw/x.log", "result": None,
         "metrics": [], "messages": [pod], "scheduler_run_id": "job-run-k-gemm-r1-abcde", "job_uid": "j-1",
         "pod_uid": "p-1", "node_name": "gpu-7"},
        {"run_id": "run-k", "layer": "micro", "suite": "gemm", "replicate": 2, "benchmark_case_id": "bc-1",
         "status": "failed", "reason": "preempted by Kueue (Preempted: ...)", "exit_code": None, "wall_s": 3.0,
         "t_request": 1796083221.0, "t_spawned": 1796083221.0, "t_finished": 1796083224.0, "log": "raw/y.log",
         "result": None, "metrics": [], "messages": []},
    ]
    (run_dir / "structured" / "run-k_launches.json").write_text(json.dumps(launches))
    counts = curate_run(run_dir, tmp_path)
    assert counts["launch_fact"] == 2
    rows = query("SELECT replicate, status, node_name, pod_uid, job_uid, queue_wait_s, "
                 "epoch(admitted_utc) - epoch(job_created_utc) AS wait, reason "
                 "FROM launch_fact ORDER BY replicate", tmp_path).table.to_pylist()
    assert rows[0] == {"replicate": 1, "status": "ok", "node_name": "gpu-7", "pod_uid": "p-1", "job_uid": "j-1",
                       "queue_wait_s": 7.0, "wait": 7.0, "reason": None}
    assert rows[1]["status"] == "failed" and rows[1]["queue_wait_s"] is None and rows[1]["reason"].startswith("preempted")
