"""Prometheus range queries against the real thing: Debian's prometheus scraping Debian's
prometheus-node-exporter on loopback (ports picked free, config written here, 1 s scrapes)."""

import json
import os
import re
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


_SELECTOR = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)?(?:\{(.*)\})?(?:\[([0-9.]+(?:ms|s|m))\])?$")
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*,?')
LOOKBACK_S = 300.0  # Prometheus' lookback for an instant vector (--query.lookback-delta, 5m)


def _parse_selector(text: str):
    """(matchers, range seconds or None) of a plain series selector, else None (not one the fake reads)."""
    m = _SELECTOR.match(text.strip())
    if not m or not (m.group(1) or m.group(2)):
        return None
    matchers = [("__name__", "=", m.group(1))] if m.group(1) else []
    body = m.group(2) or ""
    pos = 0
    while pos < len(body):
        mm = _MATCHER.match(body, pos)
        if not mm:
            return None
        matchers.append((mm.group(1), mm.group(2), json.loads(mm.group(3))))
        pos = mm.end()
    rng = m.group(3)
    secs = None if rng is None else float(rng[:-2]) / 1000 if rng.endswith("ms") else float(rng[:-1]) * {"s": 1, "m": 60}[rng[-1]]
    return matchers, secs


def _matches(labels: dict, matchers) -> bool:
    for name, op, value in matchers:
        have = labels.get(name, "")
        ok = {"=": have == value, "!=": have != value,
              "=~": re.fullmatch(value, have) is not None, "!~": re.fullmatch(value, have) is None}[op]
        if not ok:
            return False
    return True


