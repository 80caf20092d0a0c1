"""Record the NVML test fixture from a real device: successive ``read_raw`` readings of every GPU,
with the device, driver and NVML version they came from.

    python benchmarks/gpu/nvml_fixture.py --out tests/fixtures/telemetry/nvml_readings_h200.json

The GPU check (check.sh) runs it after its benchmark run and returns ``nvml_readings.json``
in ``$OUT``. The shape is that of tests/fixtures/telemetry/nvml_readings.json (the hand-written
fixture the parsing tests assert against), plus a ``source`` object naming where it came from;
the readings are benchrun's own :func:`benchrun.telemetry.nvml.read_raw`, so what the fixture
holds is exactly what the sampler sees on that device (a value NVML does not support there is
absent, as in the sampler).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchrun.telemetry.nvml import read_raw  # noqa: E402


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # NotSupported / FunctionNotFound: say so in the fixture
        return f"unavailable: {type(exc).__name__}: {exc}"


def cuda_version(value: Any) -> str:
    """NVML's CUDA driver version integer (e.g. 13000) as '13.0'."""
    if isinstance(value, int):
        return f"{value // 1000}.{(value % 1000) // 10}"
    return str(value)


def record(pynvml: Any, readings: int = 2, interval_s: float = 1.0) -> dict[str, Any]:
    """``readings`` readings of every GPU NVML sees, ``interval_s`` apart, and their source."""
    if readings < 2:
        raise ValueError("readings must be at least 2 (the NVLink rates need a previous reading)")
    pynvml.nvmlInit()
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        if not handles:
            raise RuntimeError("NVML sees no GPU: nothing to record")
        gpus = [{"index": i, "uuid": _text(_call(pynvml.nvmlDeviceGetUUID, h)),
                 "name": _text(_call(pynvml.nvmlDeviceGetName, h)), "readings": []} for i, h in enumerate(handles)]
        source = {
            "recorded_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "devices": [g["name"] for g in gpus],
            "driver_version": _text(_call(pynvml.nvmlSystemGetDriverVersion)),
            "nvml_version": _text(_call(pynvml.nvmlSystemGetNVMLVersion)),
            "cuda_driver_version": cuda_version(_call(pynvml.nvmlSystemGetCudaDriverVersion)),
            "host": platform.node(),
            "recorder": "benchmarks/gpu/nvml_fixture.py (benchrun.telemetry.nvml.read_raw)",
        }
        for k in range(readings):
            if k:
                time.sleep(interval_s)
            for gpu, handle in zip(gpus, handles):
                gpu["readings"].append(read_raw(pynvml, handle, []))
    finally:
        _call(pynvml.nvmlShutdown)
    names = ", ".join(sorted(set(source["devices"])))
    note = (f"{readings} successive read_raw() readings, {interval_s} s apart, of {len(gpus)} GPU(s) ({names}), "
            f"recorded {source['recorded_utc']} with driver {source['driver_version']} (NVML "
            f"{source['nvml_version']}, CUDA {source['cuda_driver_version']}) by benchmarks/gpu/nvml_fixture.py; "
            "in the units NVML returns (power mW, memory bytes, PCIe KB/s, NVLink cumulative KiB, clock-event "
            "reasons bitmask). A value NVML does not support on the device is absent.")
    return {"_note": note, "source": source, "gpus": gpus}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Path(os.environ["OUT"]) / "nvml_readings.json" if os.environ.get("OUT") else None
    parser.add_argument("--out", type=Path, default=default, required=default is None,
                        help="where to write the fixture (default $OUT/nvml_readings.json)")
    parser.add_argument("--readings", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args(argv)
    try:
        import pynvml
    except ImportError:
        print("unavailable: nvidia-ml-py is not installed", file=sys.stderr)
        return 3
    try:
        doc = record(pynvml, args.readings, args.interval)
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded on a machine with no GPU
        print(f"unavailable: no CUDA device (NVML: {exc})", file=sys.stderr)
        return 3
    from benchrun.fsio import atomic_write_json

    atomic_write_json(args.out, doc)
    print(f"NVML fixture: {doc['_note']} -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
