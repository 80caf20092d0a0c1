"""Which BenchmarkRun documents a cadence runs: discovery on disk or in a git commit."""

from __future__ import annotations

import logging
import os
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError

log = logging.getLogger(__name__)

CADENCES: tuple[str, ...] = ("canary", "nightly", "pre_release")
# intent.cadence value -> the automation.ci switch (YAML key) that must also be true
CI_SWITCH: dict[str, str] = {"canary": "canary", "nightly": "nightly", "pre_release": "preRelease"}
SPEC_SUFFIXES = (".yaml", ".yml")
# Below the specs folder, ``crd/`` holds the CustomResourceDefinition, not BenchmarkRuns.
EXCLUDED_SUBFOLDERS = ("crd",)


@dataclass(frozen=True)
class SpecDocument:
    """The bytes of one candidate spec file and where they came from."""

    path: str  # as shown to people: relative to the repository or specs folder
    data: bytes
    source: str  # longer provenance, e.g. "<repo>@<sha>:<path>" or an absolute path
    # where its dataset is looked for (benchrun.spec.datasets.Finder): None reads files (the
    # working directory, the spec's folder); a committed spec reads its commit (git_finder)
    find_dataset: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ValidSpec:
    """A document that passed every admission rule."""

    path: str
    source: str
    loaded: Any  # benchrun.spec.LoadedSpec

    @property
    def name(self) -> str:
        return str(self.loaded.run.metadata.name)

    @property
    def spec_digest(self) -> str:
        return str(self.loaded.spec_digest)

    @property
    def cadence(self) -> str:
        return str(self.loaded.run.spec.intent.cadence)


@dataclass(frozen=True)
class InvalidSpec:
    """A document that cannot run, with every error found in it."""

    path: str
    source: str
    errors: tuple[str, ...]

    def describe(self, limit: int = 20) -> str:
        shown = list(self.errors[:limit])
        if len(self.errors) > limit:
            shown.append(f"... and {len(self.errors) - limit} more")
        return f"{self.path}: " + "; ".join(shown)


@dataclass(frozen=True)
class Discovery:
    """The result of looking for a cadence's specs: what runs, what is broken, what is not ours."""

    cadence: str
    selected: tuple[ValidSpec, ...]
    invalid: tuple[InvalidSpec, ...]
    other: tuple[ValidSpec, ...]  # valid documents of another cadence or with the switch off


def check_cadence(name: str) -> str:
    """Normalise a cadence name (``pre-release`` is accepted) or raise naming the choices."""
    norm = name.strip().lower().replace("-", "_")
    if norm not in CADENCES:
        raise BenchrunError(f"unknown cadence {name!r}: use one of {', '.join(CADENCES)}")
    return norm


def ci_switch_on(loaded: Any, cadence: str) -> bool:
    """Whether ``spec.automation.ci.<cadence>`` is true for a loaded spec."""
    return bool(getattr(loaded.run.spec.automation.ci, cadence))


def wants(loaded: Any, cadence: str) -> bool:
    """A spec runs on ``cadence`` when ``intent.cadence`` names it and its CI switch is on."""
    return loaded.run.spec.intent.cadence == cadence and ci_switch_on(loaded, cadence)


def is_spec_path(path: str, under: str = "") -> bool:
    """Whether a POSIX path (relative to the repository) is a candidate spec document."""
    if not path.lower().endswith(SPEC_SUFFIXES):
        return False
    prefix = f"{under.strip('/')}/" if under.strip("/") else ""
    if prefix and not path.startswith(prefix):
        return False
    rest = path[len(prefix):].split("/")
    return not (len(rest) > 1 and rest[0] in EXCLUDED_SUBFOLDERS)


def format_spec_errors(exc: BaseException) -> tuple[str, ...]:
    """Every error of a SpecInvalid as ``path (line N): message``; other errors as their text."""
    items = getattr(exc, "errors", None)
    if not items:
        return (str(exc),)
    out = []
    for err in items:
        where = getattr(err, "path", "") or "<document>"
        line = getattr(err, "line", None)
        message = getattr(err, "message", str(err))
        out.append(f"{where} (line {line}): {message}" if line else f"{where}: {message}")
    return tuple(out)


def load_document(doc: SpecDocument) -> ValidSpec | InvalidSpec:
    """Validate one document; admission errors become an InvalidSpec, never an exception."""
    from benchrun.spec import load_spec_bytes
    from benchrun.spec.datasets import DatasetCacheError

    try:
        loaded = load_spec_bytes(doc.data, doc.source, find_dataset=doc.find_dataset)
    except BenchrunError as exc:  # SpecInvalid is one; so is unreadable YAML
        return InvalidSpec(path=doc.path, source=doc.source, errors=format_spec_errors(exc))
    except DatasetCacheError:
        raise  # the machine's fault: the tick fails and is tried again, the spec is not skipped
    except Exception as exc:  # noqa: BLE001 - a defect of ours must not stop every later commit's tick
        log.exception("validating %s raised; reporting the document as invalid", doc.source)
        return InvalidSpec(path=doc.path, source=doc.source,
                           errors=(f"validation failed unexpectedly ({type(exc).__name__}: {exc}); "
                                   f"the traceback is in the sensor's log",))
    return ValidSpec(path=doc.path, source=doc.source, loaded=loaded)