class _Prometheus(BaseHTTPRequestHandler):
    """A Prometheus on loopback, as far as benchrun asks one: /api/v1/targets answers ``targets``;
    /api/v1/query_range and /api/v1/query evaluate plain series selectors (and ``or`` of instant
    ones) over ``store``, a list of (labels with __name__, [(ts, value), ...]) scrapes, the way
    Prometheus does: an instant vector is each series' latest sample up to 5 minutes old at the
    evaluation time (at every step of a range query), a range selector ``sel[d]`` (an instant query)
    the series' own samples in (time - d, time], timestamps and all, and ``or`` over range vectors
    is refused as Prometheus refuses it. A sample after ``now`` (None: the wall clock) is not
    scraped yet. Anything else (rate() and joins) gets the old answer: one series with a point at
    the range query's start and end. Remembers the queries and when each came (``seen``)."""

    targets: list = []
    seen: list = []
    store: list = []
    now: float | None = None

    @classmethod
    def reset(cls, targets=(), store=(), now=None):
        cls.targets, cls.store, cls.seen, cls.now = list(targets), list(store), [], now

    def _visible(self):
        now = self.now if self.now is not None else time.time()
        return [(labels, [(t, v) for t, v in samples if t <= now]) for labels, samples in self.store]

    def _evaluate(self, expr: str, start: float, end: float, step: float | None):
        """(resultType, result) or (None, error text); None when the fake does not read ``expr``."""
        parts = [_parse_selector(part) for part in expr.split(" or ")]
        if any(p is None for p in parts):
            return None
        ranged = [p[1] is not None for p in parts]
        if any(ranged) and (len(parts) > 1 or step is not None):
            return None, "binary expression must contain only scalar and instant vector types"
        if ranged[0]:  # sel[d] at ``end``: the raw samples
            (matchers, secs), = parts
            result = [{"metric": labels, "values": [[t, str(v)] for t, v in samples if end - secs < t <= end]}
                      for labels, samples in self._visible() if _matches(labels, matchers)]
            return "matrix", [r for r in result if r["values"]]
        series, seen = [], set()
        for matchers, _ in parts:  # or: the left side's series win
            for labels, samples in self._visible():
                key = frozenset(labels.items())
                if key not in seen and _matches(labels, matchers):
                    seen.add(key)
                    series.append((labels, samples))

        def at(samples, t):
            before = [(ts, v) for ts, v in samples if t - LOOKBACK_S < ts <= t]
            return max(before)[1] if before else None

        if step is None:
            return "vector", [{"metric": labels, "value": [end, str(at(samples, end))]}
                              for labels, samples in series if at(samples, end) is not None]
        times = [start + k * step for k in range(int((end - start) / step + 1e-9) + 1)]
        result = [{"metric": labels, "values": [[t, str(at(samples, t))] for t in times if at(samples, t) is not None]}
                  for labels, samples in series]
        return "matrix", [r for r in result if r["values"]]

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        q = {k: v[0] for k, v in urllib.parse.parse_qs(url.query).items()}
        if url.path == "/api/v1/targets":
            body = {"status": "success", "data": {"activeTargets": self.targets, "droppedTargets": []}}
        else:
            self.seen.append({**q, "path": url.path, "asked_at": time.time()})
            ranged = url.path == "/api/v1/query_range"
            start = float(q["start"]) if ranged else float(q["time"])
            end = float(q["end"]) if ranged else float(q["time"])
            got = self._evaluate(q["query"], start, end, float(q["step"]) if ranged else None)
            if got is None and ranged:
                got = "matrix", [{"metric": {"nodename": "n1"},
                                  "values": [[start, "0.5"]] + ([[end, "0.5"]] if end > start else [])}]
            kind, result = got if got is not None else ("vector", [])
            if kind is None:
                body = {"status": "error", "errorType": "bad_data", "error": result}
            else:
                body = {"status": "success", "data": {"resultType": kind, "result": result}}
        data = json.dumps(body).encode()
        self.send_response(200 if body["status"] == "success" else 400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_prometheus():
    import threading

    server = HTTPServer(("127.0.0.1", 0), _Prometheus)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Prometheus.reset()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def _scrapes(labels: dict, first: float, every: float, values) -> tuple[dict, list]:
    """One series of the fake's store: ``values`` scraped every ``every`` s from ``first`` on."""
    return labels, [(first + k * every, v) for k, v in enumerate(values)]


def test_rate_ranges_are_as_wide_as_the_scrapes_need_inside_the_replicate_and_recorded(fake_prometheus, monkeypatch):
    # before: rate(...[1m]) evaluated from the replicate's start, recorded as interval_s = step (1 s):
    # a 10 s replicate's rates described the minute before it, and telemetry_slice_fact said 1 s
    monkeypatch.delenv("BENCHRUN_PROMETHEUS_RATE_WINDOW", raising=False)
    monkeypatch.delenv("BENCHRUN_PROMETHEUS_SCRAPE_INTERVAL", raising=False)
    monkeypatch.delenv("BENCHRUN_PROMETHEUS_SETTLE", raising=False)
    t0 = 1_700_000_000.0
    store = [({"__name__": "node_uname_info", "nodename": "n1", "instance": "10.0.0.1:9100"}, [(t0 - 60, 1.0)]),
             _scrapes({"__name__": "node_load1", "instance": "10.0.0.1:9100"}, t0 - 29.5, 1.0, [0.25] * 60)]

    def run(start, end, targets):
        _Prometheus.reset(targets, store)
        samples, record = range_queries(fake_prometheus, start, end, "n1")
        busy = [s for s in samples if s.metric == "node_cpu_busy_ratio"]
        load = [s for s in samples if s.metric == "node_load1"]
        return busy, load, record

    # 1 s scrapes (the slowest target decides): a 2 s range, its first point 2 s into the replicate
    busy, load, record = run(t0, t0 + 10, [{"scrapeInterval": "1s"}, {"scrapeInterval": "500ms"}])
    assert (record["scrape_interval_s"], record["rate_range_s"], record["status"]) == (1.0, 2.0, "ok")
    assert [(s.ts, s.interval_s) for s in busy] == [(t0 + 2, 2.0), (t0 + 10, 2.0)]
    # a gauge: the node's scrapes inside the window and the one after it, each over the time since the
    # one before (the first: since the window's start), found through node_uname_info's instance
    assert [(s.ts, s.interval_s) for s in load] == [(t0 + 0.5, 0.5)] + [(t0 + k + 0.5, 1.0) for k in range(1, 11)]
    assert {s.node_name for s in load} == {"n1"} and record["settle_s"] == 2.0
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
    assert (record["scrape_interval_s"], record["settle_s"]) == (5.0, 6.0)  # the settle needs the interval
    monkeypatch.setenv("BENCHRUN_PROMETHEUS_SETTLE", "3s")
    monkeypatch.delenv("BENCHRUN_PROMETHEUS_SCRAPE_INTERVAL")
    record = run(t0, t0 + 600, [{"scrapeInterval": "1s"}])[2]
    assert "scrape_interval_s" not in record and (record["settle_s"], record["settle_from"]) == (3.0, "BENCHRUN_PROMETHEUS_SETTLE")


@pytest.fixture
def no_prometheus_settings(monkeypatch):
    for var in ("BENCHRUN_PROMETHEUS_RATE_WINDOW", "BENCHRUN_PROMETHEUS_SCRAPE_INTERVAL", "BENCHRUN_PROMETHEUS_SETTLE"):
        monkeypatch.delenv(var, raising=False)


# dcgm-exporter's series as a ServiceMonitor without honorLabels stores them: the pod label is the
# exporter's own, the pod whose container holds the GPU is exported_pod
GPU0 = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "UUID": "GPU-0", "Hostname": "n1",
        "pod": "dcgm-exporter-7xk2p", "exported_pod": "train-r1-abcde"}
