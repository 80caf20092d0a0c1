"""Prometheus range queries against the real thing: Debian's prometheus scraping Debian's
prometheus-node-exporter on loopback (ports picked free, config written here, 1 s scrapes)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from benchrun.launch.local import LocalLauncher
from benchrun.plan import Invocation, base_env
from benchrun.rundir import RunDir
from benchrun.suites.result import read_result
from benchrun.telemetry.hook import RATE_ENV
from benchrun.telemetry.prometheus import range_queries, redact, render, QUERIES
from benchrun.telemetry.samples import read_samples

RUN_ID = "t-20260101000000-abcdef12"
SUITE = (
    "import time\n"
    "from benchrun.suites._runtime import main\n"
    "def run(ctx):\n"
    "    time.sleep(4)\n"
    "    ctx.add_metric('answer', 42.0, 'units', 'higher')\n"
    "main(run)\n"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return json.loads(resp.read())


def _wait(pred, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if pred():
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"{what} not ready after {timeout:g}s")


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    for binary in ("prometheus", "prometheus-node-exporter"):
        if shutil.which(binary) is None:
            pytest.skip(f"{binary} is not installed (make installs it: apt-get install {binary})")
    tmp = tmp_path_factory.mktemp("prom")
    exporter_port, prom_port = _free_port(), _free_port()
    exporter = subprocess.Popen(
        ["prometheus-node-exporter", f"--web.listen-address=127.0.0.1:{exporter_port}", "--collector.disable-defaults",
         "--collector.cpu", "--collector.meminfo", "--collector.loadavg", "--collector.stat", "--collector.uname",
         "--collector.diskstats", "--collector.netdev"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    config = tmp / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"scrape_configs:\n  - job_name: node\n    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n")
    server = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{prom_port}"
    try:
        _wait(lambda: _get(f"{url}/api/v1/query?query=up")["data"]["result"], "first scrape")
        _wait(lambda: len(_get(f"{url}/api/v1/query?query=node_cpu_seconds_total[10s]")["data"]["result"][0]["values"]) >= 3,
              "three scrapes")
        yield url
    finally:
        for proc in (server, exporter):  # only the processes this fixture started
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.mark.slow  # starts two servers and waits for scrapes
def test_replicate_window_gets_the_node_exporter_series_and_they_reach_the_warehouse(prometheus, tmp_path, monkeypatch):
    from benchrun.warehouse.curate import curate_run
    from helpers import run_rows

    monkeypatch.setenv("BENCHRUN_PROMETHEUS_URL", prometheus)
    monkeypatch.delenv("BENCHRUN_PROMETHEUS_RATE_WINDOW", raising=False)
    monkeypatch.delenv("BENCHRUN_PROMETHEUS_SCRAPE_INTERVAL", raising=False)
    rd = RunDir(tmp_path, RUN_ID).create()
    rd.update_status(run_id=RUN_ID)
    env = {**base_env(), "BENCHRUN_RUN_ID": RUN_ID, "BENCHRUN_RUN_DIR": str(rd.path), "BENCHRUN_SUITE": "s",
           "BENCHRUN_REPLICATE": "1", RATE_ENV: "2"}
    res = LocalLauncher().launch(Invocation(RUN_ID, "micro", "s", 1, "bc-x", (sys.executable, "-c", SUITE), env, 60.0),
                                 rd.path)
    assert res.status == "ok", res.reason
    tele = read_result(rd.path / res.result)["telemetry"]
    prom = tele["prometheus"]
    assert prom["status"] == "ok", prom
    assert prom["series_points"]["node_cpu_busy_ratio"] >= 2 and prom["series_points"]["node_load1"] >= 3
    # the rate range is what 1 s scrapes need (asked of Prometheus), not 1m: each rate describes
    # seconds inside the replicate, and its interval_s says how many
    assert (prom["scrape_interval_s"], prom["scrape_interval_from"], prom["rate_range_s"]) == (1.0, "targets", 2.0)
    assert "dcgm_gpu_utilization_pct" not in prom["series_points"]  # no DCGM exporter here: no points, not zeros
    table = read_samples(rd.path / prom["samples"])
    ts = [t.timestamp() for t in table["ts"].to_pylist()]
    assert min(ts) >= tele["window_start"] - 1 and max(ts) <= tele["window_end"] + 1
    busy = [(t, r["value"], r["interval_s"]) for t, r in zip(ts, table.to_pylist()) if r["metric"] == "node_cpu_busy_ratio"]
    assert all(0.0 <= v <= 1.0 and dt == 2.0 and t - dt >= tele["window_start"] - 0.001 for t, v, dt in busy)
    assert set(table["node_name"].to_pylist()) == {os.uname().nodename}
    curate_run(rd.path, tmp_path, tables=["telemetry_slice_fact"])
    rows = run_rows(tmp_path, "telemetry_slice_fact", RUN_ID)
    prom_rows = [r for r in rows if r["source"] == "prometheus:node"]
    assert {r["metric"] for r in prom_rows} >= {"node_cpu_busy_ratio", "node_load1", "node_memory_available_bytes"}
    assert all(r["suite"] == "s" and r["replicate"] == 1 and r["raw_path"] == prom["samples"] for r in prom_rows)
    busy_rows = [r for r in prom_rows if r["metric"] == "node_cpu_busy_ratio"]
    assert busy_rows and all(r["window_start_utc"].timestamp() >= tele["window_start"] - 0.001 for r in busy_rows)


def test_missing_prometheus_is_recorded_not_a_failed_replicate(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCHRUN_PROMETHEUS_URL", f"http://127.0.0.1:{_free_port()}")
    rd = RunDir(tmp_path, RUN_ID).create()
    env = {**base_env(), "BENCHRUN_RUN_ID": RUN_ID, "BENCHRUN_RUN_DIR": str(rd.path), "BENCHRUN_SUITE": "s",
           "BENCHRUN_REPLICATE": "1", RATE_ENV: "5"}
    quick = SUITE.replace("time.sleep(4)", "pass")
    res = LocalLauncher().launch(Invocation(RUN_ID, "micro", "s", 1, "bc-x", (sys.executable, "-c", quick), env, 60.0),
                                 rd.path)
    assert res.status == "ok"
    prom = read_result(rd.path / res.result)["telemetry"]["prometheus"]
    assert prom["status"] == "unavailable" and "cannot connect" in prom["reason"]
    assert "samples" not in prom


def test_promql_is_rendered_with_checked_names_only():
    q = next(q for q in QUERIES if q.name == "dcgm_gpu_utilization_pct")
    assert render(q, "gpu-node-7", None, "1m") == 'DCGM_FI_DEV_GPU_UTIL{Hostname="gpu-node-7"} or DCGM_FI_DEV_GPU_UTIL{node="gpu-node-7"}'
    pod_q = next(q for q in QUERIES if q.name == "dcgm_gpu_utilization_pct_pod")
    assert render(pod_q, "n", None, "1m") is None
    with pytest.raises(ValueError, match="plain node or pod name"):
        render(q, 'n"} or vector(1) or x{a="', None, "1m")
    with pytest.raises(ValueError, match="duration"):
        render(next(q for q in QUERIES if q.name == "node_cpu_busy_ratio"), "n", None, "1 minute")
    kueue = next(q for q in QUERIES if q.name == "kueue_pending_workloads")
    assert 'cluster_queue=~".+"' in render(kueue, "n", None, "1m")
    assert 'cluster_queue=~"team-a-cq"' in render(kueue, "n", None, "1m", "team-a-cq")
    with pytest.raises(ValueError):
        render(kueue, "n", None, "1m", 'a"}')
    assert redact("http://user:secret@prom:9090/x") == "http://prom:9090/x"


def test_a_slow_server_is_one_timeout_not_one_per_query(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)  # accepts connections, never answers
    try:
        samples, record = range_queries(f"http://127.0.0.1:{listener.getsockname()[1]}", 0.0, 10.0, "n", timeout_s=0.5)
    finally:
        listener.close()
    assert samples == [] and record["status"] == "unavailable"
    assert record["reason"].count("timed out") == 1


class _Prometheus(BaseHTTPRequestHandler):
    """Answers /api/v1/targets with ``targets`` and every range query with one series holding a
    point at each of its start and end; remembers the queries."""

    targets: list = []
    seen: list = []

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        if url.path == "/api/v1/targets":
            body = {"status": "success", "data": {"activeTargets": self.targets, "droppedTargets": []}}
        else:
            self.seen.append(q)
            start, end = float(q["start"]), float(q["end"])
            body = {"status": "success", "data": {"resultType": "matrix", "result": [
                {"metric": {"nodename": "n1"}, "values": [[start, "0.5"]] + ([[end, "0.5"]] if end > start else [])}]}}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_rate_ranges_are_as_wide_as_the_scrapes_need_inside_the_replicate_and_recorded(monkeypatch):
    # before: rate(...[1m]) evaluated from the replicate's start, recorded as interval_s = step (1 s):
    # a 10 s replicate's rates described the minute before it, and telemetry_slice_fact said 1 s
    import threading

    monkeypatch.delenv("BENCHRUN_PROMETHEUS_RATE_WINDOW", raising=False)
    monkeypatch.delenv("BENCHRUN_PROMETHEUS_SCRAPE_INTERVAL", raising=False)
    server = HTTPServer(("127.0.0.1", 0), _Prometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"

    def run(start, end, targets):
        _Prometheus.targets, _Prometheus.seen = targets, []
        samples, record = range_queries(url, start, end, "n1")
        busy = [s for s in samples if s.metric == "node_cpu_busy_ratio"]
        load = [s for s in samples if s.metric == "node_load1"]
        return busy, load, record

    try:
        t0 = 1_700_000_000.0
        # 1 s scrapes (the slowest target decides): a 2 s range, its first point 2 s into the replicate
        busy, load, record = run(t0, t0 + 10, [{"scrapeInterval": "1s"}, {"scrapeInterval": "500ms"}])
        assert (record["scrape_interval_s"], record["rate_range_s"], record["status"]) == (1.0, 2.0, "ok")
        assert [(s.ts, s.interval_s) for s in busy] == [(t0 + 2, 2.0), (t0 + 10, 2.0)]
        assert [(s.ts, s.interval_s) for s in load] == [(t0, 1.0), (t0 + 10, 1.0)]  # a gauge: the step
        rated = next(q for q in _Prometheus.seen if "node_cpu_seconds_total" in q["query"])
        assert "[2s]" in rated["query"] and float(rated["start"]) == t0 + 2 and "rate_note" not in record
        # 15 s scrapes and a 10 s replicate: one rate point, at its end, over the 30 s it needs, said so
        busy, load, record = run(t0, t0 + 10, [{"scrapeInterval": "15s"}])
        assert [(s.ts, s.interval_s) for s in busy] == [(t0 + 10, 30.0)]
        assert record["rate_range_s"] == 30.0 and "shorter than the rate range (30 s)" in record["rate_note"]
        # a Prometheus that does not say: its default, 1m; the operator's settings win
        busy, _, record = run(t0, t0 + 600, [{"labels": {}}])
        assert (record["scrape_interval_s"], record["scrape_interval_from"], record["rate_range_s"]) == (60.0, "default", 120.0)
        assert busy[0].ts == t0 + 120 and busy[0].interval_s == 120.0
        monkeypatch.setenv("BENCHRUN_PROMETHEUS_SCRAPE_INTERVAL", "5s")
        assert run(t0, t0 + 600, [])[2]["rate_range_s"] == 10.0
        monkeypatch.setenv("BENCHRUN_PROMETHEUS_RATE_WINDOW", "45s")
        busy, _, record = run(t0, t0 + 600, [])
        assert record["rate_range_s"] == 45.0 and (busy[0].ts, busy[0].interval_s) == (t0 + 45, 45.0)
        assert "scrape_interval_s" not in record
    finally:
        server.shutdown()
        server.server_close()


def _ok_doc(rd, suite="s", rep=1):
    path = rd.path / "structured" / f"{RUN_ID}_{suite}_r{rep}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": "benchrun.suite_result/v1", "status": "ok", "suite": suite,
                                "replicate": rep, "metrics": []}))
    return path


@pytest.mark.slow  # shares the servers of the test above
def test_a_pod_window_is_queried_by_node_and_recorded_for_a_cluster_launcher(prometheus, tmp_path, monkeypatch):
    import datetime as dt

    from benchrun.telemetry.conditions import apply_run_conditions
    from benchrun.telemetry.hook import pod_prometheus

    monkeypatch.setenv("BENCHRUN_PROMETHEUS_URL", prometheus)
    monkeypatch.setenv("BENCHRUN_PROMETHEUS_RATE_WINDOW", "5s")
    rd = RunDir(tmp_path, RUN_ID).create()
    rd.update_status(run_id=RUN_ID)
    path = _ok_doc(rd)
    now = time.time()
    iso = lambda t: dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat()  # noqa: E731
    inv = Invocation(RUN_ID, "micro", "s", 1, "bc-x", ("true",), {}, 60.0)
    timeline = {"container_started_utc": iso(now - 4), "container_finished_utc": iso(now),
                "node_name": os.uname().nodename, "pod_name": "s-r1-abcde", "pod_uid": "uid-1"}
    record = pod_prometheus(inv, rd.path, timeline)
    assert record["status"] == "ok" and record["series_points"]["node_load1"] >= 2
    doc = read_result(path)
    assert doc["telemetry"]["prometheus"]["samples"] == doc["samples"]["prometheus"]
    table = read_samples(rd.path / doc["samples"]["prometheus"])
    assert set(table["pod_uid"].to_pylist()) == {"uid-1"}
    st = apply_run_conditions(rd)
    cond = next(c for c in st["conditions"] if c["type"] == "TelemetryCollected")
    assert (cond["status"], cond["reason"]) == ("True", "PrometheusOnly")


def test_pod_without_prometheus_or_times_is_said_not_guessed(tmp_path, monkeypatch):
    from benchrun.telemetry.hook import pod_prometheus

    rd = RunDir(tmp_path, RUN_ID).create()
    path = _ok_doc(rd)
    inv = Invocation(RUN_ID, "micro", "s", 1, "bc-x", ("true",), {}, 60.0)
    monkeypatch.delenv("BENCHRUN_PROMETHEUS_URL", raising=False)
    assert pod_prometheus(inv, rd.path, {"node_name": "n"}) is None
    monkeypatch.setenv("BENCHRUN_PROMETHEUS_URL", "http://127.0.0.1:9")
    record = pod_prometheus(inv, rd.path, {"node_name": "n"})  # the pod never started
    assert record["status"] == "unavailable" and "no start/finish time" in record["reason"]
    assert read_result(path)["telemetry"]["prometheus"]["status"] == "unavailable"
    monkeypatch.setenv("BENCHRUN_PROMETHEUS_URL", "prometheus:9090")
    assert "not an http(s) URL" in pod_prometheus(inv, rd.path, {"node_name": "n"})["reason"]
