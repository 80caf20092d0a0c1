"""The ``job_startup`` suite: the launch timeline of a small Pipes-speaking Python process.

Parameters:
    launches    processes launched one after another (default 10)
    timeout_s   deadline per launch, seconds (default 60, at most 86400)

Each launch starts ``python -u -c <child>`` from an argv list. The child stamps
``time.time()`` as its first statement, opens a real Dagster Pipes channel
(``dagster_pipes.open_dagster_pipes`` with its default message writer on stdout, the
orchestration side being this suite), imports numpy, times one small matrix product and
reports it as a Pipes custom message, then exits. The parent stamps ``time.time()`` (one
clock, shared by processes on the host) when it asks for the launch, when ``Popen``
returns, when each Pipes message line arrives and when the process has exited.

Metrics (seconds from the launch request; ``_p50_s`` and ``_p99_s`` over launches):
``launch_to_spawn`` (fork+exec returned), ``launch_to_process_start`` (the child's first
statement runs: interpreter start-up), ``launch_to_first_pipes_message`` (the Pipes
``opened`` message reaches the parent), ``launch_to_first_measurement`` (the first
measured value reaches the parent) and ``launch_to_exit``. Each launch's stamps are kept in
``raw/<run_id>_job_startup_r<k>_launches.json``. The measured window (the telemetry
summaries') runs from the first launch request to the last child's exit. On Kubernetes the
launcher adds the scheduled/ready times that only the cluster knows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, NamedTuple

from benchrun.envcapture import package_versions
from benchrun.suites._common import Params, ParamError, check_known, float_param, int_param, percentile
from benchrun.suites._runtime import SuiteContext, Unavailable, main
from benchrun.fsio import atomic_write_json

# the parameters the suite takes (checked when it starts, and by `benchrun validate`)
PARAMETERS = ("launches", "timeout_s")
# the longest deadline of one launch: a finite one, which threading.Timer takes (above
# threading.TIMEOUT_MAX, or inf, the watchdog's thread died and a hung child had no deadline)
MAX_TIMEOUT_S = 86400.0

# The child program: a constant (never built from data).
CHILD = """\
import time
T0 = time.time()
from dagster_pipes import open_dagster_pipes
pipes = open_dagster_pipes()
T1 = time.time()
import numpy as np
a = np.ones((64, 64))
p0 = time.perf_counter()
total = float((a @ a).sum())
dt = time.perf_counter() - p0
T2 = time.time()
pipes.report_custom_message({"kind": "first_measurement", "t_process_start": T0, "t_pipes_opened": T1,
                             "t_measured": T2, "matmul_s": dt, "check": total})
pipes.close()
"""

PHASES = ("spawn", "process_start", "first_pipes_message", "first_measurement", "exit")
# the metrics the suite may report (`benchrun validate` checks a primary names one; reporting another fails)
METRICS = tuple(f"launch_to_{phase}_{q}_s" for phase in PHASES for q in ("p50", "p99"))


def _child_env(run_id: str) -> dict[str, str]:
    from dagster_pipes import encode_param

    env = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_PIPES")}
    context = {"asset_keys": None, "code_version_by_asset_key": None, "provenance_by_asset_key": None,
               "partition_key": None, "partition_key_range": None, "partition_time_window": None,
               "run_id": run_id, "job_name": "job_startup", "retry_number": 0, "extras": {}}
    env["DAGSTER_PIPES_CONTEXT"] = encode_param({"data": context})
    env["DAGSTER_PIPES_MESSAGES"] = encode_param({"stdio": "stdout"})
    return env


def launch_once(env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """Launch the child once and return its timeline (absolute time.time() stamps)."""
    messages: list[tuple[float, dict[str, Any]]] = []
    with tempfile.TemporaryFile() as err:
        t_launch = time.time()
        proc = subprocess.Popen([sys.executable, "-u", "-c", CHILD], stdout=subprocess.PIPE, stderr=err,
                                stdin=subprocess.DEVNULL, env=env, text=True)
        t_spawned = time.time()
        # A hung child never closes stdout: the watchdog kills it, which ends the read loop.
        fired = threading.Event()

        def _kill() -> None:
            fired.set()
            proc.kill()

        watchdog = threading.Timer(timeout_s, _kill)
        watchdog.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                stamp = time.time()
                try:
                    msg = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(msg, dict) and "__dagster_pipes_version" in msg:
                    messages.append((stamp, msg))
            proc.wait()
        finally:
            watchdog.cancel()
        if fired.is_set():
            raise RuntimeError(f"child did not finish within {timeout_s}s (killed)")
        t_exit = time.time()
        err.seek(0)
        stderr = err.read().decode("utf-8", "replace")
    if proc.returncode != 0:
        raise RuntimeError(f"child exited {proc.returncode}: {stderr.strip()[-500:]}")
    if not messages:
        raise RuntimeError(f"child sent no Pipes messages: {stderr.strip()[-500:]}")
    measured = [(s, m) for s, m in messages
                if m.get("method") == "report_custom_message"
                and (m.get("params") or {}).get("payload", {}).get("kind") == "first_measurement"]
    if not measured:
        raise RuntimeError(f"child sent no measurement; methods seen: {[m.get('method') for _, m in messages]}")
    payload = measured[0][1]["params"]["payload"]
    return {
        "t_launch": t_launch,
        "t_spawn": t_spawned,
        "t_process_start": payload["t_process_start"],
        "t_first_pipes_message": messages[0][0],
        "first_pipes_method": messages[0][1].get("method"),
        "t_first_measurement": measured[0][0],
        "t_exit": t_exit,
        "child_t_pipes_opened": payload["t_pipes_opened"],
        "child_t_measured": payload["t_measured"],
        "child_matmul_s": payload["matmul_s"],
    }


class Settings(NamedTuple):
    """The suite's parameters, parsed."""

    launches: int
    timeout_s: float


