"""The BenchmarkRun spec: model, YAML loading, admission rules, digests and the CRD.

Public API (what the rest of benchrun calls)::

    load_spec(path) -> LoadedSpec            # one valid BenchmarkRun, else SpecInvalid (exit 2)
    load_spec_bytes(data, source) -> LoadedSpec
    validate_path(path) -> list[DocumentResult]   # files or folders, several docs per file
    spec_digest(document), workload_spec_digest(document)   # sha256 of canonical JSON
"""

from __future__ import annotations

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

__all__ = [
    "BenchmarkRun",
    "DocumentResult",
    "Layer",
    "LoadedSpec",
    "SpecError",
    "SpecInvalid",
    "Suite",
    "canonical_json",
    "load_spec",
    "load_spec_bytes",
    "spec_digest",
    "validate_bytes",
    "validate_path",
    "workload_spec_digest",
]
