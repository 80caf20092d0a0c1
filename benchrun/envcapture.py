"""Environment capture: what a run ran on (software, hardware, GPUs, background load), with stable keys.

``write_environment(run_dir, run_id)`` writes ``structured/<run_id>_environment.json``;
called again with ``when="after"`` at the end of the run, it adds the background load
sampled then. The document (schema ``benchrun.environment/v1``)::

    captured_utc, hostname,
    python{version, implementation, executable}, packages{name: version | null},
    os{system, distro, release, version, machine, libc}, kernel,
    cpu{model, vendor, logical_cores, physical_cores, usable_cpus, affinity_cpus, cgroup_cpu_quota, max_mhz},
    numa{nodes: [{node, cpus, memory_total_bytes}]},
    memory{total_bytes, available_bytes, swap_total_bytes},
    gpus[{index, name, uuid, driver_version, memory_total_mib, pci_bus_id, mig_mode}],
    gpu_unavailable_reason (null when GPUs were found),
    gpu_runtime{driver_version, cuda_driver_version, torch_version, torch_cuda, nccl_version,
        gpu_source ("nvidia-smi" | "nvml" | null)},
    background_load{before, after}: {sampled_utc, interval_s, load_average_1m/5m/15m,
        cpu_busy_share, other_processes_cpu_share, top_other_processes[{pid, name, cpu_pct}]},
    hardware_key, software_key, key_inputs{hardware, software},
    harness{version, source_sha256, source_files, git{commit, dirty}} (benchrun's own code: benchrun.harness)

``usable_cpus`` is what this process may run at once: its affinity mask (``affinity_cpus``) bounded by its
cgroup's CPU quota (``cgroup_cpu_quota``, null without one), the rule the suites size their threads by
(:func:`usable_cpus`, which ``benchrun.suites._common`` uses). GPUs are read with nvidia-smi, else (a
container without the binary) through NVML (nvidia-ml-py's ``pynvml``); ``mig_mode`` is ``Enabled``/
``Disabled``, null where the GPU has no MIG. On Kubernetes the run's document becomes a pod's
(``benchrun.launch.podenv``): the after-run sample, taken on the orchestrator's host, then goes under
``orchestrator.background_load`` beside its before-run sample, never beside the pod's.

Keys: ``hardware_key`` and ``software_key`` are sha256 (hex) of the canonical JSON of
``key_inputs.hardware`` / ``key_inputs.software``, stored beside them so anyone can see
what differs. They name a *class* of machine and software stack, not one machine:

* hardware: machine architecture, CPU model, logical and physical cores, NUMA node count,
  memory rounded to whole GiB (kernel reservations move the exact figure), and the sorted
  list of (GPU model, memory MiB). Hostname and GPU UUIDs are left out (they identify a
  node, recorded separately).
* software: OS distribution, kernel release, Python version, the versions of
  :data:`KEY_PACKAGES` except benchrun itself (the harness is not the system under test),
  GPU driver, CUDA (driver and torch build) and NCCL versions.

psutil samples the load. It runs on the orchestrator and in suite pods: it imports only the foundation.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata
import importlib.util
import json
import logging
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.harness import harness_identity
from benchrun.paths import validate_run_id
from benchrun.fsio import atomic_write_json

log = logging.getLogger(__name__)

SCHEMA = "benchrun.environment/v1"
KEY_PACKAGES = (
    "benchrun", "numpy", "scipy", "pandas", "pyarrow", "duckdb", "torch", "dagster", "dagster-pipes",
    "dagster-k8s", "pydantic", "kubernetes", "psutil", "nvidia-nccl-cu12", "nvidia-ml-py",
)
_NVSMI_FIELDS = ("index", "name", "uuid", "driver_version", "memory.total", "pci.bus_id")
_NVSMI_MIG = "mig.mode.current"  # queried after the others: a driver that lacks it is asked again without
CGROUP_ROOT = "/sys/fs/cgroup"  # where cgroup_cpu_quota() reads the CPU quota


def _utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def package_versions(names: tuple[str, ...] = KEY_PACKAGES) -> dict[str, str | None]:
    """Installed versions (importlib.metadata) of ``names``; null for those not installed."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _os_release() -> str | None:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError:
            continue
        m = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.M)
        if m:
            return m.group(1)
    return None


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if ":" in line:
                    k, v = line.split(":", 1)
                    info.setdefault(k.strip(), v.strip())
    except OSError:
        pass
    return info


