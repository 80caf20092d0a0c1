"""What curation reads from one run directory, read defensively (absent optional files → empty)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import logging
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.paths import sample_path, validate_run_id
from benchrun.rundir import START_KEYS, read_json_or_none
from benchrun.store import ArtifactStore, ObjectManifest, open_store, portable_address, sha256_file
from benchrun.suites.result import read_result

log = logging.getLogger(__name__)


def parse_ts(value: Any) -> dt.datetime | None:
    """An ISO 8601 string or epoch seconds as an aware UTC datetime; None when absent or unparseable."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, (int, float)):
            return dt.datetime.fromtimestamp(float(value), dt.timezone.utc)
        parsed = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except (ValueError, OSError, OverflowError):
        log.warning("unparseable timestamp %r left null", value)
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def run_start(status: Any) -> dt.datetime | None:
    """The start the warehouse files a run's rows under (``run_started_utc``, its day partition): the
    run's first start, which a re-run keeps (``started_utc`` is the latest attempt's), else its start,
    else its creation; None when the status says none."""
    if not isinstance(status, dict):
        return None
    for key in (*START_KEYS, "created_utc"):
        when = parse_ts(status.get(key))
        if when is not None:
            return when
    return None


def _read_json(path: Path) -> Any:
    return read_json_or_none(path, fix="fix or remove the file and curate again")


def dig(doc: Any, *path: str) -> Any:
    """``doc[path[0]][path[1]]...`` or None at the first missing step."""
    for step in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(step)
    return doc


@dataclasses.dataclass
class RunSources:
    """Everything one run directory offers the warehouse, plus the lineage of its stored copy."""

    run_id: str
    run_dir: Path
    status: dict[str, Any]
    environment: dict[str, Any]
    spec: dict[str, Any]
    launches: list[dict[str, Any]]
    results: list[tuple[str, dict[str, Any]]]  # (relative path, suite result document)
    manifest: ObjectManifest | None
    home: Path | None = None  # the home curated into (a run restored from the store lies in a temporary one)

    @property
    def workload_spec_digest(self) -> str | None:
        return self.status.get("workload_spec_digest")

    @property
    def artifact_manifest_digest(self) -> str | None:
        if self.manifest is not None:
            return self.manifest.digest
        return self.status.get("artifact_manifest_digest")

    def lineage(self, relpath: str | None) -> dict[str, Any]:
        """Lineage columns for a number taken from ``relpath`` (raw_uri null when not stored)."""
        entry = None
        if relpath is not None and self.manifest is not None:
            try:
                entry = self.manifest.entry(relpath)
            except BenchrunError:
                entry = None
        return {
            "workload_spec_digest": self.workload_spec_digest,
            "artifact_manifest_digest": self.artifact_manifest_digest,
            "raw_uri": portable_address(entry.uri, entry.key) if entry else None,
            "raw_path": relpath,
            "raw_sha256": entry.sha256 if entry else None,
        }

    def launch_for(self, suite: str, replicate: int) -> dict[str, Any]:
        for row in self.launches:
            if row.get("suite") == suite and int(row.get("replicate") or 0) == int(replicate):
                return row
        return {}

    def sinks(self) -> dict[str, Any]:
        return dig(self.spec, "spec", "sinks") or {}


def load_sources(run_dir: Path, manifest: ObjectManifest | None, home: Path) -> RunSources:
    """Read status.json (required), environment, pinned spec, launches and suite results."""
    run_dir = Path(run_dir)
    status = _read_json(run_dir / "status.json")
    if not isinstance(status, dict) or not status.get("run_id"):
        raise BenchrunError(f"{run_dir / 'status.json'}: missing or has no run_id; is {run_dir} a run directory?")
    run_id = validate_run_id(status["run_id"])
    if run_dir.name != run_id:  # a copied or renamed directory: its rows would land under another run's id
        raise BenchrunError(f"{run_dir / 'status.json'}: run_id is {run_id!r} but the directory is {run_dir.name!r}; "
                            f"a run directory is named after its run id: rename it to {run_id}")
    structured = run_dir / "structured"
    env = _read_json(structured / f"{run_id}_environment.json") or {}
    spec = _read_spec(structured / f"{run_id}_spec.yaml")
    launches = _read_json(structured / f"{run_id}_launches.json") or []
    if isinstance(launches, dict):
        launches = launches.get("launches", [])
    results = []
    prefix = f"{run_id}_"
    for path in sorted(structured.glob(f"{prefix}*_r*.json")) if structured.is_dir() else []:
        try:
            doc = read_result(path)
        except ValueError as exc:
            # A broken result is the suite's failure, recorded in launches; it has no numbers to curate.
            log.warning("skipping %s", exc)
            continue
        results.append((path.relative_to(run_dir).as_posix(), doc))
    if manifest is None:
        manifest = _try_load_manifest(run_id, spec, status, home)
    elif manifest.run_id != run_id:
        raise BenchrunError(f"object manifest is for run {manifest.run_id}, not {run_id}")
    return RunSources(run_id, run_dir, status, env if isinstance(env, dict) else {}, spec, launches, results, manifest,
                      Path(home))


