"""Helpers for building test spec documents (import as `from helpers import ...`)."""

from __future__ import annotations


def tiny_layers(micro: list[dict], component: list[dict] | None = None, end_to_end: list[dict] | None = None) -> list[dict]:
    """A layers section with the given suites (a layer with none is disabled)."""
    out = []
    for name, suites in (("micro", micro), ("component", component or []), ("end_to_end", end_to_end or [])):
        out.append({"name": name, "enabled": bool(suites), "objective": f"{name} (test)", "suites": suites})
    return out