GPU1 = {**GPU0, "gpu": "1", "UUID": "GPU-1", "exported_pod": "another-job"}


def test_a_gauge_is_the_windows_own_scrapes_not_an_older_value_repeated(fake_prometheus, no_prometheus_settings):
    """Before: a gauge was a range query with a 1 s step from the replicate's start. Prometheus fills
    each step with the latest scrape up to 5 minutes old, so the steps before the first scrape inside
    the window repeated the idle value scraped before the replicate, each recorded as 1 s of it, and
    a replicate between two scrapes got nothing else; the pod's series, labelled exported_pod by
    the usual ServiceMonitor, were not found. Now: the scrapes themselves (a range selector), each
    over the time since the one before it, the first since the window's start."""
    t0 = 1_700_000_000.0
    # 15 s scrapes: idle before the replicate (t0 - 13), busy from its start (t0 + 2, t0 + 17, ...)
    store = [_scrapes(GPU0, t0 - 13, 15.0, [0.0, 95.0, 97.0, 4.0]), _scrapes(GPU1, t0 - 13, 15.0, [50.0] * 4)]
    _Prometheus.reset([{"scrapeInterval": "15s"}], store)
    samples, record = range_queries(fake_prometheus, t0, t0 + 10, "n1", pod="train-r1-abcde", pod_uid="uid-1")
    assert record["status"] == "ok", record
    node = sorted((s.ts, s.value, s.interval_s) for s in samples
                  if s.metric == "dcgm_gpu_utilization_pct" and s.device_index == 0)
    # inside the window at t0 + 2 (over the 2 s since its start); the scrape after it (t0 + 17, asked
    # for once end + settle had passed) over the 15 s since; never the 0 % scraped before it began
    assert node == [(t0 + 2, 95.0, 2.0), (t0 + 17, 97.0, 15.0)]
    pod = sorted((s.ts, s.value, s.interval_s, s.gpu_uuid, s.pod_uid) for s in samples
                 if s.metric == "dcgm_gpu_utilization_pct_pod")
    assert pod == [(t0 + 2, 95.0, 2.0, "GPU-0", "uid-1"), (t0 + 17, 97.0, 15.0, "GPU-0", "uid-1")]
    asked = [q for q in _Prometheus.seen if q["path"] == "/api/v1/query" and "DCGM_FI_DEV_GPU_UTIL" in q["query"]]
    assert asked and all(float(q["time"]) == t0 + 10 + 15 and q["query"].endswith("[25s]") for q in asked)
    assert {q["query"] for q in asked} >= {'DCGM_FI_DEV_GPU_UTIL{pod="train-r1-abcde"}[25s]',
                                          'DCGM_FI_DEV_GPU_UTIL{exported_pod="train-r1-abcde"}[25s]'}
    # a replicate between two scrapes: the scrape after it, over the whole window, not the one before
    samples, _ = range_queries(fake_prometheus, t0 + 3, t0 + 8, "n1", pod="train-r1-abcde")
    assert [(s.ts, s.value, s.interval_s) for s in samples if s.metric == "dcgm_gpu_utilization_pct_pod"] == [
        (t0 + 17, 97.0, 14.0)]
    # Kueue's series summed per queue at each scrape, as sum by (cluster_queue) did
    kueue = [_scrapes({"__name__": "kueue_pending_workloads", "cluster_queue": "cq", "status": status},
                      t0 - 13, 15.0, [n] * 4) for status, n in (("active", 2.0), ("inadmissible", 3.0))]
    _Prometheus.reset([{"scrapeInterval": "15s"}], kueue)
    samples, _ = range_queries(fake_prometheus, t0, t0 + 10, "n1", queue="cq")
    assert [(s.ts, s.value) for s in samples if s.metric == "kueue_pending_workloads"] == [(t0 + 2, 5.0), (t0 + 17, 5.0)]


