"""The in-toto Statement v1 for a run: its stored files as subjects and benchrun's provenance predicate."""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from benchrun.errors import BenchrunError
from benchrun.paths import validate_run_id
from benchrun.store.base import sha256_file

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://benchrun.dev/provenance/v1"
BUILDER_ID = "https://benchrun.dev/builder/benchrun"


def benchrun_version() -> str:
    """The installed distribution's version (the builder version in every Statement)."""
    try:
        return importlib.metadata.version("benchrun")
    except importlib.metadata.PackageNotFoundError:
        from benchrun import __version__

        return __version__


def canonical_json(data: Any) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BenchrunError(f"{path}: missing; {what}") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise BenchrunError(f"{path}: not readable JSON ({exc})") from exc


def environment_summary(run_dir: Path, run_id: str) -> dict[str, Any] | None:
    """The captured environment without the package list (its count and digest stand in)."""
    path = run_dir / "structured" / f"{run_id}_environment.json"
    if not path.is_file():
        return None
    env = _read_json(path, "")
    if not isinstance(env, dict):
        return None
    out = {k: v for k, v in env.items() if k != "packages"}
    if "packages" in env:
        pk = env["packages"]
        out["packages_count"] = len(pk) if isinstance(pk, (list, dict)) else None
        out["packages_sha256"] = hashlib.sha256(canonical_json(pk)).hexdigest()
    return out


