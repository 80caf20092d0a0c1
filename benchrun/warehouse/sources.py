"""What curation reads from one run directory, read defensively (absent optional files → empty)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.paths import validate_run_id
from benchrun.rundir import read_json_or_none
from benchrun.store import ObjectManifest, open_store, portable_address
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
    structured = run_dir / "structured"
    env = _read_json(structured / f"{run_id}_environment.json") or {}
    spec: dict[str, Any] = {}
    spec_path = structured / f"{run_id}_spec.yaml"
    if spec_path.is_file():
        import yaml

        try:
            loaded = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
            spec = loaded if isinstance(loaded, dict) else {}
        except yaml.YAMLError as exc:
            log.warning("%s: pinned spec not parseable (%s); workload and retention left null", spec_path, exc)
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


def _try_load_manifest(run_id: str, spec: dict[str, Any], status: dict[str, Any], home: Path) -> ObjectManifest | None:
    """The stored object manifest if the evidence was stored; None (lineage null) otherwise."""
    if not status.get("artifact_manifest_digest"):
        return None
    template = dig(spec, "spec", "sinks", "rawArtifacts", "pathTemplate")
    try:
        store = open_store(template, home)
        manifest = store.load_manifest(run_id, status["artifact_manifest_digest"])
    except BenchrunError as exc:
        log.warning("run %s: stored object manifest not loadable (%s); raw_uri left null", run_id, exc)
        return None
    # The objects are where the manifest was found (its digest leaves locations out): in a moved or
    # copied home that is this home's store, not the one the manifest was first written to.
    return dataclasses.replace(manifest, store_uri=store.uri)
