"""Synthetic run directories with known values, for the statistics tests and the analysis benchmark.

These are written in exactly the run-directory shape the launcher writes (status.json,
suite results, environment capture, pinned spec, optional per-request parquet), but their
numbers come from the caller — they are test inputs, never reported as measurements.
"""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from benchrun.suites.result import SCHEMA, raw_path, result_path
from benchrun.fsio import atomic_write_json, atomic_write_text

BASE_ENVIRONMENT: dict[str, Any] = {
    "python": "3.12.3",
    "packages": {"numpy": "2.3.4", "torch": "2.13.0"},
    "os": "Linux-6.8.0-x86_64",
    "kernel": "6.8.0",
    "cpu_model": "Intel(R) Xeon(R) Test CPU",
    "cores": 2,
    "numa": {"nodes": 1},
    "memory_total_bytes": 25769803776,
    "gpus": [],
    "driver": None,
    "cuda": None,
    "nccl": None,
    "hostname": "host-a",
    "background_load": {"before": {"loadavg_1m": 0.4}, "after": {"loadavg_1m": 0.6}},
}

BASE_SPEC: dict[str, Any] = {
    "apiVersion": "benchmarking.aisp.dev/v1alpha1",
    "kind": "BenchmarkRun",
    "metadata": {"name": "synthetic"},
    "spec": {
        "intent": {"benchmarkClass": "realism_grade", "workloadType": "inference", "cadence": "canary"},
        "comparison": {
            "variableUnderTest": "runtime_version",
            "baseline": {"artifactRef": "cluster/published/current"},
        },
        "metrics": {"inference": {"enabled": True, "primary": ["tokens_per_second", "p99_latency_ms"]}},
        "trials": {"minReplicates": 5, "confidenceLevel": 0.95,
                   "outlierPolicy": {"method": "mad", "action": "flag_and_keep"}},
    },
}


def _deep_update(base: dict[str, Any], upd: Mapping[str, Any]) -> dict[str, Any]:
    for k, v in upd.items():
        if isinstance(v, Mapping) and isinstance(base.get(k), dict):
            _deep_update(base[k], v)
        else:
            base[k] = copy.deepcopy(v)
    return base


