"""The launcher protocol and the result every launcher returns for one invocation."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol

from benchrun.plan import Invocation


@dataclass(frozen=True)
class LaunchResult:
    """What happened to one replicate: status, reason, exit, timing, and where its files are.

    ``status`` is ``ok`` (exit 0 and a result document that says ok), ``unavailable`` (the
    suite could not measure here and said why), or ``failed`` (non-zero exit, signal,
    timeout, or no/invalid result document). Timestamps are wall-clock epoch seconds.
    """

    run_id: str
    layer: str
    suite: str
    replicate: int
    benchmark_case_id: str
    status: str
    reason: str | None
    exit_code: int | None
    wall_s: float
    t_request: float
    t_spawned: float
    t_finished: float
    log: str
    result: str | None
    metrics: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    # Where it ran, when a scheduler knows (the warehouse's join keys; None locally).
    scheduler_run_id: str | None = None
    job_uid: str | None = None
    pod_uid: str | None = None
    node_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def prepare_outputs(inv: Invocation, run_dir: Path) -> tuple[Path, Path]:
    """(log path, result path) of one launch, with a stale result from an earlier attempt
    removed so it is never mistaken for this one's."""
    log_path = run_dir / inv.log_relpath()
    result_path = run_dir / inv.result_relpath()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    result_path.unlink(missing_ok=True)
    return log_path, result_path


class Launcher(Protocol):
    """Runs one invocation to completion and reports what happened; never raises for a
    suite's own failure (that is a failed LaunchResult), only for its own bugs."""

    def launch(
        self, inv: Invocation, run_dir: Path, *, extra_env: Mapping[str, str] | None = None
    ) -> LaunchResult: ...