def select(documents: Iterable[SpecDocument], cadence: str) -> Discovery:
    """Validate every document and keep those that run on ``cadence``."""
    return sort_results((load_document(doc) for doc in documents), cadence)


def sort_results(results: Iterable[ValidSpec | InvalidSpec], cadence: str) -> Discovery:
    """Split validation results into this cadence's specs, invalid documents and the rest."""
    cadence = check_cadence(cadence)
    selected: list[ValidSpec] = []
    invalid: list[InvalidSpec] = []
    other: list[ValidSpec] = []
    for result in results:
        if isinstance(result, InvalidSpec):
            log.warning("skipping invalid spec %s", result.describe())
            invalid.append(result)
        elif wants(result.loaded, cadence):
            selected.append(result)
        else:
            other.append(result)
    return Discovery(cadence, tuple(selected), tuple(invalid), tuple(other))


def default_specs_dir() -> Path:
    """``$BENCHRUN_SPECS_DIR``, else ``specs/`` of the project checkout, else ``./specs``."""
    env = os.environ.get("BENCHRUN_SPECS_DIR")
    if env:
        return Path(env).expanduser()
    from benchrun.automation.settings import project_root

    return project_root() / "specs"


def documents_in_folder(folder: Path) -> list[SpecDocument]:
    """Every candidate spec document below ``folder`` (recursive, sorted, ``crd/`` skipped)."""
    if folder.is_file():  # `--specs specs/local/canary.yaml` read "does not exist"
        raise BenchrunError(f"specs folder {folder} is a file: --specs takes the folder the cadence's specs are under "
                            f"(e.g. {folder.parent}); `benchrun submit {folder}` submits one spec")
    if not folder.is_dir():
        raise BenchrunError(f"specs folder {folder} does not exist: pass --specs DIR or set BENCHRUN_SPECS_DIR")
    docs = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if not path.is_file() or not is_spec_path(rel) or any(p.startswith(".") for p in rel.split("/")):
            continue
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise BenchrunError(f"cannot read spec {path}: {exc.strerror}") from exc
        docs.append(SpecDocument(path=rel, data=data, source=str(path.resolve())))
    return docs


def discover(cadence: str, specs_dir: Path | None = None) -> Discovery:
    """The specs under ``specs_dir`` (default :func:`default_specs_dir`) that run on ``cadence``."""
    folder = specs_dir if specs_dir is not None else default_specs_dir()
    return select(documents_in_folder(folder), cadence)


def documents_at_commit(repo: Path, sha: str, under: str, paths: Iterable[str] | None = None) -> list[SpecDocument]:
    """Candidate spec documents as committed in ``sha`` (all below ``under``, or just ``paths``)."""
    from benchrun.automation import git

    candidates = list(paths) if paths is not None else git.list_files(repo, sha, under)
    return [
        SpecDocument(path=p, data=git.read_blob(repo, sha, p), source=f"{repo}@{sha[:12]}:{p}",
                     find_dataset=git_finder(repo, sha, p))
        for p in candidates
        if is_spec_path(p, under)
    ]


def _inside(*parts: str) -> str | None:
    """``parts`` joined as a repository path, or None when it leaves the repository."""
    joined = posixpath.normpath(posixpath.join(*parts))
    return None if joined.startswith("../") or joined in ("..", ".") or joined.startswith("/") else joined


def git_finder(repo: Path, sha: str, spec_path: str, cache: Path | None = None) -> Any:
    """A committed spec's dataset, read from the same commit: the path from the repository root,
    then from the spec's folder, as for a file. Its bytes go to a content-addressed cache
    (``<home>/cache/datasets/``) so the model has a file to name; the run keeps its own copy
    (``structured/<run_id>_dataset.<ext>``, :func:`copy_into_run`). An absolute path names a
    file on the machine that runs the sensor, not in the commit: refused."""
    from benchrun.automation import git
    from benchrun.spec.datasets import cache_bytes

    def find(written: str) -> tuple[Path | None, str]:
        if Path(written).is_absolute() or written.startswith("/"):
            return None, (f"{written} (a committed spec's dataset is read from the same commit: give its path "
                          f"relative to the repository root or to the spec's folder)")
        tried = repo_candidates(written, spec_path)
        where = " or ".join(f"{sha[:12]}:{p}" for p in tried) or f"{written} (outside the repository)"
        for path in tried:
            try:
                data = git.read_blob(repo, sha, path)
            except BenchrunError:
                continue
            return cache_bytes(data, Path(path).suffix, cache), where
        return None, where
    return find


def repo_candidates(written: str, spec_path: str) -> list[str]:
    """Where a committed spec's relative dataset path may be, in order: from the repository
    root, then from the spec's folder (paths that leave the repository are dropped)."""
    if written.startswith("/"):
        return []
    return [p for p in dict.fromkeys((_inside(written), _inside(posixpath.dirname(spec_path), written))) if p]


def dataset_path_of(data: bytes) -> str | None:
    """``spec.workload.dataset.path`` of a spec's bytes, or None (no dataset, or not YAML):
    which spec a dataset-only commit changes, without validating every spec."""
    import yaml

    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError:
        return None
    for key in ("spec", "workload", "dataset", "path"):
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc if isinstance(doc, str) else None