def test_gauges_are_asked_for_once_the_scrape_after_the_window_is_in(fake_prometheus, no_prometheus_settings,
                                                                   monkeypatch):
    """Before: asked the moment the replicate ended, when the scrape describing its last part had not
    happened yet. Now: at end + settle (the scrape interval + 1 s, at most 15 s by default;
    BENCHRUN_PROMETHEUS_SETTLE, held to 2 min), waiting only for what is left of it."""
    end = 1_700_000_100.0
    clock, slept = [end + 0.25], []

    def sleep(seconds):
        slept.append(seconds)
        clock[0] += seconds
        _Prometheus.now = clock[0]  # Prometheus scrapes on meanwhile

    def run(targets=({"scrapeInterval": "15s"},), now=end + 0.25):
        clock[0] = now
        slept.clear()
        _Prometheus.reset(targets, [_scrapes(GPU0, end - 20, 15.0, [90.0, 91.0, 92.0])], now=now)  # -20, -5, +10
        return range_queries(fake_prometheus, end - 30, end, "n1", sleep=sleep, clock=lambda: clock[0])

    samples, record = run()
    assert slept == [pytest.approx(14.75)] and (record["settle_s"], record["waited_s"]) == (15.0, 14.75)
    assert [(s.ts, s.value, s.interval_s) for s in samples if s.metric == "dcgm_gpu_utilization_pct"] == [
        (end - 20, 90.0, 10.0), (end - 5, 91.0, 15.0), (end + 10, 92.0, 15.0)]
    assert "settle_note" not in record
    # a launcher that collects long after the pod ended: nothing left to wait for
    assert run(now=end + 600)[1]["waited_s"] == 0.0 and slept == []
    # Prometheus does not say its interval (1m assumed): 15 s, and the record says it may be short
    record = run(targets=[{"labels": {}}])[1]
    assert record["settle_s"] == 15.0 and "less than the scrape interval (60 s)" in record["settle_note"]
    monkeypatch.setenv("BENCHRUN_PROMETHEUS_SETTLE", "0")
    samples, record = run()
    assert slept == [] and record["settle_s"] == 0.0
    assert [s.ts for s in samples if s.metric == "dcgm_gpu_utilization_pct"] == [end - 20, end - 5]
    monkeypatch.setenv("BENCHRUN_PROMETHEUS_SETTLE", "10m")
    assert run()[1]["settle_s"] == 120.0 and slept == [pytest.approx(119.75)]
    monkeypatch.setenv("BENCHRUN_PROMETHEUS_SETTLE", "a while")
    with pytest.raises(ValueError, match="BENCHRUN_PROMETHEUS_SETTLE"):
        run()


