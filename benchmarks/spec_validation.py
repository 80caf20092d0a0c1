"""Speed of spec admission: load_spec on the seed, hostile inputs, and `benchrun validate` cold start.

Run: .venv/bin/python benchmarks/spec_validation.py [--repeats N]
Prints one line per measurement (median and p90 over the repeats).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchrun.spec import load_spec, validate_bytes, validate_path  # noqa: E402

SEED = ROOT / "specs/examples/publication-inference-stack-b200.yaml"
BOMB = b"".join(
    [b"l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n"]
    + [f"l{i}: &l{i} [{', '.join([f'*l{i-1}'] * 10)}]\n".encode() for i in range(1, 9)]
)
DEEP = b"[" * 100_000 + b"]" * 100_000


def measure(name: str, fn: Callable[[], object], repeats: int) -> None:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
    print(f"{name:<48} median {statistics.median(times):8.2f} ms   p90 {p90:8.2f} ms   (n={repeats})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=50)
    args = ap.parse_args()
    n = args.repeats
    measure("load_spec(seed) (read, parse, model, rules, digests)", lambda: load_spec(SEED), n)
    measure("validate_path(specs/) (7 specs + CRD skipped)", lambda: validate_path(ROOT / "specs"), max(5, n // 5))
    measure("reject YAML bomb (10^9 expansion)", lambda: validate_bytes(BOMB, "bomb"), max(5, n // 5))
    measure("reject 100k-deep nesting", lambda: validate_bytes(DEEP, "deep"), max(5, n // 5))
    cli = [sys.executable, "-m", "benchrun.cli", "validate", str(ROOT / "specs")]
    measure(
        "`benchrun validate specs/` cold process",
        lambda: subprocess.run(cli, cwd=ROOT, capture_output=True, check=True),
        max(3, n // 10),
    )


if __name__ == "__main__":
    main()
