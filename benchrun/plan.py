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
from benchrun.fsio import atomic_write_json
from benchrun.paths import validate_name, validate_run_id
from benchrun.spec.commandline import ENV_NAME, command_index  # noqa: F401 (command_index re-exported)
from benchrun.spec.model import _check_env_name
from benchrun.spec.placeholders import GANG_NAMES, RUNTIME_NAMES, SITE_NAMES, SITE_VAR_PREFIX, substitute

LAYER_ORDER = ("micro", "component", "end_to_end")
# Default per-layer timeouts (seconds); a suite's ``timeoutSeconds`` overrides.
DEFAULT_TIMEOUT_S = {"micro": 600.0, "component": 900.0, "end_to_end": 1800.0}
# The environment a suite process starts with (besides BENCHRUN_*): what a container has,
# plus PYTHONPATH so `python -m benchrun.suites.x` imports the same benchrun as the caller
# (a worktree's, not the editable install's); the Kubernetes pod drops it (podspec).
_PASSTHROUGH_ENV = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "TZ", "CUDA_VISIBLE_DEVICES", "PYTHONPATH")
# The rendezvous port a single-node suite's ${MASTER_PORT} resolves to (torchrun's default);
# gangs get theirs from the launcher (a free loopback port here, this one in a JobSet).
DEFAULT_MASTER_PORT = 29500
# A gang placeholder stays in a multi-node invocation's argv as NUL-delimited text (which no
# spec, path or site value can contain) until a launcher resolves it per node.
_GANG_MARK = "\x00"


def gang_mark(name: str) -> str:
    """The stand-in a multi-node argv holds for the gang placeholder ``name`` (or HOSTS)."""
    return f"{_GANG_MARK}{name}{_GANG_MARK}"


_AS_WRITTEN = {name: "${" + name + "}" for name in (*GANG_NAMES, "HOSTS")}


def resolve_gang(word: str, values: Mapping[str, str]) -> str:
    """``word`` with every gang stand-in replaced by its value (KeyError names a missing one)."""
    if _GANG_MARK not in word:
        return word
    parts = word.split(_GANG_MARK)
    # split gives text, name, text, name, ..., text: the odd items are names.
    return "".join(values[p] if i % 2 else p for i, p in enumerate(parts))