def _read_spec(spec_path: Path) -> dict[str, Any]:
    """The pinned spec as a mapping ({} when absent or not parseable, with a warning)."""
    if not spec_path.is_file():
        return {}
    import yaml

    try:
        loaded = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        log.warning("%s: pinned spec not parseable (%s); workload and retention left null", spec_path, exc)
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _try_load_manifest(run_id: str, spec: dict[str, Any], status: dict[str, Any], home: Path) -> ObjectManifest | None:
    """The stored object manifest if the evidence was stored; None (lineage null) otherwise."""
    found = _stored(run_id, spec, status, home)
    return found[1] if found else None


def _stored(run_id: str, spec: dict[str, Any], status: dict[str, Any], home: Path,
            also: tuple[ArtifactStore, ...] = ()) -> tuple[ArtifactStore, ObjectManifest] | None:
    """The store holding the object manifest status.json names and that manifest (the spec's store
    first, then ``also``); None, with a warning, where the evidence was not stored or is not found."""
    digest = status.get("artifact_manifest_digest")
    if not digest:
        return None
    template = dig(spec, "spec", "sinks", "rawArtifacts", "pathTemplate")
    why = []
    try:
        stores = [open_store(template, home)]
    except BenchrunError as exc:
        stores, why = [], [str(exc)]
    for store in [*stores, *also]:
        try:
            manifest = store.load_manifest(run_id, digest)
        except BenchrunError as exc:
            why.append(str(exc))
            continue
        # The objects are where the manifest was found (its digest leaves locations out): in a moved or
        # copied home that is this home's store, not the one the manifest was first written to.
        return store, dataclasses.replace(manifest, store_uri=store.uri)
    log.warning("run %s: stored object manifest not loadable (%s); raw_uri left null", run_id, "; ".join(why))
    return None


# What curation reads from a run directory, besides status.json (live, never stored): load_sources'
# files, the replicates' telemetry samples (telemetry.facts.sample_files) and the request files the
# results name (curate.request_files).
_FIXED_SOURCES = ("environment.json", "spec.yaml", "launches.json")


def _is_source(relpath: str, run_id: str) -> bool:
    folder, _, name = relpath.partition("/")
    if "/" in name:
        return False
    if folder == "structured":
        return name in {f"{run_id}_{n}" for n in _FIXED_SOURCES} or fnmatchcase(name, f"{run_id}_*_r*.json")
    return folder == "raw" and fnmatchcase(name, f"{run_id}_*_r*_*.parquet")


def stored_evidence(run_dir: Path, home: Path, also: tuple[ArtifactStore, ...] = ()
                    ) -> tuple[ArtifactStore, ObjectManifest] | None:
    """The store and object manifest of the evidence the run in ``run_dir`` stored (as status.json
    names it; looked for in the pinned spec's store, then in ``also``); None where it stored none
    or it is not found."""
    run_dir = Path(run_dir)
    status = _read_json(run_dir / "status.json")
    if not isinstance(status, dict) or not status.get("run_id"):
        raise BenchrunError(f"{run_dir / 'status.json'}: missing or has no run_id; is {run_dir} a run directory?")
    run_id = validate_run_id(status["run_id"])
    return _stored(run_id, _read_spec(run_dir / "structured" / f"{run_id}_spec.yaml"), status, Path(home), also)


def source_mismatches(run_dir: Path, manifest: ObjectManifest) -> list[str]:
    """Each file curation would read from ``run_dir`` that is not the one its stored evidence holds
    (re-hashed: a file edited, added or removed since the run was stored), as ``path: why``."""
    run_dir = Path(run_dir)
    run_id = manifest.run_id
    stored = {o.path: o for o in manifest.objects}
    wanted = {rel for rel in stored if _is_source(rel, run_id)}
    for folder in ("structured", "raw"):
        if (run_dir / folder).is_dir():
            wanted |= {rel for p in (run_dir / folder).iterdir() if _is_source(rel := f"{folder}/{p.name}", run_id)}
    out: list[str] = []
    checked: set[str] = set()

    def check(rel: str) -> bytes | None:
        checked.add(rel)
        path, entry = run_dir / rel, stored.get(rel)
        if not path.is_file():
            if entry is not None:
                out.append(f"{rel}: missing (the stored evidence has it)")
            return None
        if entry is None:
            out.append(f"{rel}: not in the stored evidence (added after the run was stored)")
            return None
        if path.is_symlink() or path.stat().st_size != entry.size:
            out.append(f"{rel}: differs from the stored copy (sha256 {entry.sha256})")
            return None
        data = path.read_bytes() if rel.endswith(".json") else None  # a result names its request files
        if (hashlib.sha256(data).hexdigest() if data is not None else sha256_file(path)) != entry.sha256:
            out.append(f"{rel}: differs from the stored copy (sha256 {entry.sha256})")
            return None
        return data

    named: set[str] = set()
    for rel in sorted(wanted):
        data = check(rel)
        if data is not None and fnmatchcase(rel, f"structured/{run_id}_*_r*.json"):
            try:
                doc = json.loads(data)
            except ValueError:
                continue  # curation skips it too
            samples = doc.get("samples") if isinstance(doc, dict) else None
            sample = samples.get("requests") if isinstance(samples, dict) else None
            path = sample_path(run_dir, sample)
            if path is not None:
                named.add(path.relative_to(run_dir.resolve()).as_posix())
    for rel in sorted(named - checked):
        check(rel)
    return out
