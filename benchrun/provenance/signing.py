"""Sign a run's provenance Statement into a DSSE envelope, and verify one, saying which backend signed.

Only a local ed25519 key can sign here. When the spec asks for another backend (sigstore,
a KMS key) the envelope is still made with the local key and the result says so:
``backend_used`` is what actually signed, ``satisfied_request`` is False, and the run's
``Signed`` condition must not claim the requested signature (CONTRACT.md §3).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from benchrun.errors import BenchrunError
from benchrun.paths import validate_run_id
from benchrun.provenance import dsse
from benchrun.provenance.keys import default_public_key, keyid_of, load_public_key, load_signing_key
from benchrun.provenance.status_fields import FINAL_SIGNATURE_PENDING, SEALING_PHASE  # noqa: F401 - lifecycle, runs, verify
from benchrun.provenance.statement import (
    Statement, build_statement, canonical_json, partition_mismatches, rows_now, subject_mismatches,
    unrecorded_removals)
from benchrun.rundir import utc_now
from benchrun.fsio import atomic_write_json

log = logging.getLogger(__name__)

BACKEND_USED = "local-ed25519"
# Requests a local ed25519 DSSE signature satisfies.
LOCAL_BACKENDS = frozenset({"local", "local-ed25519", "ed25519", "dsse", "dsse-ed25519"})
IN_TOTO_FORMATS = frozenset({"in_toto", "in-toto", "intoto", "dsse"})


def backend_available(backend: str | None) -> bool:
    """Whether this installation can make the signature ``signing.backend`` asks for (None: any).
    ``_`` and ``-`` are one (the shipped pre-release spec writes ``local_ed25519``)."""
    return backend is None or backend.strip().lower().replace("_", "-") in LOCAL_BACKENDS


def format_produced(attestation_format: str | None) -> bool:
    """Whether ``signing.attestationFormat`` is one benchrun produces (an in-toto DSSE envelope; None: any)."""
    return attestation_format is None or attestation_format.strip().lower() in IN_TOTO_FORMATS


@dataclass(frozen=True)
class SignResult:
    """What was signed, with which key, and whether that is what the spec asked for."""

    path: Path
    keyid: str
    backend_requested: str | None
    backend_used: str
    satisfied_request: bool
    attestation_format_requested: str | None = None
    subjects: int = 0

    def condition(self) -> tuple[bool, str, str]:
        """(status, reason, message) for the run's ``Signed`` condition; True only if the request was met."""
        where = f"{self.path.name} (keyid {self.keyid})"  # whole: what --trust-keyid pins
        if self.satisfied_request:
            return True, "SignedLocalEd25519", f"DSSE in-toto statement signed with {self.backend_used}: {where}"
        wanted = self.backend_requested or "(none)"
        if not backend_available(self.backend_requested):
            why = f"the requested backend {wanted} is not available here, so no {wanted} signature was made"
        else:
            why = f"the requested attestation format {self.attestation_format_requested} was not produced"
        return False, "RequestedBackendUnavailable", f"{why}; signed instead with {self.backend_used}: {where}"


def envelope_path(run_dir: Path) -> Path:
    run_id = validate_run_id(run_dir.name)
    return run_dir / "reports" / f"{run_id}_provenance.dsse.json"


def sign_run(run_dir: Path, home: Path | str | None = None, *, backend_requested: str | None = None,
             attestation_format: str | None = None, keep: Mapping[str, Any] | None = None) -> SignResult:
    """Write ``<run_dir>/reports/<run_id>_provenance.dsse.json`` (atomic) and say who signed it.

    The Statement's subjects are the files manifest.json hashes (re-hashed now: if any
    changed since the evidence was sealed nothing is signed) and manifest.json itself.
    """
    run_dir = Path(run_dir)
    key = load_signing_key(home)
    statement = build_statement(run_dir, backend_requested=backend_requested, backend_used=BACKEND_USED,
                                signed_utc=utc_now(), home=Path(home) if home else None, keep=keep)
    envelope = dsse.sign(dsse.IN_TOTO_PAYLOAD_TYPE, canonical_json(statement), key.private, key.keyid)
    path = envelope_path(run_dir)
    atomic_write_json(path, envelope.to_json())
    result = SignResult(path, key.keyid, backend_requested, BACKEND_USED,
                        backend_available(backend_requested) and format_produced(attestation_format),
                        attestation_format, len(statement["subject"]))
    log.info("run %s: provenance of %d subjects signed with %s (keyid %s) in %s%s",
             run_dir.name, len(statement["subject"]), BACKEND_USED, key.keyid, path,
             "" if result.satisfied_request else f"; the request was {backend_requested!r}, not met")
    return result


