"""The telemetry sampler: NVML parsing on recorded readings, host probes, the parquet file,
summaries, contention, and the hook the local launcher runs around every replicate."""

import json
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from benchrun.launch.local import LocalLauncher
from benchrun.plan import Invocation, base_env
from benchrun.rundir import RunDir
from benchrun.suites.result import read_result
from benchrun.telemetry import nvml
from benchrun.telemetry.host import HostProbe
from benchrun.telemetry.hook import RATE_ENV, attach_to_result, sample_rate_hz
from benchrun.telemetry.sampler import Sampler
from benchrun.telemetry.samples import Sample, parse_telemetry_name, read_samples, samples_table
from benchrun.telemetry.summary import contention, summarise

RUN_ID = "t-20260101000000-abcdef12"
FIXTURES = Path(__file__).parent / "fixtures" / "telemetry"


def _readings():
    return json.loads((FIXTURES / "nvml_readings.json").read_text())["gpus"]


def _by_metric(samples):
    return {s.metric: s for s in samples}


def test_nvml_parse_converts_units_and_rates_from_recorded_readings():
    g0 = _readings()[0]
    first = nvml.parse(g0["readings"][0], None, index=0, uuid=g0["uuid"], node_name="n1")
    second = _by_metric(nvml.parse(g0["readings"][1], g0["readings"][0], index=0, uuid=g0["uuid"], node_name="n1"))
    assert "gpu_nvlink_tx_bytes_per_s" not in _by_metric(first)  # a counter needs a previous reading
    assert second["gpu_utilization_pct"].value == 95.0
    assert second["gpu_memory_utilization_pct"].value == 58.0
    assert second["gpu_power_w"].value == pytest.approx(640.010)
    assert second["gpu_memory_used_bytes"].value == 68853694464.0
    assert second["gpu_sm_clock_mhz"].value == 1980.0
    assert second["gpu_temperature_c"].value == 72.0
    assert second["gpu_ecc_corrected_total"].value == 2.0
    assert second["gpu_pcie_rx_bytes_per_s"].value == 340000 * 1000.0
    # 500000 KiB in 1 s over NVLink, and idle (0x1) is not throttling
    assert second["gpu_nvlink_tx_bytes_per_s"].value == pytest.approx(500000 * 1024.0)
    assert second["gpu_nvlink_rx_bytes_per_s"].value == pytest.approx(250000 * 1024.0)
    assert second["gpu_throttled"].value == 0.0
    assert all(s.gpu_uuid == g0["uuid"] and s.device_index == 0 and s.scope == "gpu" for s in second.values())


def test_nvml_parse_flags_power_cap_and_xid_and_leaves_unsupported_values_out():
    g1 = _readings()[1]
    got = _by_metric(nvml.parse(g1["readings"][1], g1["readings"][0], index=1, uuid=g1["uuid"]))
    assert got["gpu_throttled"].value == 1.0
    assert got["gpu_clock_event_reasons"].value == 4.0
    assert got["gpu_xid_events"].value == 1.0 and got["gpu_xid"].value == 79.0
    assert "gpu_pcie_tx_bytes_per_s" not in got and "gpu_nvlink_tx_bytes_per_s" not in got


def test_nvml_on_a_device():
    reason = nvml.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    probe = nvml.NvmlProbe("here")
    try:
        probe.sample()
        got = probe.sample()
    finally:
        probe.close()
    util = [s for s in got if s.metric == "gpu_utilization_pct"]
    assert len(util) == probe.gpu_count and all(0 <= s.value <= 100 for s in util)


def test_host_probe_rates_need_two_samples_and_stay_in_range():
    probe = HostProbe("n1")
    first = probe.sample()
    assert "cpu_utilization_pct" not in {s.metric for s in first}
    assert _by_metric(first)["memory_used_bytes"].value > 0
    # per-core times tick in jiffies (10 ms): give every core's counters time to move
    import time

    end = time.monotonic() + 0.2
    while time.monotonic() < end:
        sum(i * i for i in range(10_000))
    second = probe.sample()
    cores = [s for s in second if s.metric == "cpu_core_utilization_pct"]
    import psutil

    assert sorted(s.device_index for s in cores) == list(range(psutil.cpu_count()))
    for s in second:
        if s.unit == "%":
            assert 0.0 <= s.value <= 100.0, s
    assert _by_metric(second)["run_queue_length"].value >= 1  # this process is running