def test_the_cluster_launchers_query_waits_for_the_next_scrape_and_finds_the_pod(fake_prometheus, tmp_path,
                                                                                no_prometheus_settings, monkeypatch):
    """The Kubernetes launcher's call (pod_prometheus, after the pod ends): it waited for nothing, and
    matched the pod on ``pod`` only."""
    import datetime as dt

    from benchrun.telemetry.hook import pod_prometheus

    monkeypatch.setenv("BENCHRUN_PROMETHEUS_URL", fake_prometheus)
    monkeypatch.setenv("BENCHRUN_PROMETHEUS_SETTLE", "1s")
    rd = RunDir(tmp_path, RUN_ID).create()
    path = _ok_doc(rd)
    end = time.time()
    iso = lambda t: dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat()  # noqa: E731
    # scraped at end - 3 (busy) and end + 0.5: the latter exists only once that time has come
    _Prometheus.reset([{"scrapeInterval": "1s"}], [_scrapes(GPU0, end - 3.0, 3.5, [90.0, 92.0])])
    inv = Invocation(RUN_ID, "micro", "s", 1, "bc-x", ("true",), {}, 60.0)
    record = pod_prometheus(inv, rd.path, {"container_started_utc": iso(end - 4), "container_finished_utc": iso(end),
                                           "node_name": "n1", "pod_name": "train-r1-abcde", "pod_uid": "uid-1"})
    gauge = [q for q in _Prometheus.seen if "DCGM" in q["query"]]
    assert gauge and all(q["asked_at"] >= end + 1.0 for q in gauge)
    assert record["status"] == "ok" and record["settle_s"] == 1.0, record
    table = read_samples(rd.path / read_result(path)["samples"]["prometheus"])
    pod = sorted((t.timestamp(), r["value"]) for t, r in zip(table["ts"].to_pylist(), table.to_pylist())
                 if r["metric"] == "dcgm_gpu_utilization_pct_pod")
    assert [v for _, v in pod] == [90.0, 92.0] and pod[-1][0] > end


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


def _layer(rd, replicates, layer="micro", rate="5"):
    """Invocations of suite s (a quick ok suite) and the run's pinned plan listing them in this order."""
    quick = SUITE.replace("time.sleep(4)", "pass")
    invs = []
    for rep in replicates:
        env = {**base_env(), "BENCHRUN_RUN_ID": RUN_ID, "BENCHRUN_RUN_DIR": str(rd.path), "BENCHRUN_SUITE": "s",
               "BENCHRUN_REPLICATE": str(rep), RATE_ENV: rate}
        invs.append(Invocation(RUN_ID, layer, "s", rep, "bc-x", (sys.executable, "-c", quick), env, 60.0))
    later = Invocation(RUN_ID, "component", "t", 1, "bc-y", ("true",), {}, 60.0)  # another layer: not this one's
    (rd.path / "structured").mkdir(parents=True, exist_ok=True)
    (rd.path / "structured" / f"{RUN_ID}_plan.json").write_text(json.dumps([i.to_json() for i in [*invs, later]]))
    return invs