# Set on a launch that is not its replicate's first sending of the workload, so a serving suite
# salts its prompts apart from it (benchrun.loadgen.suite.prompt_salt_of; read by
# benchrun.suites._runtime.SuiteContext) and a long-lived server's prefix cache does not serve the
# words an earlier launch sent: the attempt of a contended rerun (2, 3, ...; benchrun.launch.rerun)
# and the scope of a launch made outside the run's own round (``confirmation``: benchrun.confirm,
# whose replicates reuse the run's id and numbers).
ATTEMPT_ENV = "BENCHRUN_ATTEMPT"
SCOPE_ENV = "BENCHRUN_LAUNCH_SCOPE"


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
    # A multi-node suite: one launch is a gang of ``nodes`` nodes, ``ranks_per_node`` ranks
    # each (spec ``gpusPerNode``, at least 1); argv holds gang stand-ins until resolved.
    nodes: int = 1
    ranks_per_node: int = 1
    gpus_per_node: int | None = None
    network: str | None = None  # spec ``network``: rdma asks the JobSet for RDMA devices
    # Per-pod resources from the spec (None: the launcher resource's default); Kubernetes only.
    gpus: int | None = None
    cpu: str | None = None
    memory: str | None = None
    shm_size: str | None = None
    # What the spec's ``env`` and a leading ``env NAME=value`` of the command set for the suite:
    # recorded with the plan (the environment the suite ran with).
    suite_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.suite}_r{self.replicate}"

    @property
    def is_gang(self) -> bool:
        return self.nodes > 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    def node_log_relpath(self, node_rank: int) -> str:
        """Node 0 logs where a single-node launch does; node i > 0 beside it."""
        if node_rank == 0:
            return self.log_relpath()
        return f"raw/{self.run_id}_{self.suite}_r{self.replicate}_node{node_rank}.log"

    def node_result_relpath(self, node_rank: int) -> str:
        """Node 0 writes the replicate's result document; node i > 0 its own, in raw/."""
        if node_rank == 0:
            return self.result_relpath()
        return f"raw/{self.run_id}_{self.suite}_r{self.replicate}_node{node_rank}_result.json"

    def node_argv(self, node_rank: int, *, master_addr: str, master_port: int, hosts: str) -> tuple[str, ...]:
        """argv of one node of the gang, with ${NODE_RANK}, ${MASTER_ADDR}, ... resolved."""
        values = {"NODE_RANK": str(node_rank), "MASTER_ADDR": master_addr, "MASTER_PORT": str(master_port),
                  "NNODES": str(self.nodes), "HOSTS": hosts}
        return tuple(resolve_gang(w, values) for w in self.argv)

    def node_env(self, node_rank: int, *, master_addr: str, master_port: int, node_name: str | None = None) -> dict[str, str]:
        """The rendezvous variables one node of the gang gets (torchrun's names, plus ours)."""
        env = {
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(master_port),
            "NODE_RANK": str(node_rank),
            "GROUP_RANK": str(node_rank),
            "NNODES": str(self.nodes),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_WORLD_SIZE": str(self.ranks_per_node),
            "BENCHRUN_NODE_RANK": str(node_rank),
            "BENCHRUN_NODES": str(self.nodes),
        }
        if self.ranks_per_node == 1:
            # one rank per node: the node's process is the rank (env:// rendezvous works as is)
            env.update(RANK=str(node_rank), LOCAL_RANK="0")
        if node_name:
            env["BENCHRUN_NODE_NAME"] = node_name
        return env

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
            # a gang's argv as written: its stand-ins shown as the placeholders they came from
            "argv": [resolve_gang(w, _AS_WRITTEN) for w in self.argv],
            "env": env,
            "timeout_s": self.timeout_s,
            "parameters": dict(self.parameters),
            "image": self.image,
            "nodes": self.nodes,
            "ranks_per_node": self.ranks_per_node,
            "gpus_per_node": self.gpus_per_node,
            "network": self.network,
            "gpus": self.gpus,
            "cpu": self.cpu,
            "memory": self.memory,
            "shm_size": self.shm_size,
            "suite_env": dict(self.suite_env),
        }


@dataclass(frozen=True)
class LayerPlan:
    """A layer's invocations (empty and with a reason when the layer is disabled)."""

    name: str
    enabled: bool
    invocations: tuple[Invocation, ...]
    skip_reason: str | None = None
    contended_reruns: int = 0  # spec.trials.contendedReruns (default 1 there): launches again of a contended replicate

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
    # admission refuses a placeholder in a leading env's NAME; checked again on what will run, so
    # no substituted value can name a variable benchrun sets (BENCHRUN_PARAMS, the rendezvous)
    at = command_index(argv)
    for word in argv[1:at or 1]:
        if "=" in word and not word.startswith("-"):
            name = word.split("=", 1)[0]
            try:
                if not ENV_NAME.match(name):
                    raise ValueError("is not a variable name (letters, digits and _)")
                _check_env_name(name)
            except ValueError as exc:
                raise BenchrunError(f"{where}: `env {name}=...` in the command: {exc}; write the suite's own "
                                    "variable as NAME=value (or in its env: map)") from None
    # `python` means the interpreter benchrun runs under (the venv here; the image's in a pod),
    # also after `env VAR=value ...`, as people write it to pin threads.
    if at is not None and argv[at] in ("python", "python3"):
        argv[at] = sys.executable
    return tuple(argv)


# env(1) options that take a value as the next word.
def env_assignments(argv: tuple[str, ...]) -> dict[str, str]:
    """The ``NAME=value`` words of a leading ``env`` in ``argv`` (what the suite ran with)."""
    at = command_index(argv)
    if not at:
        return {}
    return dict(w.split("=", 1) for w in argv[1:at] if "=" in w and not w.startswith("-"))


