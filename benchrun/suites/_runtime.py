"""What every built-in suite shares: its invocation, Pipes reporting, and its result file.

Standard library + dagster-pipes only (this runs in benchmark pods). A suite module
defines ``run(ctx: SuiteContext) -> None`` and ends with ``main(run)``. The launcher
passes the invocation through the environment (never through a shell):

    BENCHRUN_RUN_ID, BENCHRUN_RUN_DIR, BENCHRUN_SUITE, BENCHRUN_REPLICATE,
    BENCHRUN_CASE_ID, BENCHRUN_PARAMS (a JSON object of suite parameters),
    BENCHRUN_WORKLOAD (a JSON object: ``spec.workload`` in the spec's own spelling, plus
    ``slo`` and ``pricing`` from ``spec.metrics.inference`` when declared, else null)

When run by hand without them, defaults make a scratch run in a temporary directory.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from benchrun.suites.result import SCHEMA, metric, raw_path, result_path
from benchrun.fsio import atomic_write_json


class Unavailable(Exception):
    """Raised by a suite when a measurement cannot run here (``unavailable: <reason>``)."""


def param_value(suite: str, params: dict[str, Any], name: str, default: Any) -> Any:
    """Parameter ``name`` of ``params``, coerced to the type of ``default`` (a clear error if not)."""
    if name not in params:
        return default
    value = params[name]
    if default is None or isinstance(value, type(default)):
        return value
    try:
        if isinstance(default, bool):
            if isinstance(value, str) and value.lower() in ("true", "false"):
                return value.lower() == "true"
            raise ValueError
        if isinstance(default, list):
            return [type(default[0])(v) for v in value] if default else list(value)
        return type(default)(value)
    except (TypeError, ValueError):
        # A ValueError (not SystemExit) so main() records a failed replicate with this reason.
        raise ValueError(f"suite {suite}: parameter {name}={value!r} should be {type(default).__name__}") from None


def process_start_time(stat_path: str = "/proc/self/stat") -> tuple[float, str]:
    """This process's start as a Unix time, and where it came from.

    The kernel's own start stamp: field 22 of /proc/self/stat, clock ticks since boot, set
    by fork/exec before the interpreter and its imports ran; placed on the wall clock through
    CLOCK_BOOTTIME (the clock that count is on). Where that cannot be read (not Linux, no
    /proc), the current time, said so in the source: a start that late leaves the
    interpreter's start and the imports out of what is timed from it."""
    try:
        with open(stat_path, encoding="ascii", errors="replace") as fh:
            stat = fh.read()
        fields = stat[stat.rindex(")") + 2:].split()  # the name in () may hold spaces
        ticks = int(fields[19])  # field 22; fields[0] is field 3 (state)
        hz = os.sysconf("SC_CLK_TCK")
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / hz
        now = time.time()
        if hz <= 0 or age < 0:
            raise ValueError(f"process age {age} s from {ticks} ticks at {hz} Hz")
        return now - age, f"{stat_path} starttime ({ticks} ticks at {hz} Hz since boot, against CLOCK_BOOTTIME)"
    except (OSError, ValueError, IndexError, AttributeError) as exc:
        return time.time(), (f"the suite context's creation, after the interpreter started and imported the suite "
                             f"({stat_path} unreadable: {type(exc).__name__}: {exc})")


def _utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