def test_sampler_writes_samples_with_window_and_counts_the_suite_apart(tmp_path):
    import subprocess

    busy = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1.5: pass"])
    path = tmp_path / "raw" / f"{RUN_ID}_s_r1_telemetry.parquet"
    sampler = Sampler(path, 10.0, gpus=False, metadata={"suite": "s"})
    sampler.start()
    sampler.watch(busy.pid)
    busy.wait()
    sampler.stop()
    table = read_samples(path)
    meta = table.schema.metadata
    assert meta[b"suite"] == b"s" and float(meta[b"window_end"]) >= float(meta[b"window_start"])
    assert sampler.n_ticks >= 2 and sampler.error is None
    suite = table.filter(pa.compute.equal(table["metric"], "suite_cpu_pct"))["value"].to_pylist()
    # the busy loop used CPU-seconds that were counted as the suite's, never as background
    assert suite and max(suite) > 0
    assert not list(tmp_path.glob("raw/.*tmp"))


def test_sampler_rejects_rates_outside_the_range(tmp_path):
    with pytest.raises(ValueError, match="outside"):
        Sampler(tmp_path / "x.parquet", 20.0, gpus=False)


RATES = ("cpu_utilization_pct", "background_cpu_pct", "suite_cpu_pct")  # recorded with interval_s, as host.py does


def _table(rows, interval=1.0):
    return samples_table(Sample(ts, "psutil" if scope != "gpu" else "nvml", scope, metric, value, "%",
                                device_index=idx, interval_s=interval if metric in RATES else None)
                         for ts, scope, metric, value, idx in rows)


def test_summaries_mean_p95_peak_throttle_and_contention():
    rows = []
    for t, (cpu, bg, gpu, thr) in enumerate([(10, 2, 90, 0), (20, 30, 80, 1), (30, 40, 70, 1), (40, 4, 60, 0)]):
        rows += [(100.0 + t, "node", "cpu_utilization_pct", cpu, None), (100.0 + t, "node", "background_cpu_pct", bg, None),
                 (100.0 + t, "gpu", "gpu_utilization_pct", gpu, 0), (100.0 + t, "gpu", "gpu_throttled", thr, 0),
                 (100.0 + t, "node", "memory_used_bytes", 1000 + t, None)]
    got = {r["name"]: r for r in summarise(_table(rows))}
    assert got["cpu_utilization_pct_mean"]["value"] == 25.0
    assert got["cpu_utilization_pct_p95"]["value"] == 40.0  # at or below 40 for 95 % of the time
    # a gauge's sample covers the time since its GPU's previous one: the first (at t=100, before
    # the suite began) covers none
    assert got["gpu_utilization_pct_mean"]["value"] == 70.0
    assert got["background_cpu_pct_mean"]["value"] == 19.0
    assert got["memory_used_bytes_peak"]["value"] == 1003.0
    assert got["gpu_throttled_s"]["value"] == 2.0  # two throttled samples, one second each
    assert all(r["case"] == "telemetry" and r["direction"] in ("higher", "lower") for r in got.values())
    contended, why = contention(list(got.values()), 10.0)
    assert contended and "19.0 %" in why
    assert contention(list(got.values()), 25.0) == (False, None)


