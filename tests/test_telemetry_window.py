"""Which samples describe a suite's measured window and how much each weighs there, and which
replicates the ReplicatesUncontended condition may judge (those with a contention verdict)."""

from __future__ import annotations

import json
import sys

import pytest

from benchrun.rundir import RunDir
from benchrun.telemetry.hook import measured_samples
from benchrun.telemetry.samples import Sample, samples_table
from benchrun.telemetry.summary import contention, summarise

RUN_ID = "t-20261207000000-abcdef12"


def _rates(t0: float, values: list[float], interval: float = 1.0):
    """Background CPU sampled at 1 Hz: the k-th value describes [t0 + k - 1, t0 + k]."""
    return samples_table(Sample(t0 + k * interval, "psutil", "node", "background_cpu_pct", v, "%", interval_s=interval)
                         for k, v in enumerate(values, start=1))


def _window(tmp_path, start: float, end: float):
    result = tmp_path / "r.json"
    result.write_text(json.dumps({"status": "ok", "measured_window": {"start_unix": start, "end_unix": end}}))
    return result


def test_each_sample_weighs_the_part_of_the_window_it_describes(tmp_path):
    """Found in review (2026-12-07): samples were picked by their end time at full weight. At 1 Hz over
    [t, t+2], 100 % background for the second ending at t+0.05 then 0 read as a 50 % mean (contended);
    the window saw 2.5 %. The sample covering the window's end (taken after it) was dropped."""
    t0 = 1000.0
    table = _rates(t0, [0.0, 100.0, 0.0, 0.0, 80.0])  # ends at t0+1 .. t0+5
    t = t0 + 1.95  # the window [t, t+2]: 0.05 s of the 100 % second, then 1.95 s of 0 %
    inside, used = measured_samples(table, _window(tmp_path, t, t + 2.0))
    assert used["from"] == "the suite's measured window"
    got = {r["name"]: r["value"] for r in summarise(inside)}
    assert got["background_cpu_pct_mean"] == pytest.approx(2.5)
    assert contention(summarise(inside), 10.0) == (False, None)
    # the three samples that describe part of it, weighing 0.05, 1 and 0.95 s
    assert sorted(inside["interval_s"].to_pylist()) == pytest.approx([0.05, 0.95, 1.0])
    # and the other way round: a busy second mostly inside the window is not diluted by the one after
    busy_end = _rates(t0, [0.0, 0.0, 100.0, 100.0, 0.0])
    got = {r["name"]: r["value"] for r in summarise(measured_samples(busy_end, _window(tmp_path, t, t + 2.0))[0])}
    assert got["background_cpu_pct_mean"] == pytest.approx(100.0 * 1.95 / 2.0)


def test_gauges_and_throttling_weigh_their_part_of_the_window(tmp_path):
    """A gauge describes the time since its device's previous reading: the reading after the window's
    end counts for the window's last part, the one at its start for none of it."""
    rows = [Sample(100.0 + k, "nvml", "gpu", "gpu_utilization_pct", v, "%", device_index=0)
            for k, v in enumerate([0.0, 0.0, 90.0, 90.0, 30.0])]
    rows += [Sample(100.0 + k, "nvml", "gpu", "gpu_throttled", f, "bool", device_index=0)
             for k, f in enumerate([0.0, 0.0, 1.0, 1.0, 1.0])]
    inside, _ = measured_samples(samples_table(rows), _window(tmp_path, 101.0, 103.5))
    got = {r["name"]: r["value"] for r in summarise(inside)}
    # [101, 102] at 90, [102, 103] at 90, [103, 103.5] of the reading at 104 (30)
    assert got["gpu_utilization_pct_mean"] == pytest.approx((90 + 90 + 0.5 * 30) / 2.5)
    assert got["gpu_throttled_s"] == pytest.approx(2.5)


