"""The admission rules of CONTRACT.md §2 about the comparison: the frozen workload keys
repeated in ``comparison.controls.fixed``, one variable at a time, and the variable under test
(a name or a spec path) resolving in the spec. Each yields ``(path, message)``, as every rule in
:mod:`benchrun.spec.rules` does (that module lists them all in ``RULES``)."""

from __future__ import annotations

from typing import Any, Iterator

from benchrun.spec.docaccess import SPEC, Finding, get, require_true, suites
from benchrun.spec.mix import compact_mix, mix_values, parse_compact_mix, same_mix
from benchrun.spec.model import FROZEN_WORKLOAD_KEYS


def rule_controls_fixed(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``comparison.controls.fixed`` holds the five workload keys with values equal to ``spec.workload``."""
    fixed_path = SPEC + ("comparison", "controls", "fixed")
    fixed = get(doc, fixed_path)
    workload = get(doc, SPEC + ("workload",))
    if not isinstance(fixed, dict) or not isinstance(workload, dict):
        return
    for key in FROZEN_WORKLOAD_KEYS:
        want = workload.get(key)
        if key not in fixed or fixed[key] is None:
            shown = compact_mix(mix_values(want) or []) if key == "sequenceLengthMix" else want
            yield fixed_path + (key,), f"missing: controls.fixed must hold every frozen workload key (spec.workload.{key} is {shown!r})"
            continue
        have = fixed[key]
        if key == "sequenceLengthMix":
            want_mix = mix_values(want)
            if want_mix is None:
                continue  # the workload's own mix is malformed: reported there
            if isinstance(have, str):
                try:
                    have_mix = parse_compact_mix(have)
                except ValueError as exc:
                    yield fixed_path + (key,), f"cannot read the compact mix ({exc}); write it as {compact_mix(want_mix)}"
                    continue
            else:
                have_mix = mix_values(have)
                if have_mix is None:
                    yield fixed_path + (key,), "must be the compact form '[{512/128@0.7},...]' or a list like spec.workload.sequenceLengthMix"
                    continue
            if not same_mix(have_mix, want_mix):
                yield fixed_path + (key,), f"is {compact_mix(have_mix)} but spec.workload.sequenceLengthMix is {compact_mix(want_mix)}; they must be equal"
        elif isinstance(have, str) and isinstance(want, str) and have != want:
            yield fixed_path + (key,), f"is {have!r} but spec.workload.{key} is {want!r}; they must be equal"
    want_ref = workload.get("datasetRef")
    have_ref = fixed.get("datasetRef")
    if isinstance(have_ref, str) and have_ref != want_ref:
        yield fixed_path + ("datasetRef",), f"is {have_ref!r} but spec.workload.datasetRef is {want_ref!r}; they must be equal"


def rule_one_variable_at_a_time(doc: Any) -> Iterator[Finding]:
    """CONTRACT §2: ``comparison.controls.compareOneVariableAtATime`` must be true."""
    yield from require_true(doc, SPEC + ("comparison", "controls"), ("compareOneVariableAtATime",), ": a comparison changes one variable at a time")


def rule_baseline_ref(doc: Any) -> Iterator[Finding]:
    """Extension: ``comparison.baseline.artifactRef`` names a run or alias of the home that runs the
    comparison, never a path (:mod:`benchrun.spec.refs`)."""
    from benchrun.spec.refs import baseline_ref_problem

    path = SPEC + ("comparison", "baseline", "artifactRef")
    ref = get(doc, path)
    if isinstance(ref, str):
        problem = baseline_ref_problem(ref)
        if problem:
            yield path, problem


def rule_variable_under_test_resolves(doc: Any) -> Iterator[Finding]:
    """Extension: ``comparison.variableUnderTest`` given as a spec path names a field of this
    spec, in a section the one-variable gate compares (``benchrun.spec.paths.GATED_SECTIONS``);
    ``comparison.allowDifferences`` entries are spec paths."""
    from typing import get_args

    from benchrun.spec import paths
    from benchrun.spec.model import VariableUnderTest

    allow = get(doc, SPEC + ("comparison", "allowDifferences"))
    for i, entry in enumerate(allow if isinstance(allow, list) else []):
        try:
            paths.parse(entry)
        except ValueError as exc:
            yield SPEC + ("comparison", "allowDifferences", i), str(exc)
    path = SPEC + ("comparison", "variableUnderTest")
    value = get(doc, path)
    body = get(doc, SPEC)
    if not isinstance(value, str) or value in get_args(VariableUnderTest) or not isinstance(body, dict):
        return
    try:
        segs = paths.parse(value)
    except ValueError as exc:
        yield path, str(exc)
        return
    sections = paths.GATED_SECTIONS
    if len(segs) == 1 and segs[0] in sections:  # "one variable" that is every field of a section
        yield path, (f"{value!r} names the whole spec.{segs[0]} section, which would let every field in it differ; "
                     f"name the one field that differs (e.g. {segs[0]}.<field>), or one of "
                     f"{', '.join(get_args(VariableUnderTest))}")
        return
    if segs[0] not in sections:
        yield path, (f"{value!r} is in spec.{segs[0]}, which the one-variable gate does not compare; name a field "
                     f"under {', '.join(sections)} or one of {', '.join(get_args(VariableUnderTest))}")
        return
    found, _ = paths.resolve(body, value)
    if not found:
        yield path, (f"{value!r} names no field of this spec (e.g. layers.micro.suites[gemm].repoCommand, "
                     "layers.micro.suites[gemm].parameters.sizes); set the field in the spec, or fix the path")


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def rule_confirmation_max_pairs(doc: Any) -> Iterator[Finding]:
    """Extension: ``comparison.confirmation.maxPairs`` is at least the most replicates a suite may
    run (its own ``replicates``, else ``trials.minReplicates``, or with ``trials.replicates: auto``
    up to ``trials.maxReplicates``): the round starts with as many pairs as the runs had replicates,
    so a smaller budget is exceeded at its first look."""
    path = SPEC + ("comparison", "confirmation", "maxPairs")
    budget = _count(get(doc, path))
    if budget is None:
        return
    low = _count(get(doc, SPEC + ("trials", "minReplicates"))) or 0
    auto = get(doc, SPEC + ("trials", "replicates")) == "auto"
    high = _count(get(doc, SPEC + ("trials", "maxReplicates"))) or 10  # the model's default
    most, why = 0, ""
    for where, suite in suites(doc):
        own = _count(suite.get("replicates"))
        n, said = ((own, f"{_dotted(where)}.replicates") if own else
                   (high, "trials.maxReplicates (replicates: auto)") if auto else (low, "trials.minReplicates"))
        if n > most:
            most, why = n, said
    if budget < most:
        yield path, (f"is {budget}; the confirmation round starts with as many pairs as the runs had replicates "
                     f"({most}: {why}), so it must be at least {most}")


def _dotted(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in path).replace(".[", "[")
