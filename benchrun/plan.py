"""Planning: a validated spec → one invocation per layer × suite × replicate.

Each invocation carries everything a launcher needs and nothing implicit: argv (placeholders
substituted one argument at a time, never through a shell), an explicit environment (a pod
will not inherit ours either), a timeout, and a stable ``benchmark_case_id``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from benchrun.errors import BenchrunError
from benchrun.paths import validate_name, validate_run_id
from benchrun.spec.placeholders import RUNTIME_NAMES, SITE_NAMES, substitute

LAYER_ORDER = ("micro", "component", "end_to_end")
# Default per-layer timeouts (seconds); a suite's ``timeoutSeconds`` overrides.
DEFAULT_TIMEOUT_S = {"micro": 600.0, "component": 900.0, "end_to_end": 1800.0}
# The environment a suite process starts with (besides BENCHRUN_*): what a container has.
_PASSTHROUGH_ENV = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ", "CUDA_VISIBLE_DEVICES")
SITE_VAR_PREFIX = "BENCHRUN_VAR_"


@dataclass(frozen=True)
class Invocation:
    """One replicate of one suite, ready to launch."""

    run_id: str
    layer: str
    suite: str
    replicate: int
    benchmark_case_id: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    timeout_s: float
    parameters: Mapping[str, Any] = field(default_factory=dict)
    image: str | None = None

    @property
    def key(self) -> str:
        return f"{self.suite}_r{self.replicate}"

    def log_relpath(self) -> str:
        return f"raw/{self.run_id}_{self.suite}_r{self.replicate}.log"

    def result_relpath(self) -> str:
        return f"structured/{self.run_id}_{self.suite}_r{self.replicate}.json"

    def to_json(self) -> dict[str, Any]:
        env = {k: v for k, v in self.env.items() if not k.startswith("DAGSTER_PIPES")}
        return {
            "run_id": self.run_id,
            "layer": self.layer,
            "suite": self.suite,
            "replicate": self.replicate,
            "benchmark_case_id": self.benchmark_case_id,
            "argv": list(self.argv),
            "env": env,
            "timeout_s": self.timeout_s,
            "parameters": dict(self.parameters),
            "image": self.image,
        }


@dataclass(frozen=True)
class LayerPlan:
    """A layer's invocations (empty and with a reason when the layer is disabled)."""

    name: str
    enabled: bool
    invocations: tuple[Invocation, ...]
    skip_reason: str | None = None

    @property
    def suites(self) -> list[str]:
        seen: dict[str, None] = {}
        for inv in self.invocations:
            seen.setdefault(inv.suite, None)
        return list(seen)


def case_id(run_id: str, layer: str, suite: str, parameters: Mapping[str, Any]) -> str:
    """Stable id of a benchmark case: the same run, layer, suite and parameters → same id."""
    blob = json.dumps([run_id, layer, suite, dict(parameters)], sort_keys=True, separators=(",", ":"), default=str)
    return "bc-" + hashlib.sha256(blob.encode()).hexdigest()[:16]


def site_values(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Values for site placeholders from ``BENCHRUN_VAR_<NAME>`` (SSH user, image, ...)."""
    environ = os.environ if environ is None else environ
    out = {n: environ[SITE_VAR_PREFIX + n] for n in SITE_NAMES if SITE_VAR_PREFIX + n in environ}
    if "SSH_USER" not in out and environ.get("USER"):
        out["SSH_USER"] = environ["USER"]
    return out


def build_argv(command: str, values: Mapping[str, str], *, where: str) -> tuple[str, ...]:
    """shlex-split what a person wrote, then substitute placeholders per argument."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise BenchrunError(f"{where}: cannot parse the command ({exc}); fix its quoting") from None
    if not words:
        raise BenchrunError(f"{where}: the command is empty")
    argv = []
    for word in words:
        try:
            argv.append(substitute(word, values))
        except KeyError as exc:
            name = exc.args[0]
            hint = (
                f"set {SITE_VAR_PREFIX}{name} in the environment"
                if name in SITE_NAMES
                else "use one of " + ", ".join(sorted(RUNTIME_NAMES | SITE_NAMES))
            )
            raise BenchrunError(f"{where}: placeholder ${{{name}}} has no value: {hint}") from None
    # `python` means the interpreter benchrun runs under (the venv here; the image's in a pod).
    if argv[0] in ("python", "python3"):
        argv[0] = sys.executable
    return tuple(argv)


def base_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The few variables a suite process inherits; everything else is explicit."""
    environ = os.environ if environ is None else environ
    env = {k: environ[k] for k in _PASSTHROUGH_ENV if k in environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def plan_run(
    run: Any,
    run_id: str,
    run_dir: Path,
    *,
    environ: Mapping[str, str] | None = None,
    hosts: str = "localhost",
    home: Path | None = None,
) -> list[LayerPlan]:
    """Every layer of ``run`` (a validated BenchmarkRun) as invocations, in layer order."""
    validate_run_id(run_id)
    spec = run.spec
    site = site_values(environ)
    env0 = base_env(environ)
    workload_json = run.workload_env_json()
    by_name = {layer.name: layer for layer in spec.layers}
    plans: list[LayerPlan] = []
    for layer_name in LAYER_ORDER:
        layer = by_name.get(layer_name)
        if layer is None or not layer.enabled:
            plans.append(LayerPlan(layer_name, False, (), "disabled in spec.layers"))
            continue
        invocations: list[Invocation] = []
        for i, suite in enumerate(layer.suites):
            where = f"spec.layers[{layer_name}].suites[{i}] ({suite.name})"
            validate_name(suite.name, what=f"{where}: suite name")
            params = dict(suite.parameters)
            cid = case_id(run_id, layer_name, suite.name, params)
            reps = run.replicates_for(suite)
            timeout = float(suite.timeout_seconds or DEFAULT_TIMEOUT_S[layer_name])
            for k in range(1, reps + 1):
                values = {
                    **site,
                    "RUN_ID": run_id,
                    "RUN_DIR": str(run_dir),
                    "REPLICATE": str(k),
                    "SUITE": suite.name,
                    "LAYER": layer_name,
                    "BENCHMARK_CASE_ID": cid,
                    "HOSTS": hosts,
                    "LABELS": "local",
                    "BENCHRUN_HOME": str(home or run_dir.parent.parent),
                }
                argv = build_argv(suite.repo_command, values, where=where)
                env = {
                    **env0,
                    "BENCHRUN_RUN_ID": run_id,
                    "BENCHRUN_RUN_DIR": str(run_dir),
                    "BENCHRUN_SUITE": suite.name,
                    "BENCHRUN_LAYER": layer_name,
                    "BENCHRUN_REPLICATE": str(k),
                    "BENCHRUN_CASE_ID": cid,
                    "BENCHRUN_PARAMS": json.dumps(params, sort_keys=True),
                    "BENCHRUN_WORKLOAD": workload_json,
                }
                invocations.append(
                    Invocation(run_id, layer_name, suite.name, k, cid, argv, env, timeout, params, suite.image)
                )
        # Interleave: replicate 1 of every suite, then replicate 2, ... so slow drift of the
        # machine (thermal, background load) spreads over suites instead of biasing one.
        invocations.sort(key=lambda inv: inv.replicate)
        plans.append(LayerPlan(layer_name, True, tuple(invocations)))
    return plans