def test_a_window_too_short_to_summarise_has_no_summaries_and_is_judged_on_the_whole_process(tmp_path, monkeypatch):
    """A window between two ticks was summarised from the whole process (start-up and all), which the
    docs never said; now it has no summaries, and its contention verdict (the machine's background
    load, a question of the whole process that brackets the window) says it was judged on the whole
    process (the canary's 0.1-0.5 s windows at 1 Hz would otherwise go unjudged)."""
    from benchrun.plan import Invocation
    from benchrun.telemetry.hook import ReplicateTelemetry, attach_to_result

    monkeypatch.delenv("BENCHRUN_PROMETHEUS_URL", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # the host alone, whatever this machine has
    run_dir = RunDir(tmp_path, RUN_ID).create().path
    inv = Invocation(RUN_ID, "micro", "s", 1, "bc-x", ("true",), {}, 60.0)
    tele = ReplicateTelemetry(inv, run_dir, 1.0)
    tele.sampler.start()
    started = tele.sampler.started
    import time

    time.sleep(0.3)
    result = run_dir / inv.result_relpath()
    result.parent.mkdir(parents=True, exist_ok=True)
    result.write_text(json.dumps({"schema": "benchrun.suite_result/v1", "status": "ok", "suite": "s", "replicate": 1,
                                  "metrics": [], "measured_window": {"start_unix": started + 0.1,
                                                                     "end_unix": started + 0.2}}))
    record = tele.finish()
    assert record["summary_window"]["from"] == "none" and "shorter than 2 sampling periods" in record["summary_window"]["reason"]
    assert record["summary"] == [] and isinstance(record["contended"], bool)
    assert record["contention_from"] == "the whole process (the measured window is too short to sample)"
    assert attach_to_result(result, record)
    assert json.loads(result.read_text())["telemetry"]["contention_from"] == record["contention_from"]
    # no sample at all even over the whole process: not judged, saying why
    import benchrun.telemetry.hook as hook

    monkeypatch.setattr(hook, "summarise", lambda table: [])
    tele2 = ReplicateTelemetry(inv, run_dir, 1.0)
    tele2.sampler.start()
    time.sleep(0.05)
    record2 = tele2.finish()
    assert record2["contended"] is None and record2["contention_reason"].startswith("not judged: the suite's measured window")


def test_whether_a_window_is_summarised_depends_on_its_length_not_where_it_falls(tmp_path):
    """Found in review (2026-12-07): the decision counted the samples overlapping the window; at 1 Hz a
    0.5 s window straddling a tick overlaps two (summarised), one between ticks only one (none), so a
    random subset of the canary's 0.1-0.5 s replicates carried cpu_/gpu_utilization_pct_mean. Now the
    window's length against 2 sampling periods decides, wherever it falls."""
    t0 = 1000.0
    at_1hz = {b"rate_hz": b"1.0"}  # as the sampler's file says
    rates = _rates(t0, [5.0] * 12).replace_schema_metadata(at_1hz)
    gauges = samples_table(Sample(t0 + k, "nvml", "gpu", "gpu_utilization_pct", 90.0, "%", device_index=0)
                           for k in range(12)).replace_schema_metadata(at_1hz)
    for table in (rates, gauges):
        for length, summarised in ((0.5, False), (1.5, False), (2.0, True), (3.2, True)):
            seen = set()
            for offset in (0.05, 0.3, 0.5, 0.75, 0.95):  # between ticks, and straddling one
                start = t0 + 3 + offset
                inside, used = measured_samples(table, _window(tmp_path, start, start + length))
                seen.add((used["from"], bool(summarise(inside))))
            want = ("the suite's measured window", True) if summarised else ("none", False)
            assert seen == {want}, (length, seen)
    # the sampler's rate decides the period: at 4 Hz a 0.5 s window is 2 periods
    at_4hz = rates.replace_schema_metadata({b"rate_hz": b"4.0"})
    assert measured_samples(at_4hz, _window(tmp_path, t0 + 3.3, t0 + 3.8))[1]["from"] != "none"
    used = measured_samples(rates, _window(tmp_path, t0 + 3.3, t0 + 3.8))[1]
    assert "shorter than 2 sampling periods (2 s at 1 Hz)" in used["reason"]


def _doc(rd, rep, telemetry, status="ok", suite="gemm"):
    doc = {"schema": "benchrun.suite_result/v1", "status": status, "suite": suite, "replicate": rep, "metrics": [],
           "telemetry": telemetry}
    (rd.path / "structured" / f"{RUN_ID}_{suite}_r{rep}.json").write_text(json.dumps(doc))


def _run(tmp_path, granted="realism_grade"):
    rd = RunDir(tmp_path, RUN_ID).create()
    (rd.path / "structured").mkdir(exist_ok=True)
    rd.update_status(run_id=RUN_ID, benchmark_class_granted=granted)
    return rd


def _cond(status, type_):
    return next(c for c in status["conditions"] if c["type"] == type_)


PROM_ONLY = {"prometheus": {"status": "ok", "samples": f"raw/{RUN_ID}_gemm_r1_prometheus.parquet"}}


def test_replicates_with_prometheus_data_alone_are_not_judged_quiet(tmp_path):
    """Found in review (2026-12-07): a Kubernetes replicate's telemetry holds only Prometheus data (no
    sampler, no ``contended``), and every such ok replicate counted as judged: ReplicatesUncontended=True
    (QuietMachine) from no evidence. Now Unknown (NotSampled), saying how many were not judged; a
    publication-grade run keeps its class (no contention was seen) and its launcher's guarantee."""
    from benchrun.telemetry.conditions import apply_run_conditions

    rd = _run(tmp_path, "publication_grade")
    for rep in (1, 2, 3):
        _doc(rd, rep, PROM_ONLY)
    st = apply_run_conditions(rd)
    cond = _cond(st, "ReplicatesUncontended")
    assert (cond["status"], cond["reason"]) == ("Unknown", "NotSampled")
    assert "3 ok replicates not judged" in cond["message"] and "gemm r1" in cond["message"]
    assert st["benchmark_class_granted"] == "publication_grade"
    assert not any(c["type"] == "PublicationGuaranteesMet" for c in st["conditions"])
    assert _cond(st, "TelemetryCollected")["reason"] == "PrometheusOnly"


def test_the_judged_and_the_unjudged_are_counted_apart(tmp_path):
    from benchrun.telemetry.conditions import apply_run_conditions

    rd = _run(tmp_path, "publication_grade")
    _doc(rd, 1, {"rate_hz": 1.0, "samples": "raw/x.parquet", "contended": False})
    _doc(rd, 2, PROM_ONLY)
    _doc(rd, 3, {"rate_hz": 1.0, "samples": "raw/y.parquet", "contended": None,
                 "contention_reason": "not judged: the suite's measured window (0.1 s) is shorter than 2 sampling periods"})
    quiet = _cond(apply_run_conditions(rd), "ReplicatesUncontended")
    assert (quiet["status"], quiet["reason"]) == ("True", "QuietMachine")
    assert "(1 ok replicates sampled)" in quiet["message"] and "2 ok replicates not judged (gemm r2, gemm r3; e.g." in quiet["message"]
    _doc(rd, 4, {"rate_hz": 1.0, "samples": "raw/z.parquet", "contended": True, "contention_reason": "others used 40.0 %"})
    st = apply_run_conditions(rd)
    loud = _cond(st, "ReplicatesUncontended")
    assert loud["status"] == "False" and loud["message"].startswith("1 of 2 ok replicates") and "2 ok replicates not judged" in loud["message"]
    assert st["benchmark_class_granted"] == "realism_grade" and _cond(st, "PublicationGuaranteesMet")["status"] == "False"


def test_an_unknown_verdict_is_no_contention_warning_on_promote(tmp_path, capsys):
    """promote warns about ReplicatesUncontended=False only: Unknown (not judged) says nothing of load."""
    from benchrun.stats.commands import _warn_contended
    from benchrun.telemetry.conditions import apply_run_conditions

    rd = _run(tmp_path)
    _doc(rd, 1, PROM_ONLY)
    apply_run_conditions(rd)
    _warn_contended(rd.path, "canary")
    assert "contended" not in capsys.readouterr().err