def test_summaries_weigh_each_sample_by_the_time_it_describes():
    # the sampler's closing tick (stop(), just after the suite exits) covers tens of ms: it weighed
    # like a full period, and 5 %, 5 %, 60 % read as 23.3 % mean background CPU, i.e. contended
    rows = [(101.0, "node", "background_cpu_pct", 5.0, None, 1.0), (102.0, "node", "background_cpu_pct", 5.0, None, 1.0),
            (102.05, "node", "background_cpu_pct", 60.0, None, 0.05),
            (101.0, "node", "cpu_utilization_pct", 50.0, None, 1.0), (102.0, "node", "cpu_utilization_pct", 50.0, None, 1.0),
            (102.05, "node", "cpu_utilization_pct", 100.0, None, 0.05),
            (101.0, "process", "suite_cpu_pct", 40.0, None, 1.0), (102.05, "process", "suite_cpu_pct", 0.0, None, 1.05)]
    for ts, gpu_util in ((100.0, 0.0), (101.0, 90.0), (102.0, 90.0), (102.05, 10.0)):  # NVML gauges, two GPUs
        rows += [(ts, "gpu", "gpu_utilization_pct", gpu_util, 0, None), (ts, "gpu", "gpu_utilization_pct", 30.0, 1, None)]
    table = samples_table(Sample(ts, "nvml" if scope == "gpu" else "psutil", scope, metric, value, "%",
                                 device_index=idx, interval_s=dt) for ts, scope, metric, value, idx, dt in rows)
    got = {r["name"]: r["value"] for r in summarise(table)}
    assert got["background_cpu_pct_mean"] == pytest.approx((5 + 5 + 60 * 0.05) / 2.05)  # 6.3, not 23.3
    assert got["background_cpu_pct_p95"] == 5.0  # 60 % for 50 ms of 2.05 s is not the 95th percentile of the time
    assert got["cpu_utilization_pct_mean"] == pytest.approx((50 + 50 + 100 * 0.05) / 2.05)
    assert got["suite_cpu_pct_mean"] == pytest.approx(40 / 2.05)
    assert got["gpu_utilization_pct_mean"] == pytest.approx((90 + 90 + 10 * 0.05 + 30 * 2.05) / 4.1)
    assert contention(list(summarise(table)), 10.0) == (False, None)
    # a single sample describes no time of its own: its value, not nothing
    one = {r["name"]: r["value"] for r in summarise(_table([(1.0, "gpu", "gpu_utilization_pct", 55.0, 0)]))}
    assert one == {"gpu_utilization_pct_mean": 55.0, "gpu_utilization_pct_p95": 55.0}


def test_summaries_of_a_cpu_only_replicate_have_no_gpu_numbers():
    got = {r["name"] for r in summarise(_table([(1.0, "node", "cpu_utilization_pct", 50.0, None)]))}
    assert got == {"cpu_utilization_pct_mean", "cpu_utilization_pct_p95"}


def test_rate_from_the_environment():
    assert sample_rate_hz({}) == 1.0
    assert sample_rate_hz({RATE_ENV: "10"}) == 10.0
    assert sample_rate_hz({RATE_ENV: "0"}) is None
    assert sample_rate_hz({RATE_ENV: "50"}) == 10.0


def test_file_names_parse():
    assert parse_telemetry_name(f"{RUN_ID}_gemm_r3_telemetry.parquet") == (RUN_ID, "gemm", 3, "telemetry")
    assert parse_telemetry_name(f"{RUN_ID}_gemm_r3_prometheus.parquet")[3] == "prometheus"
    assert parse_telemetry_name(f"{RUN_ID}_gemm_r3_requests.parquet") is None


def test_attach_is_idempotent_and_skips_failed_documents(tmp_path):
    doc = {"schema": "benchrun.suite_result/v1", "status": "ok", "suite": "s", "replicate": 1,
           "metrics": [{"name": "x", "value": 1.0, "unit": "u", "direction": "higher", "case": ""}]}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    record = {"samples": "raw/a.parquet", "contended": False,
              "summary": [{"name": "cpu_utilization_pct_mean", "value": 5.0, "unit": "%", "direction": "higher",
                           "case": "telemetry", "source": "telemetry"}]}
    assert attach_to_result(path, record) and attach_to_result(path, record)
    got = read_result(path)
    assert [m["name"] for m in got["metrics"]] == ["x", "cpu_utilization_pct_mean"]
    assert got["samples"]["telemetry"] == "raw/a.parquet" and got["telemetry"]["contended"] is False
    path.write_text(json.dumps({**doc, "status": "failed"}))
    assert not attach_to_result(path, record)


OK_SUITE = (
    "from benchrun.suites._runtime import main\n"
    "def run(ctx):\n"
    "    sum(i for i in range(300000))\n"
    "    ctx.add_metric('answer', 42.0, 'units', 'higher', case='c1')\n"
    "main(run)\n"
)


