"""The BenchmarkRun spec: model, YAML loading, admission rules, digests and the CRD.

Public API (what the rest of benchrun calls)::

    load_spec(path) -> LoadedSpec            # one valid BenchmarkRun, else SpecInvalid (exit 2)
    load_spec_bytes(data, source) -> LoadedSpec
    validate_path(path) -> list[DocumentResult]   # files or folders, one BenchmarkRun per file
    spec_digest(document), workload_spec_digest(document)   # sha256 of canonical JSON
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from benchrun._lazy import lazy_exports

if TYPE_CHECKING:
    from benchrun.spec.digest import canonical_json, spec_digest, workload_spec_digest
    from benchrun.spec.loader import SpecError
    from benchrun.spec.model import BenchmarkRun, Layer, Suite
    from benchrun.spec.validation import (
        DocumentResult,
        LoadedSpec,
        SpecInvalid,
        load_spec,
        load_spec_bytes,
        validate_bytes,
        validate_path,
    )

# Imported on first use (PEP 562): the CLI imports benchrun.spec.commands for every command,
# and the pydantic model (~0.5 s) loads only for the commands that read a spec.
_LAZY = {
    **dict.fromkeys(("canonical_json", "spec_digest", "workload_spec_digest"), "benchrun.spec.digest"),
    "SpecError": "benchrun.spec.loader",
    **dict.fromkeys(("BenchmarkRun", "Layer", "Suite"), "benchrun.spec.model"),
    **dict.fromkeys(("DocumentResult", "LoadedSpec", "SpecInvalid", "load_spec", "load_spec_bytes", "validate_bytes",
                     "validate_path"), "benchrun.spec.validation"),
}

__all__ = sorted(_LAZY)

__getattr__, __dir__ = lazy_exports(__name__, globals(), _LAZY)
