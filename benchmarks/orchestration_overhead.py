"""The service's own overhead on a real run: (total wall − Σ suite process walls) / launches.

Runs `benchrun run SPEC` (default specs/local/canary.yaml) in a fresh $BENCHRUN_HOME as a
user would, then reads the run's launch records. "Total wall" is the whole CLI command,
from process start (interpreter, imports, Dagster instance) to exit; suite walls are the
launcher's own clock around each subprocess. Targets (issue 3): ≤ 0.3 s per launch and
≤ 10 % of the run.

    .venv/bin/python benchmarks/orchestration_overhead.py [SPEC] [--repeat N] [--code DIR ...] [--warm-home] [--warm-server]

``--code DIR`` (repeatable) measures the checkout at DIR instead of this one (its package
first on PYTHONPATH, the same interpreter), so two versions can be measured side by side:
with several, runs alternate between them (A B A B …) so that load drifts hit both alike.
CPU time (user + system of the command and every process it waited for, suites included)
is recorded beside wall time: on a shared machine wall time includes waiting for the CPU.

``--warm-home`` measures the second run in a home instead of the first: the home's Dagster
instance (its sqlite schemas) already exists, as on every run a user makes after the first.
The first, unmeasured run is made with the same code.

``--warm-server`` hands each measured command to a warm orchestrator (`benchrun serve`,
benchrun.warmstart) started before the series and not measured: the command's process is a
fork of a server that has already imported benchrun, Dagster and the analysis stack. The
home is still fresh (or warm with --warm-home): the server holds no Dagster instance.

Every checkout measured has its bytecode compiled first (what a machine without
PYTHONDONTWRITEBYTECODE has after its first run, and what `make` does), so that versions are
compared on the same footing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# Runs `benchrun ARGS...` in this interpreter and writes the process's own CPU time (all its
# threads, none of its children) to argv[1] when it exits.
WRAPPER = """
import atexit, json, resource, sys
out = sys.argv.pop(1)
def _cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    doc = {"cpu_s": round(r.ru_utime + r.ru_stime, 2)}
    served = getattr(sys.modules.get("benchrun.warmstart"), "last_usage", None)
    if served:  # the command ran in a warm orchestrator's child: its CPU and this client's
        child = served.get("self_cpu_s") or 0.0
        doc = {"cpu_s": round(child + doc["cpu_s"], 2), "with_children_cpu_s": served.get("cpu_s") or 0.0,
               "client_cpu_s": doc["cpu_s"]}
    open(out, "w").write(json.dumps(doc))
atexit.register(_cpu)
sys.argv[0] = "benchrun"
try:
    from benchrun.entry import main
except ImportError:  # a version before the warm orchestrator
    from benchrun.cli import main
