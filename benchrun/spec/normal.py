"""A spec as the model reads it, so that writing out a default changes neither the gate nor the workload's identity.

``nodes: 1``, ``trials.maxReplicates: 10`` or ``dataset.format: auto`` written out mean what
leaving them out means, yet the document as written differs. Two forms here:

* :func:`filled_spec` — ``spec`` validated by the model with every default filled in (by
  alias, JSON types): what the one-variable gate diffs (:mod:`benchrun.stats.gate`), so a
  difference shows the values in effect (``nodes: 1 -> 2`` even where the baseline left it out).
* :func:`normalized_workload_digest` — sha256 of ``spec.workload`` validated by the model with
  the fields equal to their defaults left out. Leaving them out (rather than filling them in)
  keeps the digest of a written workload the same when a later version adds an optional field.

``workload_spec_digest`` (the workload as written, :mod:`benchrun.spec.digest`) stays what a
run records and what older runs were recorded with; runs record this one beside it as
``workload_spec_digest_normalized`` (status.json), and :class:`WorkloadDigests` matches two
workloads on the normalized digest when both sides have it, else on the written one — so
runs made before it existed still match exactly as they did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from pydantic import ValidationError

from benchrun.spec.digest import sha256_hex
from benchrun.spec.model import BenchmarkRun, Workload

NORMALIZED_KEY = "workload_spec_digest_normalized"  # its name in status.json
WRITTEN_KEY = "workload_spec_digest"


def filled_spec(document: Mapping[str, Any]) -> dict[str, Any] | None:
    """``spec`` of ``document`` with every default filled in; None when this model does not
    validate it (a run pinned by an older version: compare it as written)."""
    try:
        run = BenchmarkRun.model_validate(document)
    except (ValidationError, TypeError, ValueError):
        return None
    return run.spec.model_dump(mode="json", by_alias=True)


def normalized_workload_digest(document: Mapping[str, Any]) -> str | None:
    """sha256 of ``spec.workload`` as the model reads it, defaults left out; None when the
    model does not validate it."""
    spec = document.get("spec")
    workload = spec.get("workload") if isinstance(spec, Mapping) else None
    try:
        model = Workload.model_validate(workload)
    except (ValidationError, TypeError, ValueError):
        return None
    return sha256_hex(model.model_dump(mode="json", by_alias=True, exclude_defaults=True))


@dataclass(frozen=True)
class WorkloadDigests:
    """A workload's two digests: as written (every run has it) and normalized (runs since it exists)."""

    written: str | None
    normalized: str | None = None

    @classmethod
    def of_status(cls, status: Mapping[str, Any]) -> "WorkloadDigests":
        """Both digests a run recorded in its status.json (the normalized one may be missing)."""
        return cls(status.get(WRITTEN_KEY), status.get(NORMALIZED_KEY))

    def matches(self, other: "WorkloadDigests") -> bool:
        """Same workload: by the normalized digests when both have one, else by the written ones."""
        if self.normalized and other.normalized:
            return self.normalized == other.normalized
        return self.written is not None and self.written == other.written