def settings(ctx: Params) -> Settings:
    """The parameters, checked (ParamError): the suite's first step, and ``benchrun validate``'s."""
    check_known(ctx, PARAMETERS)
    launches = int_param(ctx, "launches", 10, minimum=1, maximum=10_000)
    timeout_s = float_param(ctx, "timeout_s", 60.0)
    if not timeout_s <= MAX_TIMEOUT_S:
        raise ParamError(f"parameter timeout_s={ctx.params['timeout_s']!r} must be a number of seconds > 0 and "
                         f"<= {MAX_TIMEOUT_S:g} (the deadline of one launch); give e.g. 60")
    return Settings(launches, timeout_s)


def run(ctx: SuiteContext) -> None:
    """Launch the child ``launches`` times; report percentiles of each phase of the timeline."""
    launches, timeout_s = settings(ctx)
    try:
        import dagster_pipes  # noqa: F401  (the child's channel: present here, or no launch can report)
    except ImportError:
        raise Unavailable("dagster-pipes not installed") from None
    env = _child_env(ctx.run_id)
    ctx.context.update({"python": sys.executable, "python_version": sys.version.split()[0],
                        "dagster_pipes_version": package_versions(("dagster-pipes",))["dagster-pipes"],
                        "channel": "dagster_pipes default message writer on stdout (python -u)",
                        "clock": "time.time() in parent and child (one host)"})
    timelines = []
    for i in range(launches):
        t = launch_once(env, timeout_s)
        t["launch"] = i
        timelines.append(t)
        ctx.log(f"job_startup launch {i}: process start +{t['t_process_start'] - t['t_launch']:.3f}s, "
                f"first Pipes message +{t['t_first_pipes_message'] - t['t_launch']:.3f}s, "
                f"first measurement +{t['t_first_measurement'] - t['t_launch']:.3f}s")
    # the telemetry summaries' window: the launches, from the first request to the last exit
    ctx.measured_spans.append((min(t["t_launch"] for t in timelines), max(t["t_exit"] for t in timelines)))
    path = atomic_write_json(ctx.raw_file("launches", "json"), {"unit": "unix seconds", "launches": timelines})
    ctx.samples["launches"] = str(path.relative_to(ctx.run_dir))
    for phase in PHASES:
        values = [t[f"t_{phase}"] - t["t_launch"] for t in timelines]
        if min(values) < -0.01:  # a child stamp before the request means the clocks are not shared
            raise RuntimeError(f"job_startup: {phase} stamped {min(values):.3f}s before the launch request")
        ctx.add_metric(f"launch_to_{phase}_p50_s", percentile(values, 50), "s", "lower")
        ctx.add_metric(f"launch_to_{phase}_p99_s", percentile(values, 99), "s", "lower", samples=len(values))


if __name__ == "__main__":
    main(run)