main()
"""


def code_env(code: Path, home: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "BENCHRUN_WARM", "BENCHRUN_WARM_DIR")}
    env.update(PYTHONPATH=str(code), BENCHRUN_WARM="0")
    if home:
        env["BENCHRUN_HOME"] = home
    return env


def compile_bytecode(code: Path) -> None:
    """Cache the checkout's bytecode, as any machine without PYTHONDONTWRITEBYTECODE has after
    its first run (and `make` does): every version measured starts from the same footing."""
    from benchrun.warmstart import CODE_PACKAGES  # (this checkout's list: the packages are the same)

    dirs = [str(code / d) for d in CODE_PACKAGES if (code / d).is_dir()]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *dirs], check=True, stdout=subprocess.DEVNULL)


@contextlib.contextmanager
def warm_server(code: Path):
    """A warm orchestrator (`benchrun serve`) for ``code`` in a private socket directory; the
    environment that makes a command use it (and fail rather than start cold without it)."""
    if not (code / "benchrun" / "warmstart.py").is_file():
        raise SystemExit(f"{code}: this version has no warm orchestrator (benchrun serve)")
    with tempfile.TemporaryDirectory(prefix="bw-", dir="/tmp") as sockdir:
        env = {**code_env(code), "BENCHRUN_WARM_DIR": sockdir}
        started = subprocess.run([sys.executable, "-m", "benchrun.entry", "serve", "--detach", "--idle-timeout", "3600"],
                                 env=env, cwd=code, capture_output=True, text=True)
        if started.returncode != 0:
            raise SystemExit(f"benchrun serve --detach failed: {started.stderr[-2000:]}")
        try:
            yield {"BENCHRUN_WARM_DIR": sockdir, "BENCHRUN_WARM": "require"}
        finally:
            subprocess.run([sys.executable, "-m", "benchrun.entry", "serve", "--stop"], env=env, cwd=code,
                           capture_output=True)


def measure(spec: Path, code: Path = ROOT, warm_home: bool = False, served: dict | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="benchrun-overhead-") as home:
        env = {**code_env(code, home), **(served or {})}
        if warm_home:  # the unmeasured first run of this home
            first = subprocess.run([sys.executable, "-m", "benchrun.cli", "run", str(spec)], env=env, cwd=code,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if first.returncode not in (0, 1):
                raise SystemExit(f"the warm-up run failed: {first.stderr[-2000:]}")
            _figures_worker(code, Path(home), time.perf_counter())
        load = os.getloadavg()[0]
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        self_cpu = Path(home) / "orchestrator_cpu.json"
        proc = subprocess.run([sys.executable, "-c", WRAPPER, str(self_cpu), "run", str(spec)], env=env, cwd=code,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        total = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        worker = _figures_worker(code, Path(home), t0)
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        cpu_doc = json.loads(self_cpu.read_text()) if self_cpu.is_file() else {}
        orchestrator_cpu = cpu_doc.get("cpu_s")
        if "with_children_cpu_s" in cpu_doc:  # served: the child and its suites ran under the server
            cpu += cpu_doc["with_children_cpu_s"]
        runs = sorted((Path(home) / "runs").iterdir())
        if not runs:
            raise SystemExit(f"no run was created: {proc.stderr[-2000:]}")
        run_dir = runs[-1]
        launches = json.loads((run_dir / "structured" / f"{run_dir.name}_launches.json").read_text())
        suite_wall = sum(r["wall_s"] for r in launches)
        n = len(launches)
        status = json.loads((run_dir / "status.json").read_text())
        steps = step_durations(Path(home) / "dagster_home")
        layer_wall = sum(v for k, v in steps.items() if k.endswith("_layer"))
        return {
            "code": str(code),
            "home": "warm (second run)" if warm_home else "fresh (first run)",
            "process": "warm orchestrator (benchrun serve)" if served else "own process (cold start)",
            "load_avg_1m_at_start": round(load, 2),
            "exit_code": proc.returncode,
            "outcome": status.get("outcome"),
            "launches": n,
            "failed": sum(r["status"] == "failed" for r in launches),
            "total_wall_s": round(total, 2),
            "total_cpu_s": round(cpu, 2),
            # CPU of the benchrun process itself (Dagster, Pipes, analysis, report), without
            # the suites it launched: the overhead in CPU terms, which load does not inflate.
            "orchestrator_cpu_s": orchestrator_cpu,
            "orchestrator_cpu_per_launch_s": round(orchestrator_cpu / n, 3) if orchestrator_cpu else None,
            "orchestrator_cpu_share_pct": round(100 * orchestrator_cpu / cpu, 1) if orchestrator_cpu else None,
            # The report's figures, drawn by a detached worker after the command returned (when
            # the code has one): when the report was complete, and the worker's own cost.
            **worker,
            "suite_wall_s": round(suite_wall, 2),
            "overhead_per_launch_s": round((total - suite_wall) / n, 3),
            "overhead_share_pct": round(100 * (total - suite_wall) / total, 1),
            # Where the rest goes: inside the layer steps (launching, Pipes, progress,
            # records), in the analysis steps after them, and outside Dagster (CLI start).
            "in_layer_overhead_per_launch_s": round((layer_wall - suite_wall) / n, 3),
            "analysis_steps_s": round(sum(v for k, v in steps.items() if not k.endswith("_layer")), 2),
            "outside_steps_s": round(total - sum(steps.values()), 2),
            "steps_s": {k: round(v, 2) for k, v in steps.items()},
        }


def _figures_worker(code: Path, home: Path, t0: float) -> dict:
    """Wait for the run's figure worker, if this version of benchrun starts one; its cost."""
    if not (code / "benchrun" / "report" / "worker.py").is_file():
        return {}
    pids = home / "report_workers"
    while pids.is_dir() and any(pids.glob("*.pid")):
        time.sleep(0.05)
    done = time.perf_counter() - t0
    out = {"report_complete_after_s": round(done, 2)}
    for log in sorted((home / "runs").glob("*/reports/*_figures.log")):  # the last run's last
        for line in log.read_text().splitlines():
            if line.startswith('{"figures_worker'):
                out.update(json.loads(line))
    return out


def step_durations(dagster_home: Path) -> dict[str, float]:
    """Seconds per step of the (only) Dagster run in this instance, from its event log."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(dagster_home)
    with dg.DagsterInstance.get() as instance:
        run = instance.get_runs(limit=1)[0]
        start: dict[str, float] = {}
        out: dict[str, float] = {}
        for rec in instance.all_logs(run.run_id):
            ev = rec.dagster_event
            if ev is None or rec.step_key is None:
                continue
            if ev.event_type == dg.DagsterEventType.STEP_START:
                start[rec.step_key] = rec.timestamp
            elif ev.event_type in (dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE):
                out[rec.step_key] = rec.timestamp - start.get(rec.step_key, rec.timestamp)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("spec", nargs="?", default=str(ROOT / "specs/local/canary.yaml"))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--code", type=Path, action="append", help="checkout to measure (repeatable; default this one)")
    ap.add_argument("--warm-home", action="store_true", help="measure the second run in a home, not the first")
    ap.add_argument("--warm-server", action="store_true",
                    help="run each command through a warm orchestrator (benchrun serve) started beforehand, unmeasured")
    args = ap.parse_args()
    codes = [c.resolve() for c in args.code] if args.code else [ROOT]
    for code in codes:
        compile_bytecode(code)
    rows = []
    with contextlib.ExitStack() as stack:
        served = {c: stack.enter_context(warm_server(c)) if args.warm_server else None for c in codes}
        for _ in range(args.repeat):
            for code in codes:
                rows.append(measure(Path(args.spec).resolve(), code, args.warm_home, served[code]))
                print(json.dumps(rows[-1]), flush=True)
    if any(r["exit_code"] not in (0, 1) for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
