"""The server's own Prometheus metrics during a sweep: vLLM's and SGLang's names mapped to one vocabulary, scraped by a child process.

``--server-metrics URL`` starts a scraper process (``python -m benchrun.loadgen.servermetrics``)
beside the sweep: every ``interval_s`` it GETs the URL, parses the text exposition format
(``prometheus_client``'s parser, a pinned dependency of benchrun), keeps the mapped metrics
and appends one JSON line per scrape to a file, stamped on CLOCK_MONOTONIC (the clock of the
request rows). A separate process keeps the scrape's HTTP and parsing off the event loop
that timestamps the measured requests. After each point the parent reads the file and
gives every scrape inside the point's measured window (first send to last end) to that
point, and the two that bound it for the counters: the samples (``telemetry_slice_fact`` rows, with ``point``) and a summary in the
point's row (``server_metrics``).

Names mapped (the first name a server exposes wins; sums over label sets, e.g. engines):

================================  =========================================  ========================================
benchrun metric                   vLLM                                       SGLang
================================  =========================================  ========================================
``requests_running``              ``vllm:num_requests_running``              ``sglang:num_running_reqs``
``requests_waiting``              ``vllm:num_requests_waiting``              ``sglang:num_queue_reqs``
``kv_cache_usage_ratio`` (0-1)    ``vllm:kv_cache_usage_perc``,              ``sglang:token_usage``
                                  ``vllm:gpu_cache_usage_perc`` (before V1)
``prefix_cache_queries_total``    ``vllm:prefix_cache_queries_total`` (tok)
``prefix_cache_hits_total``       ``vllm:prefix_cache_hits_total`` (tokens)
``prefix_cache_hit_ratio``        ``vllm:gpu_prefix_cache_hit_rate`` (old)   ``sglang:cache_hit_rate``
``preemptions_total``             ``vllm:num_preemptions_total``             ``sglang:num_retracted_requests_total``
================================  =========================================  ========================================

Per point: mean and max of the gauges over its scrapes; for the counters the increase from
the last scrape answered at or before the window's start to the first sent at or after its end (the parent
waits up to one interval plus the scrape timeout for that one), so the whole window is counted
(with up to an interval of whatever ran beside it at each end: warm-up before, nothing after);
``counters_cover`` records the span those two scrapes cover and whether each end lies outside
the window (else the first or last scrape inside it stands in, and a note says the increase
covers only part of the window: not scaled). A counter that went down (a restart) gives null; ``prefix_cache_hit_ratio`` over the point = Δhits / Δqueries where the server counts
both, else the mean of its own ratio gauge. Fewer than two scrapes in a point give no
increases (say so: raise the rate with ``--server-metrics-interval``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

CLOCK = time.perf_counter_ns

# benchrun name -> (server names in order of preference, kind, unit)
MAPPING: dict[str, tuple[tuple[str, ...], str, str]] = {
    "requests_running": (("vllm:num_requests_running", "sglang:num_running_reqs"), "gauge", "requests"),
    "requests_waiting": (("vllm:num_requests_waiting", "sglang:num_queue_reqs"), "gauge", "requests"),
    "kv_cache_usage_ratio": (("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"), "gauge", "fraction"),
    "prefix_cache_queries_total": (("vllm:prefix_cache_queries_total",), "counter", "tokens"),
    "prefix_cache_hits_total": (("vllm:prefix_cache_hits_total",), "counter", "tokens"),
    "prefix_cache_hit_ratio": (("vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate"), "gauge", "fraction"),
    "preemptions_total": (("vllm:num_preemptions_total", "sglang:num_retracted_requests_total"), "counter", "count"),
}


def parse(text: str) -> dict[str, float]:
    """Server sample name -> value summed over its label sets (histogram and summary series skipped). A
    NaN or ±Inf sample, which the exposition format allows (a gauge with nothing to report), is no value:
    it made the point's mean NaN, written into the result as the bare token NaN, which strict JSON
    readers refuse."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        if fam.type in ("histogram", "summary", "gaugehistogram"):
            continue
        for s in fam.samples:
            if s.name.endswith("_created") or not math.isfinite(float(s.value)):
                continue
            out[s.name] = out.get(s.name, 0.0) + float(s.value)
    return out


def mapped(values: dict[str, float]) -> tuple[dict[str, float], dict[str, str]]:
    """(benchrun name -> value, benchrun name -> the server name it came from)."""
    vals: dict[str, float] = {}
    names: dict[str, str] = {}
    for ours, (theirs, _, _) in MAPPING.items():
        for name in theirs:
            if name in values:
                vals[ours], names[ours] = values[name], name
                break
    return vals, names


