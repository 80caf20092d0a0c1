"""GPU telemetry through NVML (``nvidia-ml-py``): reading raw values is separate from turning
them into samples, so the parsing is tested on recorded values where no GPU is present.

A raw reading of one GPU is a plain dict (see :func:`read_raw`); a value NVML does not support on
a device is absent from it, and so absent from the samples (never zero). XID events likewise: a GPU
whose event registration failed has no ``xid_events`` and so no ``gpu_xid_events`` samples.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from benchrun.telemetry.samples import Sample

log = logging.getLogger(__name__)

SOURCE = "nvml"
# Clock-event (throttle) reasons that slow the GPU down for power, heat or a hardware signal.
# Idle, application clocks, sync boost and display clocks are not throttling.
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
THROTTLE_MASK = SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL | HW_THERMAL | HW_POWER_BRAKE


def unavailable_reason() -> str | None:
    """None when NVML initialises and sees at least one GPU, else why not."""
    try:
        import pynvml
    except ImportError:
        return "unavailable: nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return f"unavailable: no CUDA device (NVML: {exc})"
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            return "unavailable: no CUDA device (NVML sees 0 GPUs)"
    except Exception as exc:
        return f"unavailable: NVML cannot count the GPUs ({exc})"
    finally:
        _try(pynvml.nvmlShutdown)
    return None


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported / NoPermission / FunctionNotFound: leave it out
        return None


def read_raw(pynvml: Any, handle: Any, xids: list[int] | None = None) -> dict[str, Any]:
    """One reading of one GPU as plain values (the shape the recorded test fixtures have).

    ``xids``: the XID events drained for this GPU since its last reading; None when its events are
    not watched (registration failed), which leaves ``xid_events`` out rather than reading 0."""
    raw: dict[str, Any] = {"ts": time.time()}
    util = _try(pynvml.nvmlDeviceGetUtilizationRates, handle)
    if util is not None:
        raw["utilization"] = {"gpu": util.gpu, "memory": util.memory}
    mem = _try(pynvml.nvmlDeviceGetMemoryInfo, handle)
    if mem is not None:
        raw["memory"] = {"used": mem.used, "total": mem.total}
    raw["sm_clock_mhz"] = _try(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)
    raw["power_mw"] = _try(pynvml.nvmlDeviceGetPowerUsage, handle)
    raw["temperature_c"] = _try(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
    reasons = _try(getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                   or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons, handle)
    raw["clock_event_reasons"] = reasons
    raw["ecc_corrected"] = _try(pynvml.nvmlDeviceGetTotalEccErrors, handle,
                                pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC)
    raw["ecc_uncorrected"] = _try(pynvml.nvmlDeviceGetTotalEccErrors, handle,
                                  pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
    raw["pcie_tx_kb_per_s"] = _try(pynvml.nvmlDeviceGetPcieThroughput, handle, pynvml.NVML_PCIE_UTIL_TX_BYTES)
    raw["pcie_rx_kb_per_s"] = _try(pynvml.nvmlDeviceGetPcieThroughput, handle, pynvml.NVML_PCIE_UTIL_RX_BYTES)
    raw["nvlink_tx_kib_total"], raw["nvlink_rx_kib_total"] = nvlink_kib(pynvml, handle)
    if xids is not None:
        raw["xid_events"] = list(xids)
    return {k: v for k, v in raw.items() if v is not None}


ALL_LINKS = 0xFFFFFFFF  # nvml.h: a scopeId of UINT_MAX sums an NVLink throughput field over every link
MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS (an H100/H200 SXM has 18)


def nvlink_kib(pynvml: Any, handle: Any) -> tuple[int | None, int | None]:
    """Cumulative NVLink data KiB (tx, rx) over every link: the fields asked with scopeId UINT_MAX (before,
    with none, which reads link 0 only: about 1/18 of an H200's traffic), else, for a driver that refuses
    that scope, each link's summed; None for a field no link reports (no NVLink)."""
    ids = (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
    fields = _try(pynvml.nvmlDeviceGetFieldValues, handle, [(f, ALL_LINKS) for f in ids])
    out: list[int | None] = [f.value.ullVal if f.nvmlReturn == 0 else None for f in fields] if fields else [None, None]
    for k, field_id in enumerate(ids):
        if out[k] is not None:
            continue
        links = _try(pynvml.nvmlDeviceGetFieldValues, handle, [(field_id, link) for link in range(MAX_LINKS)])
        got = [f.value.ullVal for f in links or () if f.nvmlReturn == 0]
        out[k] = sum(got) if got else None
    return out[0], out[1]


def parse(raw: dict[str, Any], prev: dict[str, Any] | None, *, index: int, uuid: str | None,
          node_name: str | None = None) -> list[Sample]:
    """Samples of one GPU reading; counters become rates against ``prev`` (the reading before)."""
    ts = float(raw["ts"])
    out: list[Sample] = []

    def add(metric: str, value: Any, unit: str, interval: float | None = None) -> None:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out.append(Sample(ts, SOURCE, "gpu", metric, float(value), unit, device_index=index, gpu_uuid=uuid,
                              interval_s=interval, node_name=node_name))

    util = raw.get("utilization") or {}
    add("gpu_utilization_pct", util.get("gpu"), "%")
    add("gpu_memory_utilization_pct", util.get("memory"), "%")
    mem = raw.get("memory") or {}
    add("gpu_memory_used_bytes", mem.get("used"), "bytes")
    add("gpu_sm_clock_mhz", raw.get("sm_clock_mhz"), "MHz")
    if raw.get("power_mw") is not None:
        add("gpu_power_w", raw["power_mw"] / 1000.0, "W")
    add("gpu_temperature_c", raw.get("temperature_c"), "C")
    reasons = raw.get("clock_event_reasons")
    if reasons is not None:
        add("gpu_clock_event_reasons", int(reasons), "bitmask")
        add("gpu_throttled", 1.0 if int(reasons) & THROTTLE_MASK else 0.0, "bool")
    add("gpu_ecc_corrected_total", raw.get("ecc_corrected"), "count")
    add("gpu_ecc_uncorrected_total", raw.get("ecc_uncorrected"), "count")
    for direction in ("tx", "rx"):
        kb = raw.get(f"pcie_{direction}_kb_per_s")
        if kb is not None:
            add(f"gpu_pcie_{direction}_bytes_per_s", kb * 1000.0, "B/s")  # NVML reports KB/s over 20 ms
    if "xid_events" in raw:  # absent: this GPU's XID events were not watched, so no count (never 0)
        xids = raw.get("xid_events") or []
        add("gpu_xid_events", len(xids), "count")
        for xid in xids:
            add("gpu_xid", xid, "xid")
    if prev is not None:
        dt = ts - float(prev["ts"])
        for direction in ("tx", "rx"):
            a, b = prev.get(f"nvlink_{direction}_kib_total"), raw.get(f"nvlink_{direction}_kib_total")
            if dt > 0 and a is not None and b is not None and b >= a:
                add(f"gpu_nvlink_{direction}_bytes_per_s", (b - a) * 1024.0 / dt, "B/s", interval=dt)
    return out


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def suite_devices(visible: str | None, uuids: list[str | None], names: list[str | None],
                  device_order: str | None = None, unopened: dict[int, str] | None = None) -> tuple[list[int] | None, str]:
    """The NVML indices of the GPUs a suite started with ``CUDA_VISIBLE_DEVICES=visible`` uses,
    and a note saying how they were chosen; None when that is not known (sample every GPU).

    Entries are CUDA ordinals or (prefixes of) GPU UUIDs; as in CUDA, the list ends at the first
    entry that names no device. An ordinal is an NVML index only when CUDA orders devices by PCI
    bus (``CUDA_DEVICE_ORDER=PCI_BUS_ID``, NVML's order) or every GPU is the same model (CUDA's
    default fastest-first order then falls back to the PCI order); otherwise, and for MIG
    instances, the suite's GPUs are not known. ``unopened`` (NVML index -> why) are GPUs NVML
    could not open (lost, no permission): CUDA may leave them out of its numbering too, so ordinals
    are not mapped while there are any (a UUID still is; one naming such a GPU names no device).
    """
    if visible is None:
        return None, "CUDA_VISIBLE_DEVICES unset: every GPU NVML sees is sampled (the suite's are not known)"
    pci_order = device_order == "PCI_BUS_ID" or len(set(names)) <= 1
    picked: list[int] = []
    for token in (t.strip() for t in visible.split(",")):
        if token.isdigit():
            if unopened:
                return None, (f"CUDA_VISIBLE_DEVICES={visible!r} names ordinals, and NVML could not open GPU "
                              f"index {', '.join(str(i) for i in sorted(unopened))}, which CUDA's numbering may "
                              "leave out: every GPU is sampled")
            if not pci_order:
                return None, (f"CUDA_VISIBLE_DEVICES={visible!r} names ordinals, and on mixed GPU models CUDA's order "
                              "is not NVML's (set CUDA_DEVICE_ORDER=PCI_BUS_ID): every GPU is sampled")
            index = int(token)
            if index >= len(uuids):
                break
        elif token.startswith("GPU-"):
            hits = [i for i, u in enumerate(uuids) if u and u.startswith(token)]
            if len(hits) != 1:
                break
            index = hits[0]
        elif token.startswith("MIG-"):
            return None, f"CUDA_VISIBLE_DEVICES={visible!r} names MIG instances: every GPU is sampled"
        else:
            break
        if index not in picked:
            picked.append(index)
    return picked, f"CUDA_VISIBLE_DEVICES={visible!r}: the suite's GPUs, NVML index {picked or 'none'}"


class NvmlProbe:
    """The suite's GPUs (all GPUs NVML sees when ``visible``, the suite's ``CUDA_VISIBLE_DEVICES``,
    is None or cannot be mapped); ``sample()`` reads each once. Call ``close()`` when done.

    ``devices`` are the NVML indices sampled, ``selection`` says how they were chosen (and names
    any GPU left out because NVML could not open it: ``GPU is lost``, ``Insufficient Permissions``);
    ``xid_reason`` names the GPUs whose XID events are not watched (None: every one's is).
    Raises when NVML fails past ``nvmlInit`` (shut down again first) or opens none of the suite's GPUs.
    """

    def __init__(self, node_name: str | None = None, visible: str | None = None,
                 device_order: str | None = None) -> None:
        import pynvml

        self._nvml = pynvml
        self.node_name = node_name
        self._events: Any = None
        pynvml.nvmlInit()
        try:
            self._open(visible, device_order)
        except BaseException:
            self.close()
            raise
        self._prev: dict[int, dict[str, Any]] = {}

    def _open(self, visible: str | None, device_order: str | None) -> None:
        pynvml = self._nvml
        count = pynvml.nvmlDeviceGetCount()
        every: dict[int, Any] = {}
        unopened: dict[int, str] = {}
        for i in range(count):
            try:
                every[i] = pynvml.nvmlDeviceGetHandleByIndex(i)
            except Exception as exc:  # NVMLError_GpuIsLost, NVMLError_NoPermission, ...
                unopened[i] = str(exc) or type(exc).__name__
        uuids = [_text(_try(pynvml.nvmlDeviceGetUUID, every[i])) if i in every else None for i in range(count)]
        names = [_text(_try(pynvml.nvmlDeviceGetName, every[i])) if i in every else None for i in range(count)]
        chosen, self.selection = suite_devices(visible, uuids, names, device_order, unopened)
        wanted = list(range(count)) if chosen is None else chosen
        self.devices = [i for i in wanted if i in every]
        if unopened:
            named = ", ".join(f"index {i} ({why})" for i, why in unopened.items())
            self.selection += f"; not sampled, NVML could not open GPU {named}"
            if wanted and not self.devices:
                raise RuntimeError(f"NVML could not open the GPUs to sample: {named}")
        self._handles = [every[i] for i in self.devices]
        self._uuids = [uuids[i] for i in self.devices]
        self._xid_watched: set[int] = set()
        self.xid_reason: str | None = None
        if not self._handles:
            return
        try:
            self._events = pynvml.nvmlEventSetCreate()
        except Exception as exc:
            self.xid_reason = f"XID events not recorded (no gpu_xid_events): NVML event set not created ({exc})"
            return
        refused: dict[int, str] = {}
        for i, h in zip(self.devices, self._handles):
            try:
                pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, self._events)
                self._xid_watched.add(i)
            except Exception as exc:  # NotSupported, NoPermission, ...
                refused[i] = str(exc) or type(exc).__name__
        if refused:
            self.xid_reason = ("XID events not recorded (no gpu_xid_events) for NVML index "
                               + ", ".join(f"{i} ({why})" for i, why in refused.items()) + ": registration failed")

    @property
    def gpu_count(self) -> int:
        return len(self._handles)

    def _drain_xids(self) -> dict[str, list[int]]:
        """XID events pending since the last sample, by GPU UUID (one event set serves all GPUs)."""
        by_uuid: dict[str, list[int]] = {}
        while self._events is not None:
            try:
                data = self._nvml.nvmlEventSetWait_v2(self._events, 0)
            except Exception:  # NVMLError_Timeout: nothing pending
                break
            uuid = _try(self._nvml.nvmlDeviceGetUUID, data.device)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            by_uuid.setdefault(str(uuid), []).append(int(data.eventData))
        return by_uuid

    def sample(self) -> list[Sample]:
        out: list[Sample] = []
        xids = self._drain_xids()
        for j, h in enumerate(self._handles):
            i = self.devices[j]  # the NVML index: the same GPU in every tool, whatever the suite sees
            watched = i in self._xid_watched
            raw = read_raw(self._nvml, h, xids.get(str(self._uuids[j]), []) if watched else None)
            out.extend(parse(raw, self._prev.get(i), index=i, uuid=self._uuids[j], node_name=self.node_name))
            self._prev[i] = raw
        return out

    def close(self) -> None:
        if self._events is not None:
            _try(self._nvml.nvmlEventSetFree, self._events)
            self._events = None
        _try(self._nvml.nvmlShutdown)