def affinity_cpus() -> int:
    """CPUs in this process's affinity mask (all the host's where there is no mask)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cgroup_cpu_quota(root: str | None = None) -> int | None:
    """CPUs the cgroup quota allows (quota / period, rounded up); None without a quota. cgroup v2
    ``cpu.max`` ("max 100000" or "400000 100000"), else v1 ``cpu/cpu.cfs_quota_us`` (−1: none)."""
    root = root or CGROUP_ROOT
    try:
        with open(os.path.join(root, "cpu.max"), encoding="ascii") as fh:
            quota, period = fh.read().split()[:2]
        return None if quota == "max" else max(1, -(-int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    try:
        with open(os.path.join(root, "cpu", "cpu.cfs_quota_us"), encoding="ascii") as fh:
            q = int(fh.read().strip())
        with open(os.path.join(root, "cpu", "cpu.cfs_period_us"), encoding="ascii") as fh:
            period_us = int(fh.read().strip())
        return None if q <= 0 or period_us <= 0 else max(1, -(-q // period_us))
    except (OSError, ValueError):
        return None


def usable_cpus(cgroup_root: str | None = None) -> int:
    """CPUs this process may run on: its affinity mask, not the host's total, and no more than
    its cgroup's CPU quota allows at once (a pod limited to 4 CPUs on a 192-CPU node sees all
    192 in its mask, and threads beyond 4 are throttled, not run together). The one rule: the
    suites' ``benchrun.suites._common.usable_cpus`` is this one."""
    return _bounded(affinity_cpus(), cgroup_cpu_quota(cgroup_root))


def _bounded(cpus: int, quota: int | None) -> int:  # the mask bounded by the quota: usable_cpus' rule
    return max(1, min(cpus, quota)) if quota is not None else cpus


def cpu_facts() -> dict[str, Any]:
    """CPU model, vendor, logical/physical cores, the CPUs usable at once (affinity mask bounded
    by the cgroup quota), the mask and the quota apart, and the highest frequency."""
    import psutil

    info = _cpuinfo()
    mask, quota = affinity_cpus(), cgroup_cpu_quota()  # each read once
    try:
        freq = psutil.cpu_freq()
    except Exception:  # noqa: BLE001 - not every kernel exposes it
        freq = None
    return {
        "model": info.get("model name") or platform.processor() or platform.machine(),
        "vendor": info.get("vendor_id"),
        "logical_cores": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "usable_cpus": _bounded(mask, quota),
        "affinity_cpus": mask,
        "cgroup_cpu_quota": quota,
        "max_mhz": (freq.max or freq.current) if freq else None,
    }


def numa_layout(root: str | os.PathLike[str] = "/sys/devices/system/node") -> dict[str, Any]:
    """NUMA nodes from sysfs: each node's CPU list and memory; ``nodes: []`` when absent."""
    base = Path(root)
    nodes = []
    for node_dir in sorted(base.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        entry: dict[str, Any] = {"node": int(node_dir.name[4:]), "cpus": None, "memory_total_bytes": None}
        try:
            entry["cpus"] = (node_dir / "cpulist").read_text(encoding="utf-8").strip()
        except OSError:
            pass
        try:
            m = re.search(r"MemTotal:\s+(\d+)\s*kB", (node_dir / "meminfo").read_text(encoding="utf-8"))
            if m:
                entry["memory_total_bytes"] = int(m.group(1)) * 1024
        except OSError:
            pass
        nodes.append(entry)
    return {"nodes": nodes, "source": str(base) if nodes else None}


def parse_nvidia_smi_csv(text: str) -> list[dict[str, Any]]:
    """Rows of ``nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,pci.bus_id[,mig.mode.current]
    --format=csv,noheader,nounits`` as GPU dicts (``mig_mode`` only from a row that has the field;
    null where it reads ``[N/A]``, a GPU without MIG)."""
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) not in (len(_NVSMI_FIELDS), len(_NVSMI_FIELDS) + 1):
            raise ValueError(f"nvidia-smi row {line!r} has {len(parts)} fields, expected {len(_NVSMI_FIELDS)} "
                             f"(or {len(_NVSMI_FIELDS) + 1} with {_NVSMI_MIG})")
        index, name, uuid, driver, mem, bus = parts[:len(_NVSMI_FIELDS)]
        try:
            mem_mib: int | None = int(float(mem))
        except ValueError:
            mem_mib = None  # "[N/A]" on some MIG or vGPU setups
        gpu: dict[str, Any] = {"index": int(index), "name": name, "uuid": uuid, "driver_version": driver,
                               "memory_total_mib": mem_mib, "pci_bus_id": bus}
        if len(parts) > len(_NVSMI_FIELDS):
            mig = parts[-1]
            gpu["mig_mode"] = None if not mig or mig.startswith("[") else mig  # [N/A], [Not Supported]
        gpus.append(gpu)
    return gpus