def subjects_of(run_dir: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every file the manifest hashes, re-hashed from disk (they must agree), plus manifest.json."""
    sha = (manifest.get("summary") or {}).get("sha256")
    if not isinstance(sha, dict) or not sha:
        raise BenchrunError(f"{run_dir / 'manifest.json'}: summary.sha256 is missing or empty; "
                            "record the run's evidence first")
    subjects = []
    changed = []
    for rel in sorted(sha):
        path = run_dir / rel
        if not path.resolve().is_relative_to(run_dir.resolve()):
            raise BenchrunError(f"{run_dir / 'manifest.json'}: {rel!r} points outside the run directory")
        actual = sha256_file(path) if path.is_file() else None
        if actual != sha[rel]:
            changed.append(rel if actual else f"{rel} (missing)")
        subjects.append({"name": rel, "digest": {"sha256": sha[rel]}})
    if changed:
        raise BenchrunError(f"{run_dir}: files differ from manifest.json, the sealed evidence changed: "
                            f"{', '.join(changed[:10])}{' ...' if len(changed) > 10 else ''}; nothing was signed")
    subjects.append({"name": "manifest.json", "digest": {"sha256": sha256_file(run_dir / "manifest.json")}})
    return sorted(subjects, key=lambda s: s["name"])


# Never signed: the live status (it changes after signing) and the envelope itself.
UNSIGNED_NAMES = ("status.json",)


def figures_log_relpath(run_id: str) -> str:
    """``reports/<run_id>_figures.log``: the report figure worker's own log (benchrun/report/worker.py)."""
    return f"reports/{validate_run_id(run_id)}_figures.log"


def unsigned_names(run_id: str) -> tuple[str, ...]:
    """Files of run ``run_id`` no signature covers: the live status, and the report figure
    worker's own log (the worker appends its cost to it after it has re-signed the run, so
    signing it would make every `benchrun run` fail `verify`)."""
    return (*UNSIGNED_NAMES, figures_log_relpath(run_id))


def published_subjects(run_dir: Path, sealed: set[str]) -> list[dict[str, Any]]:
    """Files written after the evidence was sealed (report, statistics, playbooks, figures, ...),
    hashed now: everything a run publishes is signed, not only the sealed evidence."""
    from benchrun.store.base import iter_run_files

    run_id = validate_run_id(run_dir.name)
    envelope = f"reports/{run_id}_provenance.dsse.json"
    skip = {*sealed, *unsigned_names(run_id), envelope, "manifest.json"}
    out = []
    for rel, full in iter_run_files(run_dir):
        if rel in skip:
            continue
        out.append({"name": rel, "digest": {"sha256": sha256_file(full)}})
    return out


def warehouse_partitions(home: Path, run_id: str) -> dict[str, str]:
    """The run's curated partition files, ``<table>/run_id=<id>/part.parquet`` (relative to the
    home's warehouse/) -> sha256: what query and lineage read for this run."""
    from benchrun.warehouse.schemas import TABLES
    from benchrun.warehouse.writer import warehouse_root

    run_id = validate_run_id(run_id)
    out = {}
    for table in sorted(TABLES):
        f = warehouse_root(home) / table / f"run_id={run_id}" / "part.parquet"
        if f.is_file():
            out[f"{table}/run_id={run_id}/part.parquet"] = sha256_file(f)
    return out


def warehouse_rows(home: Path, run_id: str) -> dict[str, dict[str, Any]] | None:
    """With the Iceberg warehouse (``BENCHRUN_WAREHOUSE_FORMAT=iceberg``): the digest of the run's
    rows in each table (``benchrun.warehouse.lake.run_rows_digest``); None with the parquet layout
    (its partition files are hashed instead, :func:`warehouse_partitions`)."""
    from benchrun.warehouse import lake

    return lake.run_rows_digest(home, run_id) if lake.enabled() else None


def rows_now(statement: "Statement", home: Path) -> dict[str, dict[str, Any]]:
    """The run's Iceberg rows now, per signed table (what ``verify_run`` read, when it did)."""
    from benchrun.warehouse import lake

    if statement.rows_read is not None:
        return statement.rows_read
    # signed with the Iceberg warehouse (its row sets recorded, none included): the rows now
    return lake.run_rows_digest(home, statement.run_id) if "warehouse_rows" in statement.predicate else {}


def partition_mismatches(statement: "Statement", home: Path) -> list[str]:
    """Signed warehouse partitions whose bytes changed, and signed Iceberg row sets whose rows
    changed (a partition or row set removed since is not a mismatch: its rows are gone, not
    altered; ``missing_partitions`` and ``unrecorded_removals``)."""
    from benchrun.warehouse.writer import warehouse_root

    bad = []
    now = rows_now(statement, home)
    signed_rows = statement.predicate.get("warehouse_rows") or {}
    for table, signed in sorted(signed_rows.items()):
        got = now.get(table)
        if got is not None and got.get("sha256") != signed.get("sha256"):
            bad.append(f"iceberg {table}: the run's {got['rows']} rows differ from the {signed.get('rows')} signed")
    # Signed with the Iceberg warehouse (the key present, even as {}: a run signed with no rows): a
    # table the run had no rows in when signed holds rows added since, not the run's evidence.
    for table in sorted(set(now) - set(signed_rows)) if "warehouse_rows" in statement.predicate else []:
        bad.append(f"iceberg {table}: {now[table]['rows']} rows of the run that were not signed (added since)")
    root = warehouse_root(home).resolve()
    for rel, sha in sorted((statement.predicate.get("warehouse_partitions") or {}).items()):
        path = (warehouse_root(home) / rel).resolve()
        if not path.is_relative_to(root):
            bad.append(f"warehouse/{rel} (outside the warehouse)")
        elif path.is_file() and sha256_file(path) != sha:
            bad.append(f"warehouse/{rel} (sha256 differs)")
    return bad


def _gone(statement: "Statement", home: Path) -> list[tuple[str, str]]:
    """``(what, table)`` for each signed warehouse partition or Iceberg row set no longer present."""
    from benchrun.warehouse.writer import warehouse_root

    now = rows_now(statement, home)
    parts = sorted(statement.predicate.get("warehouse_partitions") or {})  # <table>/run_id=<id>/part.parquet
    gone = [(f"warehouse/{rel}", rel.split("/", 1)[0]) for rel in parts if not (warehouse_root(home) / rel).is_file()]
    return gone + [(f"iceberg {t}", t) for t in sorted(statement.predicate.get("warehouse_rows") or {}) if t not in now]


def missing_partitions(statement: "Statement", home: Path) -> list[str]:
    """Signed warehouse partitions and Iceberg row sets no longer present, each with the record
    that removed it where one does (``removal_record``)."""
    out = []
    for what, table in _gone(statement, home):
        why = removal_record(statement, home, table)
        out.append(f"{what} ({why})" if why else f"{what} (no retention or delete record removed it)")
    return out


def unrecorded_removals(statement: "Statement", home: Path) -> list[str]:
    """Signed warehouse partitions and Iceberg row sets gone without an applied retention record
    (``warehouse/_retention/``) or a ``benchrun delete`` record (``warehouse/_deleted/``) that
    removed them: the run's signed rows were removed some other way (by hand), which verify and
    promote must not take for retention."""
    return [what for what, table in _gone(statement, home) if not removal_record(statement, home, table)]


def removal_record(statement: "Statement", home: Path, table: str) -> str | None:
    """Why the run's rows of ``table`` may be gone: the applied retention record that names them, or
    the run's delete record (not one older than the run: a run made after a delete reuses its id);
    None when neither does."""
    from benchrun.warehouse.removed import deleted_runs, deletion, retention_parts
    from benchrun.warehouse.sources import parse_ts

    run_id = statement.run_id
    for record, t, r in retention_parts(home):
        if r == run_id and t == table:
            return f"removed by retention, record {record}"
    created = parse_ts((statement.predicate.get("timestamps") or {}).get("created_utc"))
    return deletion(deleted_runs(home), run_id, created)


def signed_partitions_unverified(run_dir: Path) -> dict[str, str] | None:
    """The partition hashes in the run's statement, read WITHOUT checking the signature (for
    query's warnings only; `verify` checks the signature); None when the run has none."""
    from benchrun.provenance import dsse

    run_id = validate_run_id(run_dir.name)
    try:
        doc = json.loads((run_dir / "reports" / f"{run_id}_provenance.dsse.json").read_text(encoding="utf-8"))
        statement = json.loads(dsse.Envelope.from_json(doc).payload)
        parts = statement["predicate"].get("warehouse_partitions")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return parts if isinstance(parts, dict) else None


def from_status(status: Mapping[str, Any]) -> dict[str, Any]:
    """The predicate fields a statement takes from status.json (which no signature covers)."""
    return {
        "run_name": status.get("name"),
        "spec_digest": status.get("spec_digest"),
        "workload_spec_digest": status.get("workload_spec_digest"),
        "artifact_manifest_digest": status.get("artifact_manifest_digest"),
        "benchmark_class": {"requested": status.get("benchmark_class_requested"),
                            "granted": status.get("benchmark_class_granted")},
        "timestamps": {k: status.get(k) for k in ("created_utc", "started_utc", "finished_utc")},
    }


def status_drift(statement: "Statement", status: Mapping[str, Any], run_dir: Path | None = None, *,
                 completing: bool = False) -> list[str]:
    """``field (signed X, status.json Y)`` for each field naming the run (its name, class and
    digests) that status.json no longer agrees with: an edit of the unsigned status.json, which
    re-signing must not pass over in silence (re-signing keeps the signed values of every field the
    predicate takes from status.json anyway: ``build_statement``'s ``keep``; a field signed empty
    may have been set since, a run signed before it finished). Then each status.json field the
    warehouse curates (the rows a re-signing signs) that moved off the value the signed rows were
    curated from, but for the moves benchrun makes itself (``status_fields.curated_drift``; its
    pinned spec is read from ``run_dir`` for a statement signed before that value was recorded).
    ``completing``: the run's final signing is pending (finalize moved its phase and finish)."""
    from benchrun.provenance.status_fields import curated_drift

    now, signed = from_status(status), statement.predicate
    now.pop("timestamps")
    out = []
    for key, value in now.items():
        pairs = ([(f"{key}.{k}", (signed.get(key) or {}).get(k), v) for k, v in value.items()]
                 if isinstance(value, dict) else [(key, signed.get(key), value)])
        out += [f"{name} (signed {old!r}, status.json {new!r})" for name, old, new in pairs
                if old is not None and old != new]
    return out + curated_drift(signed, status, run_dir, completing=completing)


def build_statement(run_dir: Path, *, backend_requested: str | None, backend_used: str,
                    signed_utc: str, home: Path | None = None,
                    keep: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The Statement for the run in ``run_dir`` (its status.json and manifest.json must exist).
    ``keep``: the predicate of the signature being replaced (re-signing): the fields taken from
    status.json keep their signed values, so an edit of the unsigned status.json is never signed."""
    run_id = validate_run_id(run_dir.name)
    status = _read_json(run_dir / "status.json", "the run has no status")
    manifest = _read_json(run_dir / "manifest.json", "the run's evidence is not recorded yet")
    if manifest.get("run_id") not in (None, run_id):
        raise BenchrunError(f"{run_dir / 'manifest.json'}: run_id {manifest.get('run_id')!r} is not {run_id!r}")
    fields = from_status(status)
    if keep:
        for key, value in fields.items():
            signed = keep.get(key)
            if isinstance(value, dict):
                fields[key] = {k: (signed or {}).get(k) if (signed or {}).get(k) is not None else v
                               for k, v in value.items()}
            elif signed is not None:
                fields[key] = signed
    digest = fields["artifact_manifest_digest"]
    if not digest:
        raise BenchrunError(f"{run_dir / 'status.json'}: no artifact_manifest_digest; the evidence is not in the "
                            "artifact store yet (materialize run_evidence first)")
    predicate = {
        "run_id": run_id,
        "run_name": fields["run_name"],
        "spec_digest": fields["spec_digest"],
        "workload_spec_digest": fields["workload_spec_digest"],
        "artifact_manifest_digest": digest,
        "benchmark_class": fields["benchmark_class"],
        "outcome": manifest.get("status"),
        "environment": environment_summary(run_dir, run_id),
        "builder": {"id": BUILDER_ID, "version": benchrun_version()},
        "signing": {"backend_requested": backend_requested, "backend_used": backend_used},
        "timestamps": {
            **fields["timestamps"],
            "evidence_sealed_utc": manifest.get("timestamp_utc"),
            "signed_utc": signed_utc,
        },
    }
    sealed = subjects_of(run_dir, manifest)
    published = published_subjects(run_dir, {x["name"] for x in sealed})
    predicate["published_files"] = sorted(x["name"] for x in published)
    predicate["not_signed"] = list(unsigned_names(run_id))
    # The status.json values the run's warehouse rows (signed below) are curated from: status.json is
    # never signed, so re-signing checks it still holds them (status_drift) before it signs new rows.
    from benchrun.provenance.status_fields import curated_status

    predicate["curated_status"] = curated_status(status)
    # The run's rows in the warehouse, as curated when it was signed (query and lineage read these).
    home_path = Path(home) if home else run_dir.parent.parent
    predicate["warehouse_partitions"] = warehouse_partitions(home_path, run_id)
    rows = warehouse_rows(home_path, run_id)
    if rows is not None:  # the Iceberg warehouse: the run's rows per table, by content
        predicate["warehouse_rows"] = rows
    return {
        "_type": STATEMENT_TYPE,
        "subject": sorted(sealed + published, key=lambda x: x["name"]),
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


@dataclass(frozen=True)
class Statement:
    """A verified Statement: its subjects (name -> sha256) and predicate."""

    subjects: dict[str, str]
    predicate_type: str
    predicate: dict[str, Any]
    raw: dict[str, Any]
    # the run's Iceberg rows as ``verify_run`` read them (table -> rows, sha256): reused by
    # ``missing_partitions`` so one verify scans each table once
    rows_read: dict[str, dict[str, Any]] | None = None

    @property
    def run_id(self) -> str:
        return str(self.predicate.get("run_id", ""))

    @classmethod
    def from_json(cls, doc: Any, source: str) -> "Statement":
        if not isinstance(doc, dict) or doc.get("_type") != STATEMENT_TYPE:
            raise BenchrunError(f"{source}: the payload is not an in-toto Statement v1")
        if doc.get("predicateType") != PREDICATE_TYPE:
            raise BenchrunError(f"{source}: predicateType {doc.get('predicateType')!r} is not {PREDICATE_TYPE}")
        subjects: dict[str, str] = {}
        for s in doc.get("subject") or []:
            name, sha = (s or {}).get("name"), ((s or {}).get("digest") or {}).get("sha256")
            if not isinstance(name, str) or not isinstance(sha, str):
                raise BenchrunError(f"{source}: a subject lacks a name or a sha256 digest")
            subjects[name] = sha
        if not subjects:
            raise BenchrunError(f"{source}: the Statement has no subjects")
        return cls(subjects, doc["predicateType"], dict(doc.get("predicate") or {}), doc)


def subject_mismatches(statement: Statement, run_dir: Path) -> list[str]:
    """Subjects whose file is missing or whose bytes changed since signing (empty when all match)."""
    return digest_mismatches(run_dir, statement.subjects)


def digest_mismatches(run_dir: Path, digests: Mapping[str, str], differs: str = "sha256 differs") -> list[str]:
    """``relpath (why)`` for each file of ``digests`` (run-relative path → sha256) that is outside
    the run directory, missing, or whose bytes hash otherwise; empty when every file matches."""
    bad = []
    root = run_dir.resolve()
    for name, sha in sorted(digests.items()):
        path = (run_dir / name).resolve()
        if not path.is_relative_to(root):
            bad.append(f"{name} (outside the run directory)")
        elif not path.is_file():
            bad.append(f"{name} (missing)")
        elif sha256_file(path) != sha:
            bad.append(f"{name} ({differs})")
    return bad
