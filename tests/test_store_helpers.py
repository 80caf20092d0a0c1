"""Helpers shared by the store, warehouse and retention tests: a small real run directory and a loopback S3 server."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchrun.suites.result import SCHEMA, metric, raw_path, result_path
from benchrun.fsio import atomic_write_json

SPEC_YAML = """\
apiVersion: benchmarking.aisp.dev/v1alpha1
kind: BenchmarkRun
metadata: {name: wh-test}
spec:
  intent: {benchmarkClass: realism_grade, workloadType: inference, cadence: canary, schedulerPath: local}
  workload:
    model: tiny-llm
    precision: bf16
    batchingPolicy: continuous
    concurrencyModel: closed_loop
    sequenceLengthMix: [{inputTokens: 512, outputTokens: 128, weight: 1.0}]
  sinks:
    rawArtifacts: {store: object_storage, pathTemplate: null, retentionClass: cold_immutable}
    curatedWarehouse:
      store: parquet_duckdb
      retention: {hotDays: 30, warmDays: 180, coldDays: 730}
"""


def make_run_dir(
    home: Path,
    run_id: str,
    *,
    replicates: int = 3,
    requests_per_replicate: int = 20,
    finished_utc: str = "2026-11-30T09:00:00+00:00",
    gflops: tuple[float, ...] = (10.0, 12.0, 11.0),
) -> Path:
    """A run directory as the lead's writer lays it out: status, env, spec, results, raw."""
    run_dir = home / "runs" / run_id
    for sub in ("structured", "raw", "figures", "reports", "progress"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    (run_dir / "structured" / f"{run_id}_spec.yaml").write_text(SPEC_YAML)
    atomic_write_json(
        run_dir / "status.json",
        {
            "run_id": run_id,
            "name": "wh-test",
            "phase": "Succeeded",
            "conditions": [],
            "spec_digest": "a" * 64,
            "workload_spec_digest": "b" * 64,
            "artifact_manifest_digest": None,
            "benchmark_class_requested": "realism_grade",
            "benchmark_class_granted": "realism_grade",
            "workload_type": "inference",
            "cadence": "canary",
            "scheduler_path_requested": "local",
            "selected_scheduler_path": "local",
            "variable_under_test": "runtime_version",
            "created_utc": "2026-11-30T08:59:00+00:00",
            "started_utc": "2026-11-30T08:59:10+00:00",
            "finished_utc": finished_utc,
            "run_directory": str(run_dir),
            "pinned_spec": f"structured/{run_id}_spec.yaml",
            "dagster_run_id": "dag-123",
            "layers": {"micro": {"status": "ok", "ok": replicates, "failed": 0}},
        },
    )
    atomic_write_json(
        run_dir / "structured" / f"{run_id}_environment.json",
        {
            "schema": "benchrun.environment/v1",
            "hostname": "node-a",
            "python": {"version": "3.12.3", "implementation": "CPython"},
            "packages": {"numpy": "2.3.4", "torch": "2.13.0", "duckdb": "1.4.1", "benchrun": "0.1.0"},
            "os": {"system": "Linux", "distro": "Debian 13", "machine": "x86_64"},
            "kernel": "6.8.0",
            "cpu": {"model": "Test CPU", "logical_cores": 2, "physical_cores": 1},
            "numa": {"nodes": [{"node": 0, "cpus": "0-1", "memory_total_bytes": 24 * 2**30}]},
            "memory": {"total_bytes": 24 * 2**30 - 12345, "available_bytes": 20 * 2**30},
            "gpus": [],
            "gpu_unavailable_reason": "nvidia-smi not found",
            "gpu_runtime": {"driver_version": None, "cuda_driver_version": None, "torch_version": "2.13.0",
                            "torch_cuda": None, "nccl_version": None},
            "background_load": {
                "before": {"sampled_utc": "2026-11-30T08:59:05+00:00", "interval_s": 0.5, "load_average_1m": 0.5,
                           "load_average_5m": 0.4, "load_average_15m": 0.3, "cpu_busy_share": 0.2,
                           "other_processes_cpu_share": 0.1, "top_other_processes": []},
                "after": None,
            },
        },
    )
    launches = []
    for k in range(1, replicates + 1):
        case_m = f"case-micro-{k}"
        launches.append({"layer": "micro", "suite": "gemm", "replicate": k, "benchmark_case_id": case_m, "exit_code": 0, "status": "ok"})
        atomic_write_json(
            result_path(run_dir, run_id, "gemm", k),
            {
                "schema": SCHEMA, "run_id": run_id, "suite": "gemm", "replicate": k,
                "benchmark_case_id": case_m, "status": "ok", "reason": None, "synthetic": False,
                "started_utc": "2026-11-30T08:59:20+00:00", "finished_utc": "2026-11-30T08:59:30+00:00",
                "parameters": {"n": 256}, "context": {},
                "metrics": [
                    metric("gflops", gflops[(k - 1) % len(gflops)], "GFLOP/s", "higher", case="n=256,fp32"),
                    metric("wall_ms", 5.0 + k, "ms", "lower", case="n=256,fp32", node_name="node-a"),
                ],
                "samples": {},
            },
        )
        case_s = f"case-serve-{k}"
        launches.append({"layer": "end_to_end", "suite": "serving", "replicate": k, "benchmark_case_id": case_s, "exit_code": 0, "status": "ok"})
        req = raw_path(run_dir, run_id, "serving", k, "requests", "parquet")
        n = requests_per_replicate
        pq.write_table(
            pa.table({
                "request_id": [f"r{k}-{i}" for i in range(n)],
                "trace_id": [f"t{k}-{i}" for i in range(n)],
                "point": ["c=4"] * n,
                "bucket": ["512/128"] * n,
                "send_ts": [1000.0 + i for i in range(n)],
                "ttft_ms": [10.0 + i for i in range(n)],
                "e2e_ms": [100.0 + 2 * i for i in range(n)],
                "input_tokens": [512] * n,
                "output_tokens": [128] * n,
                "decode_ms_per_token": [0.7] * n,
                "error": [None] * n,
            }),
            req,
        )
        atomic_write_json(
            result_path(run_dir, run_id, "serving", k),
            {
                "schema": SCHEMA, "run_id": run_id, "suite": "serving", "replicate": k,
                "benchmark_case_id": case_s, "status": "ok", "reason": None, "synthetic": True,
                "started_utc": "2026-11-30T08:59:40+00:00", "finished_utc": "2026-11-30T08:59:50+00:00",
                "parameters": {}, "context": {},
                "metrics": [metric("p99_latency_ms", 130.0 + k, "ms", "lower", case="c=4|512/128")],
                "samples": {"requests": req.relative_to(run_dir).as_posix()},
                "serving": [{
                    "point": "c=4", "load_model": "closed_loop", "offered_load": 4, "bucket": "512/128",
                    "n_requests": n, "n_errors": 0, "window_s": 10.0, "jitter_ms": 0.1,
                    "tokens_per_second": 256.0, "per_user_output_tokens_per_s": 64.0,
                    "request_throughput_rps": 2.0, "request_goodput": None, "slo_attainment": None,
                    "cost_per_request_usd": None, "cost_per_token_usd": None,
                    "achieved_rate_rps": 2.0, "schedule_lag_p99_ms": 0.2,
                    "verdict": "valid", "verdict_reasons": [],
                    "ttft_ms_p50": 19.5, "ttft_ms_p99": 28.8, "e2e_ms_p50": 119.0, "e2e_ms_p99": 137.6,
                }],
            },
        )
    atomic_write_json(run_dir / "structured" / f"{run_id}_launches.json", launches)
    (run_dir / "raw" / f"{run_id}_gemm_r1.log").write_text("gemm ok\n")
    atomic_write_json(run_dir / "manifest.json", {"manifest_version": 2, "run_id": run_id, "status": "succeeded"})
    return run_dir


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def s3_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real S3 API server (moto) on loopback; yields its endpoint URL, set in the environment."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing-secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("BENCHRUN_S3_ENDPOINT_URL", endpoint)
    try:
        yield endpoint
    finally:
        server.stop()


def shared_bucket(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket on the S3 server at ``endpoint`` (moto keeps buckets in the process, across servers),
    named by BENCHRUN_SHARED_STATE as ``s3://<bucket>/team``; its name."""
    import uuid

    import boto3

    name = f"bench-shared-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    monkeypatch.setenv("BENCHRUN_SHARED_STATE", f"s3://{name}/team")
    return name


def shared_keys(endpoint: str, bucket: str) -> set[str]:
    """The keys under the ``team/`` prefix :func:`shared_bucket` names, relative to it."""
    import boto3

    pages = boto3.client("s3", endpoint_url=endpoint).get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix="team/")
    return {o["Key"][len("team/"):] for page in pages for o in page.get("Contents", [])}


def load_json(path: Path) -> dict:
    return json.loads(path.read_text())