def verify_envelope(path: Path | str, public_key_path: Path | str | None = None, *,
                    home: Path | str | None = None, pinned: tuple[str, ...] = ()) -> Statement:
    """The Statement inside a DSSE envelope whose signature verifies; BenchrunError naming ``path`` otherwise.

    The key is ``public_key_path`` or, by default, a configured one (``default_public_key``:
    never the home's own public key unless its fingerprint is pinned).
    """
    p = Path(path)
    if public_key_path is not None:
        public, where = load_public_key(public_key_path), str(public_key_path)
    else:
        public, where = default_public_key(home, pinned)
    keyid = keyid_of(public)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BenchrunError(f"{p}: no provenance envelope there: the run is not signed (benchrun signs a run when it "
                            "finishes; 'benchrun verify RUN_ID' says why this one is not)") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise BenchrunError(f"{p}: not a readable DSSE envelope ({exc})") from exc
    try:
        env = dsse.Envelope.from_json(doc)
    except ValueError as exc:
        raise BenchrunError(f"{p}: not a DSSE envelope ({exc})") from None
    if env.payload_type != dsse.IN_TOTO_PAYLOAD_TYPE:
        raise BenchrunError(f"{p}: payloadType {env.payload_type!r} is not {dsse.IN_TOTO_PAYLOAD_TYPE}")
    if not dsse.verify(env, public, keyid):
        signers = ", ".join(sorted({k[:16] for k, _ in env.signatures if k})) or "no keyid"
        raise BenchrunError(
            f"{p}: the signature does not verify with the key {where} (keyid {keyid[:16]}; envelope signed by "
            f"{signers}): the envelope was altered or signed with another key"
        )
    try:
        statement = json.loads(env.payload.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BenchrunError(f"{p}: the signed payload is not JSON ({exc})") from exc
    return Statement.from_json(statement, str(p))


def verify_run(run_dir: Path, public_key_path: Path | str | None = None, *,
               home: Path | str | None = None, pinned: tuple[str, ...] = ()) -> Statement:
    """Verify the run's envelope, then that every subject still matches the file on disk."""
    run_dir = Path(run_dir)
    path = envelope_path(run_dir)
    statement = verify_envelope(path, public_key_path, home=home, pinned=pinned)
    if statement.run_id != run_dir.name:
        raise BenchrunError(f"{path}: the statement is for run {statement.run_id!r}, not {run_dir.name!r}")
    bad = subject_mismatches(statement, run_dir)
    if bad:
        raise BenchrunError(f"{path}: signature valid, but {len(bad)} signed file(s) changed since signing: "
                            f"{', '.join(bad[:10])}{' ...' if len(bad) > 10 else ''}")
    # The warehouse of the home this run directory is in (a copied home: its own warehouse).
    statement = dataclasses.replace(statement, rows_read=rows_now(statement, run_dir.parent.parent))
    bad = partition_mismatches(statement, run_dir.parent.parent)
    if bad:
        raise BenchrunError(f"{path}: signature valid, but {len(bad)} warehouse partition(s) of the run changed "
                            f"since signing: {', '.join(bad[:10])}{' ...' if len(bad) > 10 else ''}; "
                            "curate the run again (benchrun rebuild-warehouse) from its verified evidence")
    gone = unrecorded_removals(statement, run_dir.parent.parent)
    if gone:  # retention and `benchrun delete` record what they remove: nothing did these
        raise BenchrunError(f"{path}: signature valid, but {len(gone)} signed warehouse partition(s) of the run are "
                            f"gone and no applied retention record or delete record removed them: "
                            f"{', '.join(gone[:10])}{' ...' if len(gone) > 10 else ''}; curate the run again "
                            f"(benchrun rebuild-warehouse {statement.run_id}) from its verified evidence")
    return statement


def final_signature_missing(run_id: str, status: Any, statement: Statement | None = None) -> str | None:
    """Why run ``run_id`` cannot be verified or promoted yet: it reached its final phase but its
    final signing never ran (interrupted in between), so its signature is only the one made when
    its evidence was sealed and covers none of what the run published after. None otherwise.

    status.json's ``final_signature`` marker says so, but status.json is not signed: deleting the marker
    passed such a run. With the verified ``statement``, a Succeeded run whose signature was made while it
    was analyzed (its signed phase ``Analyzing``: the sealing signature) is one too (found in review)."""
    if not isinstance(status, dict):
        return None
    recorded = statement.predicate.get("curated_status") if statement is not None else None
    sealing_only = (isinstance(recorded, dict) and recorded.get("phase") == SEALING_PHASE
                    and status.get("phase") == "Succeeded")
    if status.get("final_signature") != FINAL_SIGNATURE_PENDING and not sealing_only:
        return None
    return (f"run {run_id}: the run's final signature is missing: it is {status.get('phase')}, but it was "
            "interrupted after it finished measuring, before the run was signed as finished (its signature "
            "is only the one made when its evidence was sealed: it covers none of the report, statistics or "
            f"final warehouse rows published after); `benchrun report {run_id}` signs it")


# Files a signature never covers, and why (what `verify` says it does not cover).
NEVER_SIGNED = {
    "status.json": "the run's live status (phase, conditions); it keeps changing after signing",
}
FIGURES_LOG_WHY = "the report figure worker's own log (its cost), written after the run is signed"


def never_signed_why(run_id: str, relpath: str) -> str | None:
    """Why a file of run ``run_id`` is never signed (``statement.unsigned_names``); None if it should be."""
    from benchrun.provenance.statement import figures_log_relpath

    return FIGURES_LOG_WHY if relpath == figures_log_relpath(run_id) else NEVER_SIGNED.get(relpath)


def analysis_output(run_id: str, relpath: str) -> bool:
    """Whether ``relpath`` is a file the run's analysis writes after its evidence is sealed, before its
    final signing: trial statistics, the baseline comparison, the playbooks, the report, its figure
    index and figures (``<run_id>_*.png`` in figures/). Completing an interrupted final signing signs
    these where they were added, never any other file (one dropped in would come out signed)."""
    import re

    rid = validate_run_id(run_id)
    named = {f"structured/{rid}_trial_statistics.json", f"structured/{rid}_comparison.json",
             f"reports/{rid}_playbooks.json", f"reports/{rid}_report.html", f"figures/{rid}_report_figures.json"}
    return relpath in named or re.fullmatch(rf"figures/{re.escape(rid)}_[A-Za-z0-9._-]+\.png", relpath) is not None


def uncovered_files(run_dir: Path, statement: Statement) -> list[str]:
    """Files in the run directory that the signature does not cover (besides the envelope itself)."""
    from benchrun.store.base import iter_run_files

    run_dir = Path(run_dir)
    envelope = envelope_path(run_dir).relative_to(run_dir).as_posix()
    return [rel for rel, _ in iter_run_files(run_dir) if rel not in statement.subjects and rel != envelope]


def verify_stored(run_dir: Path, statement: Statement, home: Path | str | None = None) -> int:
    """Re-hash every stored object of the run's evidence in the artifact store it was stored in.

    The object manifest is loaded by the signed ``artifact_manifest_digest`` (its digest is
    recomputed), every evidence subject of the signature must be in it with the same sha256,
    and every object's bytes are read back and re-hashed. Returns the number of objects.
    """
    from benchrun.store import open_store

    run_dir = Path(run_dir)
    digest = statement.predicate.get("artifact_manifest_digest")
    if not digest:
        raise BenchrunError(f"{envelope_path(run_dir)}: the statement names no artifact_manifest_digest")
    store = open_store(run_store_template(run_dir), Path(home) if home else run_dir.parent.parent)
    manifest = store.load_manifest(statement.run_id, digest)
    stored = {o.path: o.sha256 for o in manifest.objects}
    differ = [name for name, sha in statement.subjects.items()
              if name in stored and stored[name] != sha]
    if differ:
        raise BenchrunError(f"run {statement.run_id}: signed subjects differ from the stored object manifest: "
                            + ", ".join(differ[:10]))
    return store.verify(manifest)


def run_store_template(run_dir: Path) -> str | None:
    """The run's ``sinks.rawArtifacts.pathTemplate`` from its pinned spec (None: the local default)."""
    import yaml

    pinned = Path(run_dir) / "structured" / f"{Path(run_dir).name}_spec.yaml"
    try:
        doc = yaml.safe_load(pinned.read_text(encoding="utf-8"))
        return doc["spec"]["sinks"]["rawArtifacts"].get("pathTemplate")
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return None