def _torch_build() -> dict[str, Any]:
    """torch's version and CUDA build, read from torch/version.py without importing torch."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return {"torch_version": None, "torch_cuda": None}
    path = Path(list(spec.submodule_search_locations)[0]) / "version.py"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return {"torch_version": None, "torch_cuda": None}
    def grab(name: str) -> str | None:
        m = re.search(rf"^{name}\s*(?::[^=]*)?=\s*['\"]([^'\"]*)['\"]", text, re.M)
        return m.group(1) if m else None
    return {"torch_version": grab("__version__"), "torch_cuda": grab("cuda")}


def _cuda_version(v: Any) -> str | None:
    """NVML's CUDA driver version (12040) as nvidia-smi's banner writes it ("12.4")."""
    try:
        v = int(v)
    except (TypeError, ValueError):
        return None
    return f"{v // 1000}.{(v % 1000) // 10}" if v > 0 else None


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def nvml_gpu_facts() -> tuple[list[dict[str, Any]], str | None, dict[str, Any]]:
    """(gpus, reason they are unavailable or None, {driver_version, cuda_driver_version}) through
    NVML (nvidia-ml-py's ``pynvml``): what a container without the nvidia-smi binary can still
    read. A field NVML refuses (``NVMLError``: not supported, no permission) is null; the MIG
    mode is read where the call exists."""
    versions: dict[str, Any] = {"driver_version": None, "cuda_driver_version": None}
    try:
        import pynvml
    except ImportError:
        return [], "NVML not available (nvidia-ml-py is not installed)", versions
    except Exception as exc:  # noqa: BLE001 - a broken binding is a reason, not a failed capture
        return [], f"NVML not available ({type(exc).__name__}: {exc})", versions
    nvml_error = getattr(pynvml, "NVMLError", Exception)
    try:
        pynvml.nvmlInit()
    except nvml_error as exc:
        return [], f"NVML not available ({exc or type(exc).__name__})", versions
    except Exception as exc:  # noqa: BLE001
        return [], f"NVML not available ({type(exc).__name__}: {exc})", versions

    def field(fn_name: str, *args: Any) -> Any:
        fn = getattr(pynvml, fn_name, None)
        if fn is None:
            return None
        try:
            return _text(fn(*args))
        except nvml_error:
            return None

    try:
        versions["driver_version"] = field("nvmlSystemGetDriverVersion")
        versions["cuda_driver_version"] = _cuda_version(field("nvmlSystemGetCudaDriverVersion"))
        try:
            count = int(pynvml.nvmlDeviceGetCount())
        except nvml_error as exc:
            return [], f"NVML could not count the GPUs ({exc or type(exc).__name__})", versions
        gpus = []
        for i in range(count):
            gpu: dict[str, Any] = {"index": i, "name": None, "uuid": None, "driver_version": versions["driver_version"],
                                   "memory_total_mib": None, "pci_bus_id": None, "mig_mode": None}
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            except nvml_error as exc:
                gpu["nvml_error"] = str(exc) or type(exc).__name__
                gpus.append(gpu)
                continue
            gpu["name"] = field("nvmlDeviceGetName", handle)
            gpu["uuid"] = field("nvmlDeviceGetUUID", handle)
            memory = field("nvmlDeviceGetMemoryInfo", handle)
            total = getattr(memory, "total", None)
            gpu["memory_total_mib"] = int(total) // 2**20 if total is not None else None
            pci = field("nvmlDeviceGetPciInfo", handle)
            gpu["pci_bus_id"] = _text(getattr(pci, "busId", None)) if pci is not None else None
            mig = field("nvmlDeviceGetMigMode", handle)  # [current, pending]; NotSupported without MIG
            if isinstance(mig, (list, tuple)) and mig:
                enabled = getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1)
                gpu["mig_mode"] = "Enabled" if mig[0] == enabled else "Disabled"
            gpus.append(gpu)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
    if not gpus:
        return [], "NVML lists no GPUs", versions
    return gpus, None, versions


def _nvidia_smi_gpus(exe: str, timeout_s: float) -> tuple[list[dict[str, Any]], str | None]:
    """(gpus, reason) from nvidia-smi's GPU query, with the MIG mode where the driver knows the field."""
    proc = None
    for fields in ((*_NVSMI_FIELDS, _NVSMI_MIG), _NVSMI_FIELDS):
        argv = [exe, f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return [], f"nvidia-smi did not answer: {exc}"
        # a driver older than MIG (before 450) refuses the whole query for the unknown field
        if proc.returncode == 0 or _NVSMI_MIG not in (proc.stderr or "") + (proc.stdout or ""):
            break
    assert proc is not None
    if proc.returncode != 0:
        return [], f"nvidia-smi exited {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:300]}"
    try:
        gpus = parse_nvidia_smi_csv(proc.stdout)
    except ValueError as exc:
        return [], f"nvidia-smi output not understood: {exc}"
    return gpus, None if gpus else "nvidia-smi lists no GPUs"


def gpu_facts(timeout_s: float = 20.0) -> tuple[list[dict[str, Any]], str | None, dict[str, Any]]:
    """(gpus, reason they are unavailable or None, runtime versions) via nvidia-smi, else NVML,
    and torch. ``runtime["gpu_source"]`` says which of the two read the GPUs."""
    runtime: dict[str, Any] = {"driver_version": None, "cuda_driver_version": None, "nccl_version": None,
                               **_torch_build(), "gpu_source": None}
    exe = shutil.which("nvidia-smi")
    if exe is None:
        gpus, why, versions = nvml_gpu_facts()
        if why is not None:
            return [], f"nvidia-smi not found; {why}", runtime
        runtime.update(versions, gpu_source="nvml")
    else:
        gpus, why = _nvidia_smi_gpus(exe, timeout_s)
        if why is not None:
            return [], why, runtime
        runtime.update(driver_version=gpus[0]["driver_version"], gpu_source="nvidia-smi")
        try:
            banner = subprocess.run([exe], capture_output=True, text=True, timeout=timeout_s).stdout
            m = re.search(r"CUDA Version:\s*([0-9.]+)", banner)
            runtime["cuda_driver_version"] = m.group(1) if m else None
        except (OSError, subprocess.TimeoutExpired):
            pass
    if runtime["torch_version"] is not None:
        try:
            import torch

            if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
                runtime["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as exc:  # noqa: BLE001 - a broken CUDA runtime is recorded, not fatal
            runtime["torch_cuda_error"] = f"{type(exc).__name__}: {exc}"
    return gpus, None, runtime


def _own_pids() -> set[int]:
    import psutil

    me = psutil.Process()
    pids = {me.pid}
    try:
        pids.update(c.pid for c in me.children(recursive=True))
    except psutil.Error:
        pass
    return pids


def _process_cpu() -> dict[int, tuple[str, float]]:
    import psutil

    snap = {}
    for proc in psutil.process_iter(["name", "cpu_times"]):
        times = proc.info.get("cpu_times")
        if times is not None:
            snap[proc.pid] = (proc.info.get("name") or "?", float(times.user + times.system))
    return snap


# Background-load windows opened ahead of the sample (see ``open_background_window``):
# (name, run id) -> (monotonic start, per-process CPU seconds, machine CPU times, CPU of
# this process's reaped children).
_WINDOWS: dict[tuple[str, str], tuple[float, dict[int, tuple[str, float]], Any, float]] = {}
# A window older than this describes another moment than the one sampled: not used.
MAX_WINDOW_S = 300.0


def _cpu_total(times: Any) -> float:
    """All CPU seconds of a psutil ``cpu_times()`` tuple, counted once: on Linux guest and
    guest_nice are already inside user and nice (psutil's ``cpu_percent`` subtracts them too)."""
    return sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


def _reaped_children_cpu() -> float:
    import psutil

    t = psutil.Process().cpu_times()
    return t.children_user + t.children_system


def open_background_window(name: str, run_id: str) -> None:
    """Start run ``run_id``'s background-load window ``name`` now, so that the sample taken
    later (``sample_background_load(window=(name, run_id))``) covers the time in between
    instead of sleeping for its interval: ``before`` opens when ``benchrun run`` gets its
    turn (the sample is taken at admission, after start-up), ``after`` when a layer's last
    suite ends (the sample is taken when the evidence is recorded). Our own processes are
    left out of the sample, so the work we do inside the window is not background load."""
    import psutil

    _WINDOWS[(name, run_id)] = (time.monotonic(), _process_cpu(), psutil.cpu_times(), _reaped_children_cpu())


def sample_background_load(interval_s: float = 0.5, top: int = 5, *,
                           window: tuple[str, str] | None = None) -> dict[str, Any]:
    """Load average now, and over at least ``interval_s`` the CPU share used by processes other than ours.

    The interval starts now and is slept through, or started earlier with ``open_background_window(*window)``
    (at most ``MAX_WINDOW_S`` ago), in which case only what is missing of ``interval_s`` is slept. Shares are
    fractions of the whole machine's CPU capacity (all logical cores); ``cpu_busy_share`` leaves out our own
    processes' CPU (children reaped meanwhile included); ``top_other_processes`` gives the busiest others
    in percent of one core."""
    import psutil

    opened = _WINDOWS.pop(window, None) if window else None
    if opened is not None and time.monotonic() - opened[0] > MAX_WINDOW_S:
        opened = None
    if opened is None:
        t0, before, before_sys, reaped0 = time.monotonic(), _process_cpu(), psutil.cpu_times(), _reaped_children_cpu()
    else:
        t0, before, before_sys, reaped0 = opened
    remaining = interval_s - (time.monotonic() - t0)
    if remaining > 0:
        time.sleep(remaining)
    own = _own_pids()
    after = _process_cpu()
    after_sys = psutil.cpu_times()
    elapsed = time.monotonic() - t0
    total = _cpu_total(after_sys) - _cpu_total(before_sys)
    idle = (after_sys.idle - before_sys.idle) + (getattr(after_sys, "iowait", 0.0) - getattr(before_sys, "iowait", 0.0))
    deltas = []
    own_cpu = max(0.0, _reaped_children_cpu() - reaped0)
    for pid, (name, cpu) in after.items():
        d = cpu - before[pid][1] if pid in before else (cpu if pid in own else 0.0)
        if pid in own:
            own_cpu += max(0.0, d)
        elif pid in before and d > 0:
            deltas.append((d, pid, name))
    others = sum(d for d, _, _ in deltas)
    busy = max(0.0, min(1.0, (total - idle - own_cpu) / total)) if total > 0 else None
    deltas.sort(reverse=True)
    load1, load5, load15 = os.getloadavg()
    return {
        "sampled_utc": _utc(),
        "interval_s": round(elapsed, 3),
        "load_average_1m": load1,
        "load_average_5m": load5,
        "load_average_15m": load15,
        "cpu_busy_share": busy,
        # part of the busy time; read process by process, their sum overshot it under load (0.70 vs 0.65)
        "other_processes_cpu_share": min(busy, max(0.0, others / total)) if busy is not None else None,
        "top_other_processes": [{"pid": pid, "name": name, "cpu_pct": round(100.0 * d / elapsed, 1)}
                                for d, pid, name in deltas[:top]],
    }


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


def key_inputs(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The attributes hashed into hardware_key and software_key (see the module docstring)."""
    # a field NVML refused is None beside another GPU's value: sorted with None first, not compared to a str
    gpus = sorted(([g.get("name"), g.get("memory_total_mib")] for g in doc.get("gpus", [])),
                  key=lambda p: (p[0] is not None, p[0] or "", p[1] is not None, p[1] or 0))
    total = (doc.get("memory") or {}).get("total_bytes")
    hardware = {
        "machine": doc["os"]["machine"],
        "cpu_model": doc["cpu"]["model"],
        "logical_cores": doc["cpu"]["logical_cores"],
        "physical_cores": doc["cpu"]["physical_cores"],
        "numa_nodes": len(doc["numa"]["nodes"]),
        "memory_gib": round(total / 2**30) if total else None,
        "gpus": gpus,
    }
    rt = doc.get("gpu_runtime") or {}
    software = {
        "os": doc["os"]["distro"] or doc["os"]["system"],
        "kernel": doc["kernel"],
        "python": doc["python"]["version"],
        "packages": {k: v for k, v in sorted(doc["packages"].items()) if k != "benchrun"},
        "gpu_driver": rt.get("driver_version"),
        "cuda_driver": rt.get("cuda_driver_version"),
        "torch_cuda": rt.get("torch_cuda"),
        "nccl": rt.get("nccl_version"),
    }
    return {"hardware": hardware, "software": software}


def capture_environment(*, load_interval_s: float = 0.5, run_id: str | None = None) -> dict[str, Any]:
    """Everything in the module docstring, with ``background_load.before`` sampled now (over
    run ``run_id``'s ``before`` window when one was opened)."""
    import psutil

    vm = psutil.virtual_memory()
    gpus, reason, runtime = gpu_facts()
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "captured_utc": _utc(),
        "hostname": socket.gethostname(),
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "packages": package_versions(),
        "os": {"system": platform.system(), "distro": _os_release(), "release": platform.release(),
               "version": platform.version(), "machine": platform.machine(),
               "libc": "-".join(x for x in platform.libc_ver() if x) or None},
        "kernel": platform.release(),
        "cpu": cpu_facts(),
        "numa": numa_layout(),
        "memory": {"total_bytes": vm.total, "available_bytes": vm.available,
                   "swap_total_bytes": psutil.swap_memory().total},
        "gpus": gpus,
        "gpu_unavailable_reason": reason,
        "gpu_runtime": runtime,
        "background_load": {"before": sample_background_load(
            load_interval_s, window=("before", run_id) if run_id else None), "after": None},
        "harness": harness_identity(),
    }
    inputs = key_inputs(doc)
    doc["key_inputs"] = inputs
    doc["hardware_key"] = _digest(inputs["hardware"])
    doc["software_key"] = _digest(inputs["software"])
    return doc


def environment_path(run_dir: str | os.PathLike[str], run_id: str) -> Path:
    """``<run_dir>/structured/<run_id>_environment.json``."""
    return Path(run_dir) / "structured" / f"{validate_run_id(run_id)}_environment.json"


def write_environment(run_dir: str | os.PathLike[str], run_id: str, *, when: str = "before",
                      load_interval_s: float = 0.5) -> Path:
    """Write the environment document (``when="before"``), or add the after-run load sample to it.

    ``when="after"`` reads the existing file and sets ``background_load.after``; if the
    file is missing it captures everything first. The sample is taken here, so where the
    document is a pod's (``captured_in: "pod"``, promoted by ``benchrun.launch.podenv``) it
    goes to ``orchestrator.background_load.after`` instead: it describes this host, not the
    node the suites ran on. Written to a temporary name, then renamed.
    """
    if when not in ("before", "after"):
        raise ValueError(f"when must be 'before' or 'after', not {when!r}")
    path = environment_path(run_dir, run_id)
    if when == "before" or not path.exists():
        doc = capture_environment(load_interval_s=load_interval_s, run_id=run_id)
        doc["run_id"] = run_id
    else:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise BenchrunError(f"{path}: cannot read the environment document to add the after-run load ({exc})") from None
    if when == "after":
        sample = sample_background_load(load_interval_s, window=("after", run_id))
        if doc.get("captured_in") == "pod":
            orchestrator = doc.get("orchestrator") if isinstance(doc.get("orchestrator"), dict) else {}
            load = orchestrator.get("background_load") if isinstance(orchestrator.get("background_load"), dict) else {}
            orchestrator["background_load"] = {"before": load.get("before"), "after": sample}
            doc["orchestrator"] = orchestrator
        else:
            doc["background_load"]["after"] = sample
    log.info("environment %s: hardware_key %s software_key %s", path, doc["hardware_key"][:12], doc["software_key"][:12])
    return atomic_write_json(path, doc)