def test_local_launcher_samples_beside_the_replicate(tmp_path, monkeypatch):
    monkeypatch.delenv("BENCHRUN_PROMETHEUS_URL", raising=False)
    run_dir = RunDir(tmp_path, RUN_ID).create().path
    env = {**base_env(), "BENCHRUN_RUN_ID": RUN_ID, "BENCHRUN_RUN_DIR": str(run_dir), "BENCHRUN_SUITE": "s",
           "BENCHRUN_REPLICATE": "1", RATE_ENV: "10"}
    inv = Invocation(RUN_ID, "micro", "s", 1, "bc-x", (sys.executable, "-c", OK_SUITE), env, 60.0)
    res = LocalLauncher().launch(inv, run_dir)
    assert res.status == "ok", res.reason
    doc = read_result(run_dir / res.result)
    tele = doc["telemetry"]
    assert tele["samples"] == f"raw/{RUN_ID}_s_r1_telemetry.parquet" and tele["rate_hz"] == 10.0
    assert tele["window_start"] <= res.t_spawned <= tele["window_end"] <= res.t_finished
    names = {m["name"] for m in doc["metrics"] if m["case"] == "telemetry"}
    assert {"cpu_utilization_pct_mean", "background_cpu_pct_mean", "memory_used_bytes_peak"} <= names
    assert any(m["name"] == "cpu_utilization_pct_mean" for m in res.metrics)
    table = read_samples(run_dir / tele["samples"])
    assert set(table["metric"].to_pylist()) >= {"cpu_core_utilization_pct", "cpu_utilization_pct", "memory_used_bytes"}


def test_summaries_are_taken_over_the_suites_measured_window(tmp_path):
    """Found in review: the summaries averaged the whole process, start-up included: 30 s of imports and
    CUDA set-up at 0 % beside 20 s of timed work at 95 % read below 50 %, a "starved" GPU. A suite's
    ``ctx.measuring()`` spans are now the window; without them the whole process, and the record says
    which; a window fewer than two samples describe gets no summaries (review 2026-12-07: it silently
    got the whole process's)."""
    import json as _json

    from benchrun.telemetry.hook import measured_samples

    rows = [(100.0 + t, "gpu", "gpu_utilization_pct", 0.0 if t < 30 else 95.0, 0) for t in range(50)]
    table = _table(rows)
    result = tmp_path / "r.json"
    result.write_text(_json.dumps({"status": "ok"}))
    whole, used = measured_samples(table, result)
    assert used["from"].startswith("the whole process") and whole.num_rows == 50
    assert {r["name"]: r["value"] for r in summarise(whole)}["gpu_utilization_pct_mean"] < 60
    result.write_text(_json.dumps({"status": "ok", "measured_window": {"start_unix": 130.0, "end_unix": 149.0}}))
    inside, used = measured_samples(table, result)
    assert used == {"from": "the suite's measured window", "start_unix": 130.0, "end_unix": 149.0}
    assert {r["name"]: r["value"] for r in summarise(inside)}["gpu_utilization_pct_mean"] == 95.0
    result.write_text(_json.dumps({"status": "ok", "measured_window": {"start_unix": 130.0, "end_unix": 130.5}}))
    short, used = measured_samples(table, result)
    assert short.num_rows == 0 and used["from"] == "none" and "shorter than 2 sampling periods" in used["reason"]


