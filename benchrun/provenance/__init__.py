"""Signed provenance of a run's evidence: an in-toto Statement in a DSSE envelope (local ed25519)."""

from benchrun.provenance.signing import BACKEND_USED, SignResult, envelope_path, sign_run, verify_envelope, verify_run
from benchrun.provenance.statement import PREDICATE_TYPE, STATEMENT_TYPE, Statement, subject_mismatches

__all__ = [
    "BACKEND_USED",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "SignResult",
    "Statement",
    "envelope_path",
    "sign_run",
    "subject_mismatches",
    "verify_envelope",
    "verify_run",
]
