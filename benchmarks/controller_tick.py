"""How long a BenchmarkRun controller tick takes for N listed resources (the decision, without the API calls).

``controller_tick`` is what ``benchmarkrun_resource_sensor`` does between listing and patching:
for each object, a new generation is validated and pinned (``prepare``); a known one has its
run's status.json read and compared with the object's status. Times, for N objects, wall
and CPU seconds (median and max of the repeats):

* ``N new``       every object is a new generation: N validations + pins + run directories
* ``N known``     every object was handled: N status.json reads and comparisons (most ticks)

A Dagster sensor tick times out after 60 s by default; N new must stay well under it.

Usage: .venv/bin/python benchmarks/controller_tick.py [--objects 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import tempfile
import time
from pathlib import Path

import yaml

from benchrun.automation.ticks import prepare_register
from benchrun.controller.resources import controller_tick

ROOT = Path(__file__).resolve().parent.parent


def objects(n: int) -> list[dict]:
    base = yaml.safe_load((ROOT / "specs/local/canary.yaml").read_text())
    out = []
    for i in range(n):
        doc = copy.deepcopy(base)
        doc["metadata"] = {"name": f"bench-{i:04d}", "namespace": "benchrun-runs", "uid": f"uid-{i:04d}",
                           "generation": 1}
        out.append(doc)
    return out


def measure(fn) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    objs = objects(args.objects)
    new, known = [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            now = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
            result = {}
            new.append(measure(lambda: result.update(tick=controller_tick(objs, None, prepare_register(home), now, home))))
            first = result["tick"]
            assert len(first.submitted) == args.objects, first.notes
            # the objects now carry the status the sensor wrote
            status = {s.ref.uid: s.status for s in first.submitted}
            seen = [dict(o, status=status[o["metadata"]["uid"]]) for o in objs]
            known.append(measure(lambda: controller_tick(seen, first.cursor, prepare_register(home), now, home)))
    for label, rows in ((f"{args.objects} new", new), (f"{args.objects} known", known)):
        walls, cpus = sorted(r[0] for r in rows), sorted(r[1] for r in rows)
        print(f"{label:>12}: wall median {walls[len(walls) // 2]:.2f} s, max {walls[-1]:.2f} s; "
              f"CPU median {cpus[len(cpus) // 2]:.2f} s")


if __name__ == "__main__":
    main()