def base_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The few variables a suite process inherits; everything else is explicit."""
    environ = os.environ if environ is None else environ
    env = {k: environ[k] for k in _PASSTHROUGH_ENV if k in environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def replicate_plan_path(run_dir: Path, run_id: str) -> Path:
    """Where a ``replicates: auto`` run records the replicates it decided on."""
    return Path(run_dir) / "structured" / f"{run_id}_replicate_plan.json"


def recorded_replicates(run: Any, run_id: str, run_dir: Path) -> dict[str, int] | None:
    """The replicates an ``auto`` run recorded (suite → count), checked against the spec's
    bounds; None when nothing is recorded. A record that cannot be read or holds counts outside
    [minReplicates, maxReplicates] is an error naming the file: re-planning would change the
    run's replicates under it."""
    path = replicate_plan_path(run_dir, run_id)
    if not path.is_file():
        return None
    trials = run.spec.trials
    low, high = trials.min_replicates, max(trials.max_replicates, trials.min_replicates)
    try:
        suites = json.loads(path.read_text(encoding="utf-8"))["suites"]
        out = {str(k): v["replicates"] for k, v in suites.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BenchrunError(f"{path}: the run's replicate plan cannot be read ({exc}); it is the record of how "
                            "many replicates this run runs: restore it, or submit a new run") from None
    for suite, n in out.items():
        if not isinstance(n, int) or isinstance(n, bool) or not low <= n <= high:
            raise BenchrunError(f"{path}: suites.{suite}.replicates is {n!r}; it must be a whole number in "
                                f"[trials.minReplicates, trials.maxReplicates] = [{low}, {high}]: restore the "
                                "record, or submit a new run")
    return out


def auto_replicates(run: Any, run_id: str, run_dir: Path, home: Path | None, *, record: bool = True
                    ) -> dict[str, int]:
    """``trials.replicates: auto``: suite → planned replicates, decided once per run from the
    history (:func:`benchrun.stats.planning.auto_replicates`) and recorded in
    ``structured/<run_id>_replicate_plan.json`` (unless ``record`` is false: a preview such as
    ``benchrun render``), which later plannings of the run (layers, confirmation rounds) read
    back, so a run's replicates never change under it."""
    trials = run.spec.trials
    if getattr(trials, "replicates", None) != "auto":
        return {}
    recorded = recorded_replicates(run, run_id, run_dir)
    if recorded is not None:
        return recorded
    from benchrun.stats.planning import auto_replicates as planned

    suites = [s.name for layer in run.spec.layers if layer.enabled for s in layer.suites if s.replicates is None]
    from benchrun.spec.normal import WorkloadDigests

    try:
        status = json.loads((run_dir / "status.json").read_text(encoding="utf-8"))
        digest = WorkloadDigests.of_status(status if isinstance(status, dict) else {})
    except (OSError, ValueError):
        digest = None
    doc = run.model_dump(mode="json", by_alias=True, exclude_none=True)
    where = Path(home) if home is not None else run_dir.parent.parent
    decided = planned(doc, digest, where, suites, trials.min_replicates, max(trials.max_replicates,
                                                                              trials.min_replicates))
    if record:
        path = replicate_plan_path(run_dir, run_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, {"rule": "trials.replicates: auto (benchrun plan, 80 % power to detect deltaPct)",
                                 "min": trials.min_replicates, "max": trials.max_replicates, "suites": decided})
    return {k: int(v["replicates"]) for k, v in decided.items()}


def planned_replicates(run: Any, run_id: str, run_dir: Path) -> dict[str, int]:
    """Suite → the replicates the run at ``run_dir`` runs, as it planned them: its own count,
    trials.minReplicates, or for ``replicates: auto`` the recorded plan (never planned again: a
    run without its record is an error naming the file)."""
    auto: dict[str, int] = {}
    if getattr(run.spec.trials, "replicates", None) == "auto":
        got = recorded_replicates(run, run_id, run_dir)
        if got is None:
            raise BenchrunError(f"{replicate_plan_path(run_dir, run_id)}: missing; a run with trials.replicates: "
                                "auto records its plan when it is admitted, and its replicates are read from there")
        auto = got
    return {s.name: auto.get(s.name, run.replicates_for(s)) if s.replicates is None else run.replicates_for(s)
            for layer in run.spec.layers for s in layer.suites}


def plan_run(
    run: Any,
    run_id: str,
    run_dir: Path,
    *,
    environ: Mapping[str, str] | None = None,
    hosts: str = "localhost",
    home: Path | None = None,
    replicates: int | Mapping[str, int] | None = None,
    record_plan: bool = True,
) -> list[LayerPlan]:
    """Every layer of ``run`` (a validated BenchmarkRun) as invocations, in layer order.

    ``replicates`` overrides how many replicates each suite runs (an int: every suite; a
    mapping: the suites it names), as a confirmation round does; otherwise a suite runs its own
    count, or trials.minReplicates, or its ``replicates: auto`` plan (recorded in ``run_dir``
    unless ``record_plan`` is false)."""
    validate_run_id(run_id)
    spec = run.spec
    site = site_values(environ)
    env0 = base_env(environ)
    workload_json = run.workload_env_json()
    sampling = spec.observability.telemetry_sampling
    telemetry_hz = "1" if sampling is None else (f"{sampling.rate_hz:g}" if sampling.enabled else "0")
    by_name = {layer.name: layer for layer in spec.layers}
    if isinstance(replicates, int):
        counts: Mapping[str, int] = {s.name: replicates for layer in spec.layers for s in layer.suites}
    elif replicates is not None:
        counts = replicates
    else:
        counts = auto_replicates(run, run_id, Path(run_dir), home, record=record_plan)
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
            reps = int(counts[suite.name]) if suite.name in counts else run.replicates_for(suite)
            timeout = float(suite.timeout_seconds or DEFAULT_TIMEOUT_S[layer_name])
            nodes = int(getattr(suite, "nodes", 1) or 1)
            gpus_per_node = getattr(suite, "gpus_per_node", None)
            if nodes > 1:
                gang = {name: gang_mark(name) for name in (*GANG_NAMES, "HOSTS")}
            else:
                gang = {"NODE_RANK": "0", "MASTER_ADDR": "localhost", "MASTER_PORT": str(DEFAULT_MASTER_PORT),
                        "NNODES": "1", "HOSTS": hosts}
            for k in range(1, reps + 1):
                values = {
                    **site,
                    "RUN_ID": run_id,
                    "RUN_DIR": str(run_dir),
                    "REPLICATE": str(k),
                    "SUITE": suite.name,
                    "LAYER": layer_name,
                    "BENCHMARK_CASE_ID": cid,
                    **gang,
                    "LABELS": "local",
                    "BENCHRUN_HOME": str(home or run_dir.parent.parent),
                }
                argv = build_argv(suite.repo_command, values, where=where)
                suite_env = {**dict(getattr(suite, "env", None) or {}), **env_assignments(argv)}
                env = {
                    **env0,
                    **dict(getattr(suite, "env", None) or {}),  # the spec's env: data, never a shell string
                    "BENCHRUN_RUN_ID": run_id,
                    "BENCHRUN_RUN_DIR": str(run_dir),
                    "BENCHRUN_SUITE": suite.name,
                    "BENCHRUN_LAYER": layer_name,
                    "BENCHRUN_REPLICATE": str(k),
                    "BENCHRUN_CASE_ID": cid,
                    "BENCHRUN_PARAMS": json.dumps(params, sort_keys=True),
                    "BENCHRUN_WORKLOAD": workload_json,
                    "BENCHRUN_TELEMETRY_HZ": telemetry_hz,  # read by benchrun.telemetry's hook
                    # the spec's env: and the command's `env NAME=value`: recorded in the result
                    "BENCHRUN_SUITE_ENV": json.dumps(suite_env, sort_keys=True),
                }
                invocations.append(
                    Invocation(run_id, layer_name, suite.name, k, cid, argv, env, timeout, params, suite.image,
                               nodes=nodes, ranks_per_node=max(1, gpus_per_node or 1), gpus_per_node=gpus_per_node,
                               gpus=getattr(suite, "gpus", None), cpu=getattr(suite, "cpu", None),
                               memory=getattr(suite, "memory", None), shm_size=getattr(suite, "shm_size", None),
                               network=getattr(suite, "network", None), suite_env=suite_env)
                )
        # Interleave: replicate 1 of every suite, then replicate 2, ... so slow drift of the
        # machine (thermal, background load) spreads over suites instead of biasing one.
        invocations.sort(key=lambda inv: inv.replicate)
        plans.append(LayerPlan(layer_name, True, tuple(invocations),
                               contended_reruns=int(getattr(spec.trials, "contended_reruns", 0) or 0)))
    return plans