def make_run(
    home: Path,
    run_id: str,
    metrics: Mapping[tuple[str, str, str], tuple[Sequence[float], str, str]],
    *,
    environment: Mapping[str, Any] | None = None,
    status: Mapping[str, Any] | None = None,
    spec: Mapping[str, Any] | None = None,
    serving: Mapping[str, Sequence[Sequence[dict[str, Any]]]] | None = None,
    requests: Mapping[str, Sequence[Any]] | None = None,
    failed_replicates: Mapping[str, Sequence[int]] | None = None,
    launches: Mapping[str, Sequence[str]] | None = None,
    unwritten: Mapping[str, Sequence[int]] | None = None,
    created_utc: str | None = None,
    contexts: Mapping[str, Mapping[str, Any]] | None = None,
    manifest: bool = True,
    sealed: bool | None = None,
) -> Path:
    """Write a run directory under ``home/runs/run_id``.

    ``metrics`` maps (suite, case, metric) to (one value per replicate, unit, direction).
    ``serving`` maps a suite to per-replicate lists of serving rows; ``requests`` maps a
    suite to per-replicate pandas frames written as ``raw/*_requests.parquet``.
    ``launches`` maps a suite to the launcher's status of each replicate (``ok``, ``failed``,
    ``unavailable``), written as ``structured/<run>_launches.json``; ``unwritten`` names the
    replicates whose suite wrote no result document (killed before it could); ``contexts`` maps a
    suite to the ``context`` each of its replicates records.
    ``sealed``: store the evidence and sign it as a real run does (:func:`seal_run`); by default
    whenever a manifest is written (a finished run is signed, and a comparison refuses one that
    is not), ``sealed=False`` for a run that lost its envelope.
    """
    sealed = manifest if sealed is None else sealed
    rd = Path(home) / "runs" / run_id
    for sub in ("structured", "raw", "figures", "reports", "progress"):
        (rd / sub).mkdir(parents=True, exist_ok=True)
    created = created_utc or dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    st = {
        "run_id": run_id, "name": "synthetic", "phase": "Succeeded", "conditions": [],
        "spec_digest": "s" * 64, "workload_spec_digest": "w" * 64, "artifact_manifest_digest": "a" * 64,
        "benchmark_class_requested": "realism_grade", "benchmark_class_granted": "realism_grade",
        "workload_type": "inference", "cadence": "canary", "selected_scheduler_path": "local",
        "variable_under_test": "runtime_version", "created_utc": created, "run_directory": str(rd),
    }
    st.update(status or {})
    atomic_write_json(rd / "status.json", st)
    env = _deep_update(copy.deepcopy(BASE_ENVIRONMENT), environment or {})
    atomic_write_json(rd / "structured" / f"{run_id}_environment.json", env)
    sp = _deep_update(copy.deepcopy(BASE_SPEC), spec or {})
    import yaml

    atomic_write_text(rd / "structured" / f"{run_id}_spec.yaml", yaml.safe_dump(sp, sort_keys=False))
    by_suite: dict[str, dict[int, list[dict[str, Any]]]] = {}
    for (suite, case, name), (values, unit, direction) in metrics.items():
        for k, v in enumerate(values, start=1):
            by_suite.setdefault(suite, {}).setdefault(k, []).append(
                {"name": name, "value": float(v), "unit": unit, "direction": direction, "case": case}
            )
    for suite in set(serving or {}) | set(requests or {}):
        by_suite.setdefault(suite, {})
    failed = {s: set(v) for s, v in (failed_replicates or {}).items()}
    for suite, reps in by_suite.items():
        n_reps = max([*reps, len((serving or {}).get(suite, [])), len((requests or {}).get(suite, []))])
        for k in range(1, n_reps + 1):
            ok = k not in failed.get(suite, set())
            doc = {
                "schema": SCHEMA, "run_id": run_id, "suite": suite, "replicate": k,
                "benchmark_case_id": f"{suite}-case", "status": "ok" if ok else "failed",
                "reason": None if ok else "exit code 1", "synthetic": True,
                "started_utc": created, "finished_utc": created, "parameters": {},
                "context": copy.deepcopy(dict((contexts or {}).get(suite, {}))),
                "metrics": reps.get(k, []), "samples": {},
                "serving": list(serving[suite][k - 1]) if serving and k <= len(serving.get(suite, [])) else [],
            }
            atomic_write_json(result_path(rd, run_id, suite, k), doc)
            atomic_write_text(rd / "raw" / f"{run_id}_{suite}_r{k}.log", "synthetic\n")
            if requests and suite in requests and k <= len(requests[suite]):
                requests[suite][k - 1].to_parquet(raw_path(rd, run_id, suite, k, "requests", "parquet"))
    for suite, reps_gone in (unwritten or {}).items():
        for k in reps_gone:
            result_path(rd, run_id, suite, k).unlink(missing_ok=True)
    if launches:
        atomic_write_json(rd / "structured" / f"{run_id}_launches.json",
                          [{"suite": suite, "replicate": k, "status": st, "layer": "synthetic"}
                           for suite, sts in launches.items() for k, st in enumerate(sts, start=1)])
    if manifest or sealed:
        write_manifest(rd)
    if sealed:
        seal_run(rd, Path(home))
    return rd


def seal_run(rd: Path, home: Path) -> Path:
    """Store the run's evidence in the home's artifact store and sign it (the home's key), as
    ``run_evidence`` and ``provenance_attestation`` do; returns the envelope's path."""
    import json

    from benchrun.provenance import sign_run
    from benchrun.provenance.signing import run_store_template
    from benchrun.rundir import MUTABLE_FILES
    from benchrun.store import open_store

    stored = open_store(run_store_template(rd), home).put_run_dir(rd, rd.name, exclude=MUTABLE_FILES)
    st = json.loads((rd / "status.json").read_text(encoding="utf-8"))
    st["artifact_manifest_digest"] = stored.digest
    atomic_write_json(rd / "status.json", st)
    return sign_run(rd, home).path


def write_manifest(rd: Path) -> Path:
    """A minimal version-2 manifest.json hashing every file of the run directory (status.json excepted)."""
    import hashlib

    files = sorted(p for p in rd.rglob("*") if p.is_file() and p.name not in ("manifest.json", "status.json"))
    sha = {str(p.relative_to(rd)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    doc = {"manifest_version": 2, "run_id": rd.name, "status": "succeeded", "success": True,
           "files": sorted(sha), "summary": {"file_count": len(sha), "sha256": sha}}
    return atomic_write_json(rd / "manifest.json", doc)


def lognormal_replicates(rng: np.random.Generator, median: float, cv: float, n: int) -> np.ndarray:
    """n replicate values around ``median`` with coefficient of variation ≈ ``cv``."""
    sigma = float(np.sqrt(np.log1p(cv**2)))
    return median * np.exp(rng.normal(0.0, sigma, size=n))