def test_a_suite_that_measures_records_its_window_and_the_launcher_summarises_it(tmp_path, monkeypatch):
    monkeypatch.delenv("BENCHRUN_PROMETHEUS_URL", raising=False)
    run_dir = RunDir(tmp_path, RUN_ID).create().path
    env = {**base_env(), "BENCHRUN_RUN_ID": RUN_ID, "BENCHRUN_RUN_DIR": str(run_dir), "BENCHRUN_SUITE": "s",
           "BENCHRUN_REPLICATE": "1", RATE_ENV: "20"}
    code = ("import time\nfrom benchrun.suites._runtime import main\n"
            "def run(ctx):\n    time.sleep(0.6)\n    with ctx.measuring():\n        t = time.time()\n"
            "        while time.time() - t < 0.6: pass\n"
            "    ctx.add_metric('answer', 42.0, 'units', 'higher', case='c1')\nmain(run)\n")
    inv = Invocation(RUN_ID, "micro", "s", 1, "bc-x", (sys.executable, "-c", code), env, 60.0)
    res = LocalLauncher().launch(inv, run_dir)
    assert res.status == "ok", res.reason
    doc = read_result(run_dir / res.result)
    window = doc["measured_window"]
    assert 0.55 <= window["end_unix"] - window["start_unix"] < 2.0
    assert doc["telemetry"]["summary_window"]["from"] == "the suite's measured window"
    suite_cpu = next(m["value"] for m in doc["metrics"] if m["name"] == "suite_cpu_pct_mean")
    table = read_samples(run_dir / doc["telemetry"]["samples"])
    whole = {r["name"]: r["value"] for r in summarise(table)}
    assert suite_cpu > 1.5 * whole["suite_cpu_pct_mean"]  # busy inside the window; the sleep before it is left out
    # the window itself is in the samples, so telemetry_slice_fact says these summaries are the window's
    # (measurement_fact keeps no basis: the low_gpu_utilization playbook read every summary as windowed)
    [mark] = [r for r in table.to_pylist() if r["metric"] == "measured_window_s"]
    length = window["end_unix"] - window["start_unix"]
    assert (mark["source"], mark["scope"], mark["unit"]) == ("suite", "process", "s")
    assert mark["value"] == pytest.approx(length) and mark["interval_s"] == pytest.approx(length)
    assert mark["ts"].timestamp() == pytest.approx(window["end_unix"], abs=1e-5)
    assert float(table.schema.metadata[b"rate_hz"]) == doc["telemetry"]["rate_hz"]  # the sampler's metadata kept


def test_sampling_off_writes_nothing(tmp_path):
    run_dir = RunDir(tmp_path, RUN_ID).create().path
    env = {**base_env(), "BENCHRUN_RUN_ID": RUN_ID, "BENCHRUN_RUN_DIR": str(run_dir), "BENCHRUN_SUITE": "s",
           "BENCHRUN_REPLICATE": "1", RATE_ENV: "0"}
    res = LocalLauncher().launch(Invocation(RUN_ID, "micro", "s", 1, "bc-x", (sys.executable, "-c", OK_SUITE), env, 60.0),
                                 run_dir)
    assert res.status == "ok" and "telemetry" not in read_result(run_dir / res.result)
    assert not list(run_dir.glob("raw/*_telemetry.parquet"))


def test_curated_slices_carry_suite_replicate_device_keys_and_lineage(tmp_path, monkeypatch):
    from benchrun.warehouse.curate import curate_run
    from helpers import run_rows

    monkeypatch.delenv("BENCHRUN_PROMETHEUS_URL", raising=False)
    rd = RunDir(tmp_path, RUN_ID).create()
    rd.update_status(run_id=RUN_ID)
    env = {**base_env(), "BENCHRUN_RUN_ID": RUN_ID, "BENCHRUN_RUN_DIR": str(rd.path), "BENCHRUN_SUITE": "s",
           "BENCHRUN_REPLICATE": "2", RATE_ENV: "10"}
    res = LocalLauncher().launch(Invocation(RUN_ID, "micro", "s", 2, "bc-x", (sys.executable, "-c", OK_SUITE), env, 60.0),
                                 rd.path)
    assert res.status == "ok"
    n = curate_run(rd.path, tmp_path, tables=["telemetry_slice_fact", "measurement_fact"])
    raw = read_samples(rd.path / f"raw/{RUN_ID}_s_r2_telemetry.parquet")
    assert n["telemetry_slice_fact"] == raw.num_rows  # no environment capture in this run: samples only
    t = run_rows(tmp_path, "telemetry_slice_fact", RUN_ID)
    assert {(r["suite"], r["replicate"], r["run_id"]) for r in t} == {("s", 2, RUN_ID)}
    assert all(r["raw_path"] == f"raw/{RUN_ID}_s_r2_telemetry.parquet" and r["benchmark_case_id"] == "bc-x" for r in t)
    cores = {r["device_index"] for r in t if r["metric"] == "cpu_core_utilization_pct"}
    import psutil

    assert cores == set(range(psutil.cpu_count()))
    rate = next(r for r in t if r["metric"] == "cpu_utilization_pct")
    assert rate["window_start_utc"] < rate["window_end_utc"]  # a rate covers the interval since the last sample
    m = run_rows(tmp_path, "measurement_fact", RUN_ID)
    assert {"answer", "cpu_utilization_pct_mean", "background_cpu_pct_p95"} <= {r["metric"] for r in m}


