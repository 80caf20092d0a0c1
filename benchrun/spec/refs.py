"""How a spec names its baseline: ``comparison.baseline.artifactRef`` (imports only the leaves
:mod:`benchrun.errors`, :mod:`benchrun.paths` and :mod:`benchrun.spec.placeholders`, so both the spec
rules and the statistics may use it).

A baseline is named inside the home that runs the comparison, never by a path: a run id,
``runs/<run_id>`` or ``published/<alias>``, each with an optional site prefix as the specs
write it (``cluster/published/current``, ``local/runs/<run_id>``). The run id may be a site
placeholder (``runs/${BASELINE_RUN_ID}``, the reference template's), filled in from
``BENCHRUN_VAR_<NAME>`` when the comparison runs (:func:`fill_site_placeholder`). A path would let a spec
point the comparison at any directory, together with a signing key beside it (the key a
comparison falls back to is *this* home's, so such a baseline would not verify anyway; the
rule says so at validation, before a run is spent).
"""

from __future__ import annotations

import os
import re

from benchrun.errors import BenchrunError
from benchrun.paths import _RUN_ID, validate_run_id
from benchrun.spec.placeholders import SITE_NAMES, SITE_VAR_PREFIX

ALIAS_REF = re.compile(r"^(?:[A-Za-z0-9_.-]+/)?published/(?P<alias>[A-Za-z0-9._-]+)/?\Z")
RUN_REF = re.compile(r"^(?:[A-Za-z0-9_.-]+/)?runs/(?P<run>[a-z0-9-]+)/?\Z")

_SITE_RUN_REF = re.compile(r"^(?:[A-Za-z0-9_.-]+/)?runs/\$\{(?P<name>[A-Z_][A-Z0-9_]*)\}/?\Z")
FORMS = "a run id, runs/<run_id> or published/<alias> (a site prefix such as cluster/ is allowed)"


def baseline_ref_problem(ref: str) -> str | None:
    """Why ``ref`` cannot name a baseline (None: it can)."""
    ref = str(ref).strip()
    site = _SITE_RUN_REF.match(ref)
    if site and site.group("name") not in SITE_NAMES:
        return (f"{ref!r}: ${{{site.group('name')}}} is not a site placeholder; the run id of a baseline may be one of "
                f"{', '.join('${%s}' % n for n in sorted(SITE_NAMES))} (set BENCHRUN_VAR_<NAME>)")
    if site or ALIAS_REF.match(ref) or RUN_REF.match(ref) or _RUN_ID.match(ref):
        if not {".", ".."} & set(ref.split("/")):
            return None
    return (f"{ref!r} is not a baseline name: give {FORMS} of the home that runs the comparison — not a "
            "path (publish the run you want with `benchrun promote RUN_ID`)")


def fill_site_placeholder(ref: str) -> str:
    """``runs/${NAME}`` with ``$BENCHRUN_VAR_<NAME>`` filled in (other refs unchanged); BenchrunError
    naming the variable when it is not set."""
    m = _SITE_RUN_REF.match(str(ref).strip())
    if not m:
        return ref
    var = SITE_VAR_PREFIX + m.group("name")
    value = os.environ.get(var, "").strip()
    if not value:
        raise BenchrunError(f"comparison.baseline.artifactRef {ref!r}: {var} is not set; set it to the baseline's "
                            "run id, or name the baseline as published/<alias>")
    try:
        validate_run_id(value)
    except BenchrunError as exc:
        raise BenchrunError(f"{var}: {exc}") from None
    return str(ref).strip()[: m.start("name") - 2] + value