class SuiteContext:
    """One replicate of one suite: parameters in, metrics and files out."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ if env is None else env)
        # the process's real start (the kernel's stamp), else now, ``t_process_start_source`` says which
        self.t_process_start, self.t_process_start_source = process_start_time()
        self.run_id = env.get("BENCHRUN_RUN_ID", "scratch")
        run_dir = env.get("BENCHRUN_RUN_DIR") or tempfile.mkdtemp(prefix="benchrun-scratch-")
        self.run_dir = Path(run_dir)
        self.suite = env.get("BENCHRUN_SUITE", Path(sys.argv[0]).stem or "suite")
        self.replicate = int(env.get("BENCHRUN_REPLICATE", "1"))
        self.case_id = env.get("BENCHRUN_CASE_ID")
        # a contended rerun's attempt (2, ...) and a launch outside the run's own round
        # ("confirmation"): benchrun.plan.ATTEMPT_ENV and SCOPE_ENV
        self.attempt = int(env.get("BENCHRUN_ATTEMPT", "1") or 1)
        self.launch_scope = env.get("BENCHRUN_LAUNCH_SCOPE") or None
        self.pod_uid = env.get("BENCHRUN_POD_UID") or None  # a Kubernetes pod's (downward API)
        # A node of a multi-node gang (set by the launcher): node 0 writes the replicate's
        # result document, node i > 0 its own beside the logs (the launcher reads its reason).
        self.node_rank = int(env.get("BENCHRUN_NODE_RANK", "0") or 0)
        self.nodes = int(env.get("BENCHRUN_NODES", "1") or 1)
        try:
            params = json.loads(env.get("BENCHRUN_PARAMS", "{}") or "{}")
        except json.JSONDecodeError as exc:
            raise SystemExit(f"BENCHRUN_PARAMS is not JSON: {exc}") from exc
        if not isinstance(params, dict):
            raise SystemExit("BENCHRUN_PARAMS must be a JSON object")
        self.params: dict[str, Any] = params
        try:
            workload = json.loads(env.get("BENCHRUN_WORKLOAD", "{}") or "{}")
        except json.JSONDecodeError as exc:
            raise SystemExit(f"BENCHRUN_WORKLOAD is not JSON: {exc}") from exc
        self.workload: dict[str, Any] = workload if isinstance(workload, dict) else {}
        self.metrics: list[dict[str, Any]] = []
        # the suite module's METRICS (set by main): a name outside it is refused (validate reads the same list)
        self.declared_metrics: frozenset[str] | None = None
        self.context: dict[str, Any] = {}
        try:
            declared = json.loads(env.get("BENCHRUN_SUITE_ENV", "{}") or "{}")
        except json.JSONDecodeError as exc:
            raise SystemExit(f"BENCHRUN_SUITE_ENV is not JSON: {exc}") from exc
        if isinstance(declared, dict) and declared:
            # what the spec asked for (env: and `env NAME=value` in the command) and what this
            # process really has: the environment the suite ran with, in its result
            self.context["suite_env"] = {"declared": declared, "seen": {k: env.get(k) for k in sorted(declared)}}
        self.samples: dict[str, str] = {}
        self.serving: list[dict[str, Any]] = []
        self.training: list[dict[str, Any]] = []
        self.measured_spans: list[tuple[float, float]] = []  # (start, end) unix seconds: ctx.measuring()
        self.synthetic = False
        # In a pod the run directory dies with the container: the Kubernetes launcher reads
        # the result document from one stdout line instead (benchrun.launch.kubernetes).
        self.result_to_stdout = env.get("BENCHRUN_RESULT_STDOUT") == "1"
        self.started_utc = _utc()
        for sub in ("structured", "raw", "figures"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        self._pipes = _open_pipes()
        if env.get("BENCHRUN_CAPTURE_ENVIRONMENT") == "1":
            self._capture_environment(env)

    def _capture_environment(self, env: dict[str, str]) -> None:
        """In a pod: the environment of the node this replicate runs on (benchrun.launch.podenv)."""
        try:
            from benchrun.envcapture import capture_environment

            doc = capture_environment(load_interval_s=0.2)
            doc["run_id"] = self.run_id
            doc["pod"] = {"node_name": env.get("BENCHRUN_NODE_NAME"), "pod_name": env.get("BENCHRUN_POD_NAME"),
                          "pod_uid": env.get("BENCHRUN_POD_UID"), "namespace": env.get("BENCHRUN_POD_NAMESPACE")}
            kind = "environment" if self.node_rank == 0 else f"node{self.node_rank}_environment"
            atomic_write_json(self.raw_file(kind, "json"), doc)
        except Exception as exc:  # capture must never fail a measurement
            print(f"benchrun: environment capture failed: {exc}", file=sys.stderr, flush=True)

    # -- parameters -------------------------------------------------------------
    def param(self, name: str, default: Any) -> Any:
        """A suite parameter, coerced to the type of ``default`` (a clear error if not)."""
        return param_value(self.suite, self.params, name, default)

    # -- reporting --------------------------------------------------------------
    def add_metric(self, name: str, value: float, unit: str, direction: str, case: str = "", **keys: Any) -> None:
        """Record one headline metric of this replicate (and stream it over Pipes)."""
        if self.declared_metrics is not None and name not in self.declared_metrics:
            raise RuntimeError(f"{self.suite} reported metric {name!r}, which its module's METRICS does not list "
                               f"({', '.join(sorted(self.declared_metrics))}): `benchrun validate` judges primaries "
                               "by that list; add the name to it")
        row = metric(name, value, unit, direction, case, **keys)
        self.metrics.append(row)
        self.message({"kind": "metric", **row})

    def message(self, payload: dict[str, Any]) -> None:
        """A custom Pipes message (progress, metrics); a no-op outside Dagster."""
        if self._pipes is not None:
            try:
                self._pipes.report_custom_message(payload)
            except Exception:  # reporting must never fail a measurement
                pass

    def measuring(self) -> "_Measuring":
        """``with ctx.measuring():`` around the timed work: the replicate's telemetry summaries (CPU and
        GPU utilization, background load) are taken over these spans, not over the whole process
        (imports, CUDA start-up, allocation), which halved a GPU suite's utilization in review."""
        return _Measuring(self.measured_spans)

    def log(self, text: str) -> None:
        """A line to stderr (kept in raw/) and to the Dagster log when under Pipes."""
        print(text, file=sys.stderr, flush=True)
        if self._pipes is not None:
            try:
                self._pipes.log.info(text)
            except Exception:
                pass

    def raw_file(self, kind: str, ext: str) -> Path:
        """A path in raw/ named ``<run_id>_<suite>_r<k>_<kind>.<ext>``."""
        return raw_path(self.run_dir, self.run_id, self.suite, self.replicate, kind, ext)

    def finish(self, status: str, reason: str | None = None) -> Path:
        """Write the result document atomically and close Pipes."""
        doc = {
            "schema": SCHEMA,
            "run_id": self.run_id,
            "suite": self.suite,
            "replicate": self.replicate,
            "benchmark_case_id": self.case_id,
            "status": status,
            "reason": reason,
            "synthetic": self.synthetic,
            "started_utc": self.started_utc,
            "finished_utc": _utc(),
            "parameters": self.params,
            "context": self.context,
            "metrics": self.metrics,
            "samples": self.samples,
        }
        if self.serving:
            doc["serving"] = self.serving
        if self.training:
            doc["training"] = self.training
        if self.measured_spans:  # what the replicate's telemetry summaries are taken over (telemetry.hook)
            doc["measured_window"] = {"start_unix": min(a for a, _ in self.measured_spans),
                                      "end_unix": max(b for _, b in self.measured_spans)}
        if self.node_rank == 0:
            target = result_path(self.run_dir, self.run_id, self.suite, self.replicate)
        else:
            doc["node_rank"] = self.node_rank
            target = self.raw_file(f"node{self.node_rank}_result", "json")
        path = atomic_write_json(target, doc)
        if self.result_to_stdout:
            # A leading newline so the line starts fresh even after a partial line.
            line = json.dumps({"__benchrun_result__": doc}, sort_keys=True, separators=(",", ":"), default=str)
            sys.stdout.write("\n" + line + "\n")
            sys.stdout.flush()
        self.message({"kind": "result", "status": status, "reason": reason, "path": str(path)})
        if self._pipes is not None:
            try:
                self._pipes.close()
            except Exception:
                pass
        return path


