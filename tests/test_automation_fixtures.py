"""Helpers the automation, sensor and schedule tests share: a git repository and spec documents."""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "specs" / "examples" / "publication-inference-stack-b200.yaml"
_BASE: dict[str, Any] | None = None


def definitions() -> Any:
    """The project's code location (bench_assets.definitions), with these schedules and sensors."""
    from bench_assets.definitions import defs

    return defs


def spec_doc(name: str, cadence: str = "nightly", *, canary: bool = False, nightly: bool = False,
             pre_release: bool = False, note: str = "") -> dict[str, Any]:
    """The repository's example BenchmarkRun with another name, cadence and CI switches."""
    global _BASE
    if _BASE is None:
        _BASE = yaml.safe_load(EXAMPLE.read_text())
    doc = copy.deepcopy(_BASE)
    doc["metadata"]["name"] = name
    doc["spec"]["intent"]["cadence"] = cadence
    doc["spec"]["automation"]["ci"] = {"canary": canary, "nightly": nightly, "preRelease": pre_release}
    if note:  # a content change that leaves everything else as it was
        doc["spec"]["layers"][0]["objective"] += f" ({note})"
    return doc


def spec_bytes(name: str, cadence: str = "nightly", **kwargs: Any) -> bytes:
    """:func:`spec_doc` as YAML bytes; ``cadence=X`` alone switches on the matching CI flag."""
    if not any(k in kwargs for k in ("canary", "nightly", "pre_release")):
        kwargs[cadence] = True
    return yaml.safe_dump(spec_doc(name, cadence, **kwargs), sort_keys=False).encode()


def invalid_spec_bytes(name: str) -> bytes:
    """A spec that breaks two admission rules (minReplicates and the cadence enumeration)."""
    doc = spec_doc(name, "nightly", nightly=True)
    doc["spec"]["trials"]["minReplicates"] = 1
    doc["spec"]["intent"]["cadence"] = "weekly"
    return yaml.safe_dump(doc, sort_keys=False).encode()


class GitRepo:
    """A throwaway repository driven through the git CLI, with one commit per second of a fixed clock."""

    def __init__(self, path: Path, branch: str = "main") -> None:
        self.path = path
        self.clock = 1_790_000_000  # 2026-09-21, whole seconds
        path.mkdir(parents=True, exist_ok=True)
        self.git("init", "-q", "-b", branch)
        self.git("config", "user.email", "bench@example.invalid")
        self.git("config", "user.name", "bench")
        self.git("config", "commit.gpgsign", "false")

    def git(self, *args: str) -> str:
        env = {**os.environ, "GIT_AUTHOR_DATE": f"@{self.clock} +0000", "GIT_COMMITTER_DATE": f"@{self.clock} +0000"}
        env.pop("GIT_DIR", None)
        proc = subprocess.run(["git", "-C", str(self.path), *args], capture_output=True, env=env, check=True)
        return proc.stdout.decode().strip()

    def write(self, rel: str, data: bytes | str) -> None:
        target = self.path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)

    def commit(self, message: str, files: dict[str, bytes | str] | None = None, remove: tuple[str, ...] = ()) -> str:
        for rel, data in (files or {}).items():
            self.write(rel, data)
        for rel in remove:
            self.git("rm", "-q", rel)
        self.git("add", "-A")
        self.clock += 1
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.head()

    def head(self) -> str:
        return self.git("rev-parse", "HEAD")
