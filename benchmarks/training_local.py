"""Wall and CPU time of `benchrun run specs/local/training.yaml` (2 nodes x 1 rank, 6 replicates
of a 2-node all-reduce and a 2-node training loop), with per-launch walls and the training
figures it measured. Target: the training workload's 6 replicates in at most ~2 minutes.

    .venv/bin/python benchmarks/training_local.py
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    home = Path(tempfile.mkdtemp(prefix="benchrun-bench-training-"))
    env = {**os.environ, "BENCHRUN_HOME": str(home), "PYTHONPATH": str(ROOT)}
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-m", "benchrun.cli", "run", str(ROOT / "specs/local/training.yaml")],
                          env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        sys.exit(f"benchrun run failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    [run_dir] = list((home / "runs").iterdir())
    launches = json.loads((run_dir / "structured" / f"{run_dir.name}_launches.json").read_text())
    print(f"load average at start {load:.1f}; whole command: wall {wall:.1f} s, CPU (children) {cpu:.1f} s")
    for suite in sorted({r["suite"] for r in launches}):
        walls = [r["wall_s"] for r in launches if r["suite"] == suite]
        print(f"  {suite}: {len(walls)} launches, wall median {statistics.median(walls):.1f} s, "
              f"sum {sum(walls):.1f} s, statuses {sorted({r['status'] for r in launches if r['suite'] == suite})}")
    rows = []
    for path in sorted((run_dir / "structured").glob(f"{run_dir.name}_training_r*.json")):
        rows += json.loads(path.read_text()).get("training") or []
    if rows:
        med = {k: statistics.median(r[k] for r in rows) for k in
               ("step_time_p50_ms", "tokens_per_second", "scaling_efficiency_pct", "time_to_first_step_s")}
        print("  training medians: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))


if __name__ == "__main__":
    main()
