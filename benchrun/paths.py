"""Where benchrun keeps its state, and the checks a name passes before it touches a path."""

from __future__ import annotations

import os
import re
from pathlib import Path

from benchrun.errors import BenchrunError

# A run id is a DNS-1123 label (ARCHITECTURE.md §2): it becomes a partition key, a
# directory name, a Kubernetes label value and part of object keys.
_RUN_ID = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
# File-name components (suite names, labels, kinds): no separators, no dot-dot, no NUL.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
# A suite result document, ``structured/<run_id>_<suite>_r<k>.json`` (CONTRACT.md §4). The run id
# has no '_', so the first '_' ends it; a suite name may have several (serving_workflow).
_RESULT_FILE = re.compile(r"^(?P<run>[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?)_"
                          r"(?P<suite>[A-Za-z0-9][A-Za-z0-9._-]{0,127})_r(?P<rep>\d+)\.json\Z")


def home_location(override: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """Where the home is, not created (what a read-only command looks at), and what named it:
    ``--home``, ``BENCHRUN_HOME`` or ``./.benchrun``."""
    raw = override if override is not None else os.environ.get("BENCHRUN_HOME", ".benchrun")
    where = "--home" if override is not None else "BENCHRUN_HOME" if "BENCHRUN_HOME" in os.environ else "./.benchrun"
    if not str(raw).strip():  # Path("") is the working directory: a home's folders would land in it (a checkout)
        raise BenchrunError(f"{where} is set but empty; unset it (the home is then ./.benchrun) or give a directory")
    return Path(raw).expanduser().resolve(), where


def benchrun_home(override: str | os.PathLike[str] | None = None) -> Path:
    """``$BENCHRUN_HOME``, else ``./.benchrun``; the directory is created."""
    home, where = home_location(override)
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in the way, a read-only or unreachable parent
        raise BenchrunError(f"benchrun home {home} ({where}) cannot be used as a directory: "
                            f"{exc.strerror or exc}; point {where} at a directory benchrun may write") from None
    return home


def existing_home(command: str, override: str | os.PathLike[str] | None = None) -> Path:
    """The home a command that reads or repairs one uses, never created (a mistyped BENCHRUN_HOME or
    ``--home`` made an empty one): BenchrunError when there is none yet. A file where the home (or a
    folder above it) should be is run's and submit's error (:func:`benchrun_home`'s, exit 2 as there),
    not "there is none yet … `benchrun run SPEC` creates one": run cannot."""
    home, where = home_location(override)
    there = next((p for p in (home, *home.parents) if p.exists()), None)
    if there is not None and not there.is_dir():
        try:
            benchrun_home(override)  # raises: its mkdir meets the file in the way
        except BenchrunError as exc:
            raise BenchrunError(str(exc), exit_code=2) from None
    if not home.is_dir():
        name = "--home" if where == "--home" else "BENCHRUN_HOME"
        raise BenchrunError(f"{command}: there is no benchrun home at {home} ({where}) yet, so nothing to read; "
                            f"`benchrun run SPEC` creates one (or point {name} at yours)")
    return home


# A suite's scratch folder inside the run directory (fio lays out its test files on the disk under test):
# never evidence, whether or not the suite lived to remove it (a timeout's SIGTERM, a kill -9).
SCRATCH_PREFIX = ".scratch-"


def is_scratch(rel: str) -> bool:
    """Whether the run-relative path ``rel`` lies in a suite's scratch folder (:data:`SCRATCH_PREFIX`)."""
    return any(part.startswith(SCRATCH_PREFIX) for part in rel.replace("\\", "/").split("/")[:-1])


def is_run_id(value: object) -> bool:
    """Whether ``value`` is a run id (a DNS-1123 label): :func:`validate_run_id` without the error."""
    return isinstance(value, str) and _RUN_ID.match(value) is not None


def validate_run_id(run_id: str) -> str:
    """Return ``run_id`` unchanged if it is a DNS-1123 label, else raise BenchrunError."""
    if not is_run_id(run_id):
        raise BenchrunError(
            f"run id {run_id!r} is not valid: use lowercase letters, digits and '-', "
            "at most 63 characters, starting and ending with a letter or digit"
        )
    return run_id


def parse_result_name(name: str, run_id: str | None = None) -> tuple[str, int] | None:
    """``(suite, replicate)`` of a suite result document's file name ``<run_id>_<suite>_r<k>.json``;
    None for any other name, or for another run's document when ``run_id`` is given. The one parser
    of these names: the run id is read up to its first '_' (it has none), never guessed from the
    end, so a suite named ``serving_workflow`` is not taken for run ``<run_id>_serving``."""
    m = _RESULT_FILE.match(name)
    if m is None or (run_id is not None and m.group("run") != run_id):
        return None
    return m.group("suite"), int(m.group("rep"))


def validate_name(name: str, *, what: str = "name") -> str:
    """Return ``name`` unchanged if it is safe as one path component, else raise."""
    if (
        not isinstance(name, str)
        or not _NAME.match(name)
        or ".." in name
    ):
        raise BenchrunError(
            f"{what} {name!r} is not a safe file-name component: use letters, digits, "
            "'.', '_' and '-' (no '/', no '..'), at most 128 characters"
        )
    return name


def safe_join(root: Path, *parts: str) -> Path:
    """Join validated components under ``root`` and prove the result stays inside it."""
    for part in parts:
        for piece in Path(part).parts:
            validate_name(piece, what="path component")
    path = root.joinpath(*parts).resolve()
    if not path.is_relative_to(root.resolve()):
        raise BenchrunError(f"path {path} escapes {root}")
    return path


def sample_path(run_dir: Path, sample: object) -> Path | None:
    """The file a result document's ``samples`` entry names, resolved inside ``run_dir``; None when the
    entry is not a relative path that stays inside it. A result document is written by the suite (on a
    cluster, a pod): a path outside the run directory would read any file on this machine into the
    warehouse or the report, where verify never looks."""
    if not isinstance(sample, str) or not sample or Path(sample).is_absolute():
        return None
    path = (Path(run_dir) / sample).resolve()
    return path if path.is_relative_to(Path(run_dir).resolve()) else None


def published_runs(root: Path) -> dict[str, list[str]]:
    """Run id -> the ``published/<alias>`` files naming it (the alias's first line: promote
    writes its record on the second; a damaged record still names its run)."""
    directory = Path(root) / "published"
    out: dict[str, list[str]] = {}
    for p in sorted(directory.iterdir()) if directory.is_dir() else []:
        try:
            first = p.read_text(encoding="utf-8").splitlines()[:1] if p.is_file() else []
        except (OSError, UnicodeDecodeError):
            continue
        if first and first[0].strip():
            out.setdefault(first[0].strip(), []).append(p.name)
    return out
