"""What the telemetry sampler costs, and whether it moves a suite's result.

1. Sampler CPU: a Sampler runs alone for ``--seconds`` at 1 Hz and at 10 Hz, watching a
   child process (as it watches a suite); its own CPU time is read from the sampler thread's
   clock (``time.thread_time``), so other load on the machine does not inflate it. Reported as
   CPU-seconds, % of one core, and CPU per tick.
2. Effect on suites: gemm and membw (canary parameters) launched through the local launcher
   with sampling off, at 1 Hz and at 10 Hz, interleaved (off, 1 Hz, 10 Hz, off, ...) so slow
   drift of the machine spreads over the three; the median of each headline metric per mode.

Usage: .venv/bin/python benchmarks/telemetry_overhead.py [--seconds 60] [--replicates 7]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchrun.launch.local import LocalLauncher
from benchrun.plan import Invocation, base_env
from benchrun.rundir import RunDir
from benchrun.telemetry.sampler import Sampler

RUN_ID = "bench-20260101000000-telemetr"
SUITES = {
    "gemm": ({"sizes": [512], "iterations": 10}, "gflops"),
    "membw": ({"elements": 4000000, "iterations": 5}, None),
}


def sampler_cost(rate: float, seconds: float, tmp: Path) -> dict[str, float]:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(%f)" % (seconds + 5)])
    try:
        s = Sampler(tmp / f"cost_{rate:g}.parquet", rate, gpus="auto")
        t0 = time.perf_counter()
        s.start()
        s.watch(child.pid)
        time.sleep(seconds)
        s.stop()
        wall = time.perf_counter() - t0
    finally:
        child.kill()
        child.wait()
    return {"rate_hz": rate, "wall_s": wall, "ticks": s.n_ticks, "sampler_cpu_s": s.cpu_s,
            "pct_of_one_core": 100.0 * s.cpu_s / wall, "cpu_ms_per_tick": 1000.0 * s.cpu_s / max(s.n_ticks, 1),
            "gpus": s.gpu_count}


def suite_effect(replicates: int, tmp: Path) -> list[dict[str, object]]:
    rd = RunDir(tmp, RUN_ID).create()
    launcher = LocalLauncher()
    values: dict[tuple[str, str, str], list[float]] = {}
    units: dict[tuple[str, str], str] = {}
    k = 0
    for _ in range(replicates):
        for mode in ("off", "1", "10"):
            for suite, (params, _) in SUITES.items():
                k += 1
                env = {**base_env(), "BENCHRUN_RUN_ID": RUN_ID, "BENCHRUN_RUN_DIR": str(rd.path),
                       "BENCHRUN_SUITE": suite, "BENCHRUN_REPLICATE": str(k), "BENCHRUN_PARAMS": json.dumps(params),
                       "BENCHRUN_TELEMETRY_HZ": "0" if mode == "off" else mode}
                inv = Invocation(RUN_ID, "micro", suite, k, "bc-bench", (sys.executable, "-m", f"benchrun.suites.{suite}"),
                                 env, 120.0, params)
                res = launcher.launch(inv, rd.path)
                if res.status != "ok":
                    print(f"{suite} ({mode}) r{k}: {res.status} {res.reason}", file=sys.stderr)
                    continue
                for m in res.metrics:
                    if m.get("source") == "telemetry":
                        continue
                    key = (suite, f"{m['name']}[{m.get('case', '')}]", mode)
                    values.setdefault(key, []).append(float(m["value"]))
                    units[(suite, f"{m['name']}[{m.get('case', '')}]")] = m.get("unit", "")
    rows = []
    for (suite, metric), unit in sorted(units.items()):
        med = {mode: statistics.median(values.get((suite, metric, mode), [float("nan")])) for mode in ("off", "1", "10")}
        rows.append({"suite": suite, "metric": metric, "unit": unit, **{f"median_{m}": v for m, v in med.items()},
                     "n": min(len(values.get((suite, metric, m), [])) for m in ("off", "1", "10")),
                     "delta_1hz_pct": 100.0 * (med["1"] / med["off"] - 1.0) if med["off"] else float("nan"),
                     "delta_10hz_pct": 100.0 * (med["10"] / med["off"] - 1.0) if med["off"] else float("nan")})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--replicates", type=int, default=7)
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print("rate_hz  wall_s  ticks  sampler_cpu_s  %_of_one_core  cpu_ms_per_tick  gpus")
        for rate in (1.0, 10.0):
            c = sampler_cost(rate, args.seconds, tmp)
            print(f"{c['rate_hz']:>7g}  {c['wall_s']:6.1f}  {c['ticks']:5d}  {c['sampler_cpu_s']:13.3f}  "
                  f"{c['pct_of_one_core']:13.3f}  {c['cpu_ms_per_tick']:15.3f}  {c['gpus']}")
        print("\nsuite  metric  unit  median_off  median_1Hz  median_10Hz  Δ1Hz%  Δ10Hz%  n")
        for r in suite_effect(args.replicates, tmp):
            print(f"{r['suite']}  {r['metric']}  {r['unit']}  {r['median_off']:.4g}  {r['median_1']:.4g}  "
                  f"{r['median_10']:.4g}  {r['delta_1hz_pct']:+.2f}  {r['delta_10hz_pct']:+.2f}  {r['n']}")
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    print(f"\nscript: wall {time.perf_counter() - t0:.1f} s, CPU {r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime:.1f} s "
          f"(this process); load average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