def scrape_once(url: str, timeout_s: float = 2.0) -> dict[str, Any]:
    """One scrape: ``{"mono_ns", "done_ns", "wall_s", "values", "names"}`` or ``{..., "error"}``:
    sent at ``mono_ns``, its answer read by ``done_ns`` (the server read its counters in between)."""
    mono, wall = CLOCK(), time.time()
    try:
        req = urllib.request.Request(url, headers={"Accept": "text/plain", "User-Agent": "benchrun-loadgen"})
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310  (http(s) only: checked by SweepConfig)
            text = resp.read(8 << 20).decode("utf-8", "replace")
        done = CLOCK()
        vals, names = mapped(parse(text))
        return {"mono_ns": mono, "done_ns": done, "wall_s": wall, "values": vals, "names": names}
    except Exception as exc:  # a failed scrape is recorded, the sweep goes on
        return {"mono_ns": mono, "done_ns": CLOCK(), "wall_s": wall, "error": f"{type(exc).__name__}: {exc}"[:300]}


def _main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="benchrun.loadgen.servermetrics")
    p.add_argument("--url", required=True)
    p.add_argument("--interval", type=float, required=True)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    nxt = time.monotonic()
    with open(a.out, "a", encoding="utf-8", buffering=1) as fh:
        while True:
            fh.write(json.dumps(scrape_once(a.url, min(2.0, max(0.2, a.interval)))) + "\n")
            nxt += a.interval
            time.sleep(max(0.0, nxt - time.monotonic()))
            if os.getppid() == 1:  # the sweep is gone
                return


