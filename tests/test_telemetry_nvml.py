"""The NVML probe when NVML answers only in part: a GPU it cannot open (lost, no permission), a
probe that cannot be built at all, and XID events it will not watch. There is no GPU where these
tests run: pynvml is a fake (``sys.modules['pynvml']``), shaped as nvidia-ml-py's calls are."""

from __future__ import annotations

import sys
import time
from types import SimpleNamespace

import pytest

from benchrun.telemetry import nvml
from benchrun.telemetry.sampler import Sampler
from benchrun.telemetry.samples import read_samples


class NVMLError(Exception):
    """As pynvml's: its text is NVML's error string."""


class FakeNvml:
    """pynvml on a node of ``n`` GPUs (utilization 10×index). ``lost``: NVML index -> the error
    ``nvmlDeviceGetHandleByIndex`` raises for it; ``no_events``: indices whose XID registration is
    refused; ``event_set``: False when no event set can be created. Counts init and shutdown."""

    NVML_CLOCK_SM = NVML_TEMPERATURE_GPU = NVML_MEMORY_ERROR_TYPE_CORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0
    NVML_VOLATILE_ECC = NVML_PCIE_UTIL_TX_BYTES = NVML_PCIE_UTIL_RX_BYTES = 0
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 0
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, n=4, lost=None, no_events=(), event_set=True, count_error=None):
        self.n, self.lost, self.no_events, self.event_set = n, dict(lost or {}), set(no_events), event_set
        self.count_error = count_error
        self.inits = self.shutdowns = 0
        self.registered: list[int] = []

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        if self.count_error:
            raise NVMLError(self.count_error)
        return self.n

    def nvmlDeviceGetHandleByIndex(self, i):
        if i in self.lost:
            raise NVMLError(self.lost[i])
        return i

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}{h}{h}-abcd".encode()

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H100"

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=10 * h, memory=0)

    def nvmlEventSetCreate(self):
        if not self.event_set:
            raise NVMLError("Not Supported")
        return object()

    def nvmlDeviceRegisterEvents(self, h, kind, events):
        if h in self.no_events:
            raise NVMLError("Not Supported")
        self.registered.append(h)

    def nvmlEventSetWait_v2(self, events, timeout_ms):
        raise NVMLError("Timeout")

    def __getattr__(self, name):  # every other reading: not supported on this device
        def unsupported(*a):
            raise NVMLError(f"{name}: Not Supported")
        return unsupported


def _fake(monkeypatch, **kw) -> FakeNvml:
    fake = FakeNvml(**kw)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def test_a_gpu_nvml_cannot_open_is_left_out_and_named(monkeypatch):
    """Found in review (2026-12-07): nvmlDeviceGetHandleByIndex was not guarded, so one lost GPU
    (GPU_IS_LOST) raised out of the probe: no GPU samples, and (through Sampler) no sampler at all."""
    fake = _fake(monkeypatch, lost={2: "GPU is lost"})
    probe = nvml.NvmlProbe("n1")
    try:
        assert probe.devices == [0, 1, 3] and probe.gpu_count == 3
        assert "index 2 (GPU is lost)" in probe.selection
        util = [(s.device_index, s.value) for s in probe.sample() if s.metric == "gpu_utilization_pct"]
        assert util == [(0, 0.0), (1, 10.0), (3, 30.0)]
    finally:
        probe.close()
    assert fake.inits == fake.shutdowns == 1


def test_ordinals_are_not_mapped_past_a_gpu_nvml_cannot_open(monkeypatch):
    """CUDA may leave an unopenable GPU out of its numbering, so CUDA_VISIBLE_DEVICES=3 may not be
    NVML index 3: every GPU NVML could open is sampled, saying why; a UUID still maps."""
    _fake(monkeypatch, lost={1: "Insufficient Permissions"})
    probe = nvml.NvmlProbe("n1", visible="3")
    assert probe.devices == [0, 2, 3] and "names ordinals" in probe.selection
    assert "index 1 (Insufficient Permissions)" in probe.selection
    probe.close()
    by_uuid = nvml.NvmlProbe("n1", visible="GPU-333")
    assert by_uuid.devices == [3] and "index 1 (Insufficient Permissions)" in by_uuid.selection
    by_uuid.close()


