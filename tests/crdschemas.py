"""Validators for rendered objects from the published CRDs in ``../shared/reference/crds/``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def shared_dir() -> Path | None:
    """$BENCHRUN_SHARED_DIR, else ``<repo>/../shared`` (CI), else ``/work/shared`` (a worktree)."""
    for candidate in (os.environ.get("BENCHRUN_SHARED_DIR"), ROOT.parent / "shared", "/work/shared"):
        if candidate and (Path(candidate) / "reference/crds").is_dir():
            return Path(candidate)
    return None


def strict(schema: Any) -> Any:
    """The CRD schema with unknown fields refused (the API server would prune them silently)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes")}
        if "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out.setdefault("additionalProperties", False)
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def _crds_dir() -> Path:
    shared = shared_dir()
    if shared is None:
        pytest.skip("no shared reference dir (set BENCHRUN_SHARED_DIR to the folder holding reference/crds)")
    return shared / "reference/crds"


def _validator(doc: dict[str, Any], version: str) -> jsonschema.Draft4Validator | None:
    for ver in doc["spec"]["versions"]:
        if ver["name"] == version:
            schema = strict(ver["schema"]["openAPIV3Schema"])
            schema["properties"]["metadata"] = {"type": "object"}
            return jsonschema.Draft4Validator(schema)
    return None


def crd_validator(filename: str, version: str) -> jsonschema.Draft4Validator:
    """A strict validator for one published CRD file at one version (skips without ../shared)."""
    validator = _validator(yaml.safe_load((_crds_dir() / filename).read_text()), version)
    if validator is None:
        raise AssertionError(f"{filename} has no version {version}")
    return validator


def crd_validators(pattern: str, version: str) -> dict[str, jsonschema.Draft4Validator]:
    """Strict validators by kind for every published CRD file matching ``pattern``."""
    out = {}
    for path in sorted(_crds_dir().glob(pattern)):
        doc = yaml.safe_load(path.read_text())
        validator = _validator(doc, version)
        if validator is not None:
            out[doc["spec"]["names"]["kind"]] = validator
    return out