def _doc_with(rd, suite, rep, telemetry, status="ok"):
    doc = {"schema": "benchrun.suite_result/v1", "status": status, "suite": suite, "replicate": rep, "metrics": [],
           "telemetry": telemetry}
    (rd.path / "structured" / f"{RUN_ID}_{suite}_r{rep}.json").write_text(json.dumps(doc))


def _cond(status, type_):
    return next(c for c in status["conditions"] if c["type"] == type_)


def test_contended_publication_run_loses_the_guarantee_and_prometheus_outage_is_a_condition(tmp_path):
    from benchrun.telemetry.conditions import apply_run_conditions

    rd = RunDir(tmp_path, RUN_ID).create()
    (rd.path / "structured").mkdir(exist_ok=True)
    rd.update_status(run_id=RUN_ID, benchmark_class_granted="publication_grade")
    _doc_with(rd, "gemm", 1, {"rate_hz": 1.0, "contended": False})
    _doc_with(rd, "gemm", 2, {"rate_hz": 1.0, "contended": True, "contention_reason": "others used 40.0 %",
                              "prometheus": {"status": "unavailable", "reason": "cannot connect"}})
    st = apply_run_conditions(rd)
    assert st["benchmark_class_granted"] == "realism_grade"
    guarantee = _cond(st, "PublicationGuaranteesMet")
    assert guarantee["status"] == "False" and guarantee["reason"] == "BackgroundLoad" and "gemm r2" in guarantee["message"]
    assert _cond(st, "ReplicatesUncontended")["status"] == "False"
    collected = _cond(st, "TelemetryCollected")
    assert (collected["status"], collected["reason"]) == ("False", "PrometheusUnavailable")
    assert "cannot connect" in collected["message"]


def test_an_unavailable_replicate_neither_is_contended_nor_downgrades_a_publication_run(tmp_path):
    """An unavailable replicate measured nothing: background load during it spoils no number."""
    from benchrun.telemetry.conditions import apply_run_conditions

    rd = RunDir(tmp_path, RUN_ID).create()
    (rd.path / "structured").mkdir(exist_ok=True)
    rd.update_status(run_id=RUN_ID, benchmark_class_granted="publication_grade")
    _doc_with(rd, "gemm", 1, {"rate_hz": 1.0, "contended": False})
    unavailable = rd.path / "structured" / f"{RUN_ID}_gemm_r2.json"
    unavailable.write_text(json.dumps({"schema": "benchrun.suite_result/v1", "status": "unavailable", "suite": "gemm",
                                       "replicate": 2, "reason": "unavailable: no CUDA device", "metrics": []}))
    record = {"samples": f"raw/{RUN_ID}_gemm_r2_telemetry.parquet", "rate_hz": 1.0, "summary": [],
              "contended": True, "contention_reason": "others used 40.0 %"}
    assert attach_to_result(unavailable, record)
    tele = read_result(unavailable)["telemetry"]
    assert tele["contended"] is None and tele["contention_reason"] is None and tele["samples"] == record["samples"]
    _doc_with(rd, "gemm", 3, {"rate_hz": 1.0, "contended": True, "contention_reason": "others used 40.0 %"},
              status="unavailable")  # written before the hook left the verdict out
    st = apply_run_conditions(rd)
    assert st["benchmark_class_granted"] == "publication_grade"
    assert not any(c["type"] == "PublicationGuaranteesMet" and c["status"] == "False" for c in st["conditions"])
    quiet = _cond(st, "ReplicatesUncontended")
    assert quiet["status"] == "True" and "(1 ok replicates sampled)" in quiet["message"]
    _doc_with(rd, "gemm", 4, {"rate_hz": 1.0, "contended": True, "contention_reason": "others used 40.0 %"})
    st = apply_run_conditions(rd)
    loud = _cond(st, "ReplicatesUncontended")
    assert loud["status"] == "False" and loud["message"].startswith("1 of 2 ok replicates") and "gemm r4" in loud["message"]
    assert "r2" not in loud["message"] and "r3" not in loud["message"]
    assert st["benchmark_class_granted"] == "realism_grade"