def test_a_probe_that_cannot_be_built_leaves_the_host_sampled_and_nvml_shut_down(monkeypatch, tmp_path):
    """Every GPU refused (NO_PERMISSION): the Sampler used to raise (start_telemetry then returned
    None: no host samples, no contention verdict, nvmlInit never shut down). Now the host alone is
    sampled, gpu_reason says why, and NVML is shut down."""
    fake = _fake(monkeypatch, lost={i: "Insufficient Permissions" for i in range(4)})
    sampler = Sampler(tmp_path / "t.parquet", 10.0, node_name="n1")
    assert sampler.gpu_count == 0 and sampler.gpu_reason.startswith("unavailable: the NVML probe could not be built")
    assert "Insufficient Permissions" in sampler.gpu_reason
    sampler.start()
    deadline = time.monotonic() + 20  # rates need two ticks: a loaded machine may take a while to give them
    while sampler.n_ticks < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    sampler.stop()
    metrics = set(read_samples(tmp_path / "t.parquet")["metric"].to_pylist())
    assert {"cpu_utilization_pct", "background_cpu_pct"} <= metrics and not any(m.startswith("gpu_") for m in metrics)
    assert fake.inits == fake.shutdowns  # unavailable_reason's own init, and the probe's


def test_nvml_failing_after_init_is_shut_down_and_counted_as_unavailable(monkeypatch):
    fake = _fake(monkeypatch, count_error="Unknown Error")
    assert nvml.unavailable_reason() == "unavailable: NVML cannot count the GPUs (Unknown Error)"
    with pytest.raises(NVMLError):
        nvml.NvmlProbe("n1")
    assert fake.inits == fake.shutdowns == 2


def test_xid_events_are_counted_only_for_gpus_whose_registration_succeeded(monkeypatch):
    """The module's rule is that what is not supported is absent, never zero: a GPU whose XID event
    registration failed read gpu_xid_events = 0 in every sample, as if it had been watched."""
    _fake(monkeypatch, no_events={1})
    probe = nvml.NvmlProbe("n1", visible="0,1")
    got = {(s.device_index, s.metric): s.value for s in probe.sample()}
    assert got[(0, "gpu_xid_events")] == 0.0 and (1, "gpu_xid_events") not in got
    assert probe.xid_reason is not None and "index 1 (Not Supported)" in probe.xid_reason
    probe.close()
    _fake(monkeypatch, event_set=False)
    unwatched = nvml.NvmlProbe("n1")
    assert not [s for s in unwatched.sample() if s.metric == "gpu_xid_events"]
    assert "event set not created" in unwatched.xid_reason
    unwatched.close()
    _fake(monkeypatch)
    watched = nvml.NvmlProbe("n1")
    assert watched.xid_reason is None and len([s for s in watched.sample() if s.metric == "gpu_xid_events"]) == 4
    watched.close()


def test_the_replicate_record_says_which_gpus_xid_events_were_not_watched(monkeypatch, tmp_path):
    from benchrun.plan import Invocation
    from benchrun.rundir import RunDir
    from benchrun.telemetry.hook import ReplicateTelemetry

    monkeypatch.delenv("BENCHRUN_PROMETHEUS_URL", raising=False)
    _fake(monkeypatch, no_events={2})
    run_id = "t-20261207000000-abcdef12"
    run_dir = RunDir(tmp_path, run_id).create().path
    tele = ReplicateTelemetry(Invocation(run_id, "micro", "s", 1, "bc-x", ("true",), {"CUDA_VISIBLE_DEVICES": "2"}, 60.0),
                              run_dir, 10.0)
    tele.sampler.start()
    record = tele.finish()
    assert record["gpu_devices"] == [2] and record["gpu_reason"] is None
    assert "index 2 (Not Supported)" in record["gpu_xid_reason"]
    table = read_samples(run_dir / record["samples"])
    assert "gpu_utilization_pct" in table["metric"].to_pylist() and "gpu_xid_events" not in table["metric"].to_pylist()