def test_the_next_replicate_does_not_wait_for_the_settle(fake_prometheus, tmp_path, no_prometheus_settings,
                                                         monkeypatch):
    """Found in review (2026-12-07): the settle wait (the scrape interval + 1 s, up to 15 s) ran in line
    at every replicate's end, so each next replicate waited for it (about 10 min over 40). Now, where
    more of the layer follows, the collection runs beside the next replicate and is written into the
    result at a later replicate's end, all of it by the layer's last."""
    monkeypatch.setenv("BENCHRUN_PROMETHEUS_URL", fake_prometheus)
    monkeypatch.setenv("BENCHRUN_PROMETHEUS_SETTLE", "3s")
    _Prometheus.reset([{"scrapeInterval": "1s"}])
    rd = RunDir(tmp_path, RUN_ID).create()
    r1, r2 = _layer(rd, (1, 2))
    launcher = LocalLauncher()
    res1 = launcher.launch(r1, rd.path)
    returned = time.time()
    doc1 = read_result(rd.path / res1.result)
    end1 = doc1["telemetry"]["window_end"]
    assert res1.status == "ok" and returned < end1 + 3.0  # it did not wait for r1's settle
    assert doc1["telemetry"]["prometheus"]["status"] == "pending"
    res2 = launcher.launch(r2, rd.path)
    assert res2.status == "ok" and res2.t_spawned < end1 + 3.0  # r2 ran while r1's collection waited
    # r2 is the layer's last: r1's collection was written by then, and r2's own collected in line
    for res in (res1, res2):
        doc = read_result(rd.path / res.result)
        prom = doc["telemetry"]["prometheus"]
        assert prom["status"] == "ok" and prom["settle_s"] == 3.0, prom
        assert doc["samples"]["prometheus"] == prom["samples"] and (rd.path / prom["samples"]).is_file()
    gauges = [q for q in _Prometheus.seen if q["path"] == "/api/v1/query" and float(q["time"]) == round(end1 + 3.0, 3)]
    assert gauges and all(q["asked_at"] >= end1 + 3.0 for q in gauges)  # still asked once the settle had passed


def test_an_interrupt_is_not_held_by_the_settle_or_the_queries(fake_prometheus, tmp_path, no_prometheus_settings,
                                                               monkeypatch):
    """Found in review (2026-12-07): the settle wait and the ~40 queries sat in the telemetry's finally,
    so Ctrl-C (or a cancelled Dagster run) waited for them before it stopped anything. Now an interrupt
    goes on at once; the Prometheus part is recorded as not collected, an earlier replicate's collection
    still on its way too."""
    import benchrun.launch.local as local
    from benchrun.telemetry.hook import replicate_telemetry

    monkeypatch.setenv("BENCHRUN_PROMETHEUS_URL", fake_prometheus)
    monkeypatch.setenv("BENCHRUN_PROMETHEUS_SETTLE", "10s")
    _Prometheus.reset([{"scrapeInterval": "1s"}])
    rd = RunDir(tmp_path, RUN_ID).create()
    # in the telemetry's own hands: the suite wrote its result, then Ctrl-C
    inv = Invocation(RUN_ID, "micro", "solo", 1, "bc-x", ("true",), {RATE_ENV: "5"}, 60.0)
    began = time.time()
    with pytest.raises(KeyboardInterrupt):
        with replicate_telemetry(inv, rd.path):
            _ok_doc(rd, suite="solo")
            raise KeyboardInterrupt
    assert time.time() - began < 5.0 and not _Prometheus.seen
    prom = read_result(rd.path / inv.result_relpath())["telemetry"]["prometheus"]
    assert prom["status"] == "unavailable" and "interrupted (KeyboardInterrupt)" in prom["reason"]
    # through the launcher: r1's collection runs in the background; Ctrl-C while r2 runs stops at once
    r1, r2, _ = _layer(rd, (1, 2, 3))
    launcher = LocalLauncher()
    res1 = launcher.launch(r1, rd.path)

    def interrupted(proc, timeout_s):
        raise KeyboardInterrupt

    monkeypatch.setattr(local, "wait_exit", interrupted)
    began = time.time()
    with pytest.raises(KeyboardInterrupt):
        launcher.launch(r2, rd.path)
    assert time.time() - began < 5.0
    prom = read_result(rd.path / res1.result)["telemetry"]["prometheus"]
    assert prom["status"] == "unavailable" and "interrupted (KeyboardInterrupt)" in prom["reason"], prom


