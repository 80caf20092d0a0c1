"""Can a spec's gate ever fire? The replicates and gating family of a spec against the exact test's floor.

A one-sided exact rank test with n vs n replicates cannot give a p-value below 1/C(2n, n)
(1/252 at n = 5), and Holm's correction over F gating tests asks for α/F at its first step;
when the floor is above the threshold, no regression can gate on the distribution-free test
(the comparison then falls back to a Welch t-test on log values, which assumes roughly
log-normal noise). :func:`gating_warnings` says so at validation time, with the smallest n
that lets the distribution-free test gate. :func:`percentile_warnings`: a primary percentile of
a serving suite whose requests (a fixed count a replicate × the replicates) cannot support it —
the comparison refuses every such pair (``PrimaryNotGateable``), so say it before any run.
"""

from __future__ import annotations

from typing import Any

from benchrun.stats.ranktest import rejects, smallest_gating_n, smallest_one_sided_p

DEFAULT_CONFIDENCE = 0.95


def _suites(doc: dict[str, Any]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    layers = ((doc.get("spec") or {}).get("layers")) or []
    for layer in layers if isinstance(layers, list) else []:
        if not isinstance(layer, dict) or layer.get("enabled") is False:
            continue
        for suite in layer.get("suites") or []:
            if isinstance(suite, dict) and isinstance(suite.get("name"), str):
                reps = suite.get("replicates")
                out[suite["name"]] = reps if isinstance(reps, int) and not isinstance(reps, bool) else None
    return out


def _trials(doc: Any) -> tuple[dict[str, Any], int, float] | None:
    """(spec, minReplicates, confidenceLevel) of a spec document as written, None where unreadable
    (the admission rules say why)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("spec"), dict):
        return None
    spec = doc["spec"]
    trials = spec.get("trials") if isinstance(spec.get("trials"), dict) else {}
    minimum = trials.get("minReplicates")
    conf = trials.get("confidenceLevel", DEFAULT_CONFIDENCE)
    if not isinstance(minimum, int) or isinstance(minimum, bool) or not isinstance(conf, (int, float)):
        return None
    return spec, minimum, float(conf)


def gating_warnings(doc: Any) -> list[tuple[tuple[str, ...], str]]:
    """``(path, message)`` warnings for a spec document as written (camelCase keys)."""
    read = _trials(doc)
    if read is None:
        return []
    spec, minimum, conf = read
    alpha = 1.0 - float(conf)
    metrics = spec.get("metrics") if isinstance(spec.get("metrics"), dict) else {}
    entries: list[tuple[str, str]] = []
    for family, fam in metrics.items():
        if isinstance(fam, dict) and fam.get("enabled", True) and isinstance(fam.get("primary"), list):
            entries += [(family, str(p)) for p in fam["primary"]]
    if not entries:
        return []
    suites = _suites(doc)
    reps = []
    bare = 0
    for _family, entry in entries:
        suite = entry.split("/", 1)[0] if "/" in entry else None
        if suite is None or "[" not in entry:
            bare += 1
        if suite is not None and suite in suites:
            reps.append(suites[suite] or minimum)
        else:
            reps.append(min([r or minimum for r in suites.values()] or [minimum]))
    n = min(reps)
    family = len(entries)
    floor = smallest_one_sided_p(n, n)
    per_test = (f"; each bare or unqualified name counts once per suite and case that reports it "
                f"({bare} here), so the real family may be larger" if bare else "")
    if rejects(floor, alpha / family):
        return []
    need = smallest_gating_n(family, alpha)
    return [(("spec", "trials", "minReplicates"),
             f"with {n} replicates and {family} gating tests the exact (distribution-free) test can never reach "
             f"significance: its smallest one-sided p, {floor:.4f}, is above Holm's first threshold "
             f"{alpha:g}/{family} = {alpha / family:.4f}{per_test}; the comparison falls back to a Welch t-test "
             f"on log values (assumes log-normal noise). "
             + (f"{need} replicates per arm is the smallest n that lets the exact test gate" if need else
                "no replicate count up to 50 fixes this")
             + ", or gate on fewer (qualified) primaries")]


def suite_request_counts(doc: Any) -> dict[str, tuple[int, str, int, tuple[Any, ...]]]:
    """Per enabled serving suite with a fixed request count: (requests a replicate, the
    parameter that sets it, its replicates, the parameter's spec path). A suite says which
    parameter fixes its requests (its module's ``REQUEST_COUNT``: name, default); in duration
    or trace mode the count is not known ahead, and the suite is left out."""
    import importlib

    from benchrun.spec.builtin_suites import suite_module

    read = _trials(doc)
    if read is None:
        return {}
    spec, minimum, _conf = read
    out = {}
    layers = spec.get("layers") if isinstance(spec.get("layers"), list) else []
    for i, layer in enumerate(layers):
        if not isinstance(layer, dict) or layer.get("enabled") is False:
            continue
        for j, suite in enumerate(layer.get("suites") or []):
            if not isinstance(suite, dict):
                continue
            module = suite_module(str(suite.get("repoCommand") or ""))
            try:
                count = getattr(importlib.import_module(module), "REQUEST_COUNT", None) if module else None
            except ImportError:  # an unknown suite: an admission error of its own (builtin_suites)
                count = None
            params = suite.get("parameters") if isinstance(suite.get("parameters"), dict) else {}
            if count is None or "duration_s" in params or "trace" in params:
                continue
            key, default = count
            requests = params.get(key, default)
            reps = suite.get("replicates")
            reps = reps if isinstance(reps, int) and not isinstance(reps, bool) else minimum
            if not isinstance(requests, int) or isinstance(requests, bool) or reps < 1:
                continue
            out[str(suite.get("name"))] = (requests, key, reps, ("spec", "layers", i, "suites", j, "parameters", key))
    return out


def percentile_warnings(doc: Any) -> list[tuple[tuple[str, ...], str]]:
    """``(path, message)`` per serving suite whose fixed request count cannot support a primary
    percentile it reports: pooled over the replicates it must reach ``tails.requests_needed``
    (:func:`suite_request_counts`)."""
    from benchrun.stats.tails import percentile_of, requests_needed

    read = _trials(doc)
    if read is None:
        return []
    spec, _minimum, conf = read
    metrics = spec.get("metrics") if isinstance(spec.get("metrics"), dict) else {}
    primaries = [str(p) for fam in metrics.values() if isinstance(fam, dict) and fam.get("enabled", True)
                 and isinstance(fam.get("primary"), list) for p in fam["primary"]]
    out = []
    for name, (requests, key, reps, path) in suite_request_counts(doc).items():
        for entry in primaries:
            owner, _, metric = entry.rpartition("/")
            q = percentile_of(metric.split("[", 1)[0])
            if q is None or owner not in ("", name):
                continue
            need = requests_needed(q, float(conf))
            if requests * reps < need:
                out.append((path,
                            f"primary {entry}: {reps} replicates x {requests} requests = {requests * reps} pooled "
                            f"requests, and a p{q * 100:g} needs {need}: every comparison will refuse the pair "
                            f"(PrimaryNotGateable); set {key} to at least {-(-need // reps)}, or gate on another "
                            "metric"))
    return out