def test_quiet_realism_run_keeps_its_class(tmp_path):
    from benchrun.telemetry.conditions import apply_run_conditions

    rd = RunDir(tmp_path, RUN_ID).create()
    (rd.path / "structured").mkdir(exist_ok=True)
    rd.update_status(run_id=RUN_ID, benchmark_class_granted="realism_grade")
    _doc_with(rd, "membw", 1, {"rate_hz": 10.0, "contended": False, "samples": "raw/x.parquet"})
    st = apply_run_conditions(rd)
    assert st["benchmark_class_granted"] == "realism_grade"
    assert _cond(st, "ReplicatesUncontended")["status"] == "True"
    assert _cond(st, "TelemetryCollected")["message"] == "1 replicates sampled at 10 Hz"
    assert not any(c["type"] == "PublicationGuaranteesMet" for c in st["conditions"])


def test_report_timeline_marks_every_replicate_window(tmp_path):
    from types import SimpleNamespace

    from benchrun.report.telemetry import timeline_data, utilization_section

    rd = RunDir(tmp_path, RUN_ID).create()
    for rep in (1, 2):
        s = Sampler(rd.path / f"raw/{RUN_ID}_gemm_r{rep}_telemetry.parquet", 10.0, gpus=False)
        s.start()
        sum(i for i in range(200_000))
        s.stop()
    data = timeline_data(rd.path, RUN_ID)
    assert [r["replicate"] for r in data["gemm"]] == [1, 2]
    assert data["gemm"][0]["window"][1] <= data["gemm"][1]["window"][0]
    sec = utilization_section(SimpleNamespace(run=SimpleNamespace(path=rd.path, run_id=RUN_ID)))
    [(caption, png)] = sec.figures
    assert f"raw/{RUN_ID}_gemm_r1_telemetry.parquet" in caption and png[:8] == b"\x89PNG\r\n\x1a\n"
    empty = utilization_section(SimpleNamespace(run=SimpleNamespace(path=tmp_path / "none", run_id=RUN_ID)))
    assert "No telemetry samples" in empty.html and empty.figures == []


def test_suite_cpu_is_all_counted_even_for_a_suite_shorter_than_a_tick(tmp_path):
    """A suite that starts after one tick and is reaped before the next still gets all its CPU."""
    import resource
    import subprocess

    import psutil

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    sampler = Sampler(tmp_path / "t.parquet", 1.0, gpus=False)
    sampler.start()
    child = subprocess.Popen([sys.executable, "-c", "import time\nt=time.process_time()\n"
                              "while time.process_time()-t<0.4: pass"])
    sampler.watch(child.pid)
    child.wait()
    sampler.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    t = read_samples(tmp_path / "t.parquet").to_pylist()
    counted = sum(r["value"] / 100.0 * r["interval_s"] * psutil.cpu_count() for r in t if r["metric"] == "suite_cpu_pct")
    assert child_cpu >= 0.4
    assert counted == pytest.approx(child_cpu, rel=0.05, abs=0.02)


class _FakeNvml:
    """pynvml on an 8-GPU node whose GPUs read utilization 10×index; every other call unsupported."""

    NVML_CLOCK_SM = NVML_TEMPERATURE_GPU = NVML_MEMORY_ERROR_TYPE_CORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0
    NVML_VOLATILE_ECC = NVML_PCIE_UTIL_TX_BYTES = NVML_PCIE_UTIL_RX_BYTES = 0
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = nvmlEventTypeXidCriticalError = 0

    def __init__(self, names=("NVIDIA H100",) * 8):
        self.names = names

    def nvmlInit(self):
        pass

    nvmlShutdown = nvmlInit

    def nvmlDeviceGetCount(self):
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}{h}{h}-abcd".encode()

    def nvmlDeviceGetName(self, h):
        return self.names[h]

    def nvmlDeviceGetUtilizationRates(self, h):
        return type("U", (), {"gpu": 10 * h, "memory": 0})()

    def __getattr__(self, name):
        def unsupported(*a):
            raise RuntimeError(f"{name}: NotSupported")
        return unsupported