def test_the_cluster_launchers_collection_runs_beside_the_next_job(fake_prometheus, tmp_path, no_prometheus_settings,
                                                                   monkeypatch):
    """The Kubernetes launcher waited for the settle before it created the next Job; now the collection
    runs beside it, and the layer's last replicate (a failed one too: it is called whatever the result)
    writes every earlier one before the layer ends."""
    import datetime as dt

    from benchrun.telemetry.hook import pod_prometheus

    monkeypatch.setenv("BENCHRUN_PROMETHEUS_URL", fake_prometheus)
    monkeypatch.setenv("BENCHRUN_PROMETHEUS_SETTLE", "2s")
    _Prometheus.reset([{"scrapeInterval": "1s"}])
    rd = RunDir(tmp_path, RUN_ID).create()
    r1, r2 = _layer(rd, (1, 2))
    path = _ok_doc(rd, rep=1)
    end = time.time()
    iso = lambda t: dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat()  # noqa: E731
    timeline = {"container_started_utc": iso(end - 4), "container_finished_utc": iso(end), "node_name": "n1",
                "pod_name": "s-r1-abcde", "pod_uid": "uid-1"}
    assert pod_prometheus(r1, rd.path, timeline)["status"] == "pending" and time.time() < end + 2.0
    assert read_result(path)["telemetry"]["prometheus"]["status"] == "pending"
    # r2 failed (no result): not queried, but the layer ends with it, so r1's collection is written
    record = pod_prometheus(r2, rd.path, {**timeline, "pod_name": "s-r2-abcde"})
    assert record["status"] == "unavailable" and record["reason"].startswith("not collected")
    prom = read_result(path)["telemetry"]["prometheus"]
    assert prom["status"] == "ok" and prom["settle_s"] == 2.0 and (rd.path / prom["samples"]).is_file()
    assert not any("s-r2-abcde" in q["query"] for q in _Prometheus.seen)


def test_a_layer_ends_its_background_collections_however_it_ends(tmp_path, monkeypatch):
    # read again: flush_prometheus had no caller, so a layer that ended before its planned last replicate
    # (an exception between replicates, a Job never created) left earlier collections pending
    from benchrun.execute import run_layer
    from benchrun.launch.base import LaunchResult
    from benchrun.plan import Invocation, LayerPlan
    from benchrun.rundir import RunDir
    from benchrun.telemetry import hook

    calls = []
    monkeypatch.setattr(hook, "_settle", lambda *, wait, interrupted: calls.append((wait, type(interrupted).__name__)))

    class Launcher:
        def launch(self, inv, run_dir, extra_env=None):
            if inv.replicate == 2:
                raise KeyboardInterrupt
            return LaunchResult(inv.run_id, inv.layer, inv.suite, inv.replicate, inv.benchmark_case_id, "ok", None, 0,
                                0.0, 0.0, 0.0, 0.0, inv.log_relpath(), None)

    run_id = "flush-20261207000000-aaaaaaaa"
    rd = RunDir(tmp_path, run_id).create()
    rd.write_status({"run_id": run_id, "phase": "Running", "conditions": []})
    invs = tuple(Invocation(run_id, "micro", "s", k, "bc-1", ("/bin/true",), {}, 10.0) for k in (1, 2))
    with pytest.raises(KeyboardInterrupt):
        run_layer(LayerPlan("micro", True, invs), rd, Launcher())
    assert calls == [(False, "KeyboardInterrupt")]  # nothing waited for on the way out
    calls.clear()
    run_layer(LayerPlan("micro", True, invs[:1]), rd, Launcher())
    assert calls == [(True, "NoneType")]