def _open_pipes() -> Any:
    try:
        from dagster_pipes import PipesEnvVarParamsLoader, open_dagster_pipes
    except ImportError:
        return None
    loader = PipesEnvVarParamsLoader()
    if not loader.is_dagster_pipes_process():
        return None
    try:
        params = loader.load_messages_params()
    except Exception:
        params = {}
    try:
        if isinstance(params, dict) and "bucket" in params:
            # dagster-aws's PipesS3MessageReader on the other side (launcher pipes_messages: s3):
            # write message chunks to that bucket (endpoint and credentials from the environment).
            import boto3
            from dagster_pipes import PipesS3MessageWriter

            client = boto3.client("s3", endpoint_url=os.environ.get("BENCHRUN_S3_ENDPOINT_URL") or None)
            return open_dagster_pipes(message_writer=PipesS3MessageWriter(client=client, interval=1.0))
        return open_dagster_pipes()
    except Exception:
        return None


def main(run: Callable[[SuiteContext], None]) -> None:
    """Run a suite body; turn Unavailable/errors into a result document and exit code.

    ``unavailable`` exits 0 (the suite did what it could and said why); a failure exits 1
    with the traceback in the log and ``status: failed`` in the result.
    """
    ctx = SuiteContext()
    declared = getattr(sys.modules.get(run.__module__), "METRICS", None)
    ctx.declared_metrics = frozenset(declared) if declared is not None else None
    # The launcher ends a suite past its timeout (or canceled) with SIGTERM: as an exit, so its finally
    # blocks run (fio's scratch files went unremoved, Python's default for SIGTERM being to die at once)
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    try:
        run(ctx)
    except Unavailable as exc:
        reason = str(exc)
        reason = reason if reason.startswith("unavailable:") else f"unavailable: {reason}"
        ctx.log(reason)
        ctx.finish("unavailable", reason)
        sys.exit(0)
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - a suite failure is recorded, then re-raised as exit 1
        traceback.print_exc()
        ctx.finish("failed", f"{type(exc).__name__}: {exc}")
        sys.exit(1)
    ctx.finish("ok")


class _Measuring:
    def __init__(self, spans: list[tuple[float, float]]) -> None:
        self.spans = spans

    def __enter__(self) -> None:
        self.t0 = time.time()

    def __exit__(self, *exc: Any) -> None:
        self.spans.append((self.t0, time.time()))