@pytest.mark.parametrize("visible, order, names, devices", [
    (None, None, ["A"] * 8, None),  # unset: not known, every GPU
    ("3", None, ["A"] * 8, [3]),
    ("5,GPU-222", None, ["A"] * 8, [5, 2]),  # a UUID prefix, in CUDA's order
    ("1,9,2", None, ["A"] * 8, [1]),  # CUDA stops at the first entry naming no device
    ("", None, ["A"] * 8, []),  # the suite sees no GPU
    ("1", None, ["A", "B"], None),  # mixed models: ordinals are CUDA's fastest-first order, not NVML's
    ("1", "PCI_BUS_ID", ["A", "B"], [1]),
    ("MIG-1234", None, ["A"] * 8, None),
])
def test_the_suites_gpus_from_cuda_visible_devices(visible, order, names, devices):
    uuids = [f"GPU-{i}{i}{i}-abcd" for i in range(len(names))]
    got, note = nvml.suite_devices(visible, uuids, names, order)
    assert got == devices and (visible is None or repr(visible) in note)


def test_the_sampler_reads_only_the_gpus_the_suites_cuda_visible_devices_names(tmp_path, monkeypatch):
    """On an 8-GPU node a one-GPU suite (CUDA_VISIBLE_DEVICES=3) was sampled with all eight GPUs,
    the seven idle ones pulling its utilization to 0 %: now only GPU 3 is sampled, by its NVML index."""
    from benchrun.telemetry.hook import ReplicateTelemetry

    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml())
    run_dir = RunDir(tmp_path, RUN_ID).create().path
    inv = Invocation(RUN_ID, "micro", "s", 1, "bc-x", ("true",), {"CUDA_VISIBLE_DEVICES": "3"}, 60.0)
    sampler = ReplicateTelemetry(inv, run_dir, 1.0).sampler
    util = [s for s in sampler._gpu.sample() if s.metric == "gpu_utilization_pct"]
    assert [(s.device_index, s.value, s.gpu_uuid) for s in util] == [(3, 30.0, "GPU-333-abcd")]
    assert sampler.gpu_count == 1 and sampler.gpu_devices == [3] and "'3'" in sampler.gpu_selection
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    unset = ReplicateTelemetry(Invocation(RUN_ID, "micro", "s", 1, "bc-x", ("true",), {}, 60.0), run_dir, 1.0).sampler
    assert unset.gpu_devices == list(range(8)) and "unset" in unset.gpu_selection


def test_nvlink_traffic_is_summed_over_every_link():
    """Found in review: the NVLink throughput fields were asked without a scopeId, which reads link 0 only
    (about 1/18 of an H200's traffic). Now scopeId UINT_MAX (every link), else each link summed."""
    from types import SimpleNamespace

    from benchrun.telemetry.nvml import ALL_LINKS, MAX_LINKS, nvlink_kib

    per_link = [100 * (k + 1) for k in range(MAX_LINKS)]

    class Nvml:
        NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 138, 139

        def __init__(self, aggregate: bool):
            self.aggregate, self.asked = aggregate, []

        def nvmlDeviceGetFieldValues(self, h, ids):
            self.asked.append(ids)
            out = []
            for field, scope in ids:
                if scope == ALL_LINKS:
                    ok, v = self.aggregate, sum(per_link) * (1 if field == 138 else 2)
                else:
                    ok, v = True, per_link[scope] * (1 if field == 138 else 2)
                out.append(SimpleNamespace(nvmlReturn=0 if ok else 3, value=SimpleNamespace(ullVal=v)))
            return out

    new = Nvml(aggregate=True)
    assert nvlink_kib(new, 0) == (sum(per_link), 2 * sum(per_link)) and len(new.asked) == 1
    old_driver = Nvml(aggregate=False)  # refuses the all-links scope: each link, summed
    assert nvlink_kib(old_driver, 0) == (sum(per_link), 2 * sum(per_link))
    assert [len(a) for a in old_driver.asked] == [2, MAX_LINKS, MAX_LINKS]
