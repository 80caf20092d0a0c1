"""Read-only git queries the cadence sensors need, through the git CLI with argv lists."""

from __future__ import annotations

import logging
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from benchrun.errors import BenchrunError

log = logging.getLogger(__name__)

_TIMEOUT_S = 60


@dataclass(frozen=True)
class ChangedFile:
    """One file a commit added or modified (relative to the repository root, POSIX)."""

    status: str  # git's letter: A (added), M (modified), T (type changed)
    path: str


def _git_binary() -> str:
    exe = shutil.which("git")
    if exe is None:
        raise BenchrunError("git is not installed or not on PATH: install git to use the spec sensors")
    return exe


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """Run ``git -C repo args...`` (never through a shell); raise BenchrunError if it fails."""
    argv = [_git_binary(), "-C", str(repo), *args]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise BenchrunError(f"git {' '.join(args[:2])} in {repo} took more than {_TIMEOUT_S}s") from exc
    if check and proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        raise BenchrunError(f"git {' '.join(args)} failed in {repo}: {err or 'exit ' + str(proc.returncode)}")
    return proc


def _out(repo: Path, *args: str) -> str:
    return git(repo, *args).stdout.decode("utf-8").strip()


def repo_root(path: Path) -> Path:
    """The top of the work tree containing ``path``; raise if it is not in a git repository."""
    if not path.exists():
        raise BenchrunError(f"git repository {path} does not exist: set BENCHRUN_SPEC_REPO to a clone")
    proc = git(path, "rev-parse", "--show-toplevel", check=False)
    if proc.returncode != 0:
        raise BenchrunError(f"{path} is not inside a git repository: set BENCHRUN_SPEC_REPO to a clone")
    return Path(proc.stdout.decode("utf-8").strip())


def resolve_commit(repo: Path, ref: str) -> str | None:
    """The full commit id ``ref`` names, or None if it names no commit here."""
    proc = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", check=False)
    if proc.returncode != 0:
        return None
    return proc.stdout.decode("utf-8").strip()


def is_ancestor(repo: Path, ancestor: str, descendant: str) -> bool:
    """Whether ``ancestor`` is reachable from ``descendant`` (a commit is its own ancestor)."""
    proc = git(repo, "merge-base", "--is-ancestor", ancestor, descendant, check=False)
    if proc.returncode in (0, 1):
        return proc.returncode == 0
    err = proc.stderr.decode("utf-8", "replace").strip()
    raise BenchrunError(f"git merge-base --is-ancestor failed in {repo}: {err}")


def merge_base(repo: Path, a: str, b: str) -> str | None:
    """The best common ancestor of two commits, or None when their histories are unrelated."""
    proc = git(repo, "merge-base", a, b, check=False)
    if proc.returncode != 0:
        return None
    return proc.stdout.decode("utf-8").strip() or None


def tree_of(repo: Path, sha: str) -> str:
    """The id of ``sha``'s tree: the same files, whatever the message, author or parents."""
    return _out(repo, "rev-parse", "--verify", "--end-of-options", f"{sha}^{{tree}}")


def first_parent_commits(repo: Path, head: str, *, since: str | None = None) -> list[str]:
    """Commits on ``head``'s first-parent line after ``since`` (exclusive), oldest first.

    First-parent only: a merged branch counts once, as its merge commit, whose change is
    taken against the first parent, so a merge to main is one commit of main.
    """
    rng = f"{since}..{head}" if since else head
    text = _out(repo, "rev-list", "--first-parent", "--reverse", rng, "--")
    return [line for line in text.splitlines() if line]


def first_parent(repo: Path, sha: str) -> str | None:
    """The commit's first parent, or None for a root commit."""
    return resolve_commit(repo, f"{sha}^1")


def changed_files(repo: Path, sha: str, under: str = "") -> list[ChangedFile]:
    """Files ``sha`` added, modified or retyped against its first parent, below ``under``.

    Renames are reported as an addition (``--no-renames``): a moved spec is a new path and
    is submitted again under it. Deleted files are not listed.
    """
    parent = first_parent(repo, sha)
    pathspec = ["--", under] if under else ["--"]
    if parent is None:
        args = ["diff-tree", "--root", "--no-commit-id", "-r", "-z", "--no-renames",
                "--name-status", "--diff-filter=AMT", sha, *pathspec]
    else:
        args = ["diff-tree", "--no-commit-id", "-r", "-z", "--no-renames",
                "--name-status", "--diff-filter=AMT", parent, sha, *pathspec]
    raw = git(repo, *args).stdout.decode("utf-8", "surrogateescape")
    fields = [f for f in raw.split("\0") if f]
    return [ChangedFile(status=fields[i], path=fields[i + 1]) for i in range(0, len(fields) - 1, 2)]


def list_files(repo: Path, sha: str, under: str = "") -> list[str]:
    """Every file path in ``sha``'s tree below ``under`` (sorted)."""
    args = ["ls-tree", "-r", "-z", "--name-only", "--full-tree", sha]
    if under:
        args += ["--", under]
    raw = git(repo, *args).stdout.decode("utf-8", "surrogateescape")
    return sorted(f for f in raw.split("\0") if f)


def list_blobs(repo: Path, sha: str, under: str = "") -> list[tuple[str, str]]:
    """(path, blob id) of every file in ``sha``'s tree below ``under``, sorted by path."""
    args = ["ls-tree", "-r", "-z", "--full-tree", sha]
    if under:
        args += ["--", under]
    raw = git(repo, *args).stdout.decode("utf-8", "surrogateescape")
    out = []
    for entry in filter(None, raw.split("\0")):
        meta, path = entry.split("\t", 1)
        _mode, kind, blob = meta.split()
        if kind == "blob":
            out.append((path, blob))
    return sorted(out)


def read_object(repo: Path, blob: str) -> bytes:
    """The bytes of one blob by its id."""
    return git(repo, "cat-file", "blob", blob).stdout


def read_blob(repo: Path, sha: str, path: str) -> bytes:
    """The bytes of ``path`` as committed in ``sha``."""
    return git(repo, "cat-file", "blob", f"{sha}:{path}").stdout


def commit_time(repo: Path, sha: str) -> int:
    """The committer time of ``sha`` in seconds since the epoch (UTC)."""
    return int(_out(repo, "show", "-s", "--format=%ct", sha))

