"""Submission: validate → pin → mint run_id → register the partition → (optionally) run.

Used by the CLI, the schedules and the sensors alike, so every path into benchrun pins the
same way. ``prepare`` is idempotent: the same bytes at the same ``now`` give the same run.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.paths import benchrun_home, validate_run_id
from benchrun.rundir import RunDir, utc_now
from benchrun.fsio import atomic_write_bytes, atomic_write_text, create_once
from benchrun.liveness import JOB_NAME, PARTITIONS_NAME  # noqa: F401 - one definition, used here and by the reaper

_REPO_ROOT = Path(__file__).resolve().parent.parent
WORKSPACE = _REPO_ROOT / "workspace.yaml"
# What workspace.yaml names, for an installed package that has no workspace.yaml beside it.
CODE_LOCATION = ("bench_assets.definitions", "defs")


@dataclass(frozen=True)
class Prepared:
    """A pinned, registered-to-be run."""

    run_id: str
    name: str
    spec_digest: str
    workload_spec_digest: str
    pinned_path: Path
    run_dir: Path
    cadence: str
    source: str


def run_id_stem(name: str) -> str:
    """The name part of a run id, before it is cut to fit (:func:`mint_run_id`)."""
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-"))


def mint_run_id(name: str, now: dt.datetime, spec_digest: str, attempt: int = 1) -> str:
    """``<name>-<utc yyyymmddhhmmss>-<digest8>``, a DNS-1123 label of at most 63 chars.

    ``attempt`` > 1 (an identical submission in the same second) appends ``-<attempt>``,
    shortening the name part so the id still fits.
    """
    suffix = "" if attempt <= 1 else f"-{attempt}"
    stem = run_id_stem(name)[: 39 - len(suffix)].rstrip("-") or "run"
    stamp = now.astimezone(dt.timezone.utc).strftime("%Y%m%d%H%M%S")
    return validate_run_id(f"{stem}-{stamp}-{spec_digest.removeprefix('sha256:')[:8]}{suffix}")


def _claim_run_dir(root: Path, name: str, now: dt.datetime, spec_digest: str) -> str:
    """Mint a run id whose directory this process creates itself (``mkdir`` is atomic), so
    identical submissions in the same second get different runs instead of sharing one."""
    (root / "runs").mkdir(parents=True, exist_ok=True)
    for attempt in range(1, 1000):
        run_id = mint_run_id(name, now, spec_digest, attempt)
        try:
            (root / "runs" / run_id).mkdir()
        except FileExistsError:
            continue
        return run_id
    raise BenchrunError(f"{root / 'runs'}: 999 runs of {name} in one second; submit again")


def pin_bytes(raw: bytes, home: Path) -> Path:
    """Store the exact submitted bytes content-addressed, write-once and read-only."""
    digest = hashlib.sha256(raw).hexdigest()
    path = home / "specs" / "sha256" / f"{digest}.yaml"
    if path.exists():
        if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            raise BenchrunError(f"{path}: pinned spec was modified on disk; restore it or remove it")
        return path
    atomic_write_bytes(path, raw, mode=0o444)
    return path


def _keep_dataset(rd: RunDir, loaded: Any) -> dict[str, str] | None:
    """The run's own read-only copy of its dataset (``structured/<run_id>_dataset.<ext>``): the
    pinned spec is read against it from then on (``lifecycle.load_pinned``), so whoever runs it,
    from whatever working directory, measures the bytes that were pinned."""
    from benchrun.spec.datasets import copy_into_run

    ds = loaded.run.workload_env().get("dataset")
    if not ds:
        return None
    ext = Path(ds["path"]).suffix.lstrip(".") or "data"
    if not ext.isalnum():
        ext = "data"
    copy = copy_into_run(ds, rd.file("structured", "dataset", "", ext))
    written = loaded.document["spec"]["workload"]["dataset"]["path"]
    return {"path": written, "sha256": ds["sha256"], "copy": copy.name}


def prepare(
    spec: Path | str | bytes,
    *,
    source: str | None = None,
    home: Path | str | None = None,
    now: dt.datetime | None = None,
    loaded: Any = None,
) -> Prepared:
    """Validate and pin a spec and create its run directory (phase Pending).

    Raises SpecInvalid (exit code 2) listing every error; nothing is created then.
    Without ``now`` (a person's submission) the run is always a new one, even for the same
    bytes in the same second; with ``now`` (a schedule or sensor tick) the same bytes at the
    same ``now`` give the same run, so a repeated tick is idempotent. ``loaded``: ``spec``
    already validated (a sensor's, whose dataset was read from its commit).
    """
    from benchrun.spec import load_spec, load_spec_bytes

    if loaded is not None and (not isinstance(spec, bytes) or loaded.raw != spec):
        raise BenchrunError("prepare: the validated spec given is not these bytes")  # a defect of ours
    if loaded is None and isinstance(spec, bytes):
        loaded = load_spec_bytes(spec, source or "<bytes>")
    elif loaded is None:
        loaded = load_spec(Path(spec))
    root = benchrun_home(home)
    run = loaded.run
    from benchrun.store import check_path_template

    # Admission: where the evidence will go is checked now, not after every suite has run.
    check_path_template(run.spec.sinks.raw_artifacts.path_template, root)
    if now is None:
        run_id = _claim_run_dir(root, run.metadata.name, dt.datetime.now(dt.timezone.utc), loaded.spec_digest)
    else:
        run_id = mint_run_id(run.metadata.name, now, loaded.spec_digest)
    rd = RunDir(root, run_id)
    if rd.exists():
        status = rd.read_status()
        if status.get("spec_digest") != loaded.spec_digest:
            raise BenchrunError(f"run {run_id} is pinned to another spec digest; a pinned run never changes")
    else:
        pinned = pin_bytes(loaded.raw, root)
        try:
            rd.create()
            dataset = _keep_dataset(rd, loaded)
            atomic_write_text(rd.file("structured", "spec", "", "yaml"), loaded.raw.decode("utf-8"))
            intent = run.spec.intent
            rd.write_status(
                {
                    "apiVersion": "benchmarking.aisp.dev/v1alpha1",
                    "kind": "BenchmarkRun",
                    "run_id": run_id,
                    "name": run.metadata.name,
                    "phase": "Pending",
                    "outcome": None,
                    "conditions": [],
                    "spec_digest": loaded.spec_digest,
                    "workload_spec_digest": loaded.workload_spec_digest,
                    "workload_spec_digest_normalized": loaded.workload_spec_digest_normalized,
                    "artifact_manifest_digest": None,
                    "benchmark_class_requested": intent.benchmark_class,
                    "benchmark_class_granted": None,
                    "workload_type": intent.workload_type,
                    "cadence": intent.cadence,
                    "scheduler_path_requested": intent.scheduler_path,
                    "selected_scheduler_path": None,
                    "variable_under_test": run.spec.comparison.variable_under_test,
                    "created_utc": utc_now(),
                    "started_utc": None,
                    "finished_utc": None,
                    "run_directory": str(rd.path),
                    "pinned_spec": str(pinned),
                    "source": source or (str(spec) if not isinstance(spec, bytes) else "<bytes>"),
                    "dagster_run_id": None,
                    "layers": {},
                    **({"dataset": dataset} if dataset else {}),
                }
            )
            rd.set_condition("Validated", True, "AdmissionRulesPassed", "every rule of the contract holds")
            rd.set_condition("SpecPinned", True, "ContentAddressed", f"pinned at {pinned}")
            from benchrun.sharedstate import push_run

            push_run(rd.path, root, merge=rd.merge_shared_status)  # no-op unless BENCHRUN_SHARED_STATE is set
        except BaseException:
            # Not registered until its status is written and the shared state holds it: a retry
            # must create (and push) it again; a run directory left here would be taken as
            # registered and never pushed, or as a run without status.json (a dataset that
            # changed while it was copied, say).
            shutil.rmtree(rd.path, ignore_errors=True)
            raise
    return Prepared(
        run_id=run_id,
        name=run.metadata.name,
        spec_digest=loaded.spec_digest,
        workload_spec_digest=loaded.workload_spec_digest,
        pinned_path=Path(rd.read_status()["pinned_spec"]),
        run_dir=rd.path,
        cadence=run.spec.intent.cadence,
        source=source or str(spec if not isinstance(spec, bytes) else "<bytes>"),
    )


def admission_fault(exc: BenchrunError, spec: Any, source: str,
                    home: Path | str | None = None) -> BenchrunError | None:
    """The error that makes ``spec`` (its bytes, or the LoadedSpec already validated) invalid,
    or None when ``exc``, raised by :func:`prepare` or :func:`submit`, is not the spec's fault:
    the shared state, the disk or the Dagster instance failed, and a later try may not.

    One rule for every automated path (the BenchmarkRun controller, the schedules and the
    commit sensors): only an invalid spec is dropped for good; anything else is tried again.
    """
    from benchrun.spec import load_spec_bytes
    from benchrun.spec.validation import SpecInvalid
    from benchrun.store import check_path_template

    if isinstance(exc, SpecInvalid):
        return exc
    try:  # what prepare() checks before it writes anything
        loaded = load_spec_bytes(spec, source) if isinstance(spec, bytes) else spec
        check_path_template(loaded.run.spec.sinks.raw_artifacts.path_template, benchrun_home(home))
    except BenchrunError as invalid:
        return invalid
    return None


def dagster_home(home: Path | str | None = None) -> Path:
    """``$BENCHRUN_HOME/dagster_home`` with the repo's instance template (dagster.yaml)."""
    path = benchrun_home(home) / "dagster_home"
    path.mkdir(parents=True, exist_ok=True)
    template = _REPO_ROOT / "dagster.yaml"
    target = path / "dagster.yaml"
    if template.is_file() and not target.exists():
        # whole or not at all (a copy cut short was never copied again: an empty file reads as no settings,
        # and Dagster's defaults let benchmarks share the machine); a second process keeps the first's
        create_once(target, lambda fh: fh.write(template.read_bytes()), mode=0o644)
    return path


def get_instance(home: Path | str | None = None) -> Any:
    """The persistent Dagster instance under ``$BENCHRUN_HOME`` (so the UI sees CLI runs).

    Creating it on a brand-new home creates its sqlite schemas; two processes doing that at
    once collide ("table alembic_version already exists"), so creation is serialised by an
    OS lock and the storages are opened inside it.
    """
    import fcntl

    import dagster as dg

    dh = dagster_home(home)
    os.environ["DAGSTER_HOME"] = str(dh)
    with open(dh / ".instance.lock", "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            instance = dg.DagsterInstance.get()
            # Touch every storage so their schemas exist before the lock is released.
            instance.get_runs(limit=1)
            instance.has_dynamic_partition(PARTITIONS_NAME, "x")
            instance.all_instigator_state()
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    return instance


def register_partition(instance: Any, run_id: str) -> None:
    if not instance.has_dynamic_partition(PARTITIONS_NAME, run_id):
        instance.add_dynamic_partitions(PARTITIONS_NAME, [run_id])


def submit(
    spec: Path | str | bytes,
    *,
    home: Path | str | None = None,
    instance: Any = None,
    now: dt.datetime | None = None,
    source: str | None = None,
    loaded: Any = None,
) -> Prepared:
    """prepare + add the dynamic partition (to materialize from the UI or a sensor)."""
    prepared = prepare(spec, home=home, now=now, source=source, loaded=loaded)
    register_partition(instance or get_instance(home), prepared.run_id)
    return prepared


def code_location_target() -> tuple[str, str]:
    """(module, attribute) of the Dagster definitions that ``workspace.yaml`` names."""
    module, attribute = CODE_LOCATION
    if WORKSPACE.is_file():
        import yaml

        try:
            entry = yaml.safe_load(WORKSPACE.read_text(encoding="utf-8"))["load_from"][0]["python_module"]
            module, attribute = entry["module_name"], entry.get("attribute", "defs")
        except (yaml.YAMLError, KeyError, IndexError, TypeError) as exc:
            raise BenchrunError(f"{WORKSPACE}: no load_from[0].python_module.module_name ({exc!r}); "
                                "restore the repository's workspace.yaml") from None
    return module, attribute


def code_location() -> Any:
    """The Dagster definitions that ``workspace.yaml`` names (what the UI, the daemon and the
    code server load), imported by that name as Dagster imports them: the CLI runs the same job
    the UI does, and benchrun, the layer below the Dagster shell, never imports the shell."""
    import importlib

    module, attribute = code_location_target()
    return getattr(importlib.import_module(module), attribute)


class _OwnSessionSubprocess:
    """The ``subprocess`` module as Dagster's compute-log mirror sees it, its ``Popen`` starting each
    child in a session of its own (everything else is the module's)."""

    def __getattr__(self, name: str) -> Any:
        import subprocess

        return getattr(subprocess, name)

    @staticmethod
    def Popen(*args: Any, **kwargs: Any) -> Any:  # noqa: N802 (subprocess's name)
        import subprocess

        kwargs.setdefault("start_new_session", True)
        return subprocess.Popen(*args, **kwargs)


def _mirror_out_of_the_terminals_group() -> None:
    """Dagster mirrors each step's captured output with ``tail -F`` and an orphan watcher (a Python
    process), started in this process's group: Ctrl-C in the terminal reached them too, and the
    watcher printed a KeyboardInterrupt traceback for each step under way (review 2026-12-07). In a
    session of their own they never get the terminal's signal; Dagster still ends them with the step,
    and the watcher ends the tail if this process dies. Written against dagster 1.13.27 (pinned): the
    test of Ctrl-C (tests/test_first_run.py) fails if the module stops starting them this way."""
    from dagster._core.execution import compute_logs

    if not isinstance(compute_logs.subprocess, _OwnSessionSubprocess):
        compute_logs.subprocess = _OwnSessionSubprocess()  # type: ignore[assignment]


def execute(prepared: Prepared, *, defs: Any = None, home: Path | str | None = None, instance: Any = None) -> Any:
    """Materialize the whole benchmark graph for the run's partition, in this process.

    ``defs`` is the Dagster code location (by default :func:`code_location`). The Dagster run
    is tagged with this process (host, pid, start time), so a run whose process is killed is
    found and failed (``benchrun.liveness``) instead of holding the queue for ever.
    """
    from benchrun.liveness import executor_tags

    defs = defs if defs is not None else code_location()
    instance = instance or get_instance(home)
    register_partition(instance, prepared.run_id)
    job = defs.resolve_job_def(JOB_NAME)
    # The run log is in the UI; the terminal shows benchrun's own progress instead.
    # Errors too: a failed step prints benchrun's one-line reason, not Dagster's stack traces (run log).
    quiet = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
    # The launcher's settings as the environment has them now, not when the definitions were
    # imported (a warm orchestrator imported them before this command's environment existed):
    # the code location's launcher resource, built again from the environment.
    launcher = type(defs.resources["launcher"]).from_env()
    _mirror_out_of_the_terminals_group()
    return job.execute_in_process(
        instance=instance, partition_key=prepared.run_id, raise_on_error=False, run_config=quiet,
        tags=executor_tags(), resources={"launcher": launcher},
    )
