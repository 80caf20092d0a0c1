"""Signed provenance of a run's evidence: an in-toto Statement in a DSSE envelope (local ed25519).

The names below are imported on first use (PEP 562), so the CLI, which imports
``benchrun.provenance.commands`` for every command, does not load cryptography up front.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
