"""Signed provenance of a run's evidence: an in-toto Statement in a DSSE envelope (local ed25519).

The names below are imported on first use (PEP 562), so the CLI, which imports
``benchrun.provenance.commands`` for every command, does not load cryptography up front.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchrun._lazy import lazy_exports

if TYPE_CHECKING:
    from benchrun.provenance.signing import (
        BACKEND_USED,
        SignResult,
        envelope_path,
        sign_run,
        verify_envelope,
        verify_run,
    )
    from benchrun.provenance.statement import PREDICATE_TYPE, STATEMENT_TYPE, Statement, subject_mismatches

_LAZY = {
    **dict.fromkeys(("BACKEND_USED", "SignResult", "envelope_path", "sign_run", "verify_envelope", "verify_run"),
                    "benchrun.provenance.signing"),
    **dict.fromkeys(("PREDICATE_TYPE", "STATEMENT_TYPE", "Statement", "subject_mismatches"),
                    "benchrun.provenance.statement"),
}

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)
