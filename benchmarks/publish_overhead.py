"""What publishing a run costs: hot-metric rendering and push, provenance signing and verification.

Builds a synthetic run directory (suite result documents with many metric rows, plus raw
files of a given total size), then times, each repeated and reported as median and max
wall seconds:

* ``render``        hotmetrics.render + exposition text, all series within budget
* ``render tight``  the same with a budget of 100 series (sorting and trimming)
* ``push``          PUT of the rendered series to a real Pushgateway on loopback
* ``sign``          sign_run: re-hash every sealed file, build the Statement, sign, write
* ``verify``        verify_run: check the signature and re-hash every subject

Usage: .venv/bin/python benchmarks/publish_overhead.py [--repeats 5] [--suites 40]
       [--replicates 5] [--rows 50] [--files 400] [--file-kib 256]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

from benchrun.hotmetrics import Budget, push, render
from benchrun.provenance import sign_run, verify_run
from benchrun.rundir import RunDir
from benchrun.suites.result import SCHEMA, metric
from benchrun.fsio import atomic_write_json
from _timing import timed  # benchmarks/_timing.py, beside this script

RUN_ID = "bench-20261130000000-00000000"
PUSHGATEWAY = "/usr/bin/prometheus-pushgateway"


def build(home: Path, suites: int, replicates: int, rows: int, files: int, file_kib: int) -> RunDir:
    rd = RunDir(home, RUN_ID).create()
    rd.write_status({"run_id": RUN_ID, "name": "bench", "phase": "Analyzing", "cadence": "nightly",
                     "benchmark_class_granted": "realism_grade", "started_utc": "2026-11-30T00:00:00Z",
                     "layers": {"micro": {"status": "succeeded", "ok": suites * replicates, "failed": 0}}})
    for s in range(suites):
        for k in range(1, replicates + 1):
            ms = [metric(f"m{r % 10}_ms", float(r + k), "ms", "lower", case=f"c{r}") for r in range(rows)]
            atomic_write_json(rd.path / "structured" / f"{RUN_ID}_s{s}_r{k}.json", {
                "schema": SCHEMA, "run_id": RUN_ID, "suite": f"s{s}", "replicate": k, "status": "ok", "metrics": ms})
    for i in range(files):
        (rd.path / "raw" / f"{RUN_ID}_blob{i}_r1.bin").write_bytes(os.urandom(file_kib * 1024))
    rd.write_manifest(status="succeeded", issues=[], suite_steps={})
    rd.update_status(artifact_manifest_digest="00" * 32)
    return rd


def start_gateway() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Debian persists to /var/lib/prometheus by default: other runs' groups would count.
    proc = subprocess.Popen([PUSHGATEWAY, f"--web.listen-address=127.0.0.1:{port}", "--persistence.file="],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            urllib.request.urlopen(url + "/-/ready", timeout=1).close()
            return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("pushgateway did not start")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--suites", type=int, default=40)
    ap.add_argument("--replicates", type=int, default=5)
    ap.add_argument("--rows", type=int, default=50)
    ap.add_argument("--files", type=int, default=400)
    ap.add_argument("--file-kib", type=int, default=256)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        rd = build(home, a.suites, a.replicates, a.rows, a.files, a.file_kib)
        status = rd.read_status()
        big = Budget(10_000_000, ["request_id", "trace_id", "prompt_hash"])
        hm = render(rd.path, status, big)
        print(f"run: {a.suites} suites x {a.replicates} replicates x {a.rows} rows; "
              f"{hm.series_count} series; {a.files} raw files of {a.file_kib} KiB")
        results = {
            "render": timed(lambda: render(rd.path, status, big).text, a.repeats),
            "render tight": timed(lambda: render(rd.path, status, Budget(100, [])).text, a.repeats),
        }
        if Path(PUSHGATEWAY).exists():
            proc, url = start_gateway()
            try:
                results["push"] = timed(lambda: push(hm, url), a.repeats)
            finally:
                proc.terminate()
                proc.wait(timeout=10)
        results["sign"] = timed(lambda: sign_run(rd.path, home), a.repeats)
        results["verify"] = timed(lambda: verify_run(rd.path, home=home), a.repeats)
        for name, (med, mx) in results.items():
            print(f"{name:14s} median {med * 1e3:9.1f} ms   max {mx * 1e3:9.1f} ms")


if __name__ == "__main__":
    main()
