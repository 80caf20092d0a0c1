"""Which benchrun measured: the harness's own code, recorded with every environment capture.

The suites and the load generator are benchrun's code, so a change to them (a timer, a request
loop, a token count) moves the figures as surely as a change to the system under test. The
installed version (``0.1.0`` from an editable checkout, whatever is in it) does not say which
code that was, so the capture records (``environment.harness``):

- ``source_sha256``: sha256 over the package's Python sources (each file's path relative to the
  package and the sha256 of its bytes, sorted by path), and ``source_files``: how many. The same
  code gives the same digest wherever it is installed (a checkout, a wheel, an image);
- ``git``: ``{commit, dirty}`` of the checkout the package runs from, when it runs from one
  (``dirty``: the package's Python files, tracked or not, differ from the commit); null in an image or a wheel;
- ``version``: the distribution's version.

The one-variable gate reads it as a note, never a refusal (``benchrun.stats.gate``): the harness is
not the system under test, but a comparison across two harnesses says so. Computed once a process
(about 300 files: tens of milliseconds). No shell: git runs from an argument list, with a timeout.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import shutil
import subprocess
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent
GIT_TIMEOUT_S = 5.0


def source_digest(package_dir: Path = PACKAGE_DIR) -> tuple[str, int]:
    """(sha256 hex, file count) over ``package_dir``'s ``*.py`` files (caches left out), by relative path."""
    outer = hashlib.sha256()
    files = sorted(p for p in package_dir.rglob("*.py") if "__pycache__" not in p.parts)
    for path in files:
        rel = path.relative_to(package_dir).as_posix()
        outer.update(rel.encode("utf-8") + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return outer.hexdigest(), len(files)


def _git(root: Path, *args: str) -> str | None:
    exe = shutil.which("git")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "-C", str(root), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def git_state(package_dir: Path = PACKAGE_DIR) -> dict[str, Any] | None:
    """``{commit, dirty}`` of the git checkout ``package_dir`` lies in (its tracked files only), or None."""
    root = package_dir.parent
    if not (root / ".git").exists():
        return None
    commit = _git(root, "rev-parse", "HEAD")
    if not commit:
        return None
    # what the source digest covers: every .py file, tracked or not (a stray untracked module is code too)
    status = _git(root, "status", "--porcelain", "--untracked-files=all", "--", package_dir.name)
    dirty = None if status is None else any(line.rstrip().endswith(".py") for line in status.splitlines())
    return {"commit": commit, "dirty": dirty}


def _version() -> str | None:
    try:
        return importlib.metadata.version("benchrun")
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def harness_identity() -> dict[str, Any]:
    """The ``harness`` block of an environment capture (the module docstring); once a process."""
    digest, count = source_digest()
    return {"version": _version(), "source_sha256": digest, "source_files": count, "git": git_state()}
