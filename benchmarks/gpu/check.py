"""The GPU check (issue 25): one command that runs every CUDA path benchrun has on one GPU and
says how close each comes to the hardware's published limits.

``benchmarks/gpu/check.sh`` installs the carried wheels and calls this. Steps, in order:

1. set-up: Python, the modules ``benchrun run`` imports, the CUDA device (torch, NVML);
2. ``benchrun validate specs/gpu/h200.yaml``;
3. ``benchrun render --launcher kubernetes``: every GPU suite's Job asks for ``nvidia.com/gpu``;
4. ``benchrun run`` on the spec (the GPU steps), then the summary: headline metrics against
   the published peaks, NVML fields seen per replicate (``telemetry_slice_fact``), and every
   suite that failed with its error. Everything goes under ``$OUT`` (or ``--out``).

``--dry-run`` (no CUDA needed) runs steps 1-3, then step 4 on a CPU variant of the same spec
(every suite, CPU-sized parameters) so the run and summary code are exercised, and stops
before the GPU run with ``unavailable: no CUDA device``. Without ``--dry-run`` on a machine
with no CUDA device the check stops there too, exit 3.

Exit codes: 0 the check ran (targets missed are reported, not errors), 1 a step broke
(set-up, validation, render, the run itself or a GPU path failed), 3 no CUDA device.
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import importlib
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "specs" / "gpu" / "h200.yaml"

# Published limits of one H200 SXM (NVIDIA's datasheet): dense (no sparsity) tensor-core
# rates and HBM3e bandwidth. GB = 1e9 bytes, as the suites count.
PEAKS = {
    "bf16_dense_tflops": 989.4,
    "fp8_dense_tflops": 1978.9,
    "hbm_gb_per_s": 4800.0,
}
# The peaks of each GPU the check may be lent, by a name NVML/torch report (first match wins):
# a share of the H200's peaks on an H100 read as a false "NOT MET" (its 3.35 TB/s HBM3 against
# 4.8 TB/s). H100 SXM5 80GB: 989.4 / 1978.9 TFLOP/s dense, 3350 GB/s; H100 PCIe 80GB: 756 / 1513,
# 2000 GB/s (NVIDIA's datasheets). Another GPU gets no share (no verdict on a target).
DEVICE_PEAKS = (
    ("h200", PEAKS),
    ("h100 pcie", {"bf16_dense_tflops": 756.0, "fp8_dense_tflops": 1513.0, "hbm_gb_per_s": 2000.0}),
    ("h100", {"bf16_dense_tflops": 989.4, "fp8_dense_tflops": 1978.9, "hbm_gb_per_s": 3350.0}),
)


def peaks_for(gpu_name: str | None) -> dict[str, float] | None:
    """The published peaks of the GPU named ``gpu_name``; None for one not listed in DEVICE_PEAKS."""
    name = (gpu_name or "").lower()
    return next((peaks for key, peaks in DEVICE_PEAKS if key in name), None)
TARGETS = {"gemm_bf16_pct_of_peak": 70.0, "membw_pct_of_peak": 80.0}

# What `benchrun run` imports in its own process and in the suites' (measured on a CPU run:
# benchmarks/gpu/wheels.txt). A missing one fails set-up before any device time is spent.
REQUIRED_MODULES = (
    "benchrun.cli", "benchrun.execute", "benchrun.report", "benchrun.warehouse", "benchrun.telemetry.sampler",
    "dagster", "dagster_pipes", "dagster_duckdb", "duckdb", "pydantic", "ruamel.yaml", "typer", "rich",
    "pyarrow", "pandas", "numpy", "scipy", "matplotlib", "psutil", "yaml", "ruptures", "cryptography",
    "prometheus_client", "pynvml",
)
GPU_MODULES = ("torch", "torch.distributed")


class StepError(Exception):
    """A step of the check that broke (its message says which and why)."""


def log(text: str) -> None:
    print(text, flush=True)


def _cli(args: list[str], env: dict[str, str], log_path: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    """``python -m benchrun.cli ARGS`` (argv list, never a shell); output kept in ``log_path``."""
    proc = subprocess.run([sys.executable, "-m", "benchrun.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if log_path is not None:
        with log_path.open("a", encoding="utf-8") as fh:
            fh.write(f"$ benchrun {' '.join(args)}\n{proc.stdout}{proc.stderr}\n(exit {proc.returncode})\n")
    return proc


# -- 1. set-up ------------------------------------------------------------------------------
def setup_checks(*, import_modules: bool) -> dict[str, Any]:
    """Python and the required modules; raises naming every missing one.

    ``import_modules`` imports each (on the device: a broken binary wheel shows here, not in
    the middle of the run); else each is only found (``importlib.util.find_spec``), which
    costs nothing on this 2-core machine where importing them all takes a minute under load.
    """
    if sys.version_info < (3, 11):
        raise StepError(f"set-up: Python {platform.python_version()} is too old (benchrun needs >= 3.11)")
    found: dict[str, str] = {}
    missing: list[str] = []
    for name in REQUIRED_MODULES + (GPU_MODULES if import_modules else ()):
        try:
            if import_modules:
                mod = importlib.import_module(name)
                found[name] = str(getattr(mod, "__version__", "") or getattr(mod, "__file__", ""))
            else:
                spec = importlib.util.find_spec(name)
                if spec is None:
                    raise ImportError(f"No module named {name!r}")
                found[name] = str(spec.origin)
        except Exception as exc:  # ImportError, or a broken binary wheel
            missing.append(f"{name} ({type(exc).__name__}: {exc})")
    if missing:
        raise StepError("set-up: cannot import " + "; ".join(missing)
                        + " (on the device: carry the wheels benchmarks/gpu/wheels.sh fetches)")
    import benchrun

    if Path(benchrun.__file__).resolve().parents[1] != ROOT:
        raise StepError(f"set-up: benchrun is imported from {benchrun.__file__}, not this checkout {ROOT} "
                        "(put the checkout first on PYTHONPATH)")
    return {"python": sys.executable, "python_version": platform.python_version(), "modules": found}


def cuda_probe_isolated() -> dict[str, Any]:
    """:func:`cuda_probe` in a child process, so this one holds no CUDA context (and no GPU
    memory) while the suites run; without device nodes nothing is started at all."""
    from benchrun.envcapture import _torch_build
    from benchrun.suites._common import cuda_device_nodes

    if not cuda_device_nodes():
        build = _torch_build()
        return {"available": False, "reason": "no CUDA device", "torch_version": build["torch_version"],
                "torch_cuda": build["torch_cuda"]}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--probe-cuda"], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"available": False, "reason": f"no CUDA device (the probe exited {proc.returncode}: "
                                              f"{proc.stderr.strip()[-500:]})"}


def cuda_probe() -> dict[str, Any]:
    """The CUDA device as torch and NVML see it; ``available`` False (with ``reason``) without one."""
    out: dict[str, Any] = {"available": False}
    try:
        import torch
    except ImportError as exc:
        out["reason"] = f"no CUDA device (torch not importable: {exc})"
        return out
    out["torch_version"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    if not torch.cuda.is_available():
        out["reason"] = "no CUDA device"
        return out
    props = torch.cuda.get_device_properties(0)
    out.update(available=True, device_count=torch.cuda.device_count(), name=props.name,
               capability=".".join(map(str, torch.cuda.get_device_capability(0))),
               memory_bytes=int(props.total_memory), multiprocessors=int(props.multi_processor_count))
    try:
        out["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as exc:
        out["nccl_version"] = f"unavailable: {exc}"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            out["driver_version"] = _text(pynvml.nvmlSystemGetDriverVersion())
            out["nvml_device_name"] = _text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0)))
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:
        out["nvml"] = f"unavailable: {exc}"
    return out


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- 2./3. validate and render ----------------------------------------------------------------
def validate_spec(spec: Path, env: dict[str, str], log_path: Path) -> None:
    proc = _cli(["validate", str(spec)], env, log_path, timeout=120)
    if proc.returncode != 0:
        raise StepError(f"validate {spec.name}: exit {proc.returncode}: {(proc.stdout + proc.stderr).strip()[-2000:]}")


def spec_doc(spec: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load(spec.read_text(encoding="utf-8"))


def gpu_suites(doc: dict[str, Any]) -> dict[str, int]:
    """Suite name -> GPUs one launch asks for, for the enabled suites that ask for any."""
    return {s["name"]: int(s["gpus"]) for layer in doc["spec"]["layers"] if layer.get("enabled", True)
            for s in layer["suites"] if s.get("gpus")}


def render_check(spec: Path, env: dict[str, str], log_path: Path) -> dict[str, Any]:
    """Render to Kubernetes Jobs (``benchrun render``) and check them (:func:`check_jobs`)."""
    renv = {**env, "BENCHRUN_LAUNCHER_QUEUE_NAME": env.get("BENCHRUN_LAUNCHER_QUEUE_NAME", "gpu-check"),
            "BENCHRUN_LAUNCHER_NAMESPACE": env.get("BENCHRUN_LAUNCHER_NAMESPACE", "benchrun")}
    proc = _cli(["render", str(spec), "--launcher", "kubernetes", "-o", "json"], renv, log_path, timeout=120)
    if proc.returncode != 0:
        raise StepError(f"render {spec.name}: exit {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    items = json.loads(proc.stdout)["items"]
    return {**check_jobs(items, spec_doc(spec)), "items": items}


def check_jobs(items: list[dict[str, Any]], doc: dict[str, Any]) -> dict[str, Any]:
    """Every replicate of a GPU suite is a Job asking for its nvidia.com/gpu; no other Job asks for one."""
    want = gpu_suites(doc)
    replicates = int(doc["spec"]["trials"]["minReplicates"])
    seen: dict[str, int] = {}
    for item in items:
        if item.get("kind") != "Job":
            continue
        suite = item["metadata"]["labels"].get("benchrun.dev/suite")
        limits = item["spec"]["template"]["spec"]["containers"][0].get("resources", {}).get("limits", {})
        gpus = int(limits.get("nvidia.com/gpu", 0))
        if suite in want:
            if gpus != want[suite]:
                raise StepError(f"render: Job {item['metadata']['name']} asks for {gpus} nvidia.com/gpu, "
                                f"the spec's suite {suite} for {want[suite]}")
            seen[suite] = seen.get(suite, 0) + 1
        elif gpus:
            raise StepError(f"render: Job {item['metadata']['name']} (suite {suite}) asks for a GPU it does not use")
    short = {s: seen.get(s, 0) for s in want if seen.get(s, 0) != replicates}
    if short:
        raise StepError(f"render: GPU suites without one Job per replicate ({replicates}): {short}")
    return {"jobs": sum(1 for i in items if i.get("kind") == "Job"), "gpu_jobs": sum(seen.values()),
            "gpu_suites": want}


# -- the CPU variant (dry run) ---------------------------------------------------------------
CPU_PARAMETERS = {
    "gemm": {"sizes": [256], "iterations": 5, "warmup": 1, "dtype": "float32", "device": "cpu"},
    # fp8 stays fp8: on CPU the suite says unavailable, which the summary must report
    "gemm_fp8": {"sizes": [256], "iterations": 5, "warmup": 1, "dtype": "float8_e4m3fn", "device": "auto"},
    "membw": {"elements": 1_000_000, "iterations": 3, "dtype": "float32", "device": "cpu"},
    "allreduce": {"world_size": 1, "backend": "gloo", "sizes": [1024, 65536], "iterations": 5, "warmup": 1},
    "job_startup": {"launches": 1},
    "training": {"layers": 1, "hidden": 32, "heads": 2, "seq_len": 16, "vocab": 64, "global_batch": 4,
                 "steps": 6, "warmup_steps": 1, "lr": 0.01, "checkpoint": True, "backend": "gloo",
                 "peak_tflops_per_device": 989.4},
}


# --quick (the test in make test): the suites that take under a second each here.
QUICK_SUITES = ("gemm", "gemm_fp8", "membw", "job_startup")


def cpu_variant(doc: dict[str, Any], quick: bool = False) -> dict[str, Any]:
    """The GPU spec with CPU-sized parameters and no GPU requests (same suites, same telemetry).

    ``quick`` keeps only QUICK_SUITES (a layer left with none is disabled).
    """
    out = copy.deepcopy(doc)
    out["metadata"]["name"] = doc["metadata"]["name"] + "-cpu-dry-run"
    for layer in out["spec"]["layers"]:
        if quick:
            layer["suites"] = [s for s in layer["suites"] if s["name"] in QUICK_SUITES]
            layer["enabled"] = bool(layer["suites"]) and layer.get("enabled", True)
        for suite in layer["suites"]:
            if suite["name"] not in CPU_PARAMETERS:
                raise StepError(f"dry run: suite {suite['name']} has no CPU parameters in CPU_PARAMETERS")
            suite["parameters"] = dict(CPU_PARAMETERS[suite["name"]])
            suite.pop("gpus", None)
            suite["timeoutSeconds"] = 120
    return out


# -- 4. run and summary ----------------------------------------------------------------------
def run_spec(spec: Path, home: Path, env: dict[str, str], log_path: Path, timeout: float) -> tuple[int, str]:
    """``benchrun run`` (exit 0/1/2 as it defines them) and the run id it made."""
    before = set(_run_ids(home))
    t0 = time.monotonic()
    try:
        proc = _cli(["run", str(spec), "--home", str(home), "--no-wait"], env, log_path, timeout=timeout)
        rc, said = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        # killed at the cap: summarise what finished (the rest shows as missing replicates)
        rc, said = 124, f"killed after {timeout:.0f} s: {_text(exc.stdout or b'')}{_text(exc.stderr or b'')}"
        with log_path.open("a", encoding="utf-8") as fh:
            fh.write(f"$ benchrun run {spec}\n{said}\n(killed after {timeout:.0f} s)\n")
    made = sorted(set(_run_ids(home)) - before)
    log(f"  benchrun run: exit {rc} in {time.monotonic() - t0:.0f} s")
    if not made:
        raise StepError(f"benchrun run made no run (exit {rc}): {str(said).strip()[-2000:]}")
    return rc, made[-1]


def _run_ids(home: Path) -> list[str]:
    runs = home / "runs"
    return [p.name for p in runs.iterdir() if p.is_dir()] if runs.is_dir() else []


def result_docs(run_dir: Path) -> list[dict[str, Any]]:
    """Every replicate's result document in the run directory."""
    docs = []
    for path in sorted((run_dir / "structured").glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(doc, dict) and "suite" in doc and "replicate" in doc and "metrics" in doc:
            docs.append(doc)
    return docs


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def _metric(docs: list[dict[str, Any]], suite: str, name: str) -> dict[str, list[float]]:
    """case -> values over the replicates that were ok."""
    out: dict[str, list[float]] = {}
    for d in docs:
        if d["suite"] != suite or d.get("status") != "ok":
            continue
        for m in d["metrics"]:
            if m.get("name") == name and "rank_id" not in m:
                out.setdefault(m.get("case", ""), []).append(float(m["value"]))
    return out


def _share(value: float | None, peak: float) -> float | None:
    return None if value is None else 100.0 * value / peak


def headlines(docs: list[dict[str, Any]], gpu_name: str | None = None) -> dict[str, Any]:
    """Each headline metric (median over ok replicates, best case) and its share of the published peak.

    A share is given only for what the peak is the peak of: a CUDA measurement in that dtype on a
    GPU whose peaks are known (``gpu_name``, else the suites' own ``context.gpu_name``; a CPU run's
    figures, in the dry run, and an unlisted GPU's get ``pct_of_peak`` None).
    """
    out: dict[str, Any] = {}
    name = gpu_name or next((d["context"]["gpu_name"] for d in docs
                             if isinstance(d.get("context"), dict) and d["context"].get("gpu_name")), None)
    peaks = peaks_for(name)
    out["peaks"] = {"gpu_name": name, **(peaks or {})} if peaks else {"gpu_name": name, "unknown": True}
    for suite, label in (("gemm", "gemm_bf16"), ("gemm_fp8", "gemm_fp8")):
        by_case = {c: _median(v) for c, v in _metric(docs, suite, "tflops").items()}
        if by_case:
            case = max(by_case, key=lambda c: by_case[c] or 0.0)
            dtype, device = _context(docs, suite, "dtype"), _context(docs, suite, "device")
            peak_key = {"bfloat16": "bf16_dense_tflops", "float8_e4m3fn": "fp8_dense_tflops"}.get(dtype)
            applies = device == "cuda" and peak_key is not None and peaks is not None
            out[label] = {"suite": suite, "case": case, "dtype": dtype, "device": device, "tflops": by_case[case],
                          "by_case": by_case, "peak_tflops": peaks[peak_key] if peak_key and peaks else None,
                          "pct_of_peak": _share(by_case[case], peaks[peak_key]) if applies else None,
                          "gpu_name": _context(docs, suite, "gpu_name")}
    bw = {c: _median(v) for c, v in _metric(docs, "membw", "bandwidth_best_gb_per_s").items()}
    if bw:
        kernel = max(bw, key=lambda c: bw[c] or 0.0)
        device = _context(docs, "membw", "device")
        out["membw"] = {"suite": "membw", "kernel": kernel, "device": device, "gb_per_s": bw[kernel], "by_kernel": bw,
                        "peak_gb_per_s": peaks["hbm_gb_per_s"] if peaks else None,
                        "pct_of_peak": _share(bw[kernel], peaks["hbm_gb_per_s"]) if device == "cuda" and peaks else None,
                        "figure": "STREAM best iteration, median over replicates (bytes read + written)"}
    alg = {c: _median(v) for c, v in _metric(docs, "allreduce", "algbw_gb_per_s").items()}
    lat = {c: _median(v) for c, v in _metric(docs, "allreduce", "p50_latency_us").items()}
    if alg:
        out["allreduce"] = {"suite": "allreduce", "algbw_gb_per_s": alg, "p50_latency_us": lat,
                            "backend": _context(docs, "allreduce", "backend"),
                            "world_size": _context(docs, "allreduce", "world_size")}
    mfu = _median(sum(_metric(docs, "training", "mfu_pct").values(), []))
    tps = _median(sum(_metric(docs, "training", "tokens_per_second").values(), []))
    row = next((t for d in docs if d["suite"] == "training" and d.get("status") == "ok" for t in d.get("training", [])), None)
    if row is not None or mfu is not None:
        out["training"] = {"suite": "training", "mfu_pct": mfu, "tokens_per_second": tps,
                           "model_flops_per_token": row and row.get("model_flops_per_token"),
                           "flops_formula": row and row.get("flops_formula"),
                           "peak_tflops_used": row and row.get("peak_tflops_used"),
                           "case": row and row.get("case"), "device": row and row.get("device"),
                           "dtype": row and row.get("dtype")}
    startup = _median(sum(_metric(docs, "job_startup", "launch_to_first_measurement_p50_s").values(), []))
    if startup is not None:
        out["job_startup"] = {"suite": "job_startup", "launch_to_first_measurement_p50_s": startup}
    return out


def _context(docs: list[dict[str, Any]], suite: str, key: str) -> Any:
    return next((d["context"].get(key) for d in docs if d["suite"] == suite and d.get("status") == "ok"), None)


def failures(docs: list[dict[str, Any]], expected: dict[str, int]) -> list[dict[str, Any]]:
    """Every replicate that did not end ok, with its reason, and every expected replicate that is missing."""
    out = [{"suite": d["suite"], "replicate": d["replicate"], "status": d.get("status"), "reason": d.get("reason")}
           for d in docs if d.get("status") != "ok"]
    have = {(d["suite"], d["replicate"]) for d in docs}
    for suite, n in expected.items():
        for r in range(1, n + 1):
            if (suite, r) not in have:
                out.append({"suite": suite, "replicate": r, "status": "missing", "reason": "no result document"})
    return sorted(out, key=lambda f: (f["suite"], f["replicate"]))


def nvml_seen(home: Path, run_id: str, env: dict[str, str], gpu_suite_names: list[str], log_path: Path) -> dict[str, Any]:
    """NVML series in telemetry_slice_fact per (suite, replicate), and the GPU replicates without any."""
    sql = ("SELECT suite, replicate, metric, count(*) AS n FROM telemetry_slice_fact "
           f"WHERE run_id = '{run_id}' AND source = 'nvml' GROUP BY ALL ORDER BY ALL")
    # run_id is benchrun's own (a DNS-1123 label, checked below), never user input.
    from benchrun.paths import validate_run_id

    validate_run_id(run_id)
    proc = _cli(["query", sql, "--json", "--limit", "0"], {**env, "BENCHRUN_HOME": str(home)}, log_path, timeout=120)
    if proc.returncode != 0:
        return {"error": f"query telemetry_slice_fact: exit {proc.returncode}: {proc.stderr.strip()[-500:]}"}
    rows = json.loads(proc.stdout)["rows"]
    per: dict[str, dict[str, int]] = {}
    fields: set[str] = set()
    for row in rows:
        suite, rep, metric, n = (row[k] for k in ("suite", "replicate", "metric", "n")) if isinstance(row, dict) else row
        per.setdefault(f"{suite}/r{rep}", {})[metric] = int(n)
        fields.add(metric)
    return {"fields": sorted(fields), "per_replicate": per,
            "gpu_replicates_without_nvml": sorted(k for k in _replicate_keys(home, run_id, gpu_suite_names) if k not in per)}


def _replicate_keys(home: Path, run_id: str, suites: list[str]) -> list[str]:
    docs = result_docs(home / "runs" / run_id)
    return [f"{d['suite']}/r{d['replicate']}" for d in docs if d["suite"] in suites]


def summarise(run_dir: Path, doc: dict[str, Any], nvml: dict[str, Any], device: dict[str, Any]) -> dict[str, Any]:
    """The summary JSON: device, headlines with shares of the peaks, targets, NVML fields, failures."""
    docs = result_docs(run_dir)
    replicates = int(doc["spec"]["trials"]["minReplicates"])
    expected = {s["name"]: int(s.get("replicates") or replicates) for layer in doc["spec"]["layers"]
                if layer.get("enabled", True) for s in layer["suites"]}
    heads = headlines(docs, device.get("name"))
    peaks = heads.pop("peaks")
    bf16 = heads.get("gemm_bf16", {}).get("pct_of_peak")
    bw = heads.get("membw", {}).get("pct_of_peak")
    targets = {
        "gemm_bf16_pct_of_peak": {"target": TARGETS["gemm_bf16_pct_of_peak"], "value": bf16,
                                  "met": None if bf16 is None else bf16 >= TARGETS["gemm_bf16_pct_of_peak"]},
        "membw_pct_of_peak": {"target": TARGETS["membw_pct_of_peak"], "value": bw,
                              "met": None if bw is None else bw >= TARGETS["membw_pct_of_peak"]},
        "training_mfu_reported": {"met": heads.get("training", {}).get("mfu_pct") is not None},
        "nvml_for_every_gpu_replicate": {"met": bool(nvml.get("per_replicate")) and not nvml.get("gpu_replicates_without_nvml")
                                         and "error" not in nvml},
    }
    return {"run_id": run_dir.name, "spec": doc["metadata"]["name"], "device": device, "peaks": peaks,
            "headlines": heads, "targets": targets, "nvml": nvml, "failures": failures(docs, expected),
            "replicates_ok": sum(1 for d in docs if d.get("status") == "ok"), "replicates_expected": sum(expected.values())}


def _fmt(value: Any, spec: str = ".1f") -> str:
    return "n/a" if value is None else format(value, spec)


def summary_lines(s: dict[str, Any]) -> list[str]:
    """The one printed summary."""
    dev = s["device"]
    h = s["headlines"]
    lines = [f"GPU check {s['run_id']} ({s['spec']}): {s['replicates_ok']}/{s['replicates_expected']} replicates ok",
             f"  device: {dev.get('name') or 'none'} (driver {dev.get('driver_version', 'n/a')}, torch "
             f"{dev.get('torch_version', 'n/a')}, CUDA {dev.get('torch_cuda', 'n/a')}, NCCL {dev.get('nccl_version', 'n/a')})"]
    for key, label in (("gemm_bf16", "GEMM"), ("gemm_fp8", "GEMM fp8")):
        g = h.get(key)
        lines.append(f"  {label} ({g['suite']}): {_fmt(g['tflops'], '.2f')} TFLOP/s at {g['case']} = "
                     + (f"{_fmt(g['pct_of_peak'])} % of {g['peak_tflops']} TFLOP/s dense" if g["pct_of_peak"] is not None
                        else "no share (the peak is a GPU's)") if g else f"  {label}: not measured")
    m = h.get("membw")
    lines.append("  membw: " + (f"{_fmt(m['gb_per_s'], '.0f')} GB/s ({m['kernel']}) = "
                                + (f"{_fmt(m['pct_of_peak'])} % of {m['peak_gb_per_s']:.0f} GB/s HBM"
                                   if m["pct_of_peak"] is not None else "no share (the peak is HBM's)")
                                if m else "not measured"))
    a = h.get("allreduce")
    lines.append("  allreduce: " + (f"{a['backend']}, world {a['world_size']}, algbw "
                                    + ", ".join(f"{c} {_fmt(v, '.2f')} GB/s" for c, v in a["algbw_gb_per_s"].items())
                                    if a else "not measured"))
    t = h.get("training")
    lines.append("  training: " + (f"MFU {_fmt(t['mfu_pct'], '.2f')} % of {t['peak_tflops_used']} TFLOP/s, "
                                   f"{_fmt(t['tokens_per_second'], '.0f')} tokens/s, {t['model_flops_per_token']} FLOP/token "
                                   f"= {t['flops_formula']}" if t else "not measured"))
    j = h.get("job_startup")
    lines.append("  job_startup: " + (f"launch to first measurement p50 {_fmt(j['launch_to_first_measurement_p50_s'], '.3f')} s"
                                      if j else "not measured"))
    for name, t in s["targets"].items():
        lines.append(f"  target {name}: " + ("met" if t["met"] else "NOT MET" if t["met"] is False else "not measured")
                     + (f" ({_fmt(t.get('value'))} % vs >= {t['target']} %)" if "target" in t else ""))
    nv = s["nvml"]
    lines.append("  NVML fields seen: " + (", ".join(nv.get("fields") or []) or "none")
                 + (f" ({nv['error']})" if "error" in nv else ""))
    if nv.get("gpu_replicates_without_nvml"):
        lines.append("  GPU replicates without NVML series: " + ", ".join(nv["gpu_replicates_without_nvml"]))
    if s["failures"]:
        lines.append("  failed or unavailable GPU paths:")
        lines += [f"    {f['suite']} r{f['replicate']}: "
                  + (f["reason"] if str(f["reason"] or "").startswith(f"{f['status']}:") else f"{f['status']}: {f['reason']}")
                  for f in s["failures"]]
    else:
        lines.append("  failed paths: none")
    return lines


def pack(home: Path, run_id: str, out: Path) -> list[str]:
    """What comes back from the device: the run directory as one tar.gz (under 15 MiB), the report."""
    run_dir = home / "runs" / run_id
    written = []
    limit = 15 * 2**20
    for skip_over in (None, 2**20, 64 * 2**10):
        target = out / "run.tar.gz"
        with tarfile.open(target, "w:gz") as tar:
            for path in sorted(run_dir.rglob("*")):
                if path.is_file() and (skip_over is None or path.stat().st_size <= skip_over):
                    tar.add(path, arcname=str(Path(run_id) / path.relative_to(run_dir)))
        if target.stat().st_size <= limit:
            break
    written.append(target.name)
    report = next(iter(sorted((run_dir / "reports").glob("*_report.html"))), None)
    if report is not None:
        shutil.copyfile(report, out / "report.html")
        written.append("report.html")
    return written


def record_nvml_fixture(path: Path) -> str:
    """The NVML fixture from this device's answers (benchmarks/gpu/nvml_fixture.py): 'written' or why not."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        import pynvml
        from nvml_fixture import record

        from benchrun.fsio import atomic_write_json

        atomic_write_json(path, record(pynvml, readings=3, interval_s=0.5))
        return "written"
    except Exception as exc:  # the fixture must never fail the check
        return f"not written: {type(exc).__name__}: {exc}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="no CUDA needed: every step that runs on CPU, then stop")
    parser.add_argument("--out", default=os.environ.get("OUT") or None,
                        help="where the summary, log and run go (default $OUT, else a temporary directory)")
    parser.add_argument("--quick", action="store_true",
                        help="with --dry-run: only the suites that take under a second on CPU (the test's)")
    parser.add_argument("--spec", default=str(SPEC), help=argparse.SUPPRESS)
    parser.add_argument("--probe-cuda", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe_cuda:
        print(json.dumps(cuda_probe(), default=str))
        return 0
    out = Path(args.out or tempfile.mkdtemp(prefix="benchrun-gpu-check-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "check.log"
    spec = Path(args.spec).resolve()
    home = Path(tempfile.mkdtemp(prefix="benchrun-gpu-home-"))
    env = {**os.environ, "BENCHRUN_HOME": str(home), "DAGSTER_HOME": str(home / "dagster_home"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]),
           "PYTHONUNBUFFERED": "1"}
    t0 = time.monotonic()
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    log(f"GPU check: {spec.relative_to(ROOT) if spec.is_relative_to(ROOT) else spec}, output in {out}")
    try:
        log("1. set-up")
        device = cuda_probe_isolated()
        if not args.dry_run and not device["available"]:
            # before the imports: a machine without torch (an optional extra) said "cannot import torch",
            # exit 1, where the check promises `unavailable: no CUDA device` and exit 3
            log(f"unavailable: {device['reason']}")
            return 3
        setup = setup_checks(import_modules=not args.dry_run)
        log(f"  Python {setup['python_version']} ({setup['python']}), torch {device.get('torch_version', 'absent')}, "
            f"CUDA device: {device.get('name') or device.get('reason')}")
        log("2. validate")
        validate_spec(spec, env, log_path)
        log("3. render --launcher kubernetes")
        rendered = render_check(spec, env, log_path)
        rendered.pop("items")
        log(f"  {rendered['jobs']} Jobs, {rendered['gpu_jobs']} ask for nvidia.com/gpu ({', '.join(rendered['gpu_suites'])})")
        doc = spec_doc(spec)
        if args.dry_run:
            log("4. dry run: the same suites with CPU parameters, then the summary")
            cpu_spec = out / "cpu-variant.yaml"
            import yaml

            run_doc, timeout = cpu_variant(doc, quick=args.quick), 600
            # not validated apart: `benchrun run` refuses an invalid spec (exit 2, no run: a StepError)
            cpu_spec.write_text(yaml.safe_dump(run_doc, sort_keys=False), encoding="utf-8")
        else:
            if not device["available"]:
                log(f"unavailable: {device['reason']}")
                return 3
            log(f"4. benchrun run on {device['name']}")
            cpu_spec, run_doc, timeout = spec, doc, 400
        rc, run_id = run_spec(cpu_spec, home, env, log_path, timeout)
        nvml = nvml_seen(home, run_id, env, list(gpu_suites(doc)), log_path)
        summary = summarise(home / "runs" / run_id, run_doc, nvml, device)
        summary.update(started_utc=started, wall_s=round(time.monotonic() - t0, 1), dry_run=args.dry_run,
                       run_exit_code=rc, setup=setup, render=rendered, host=platform.node(),
                       wheels_install_s=float(os.environ["BENCHRUN_GPU_SETUP_S"]) if os.environ.get("BENCHRUN_GPU_SETUP_S") else None)
        summary["files"] = pack(home, run_id, out)
        if not args.dry_run:
            summary["nvml_fixture"] = record_nvml_fixture(out / "nvml_readings.json")
            if summary["nvml_fixture"] == "written":
                summary["files"].append("nvml_readings.json")
        from benchrun.fsio import atomic_write_json

        atomic_write_json(out / "summary.json", summary)
        for line in summary_lines(summary):
            log(line)
        log(f"  written: {out}/summary.json, check.log, " + ", ".join(summary["files"]))
        broken = [f for f in summary["failures"] if f["status"] != "unavailable" or not args.dry_run]
        if args.dry_run:
            if rc != 0 or broken:
                log(f"error: the dry run's CPU run ended with exit {rc} and {len(broken)} failed replicate(s)")
                return 1
            log("unavailable: no CUDA device (dry run: stopped before the GPU steps)")
            return 0
        return 1 if broken or rc != 0 else 0
    except StepError as exc:
        log(f"error: {exc}")
        return 1
    finally:
        log(f"GPU check took {time.monotonic() - t0:.0f} s")
        shutil.rmtree(home, ignore_errors=True) if os.environ.get("BENCHRUN_GPU_CHECK_KEEP") != "1" else None


if __name__ == "__main__":
    sys.exit(main())
