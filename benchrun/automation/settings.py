"""Where the cadence schedules and sensors look, read from environment variables."""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path

from benchrun.errors import BenchrunError

DEFAULT_NIGHTLY_CRON = "15 3 * * *"  # 03:15 UTC
DEFAULT_PRE_RELEASE_CRON = "30 4 * * 6"  # Saturdays 04:30 UTC; the schedule is off by default
DEFAULT_BRANCH = "main"
DEFAULT_REPO_SPECS = "specs"
DEFAULT_MAX_COMMITS_PER_TICK = 25

ENV_NIGHTLY_CRON = "BENCHRUN_NIGHTLY_CRON"
ENV_PRE_RELEASE_CRON = "BENCHRUN_PRE_RELEASE_CRON"
ENV_SPEC_REPO = "BENCHRUN_SPEC_REPO"
ENV_SPEC_BRANCH = "BENCHRUN_SPEC_BRANCH"
ENV_REPO_SPECS = "BENCHRUN_SPEC_REPO_SPECS"
ENV_MAX_COMMITS = "BENCHRUN_SENSOR_MAX_COMMITS"


def project_root() -> Path:
    """The checkout this package runs from when it has ``specs/``, else the working directory."""
    candidate = Path(__file__).resolve().parents[2]
    if (candidate / "pyproject.toml").is_file() and (candidate / "specs").is_dir():
        return candidate
    return Path.cwd()


def cron_from_env(var: str, default: str) -> str:
    """A five-field cron string from ``var`` (default when unset), checked before Dagster sees it."""
    value = os.environ.get(var, "").strip() or default
    from dagster._utils.schedules import is_valid_cron_string

    if not is_valid_cron_string(value):
        raise BenchrunError(f"{var}={value!r} is not a valid cron schedule: use five fields, e.g. {default!r}")
    return value


@dataclass(frozen=True)
class RepoWatch:
    """The git repository, branch and specs folder the commit sensors watch."""

    repo: Path
    branch: str
    specs_under: str  # POSIX path of the specs folder relative to the repository root
    max_commits: int

    @classmethod
    def from_env(cls) -> "RepoWatch":
        repo = Path(os.environ.get(ENV_SPEC_REPO, "") or project_root()).expanduser()
        branch = os.environ.get(ENV_SPEC_BRANCH, "").strip() or DEFAULT_BRANCH
        raw = os.environ.get(ENV_REPO_SPECS, "").strip() or DEFAULT_REPO_SPECS
        # Normalised (found in review): `./specs` made the prefix `./specs/`, which no git path
        # starts with, so every commit "touched no spec" and nothing ran; `.` is the whole repository.
        under = posixpath.normpath(raw)
        if raw.startswith("/") or under == ".." or under.startswith("../"):
            raise BenchrunError(f"{ENV_REPO_SPECS}={raw!r} must be a folder inside the repository, e.g. 'specs'")
        under = "" if under == "." else under
        raw_max = os.environ.get(ENV_MAX_COMMITS, "").strip() or str(DEFAULT_MAX_COMMITS_PER_TICK)
        if not raw_max.isdigit() or int(raw_max) < 1:
            raise BenchrunError(f"{ENV_MAX_COMMITS}={raw_max!r} must be a positive integer")
        return cls(repo=repo, branch=branch, specs_under=under, max_commits=int(raw_max))

# The partitioned job every trigger requests (defined in bench_assets/definitions.py).
JOB_NAME = "benchmark_run_job"

ENV_ON = "BENCHRUN_AUTOMATION_ON"
ENV_OFF = "BENCHRUN_AUTOMATION_OFF"
AUTOMATION_NAMES = (
    "nightly_schedule", "pre_release_schedule",
    "spec_commit_sensor", "canary_sensor", "run_failure_sensor", "run_canceled_sensor",
    "benchmarkrun_resource_sensor", "run_liveness_sensor", "warehouse_maintenance_schedule",
    "history_schedule", "retention_schedule",
)
# Named one by one only: "all" does not turn on what deletes (retention applies coldDays and removes runs' rows)
NOT_IN_ALL = ("retention_schedule",)


def _names_from_env(var: str) -> set[str]:
    raw = {n.strip() for n in os.environ.get(var, "").split(",") if n.strip()}
    if "all" in raw:
        return set(AUTOMATION_NAMES) - set(NOT_IN_ALL) | (raw & set(NOT_IN_ALL))
    unknown = sorted(raw - set(AUTOMATION_NAMES))
    if unknown:
        raise BenchrunError(f"{var} names unknown schedules or sensors {unknown}: use 'all' or any of "
                            f"{', '.join(AUTOMATION_NAMES)}, comma-separated")
    return raw


def starts_on(name: str, built_in: bool) -> bool:
    """The default status of a schedule or sensor: built-in, unless BENCHRUN_AUTOMATION_ON/OFF names it.

    Like any Dagster default status it applies until someone toggles it in the UI or CLI;
    the toggle is stored in the instance and wins.
    """
    on, off = _names_from_env(ENV_ON), _names_from_env(ENV_OFF)  # both checked, always
    if name in off:
        return False
    return built_in or name in on
