"""Canonical JSON and the two lineage digests: ``spec_digest`` and ``workload_spec_digest``.

Canonical JSON: keys sorted, no insignificant whitespace, UTF-8 kept as is
(``ensure_ascii=False``), and numbers normalised so that a value written ``1`` or
``1.0`` (or ``0.70`` and ``0.7``) hashes the same: a float with an integral value becomes
an integer, other floats print in Python's shortest round-trip form. Booleans stay
booleans. The digest is the sha256 hex of the canonical text's UTF-8 bytes.

Digests are computed over the document as written (its camelCase keys, without model
defaults), so YAML formatting, comments, quoting and key order never change them, and any
change of value does.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Mapping

# Set by an API server (or kubectl), not by the author: left out of spec_digest so the
# same document read from a file or from a cluster pins to the same digest. ``namespace`` is
# one: the API server always sets it (to kubectl's context when the file names none), and
# where a run is submitted is not what it measures.
# The rest are set by the server or a controller (the operator adds its finalizer), or say how the
# server chose the name (generateName): an object read back has them, a file does not.
SERVER_METADATA = frozenset(
    {"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "namespace", "finalizers",
     "ownerReferences", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink", "generateName"}
)
SERVER_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})


def normalise(value: Any) -> Any:
    """A copy of ``value`` with integral floats as ints and tuples as lists."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot digest the non-finite number {value!r}")
        return int(value) if value.is_integer() else value
    if isinstance(value, Mapping):
        return {str(k): normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalise(v) for v in value]
    raise TypeError(f"cannot digest a value of type {type(value).__name__}")


def canonical_json(value: Any) -> str:
    """The canonical JSON text of ``value`` (see the module docstring)."""
    return json.dumps(
        normalise(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def sha256_hex(value: Any) -> str:
    """sha256 hex digest of ``canonical_json(value)``."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def _authored_metadata(metadata: Any) -> Any:
    if not isinstance(metadata, Mapping):
        return metadata
    out = {k: v for k, v in metadata.items() if k not in SERVER_METADATA}
    annotations = out.get("annotations")
    if isinstance(annotations, Mapping):
        out["annotations"] = {k: v for k, v in annotations.items() if k not in SERVER_ANNOTATIONS}
    return out


def spec_digest(document: Mapping[str, Any]) -> str:
    """Digest of the whole document as written: apiVersion, kind, metadata and spec.

    ``status`` and server-populated metadata are left out (see ``SERVER_METADATA``).
    """
    return sha256_hex(
        {
            "apiVersion": document.get("apiVersion"),
            "kind": document.get("kind"),
            "metadata": _authored_metadata(document.get("metadata")),
            "spec": document.get("spec"),
        }
    )


def workload_spec_digest(document: Mapping[str, Any]) -> str:
    """Digest of ``spec.workload`` as written."""
    spec = document.get("spec")
    workload = spec.get("workload") if isinstance(spec, Mapping) else None
    return sha256_hex(workload)