class Scraper:
    """The scraper child process of one sweep; ``samples_between(a, b)`` reads what it wrote."""

    def __init__(self, url: str, interval_s: float, workdir: str | Path) -> None:
        import subprocess
        import tempfile

        self.url, self.interval_s = url, interval_s
        fd, path = tempfile.mkstemp(prefix="benchrun-servermetrics-", suffix=".jsonl", dir=str(workdir))
        os.close(fd)
        self.path = Path(path)
        env = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_PIPES")}
        self.proc = subprocess.Popen([sys.executable, "-m", "benchrun.loadgen.servermetrics", "--url", url,
                                      "--interval", repr(float(interval_s)), "--out", str(self.path)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=env)

    def samples(self) -> list[dict[str, Any]]:
        """Every complete scrape line so far."""
        out = []
        with open(self.path, encoding="utf-8") as fh:
            for line in fh:
                if line.endswith("\n"):
                    out.append(json.loads(line))
        return out

    def wait_first(self, timeout_s: float = 10.0) -> None:
        """Wait (bounded) for the first scrape line, so the first point's counters have a scrape before its start."""
        deadline = time.monotonic() + timeout_s
        while not self.samples() and time.monotonic() < deadline and self.proc.poll() is None:
            time.sleep(0.02)

    def samples_after(self, end_ns: int) -> list[dict[str, Any]]:
        """Every scrape so far, once one taken at or after ``end_ns`` is among them (the counters'
        outer bound), waiting at most an interval plus the scrape timeout for it."""
        deadline = time.monotonic() + self.interval_s + min(2.0, max(0.2, self.interval_s)) + 0.25
        while True:
            got = self.samples()
            if any(s["mono_ns"] >= end_ns for s in got) or time.monotonic() >= deadline or self.proc.poll() is not None:
                return got
            time.sleep(min(0.05, self.interval_s / 4))

    def close(self) -> None:
        """Stop the child and remove its file."""
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except Exception:
            self.proc.kill()
            self.proc.wait(5)
        self.path.unlink(missing_ok=True)


def for_point(scrapes: list[dict[str, Any]], start_ns: int, end_ns: int) -> list[dict[str, Any]]:
    """The scrapes taken inside ``[start_ns, end_ns]`` (CLOCK_MONOTONIC)."""
    return [s for s in scrapes if start_ns <= s["mono_ns"] <= end_ns]


def bounds(scrapes: list[dict[str, Any]], start_ns: int, end_ns: int) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(the last successful scrape answered at or before ``start_ns``, the first sent at or after
    ``end_ns``); either None when there is none: the outer ends a counter's increase over the window
    is taken between. The server reads its counters between a scrape's send and its answer, so one
    sent before the start but answered after it may count the first requests already (a loaded
    host: 2 of 16 requests' prompt tokens missing); a record without ``done_ns`` (older) by its send."""
    ok = [s for s in scrapes if "values" in s]
    before = max((s for s in ok if s.get("done_ns", s["mono_ns"]) <= start_ns), key=lambda s: s["mono_ns"],
                 default=None)
    after = min((s for s in ok if s["mono_ns"] >= end_ns), key=lambda s: s["mono_ns"], default=None)
    return before, after


def summarize(scrapes: list[dict[str, Any]], interval_s: float, *, window: tuple[int, int] | None = None,
              before: dict[str, Any] | None = None, after: dict[str, Any] | None = None) -> dict[str, Any]:
    """One point's server-side figures (see module docstring): gauges over ``scrapes`` (those inside
    the window), counters from ``before`` (else the first inner scrape) to ``after`` (else the last)."""
    ok = [s for s in scrapes if "values" in s]
    out: dict[str, Any] = {"scrapes": len(ok), "scrape_errors": len(scrapes) - len(ok), "interval_s": interval_s}
    if len(scrapes) > len(ok):
        out["scrape_error_example"] = next(s["error"] for s in scrapes if "error" in s)
    names: dict[str, str] = {}
    for s in ok:
        names.update(s.get("names") or {})
    out["server_names"] = names
    first = before if before is not None else (ok[0] if ok else None)
    last = after if after is not None else (ok[-1] if ok else None)
    if not ok and (before is None or after is None):
        out["note"] = "no successful scrape inside the point's measured window"
        return out
    for ours, (_, kind, _) in MAPPING.items():
        if kind == "gauge":
            vals = [s["values"][ours] for s in ok if ours in s["values"]]
            if vals:
                out[f"{ours}_mean"] = sum(vals) / len(vals)
                out[f"{ours}_max"] = max(vals)
            continue
        a, b = (first or {}).get("values", {}).get(ours), (last or {}).get("values", {}).get(ours)
        if a is None and b is None:
            continue
        inc = b - a if a is not None and b is not None and last is not first else None
        out[ours.replace("_total", "_increase")] = inc if inc is None or inc >= 0 else None
    if first is not None and last is not None and last is not first:
        cover: dict[str, Any] = {"span_s": (last["mono_ns"] - first["mono_ns"]) / 1e9,
                                 "start": "scrape at/before the window's start" if before is not None else "first scrape inside the window",
                                 "end": "scrape at/after the window's end" if after is not None else "last scrape inside the window"}
        if window is not None:
            cover["window_s"] = (window[1] - window[0]) / 1e9
        if before is None or after is None:
            cover["note"] = "counters cover only part of the window (no scrape outside one end): increases are not scaled"
        out["counters_cover"] = cover
    q, h = out.get("prefix_cache_queries_increase"), out.get("prefix_cache_hits_increase")
    if q:
        out["prefix_cache_hit_ratio_point"] = (h or 0.0) / q
    elif out.get("prefix_cache_hit_ratio_mean") is not None:
        out["prefix_cache_hit_ratio_point"] = out["prefix_cache_hit_ratio_mean"]
    if first is None or last is None or last is first:
        out["note"] = f"{len(ok)} scrape in the point: no counter increases (scrape more often: --server-metrics-interval)"
    return out


def sample_rows(scrapes: list[dict[str, Any]], point: str, interval_s: float) -> list[dict[str, Any]]:
    """Telemetry sample rows (the columns of ``benchrun.telemetry.samples.SAMPLE_SCHEMA`` plus ``point``)."""
    rows = []
    for s in scrapes:
        for ours, v in (s.get("values") or {}).items():
            _, kind, unit = MAPPING[ours]
            rows.append({"ts": s["wall_s"], "interval_s": interval_s if kind == "counter" else None,
                         "source": f"server:{(s.get('names') or {}).get(ours, '?').split(':')[0]}", "scope": "process",
                         "metric": ours, "device_index": None, "gpu_uuid": None, "node_name": None, "pod_uid": None,
                         "value": float(v), "unit": unit, "point": point})
    return rows


def write_samples(path: Path, rows: list[dict[str, Any]], metadata: dict[str, str]) -> Path:
    """``rows`` as a telemetry sample parquet file (pyarrow imported here: the load generator needs it only for this)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from benchrun.fsio import atomic_path

    schema = pa.schema([("ts", pa.timestamp("us", tz="UTC")), ("interval_s", pa.float64()), ("source", pa.string()),
                        ("scope", pa.string()), ("metric", pa.string()), ("device_index", pa.int64()),
                        ("gpu_uuid", pa.string()), ("node_name", pa.string()), ("pod_uid", pa.string()),
                        ("value", pa.float64()), ("unit", pa.string()), ("point", pa.string())])
    cols = {n: [r[n] for r in rows] for n in schema.names}
    cols["ts"] = [int(round(t * 1e6)) for t in cols["ts"]]
    arrays = [pa.array(cols["ts"], pa.int64()).cast(f.type) if f.name == "ts" else pa.array(cols[f.name], f.type) for f in schema]
    table = pa.Table.from_arrays(arrays, schema=schema).replace_schema_metadata({k.encode(): v.encode() for k, v in metadata.items()})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return path


if __name__ == "__main__":
    _main()
