"""Time to analyse 1,000 metrics × 2 arms × 10 replicates: load, trial statistics, comparison.

Builds two synthetic run directories (values drawn from a seeded lognormal, 2 % CV; 50 of
the 1,000 metrics shifted by 10 %), then times, separately and end to end:

* ``replicate_table`` on both run directories (reading 20 suite-result JSON files),
* ``trial_statistics`` for both arms (summaries, MAD, order-statistic and BCa intervals),
* ``compare_tables`` (HL + exact Mann–Whitney per metric, Holm/BH, verdicts).

"Analysis" below is trial statistics plus comparison (everything after loading). Wall and
process CPU time are both reported per step: the machine is shared, so wall time includes
waiting for a core. The script uses only APIs the previous (per-metric) implementation also
had, so the same file times both: run it with ``PYTHONPATH`` pointing at either tree.

Usage: ``.venv/bin/python benchmarks/analysis_scale.py [--metrics 1000] [--replicates 10] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from benchrun.stats.compare import compare_tables
from benchrun.stats.describe import trial_statistics
from benchrun.stats.load import replicate_table
from benchrun.stats.synthetic import lognormal_replicates, make_run


def build(home: Path, n_metrics: int, n_reps: int, seed: int = 0) -> tuple[Path, Path]:
    rng = np.random.default_rng(seed)
    base, cand = {}, {}
    for i in range(n_metrics):
        key = (f"suite{i % 10}", f"case{i // 10}", f"metric_{i}")
        direction = "higher" if i % 2 else "lower"
        shift = 0.9 if i < n_metrics // 20 else 1.0
        base[key] = (lognormal_replicates(rng, 100.0, 0.02, n_reps), "u", direction)
        cand[key] = (lognormal_replicates(rng, 100.0 * shift, 0.02, n_reps), "u", direction)
    primary = {f"metric_{i}" for i in range(0, n_metrics, 100)}  # 10 gating metrics
    spec = {"spec": {"metrics": {"inference": {"primary": sorted(primary)}}}}
    return (make_run(home, "scale-base", base, spec=spec, manifest=False),
            make_run(home, "scale-cand", cand, spec=spec, manifest=False))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--metrics", type=int, default=1000)
    ap.add_argument("--replicates", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        b_dir, c_dir = build(Path(tmp), args.metrics, args.replicates)
        primary = {f"metric_{i}" for i in range(0, args.metrics, 100)}
        timings: dict[str, list[float]] = {k: [] for k in (
            "load", "trial_statistics", "compare", "analysis", "total",
            "load_cpu", "trial_statistics_cpu", "compare_cpu", "analysis_cpu", "total_cpu")}
        for _ in range(args.repeat):
            c0, t0 = time.process_time(), time.perf_counter()
            b, c = replicate_table(b_dir), replicate_table(c_dir)
            c1, t1 = time.process_time(), time.perf_counter()
            trial_statistics(b, 0.95)
            trial_statistics(c, 0.95)
            c2, t2 = time.process_time(), time.perf_counter()
            res = compare_tables(b, c, confidence=0.95, primary=primary)
            c3, t3 = time.process_time(), time.perf_counter()
            for k, v in (("load", t1 - t0), ("trial_statistics", t2 - t1), ("compare", t3 - t2),
                         ("analysis", t3 - t1), ("total", t3 - t0), ("load_cpu", c1 - c0),
                         ("trial_statistics_cpu", c2 - c1), ("compare_cpu", c3 - c2), ("analysis_cpu", c3 - c1),
                         ("total_cpu", c3 - c0)):
                timings[k].append(v)
        verdicts = res.rows["verdict"].value_counts().to_dict()
    out = {
        "metrics": args.metrics, "arms": 2, "replicates": args.replicates, "repeat": args.repeat,
        "python": platform.python_version(), "machine": platform.machine(),
        "code": str(Path(__import__("benchrun").__file__).parent),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "seconds_median": {k: round(float(np.median(v)), 3) for k, v in timings.items()},
        "seconds_min": {k: round(float(np.min(v)), 3) for k, v in timings.items()},
        "verdicts": verdicts,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
