"""A suite run as ``python -m benchrun.suites.<name>`` must name a suite benchrun has, with only
the parameters that suite takes (each suite module's ``PARAMETERS``, which the suite also checks
when it starts). ``validate`` said "valid" for ``benchrun.suites.nosuchsuite`` and for a typo'd
parameter (``sizez``); the run then failed every replicate, the reason only in the logs. The
same holds for parameters that contradict each other or ``spec.workload`` (a suite's
``conflicts``, e.g. ``burstiness`` on a closed loop, a ``trace`` with ``workload.dataset``).

The same holds for values: :func:`check_parameters` runs the parsing the suite does when it
starts (its module's ``settings``, or its own ``check_parameters`` where one function does not
parse them all) on the spec's values and raises ``ParamError`` naming the parameter
(``iterations: 0``, ``sizes: [-5]``, ``dtype: int4x``): every replicate would fail with that line.
A value that parsing cannot convert at all (``iterations: .inf``, a ``.inf`` token count in
``workload.sequenceLengthMix``) is a finding at its own path, never a traceback.

A command that is not one of benchrun's own suites is the user's program: nothing is checked
beyond argv (:func:`benchrun.spec.rules.rule_repo_command`)."""

from __future__ import annotations

import importlib
import importlib.util
import math
import pkgutil
import shlex
from typing import Any, Iterator

from benchrun.spec.docaccess import SPEC, Finding, did_you_mean, get, suites

PACKAGE = "benchrun.suites"
NOT_SUITES = {"result"}  # the result document's format, not a suite


def suite_module(command: str) -> str | None:
    """The module a ``[env ...] python -m benchrun.suites.X`` command runs, else None."""
    from benchrun.spec.commandline import command_index

    try:
        argv = shlex.split(command)
    except ValueError:
        return None  # reported by rule_repo_command
    at = command_index(argv)
    if at is None or at >= len(argv) or "python" not in argv[at].rsplit("/", 1)[-1]:
        return None
    rest = argv[at + 1:]
    if "-m" not in rest or rest.index("-m") + 1 >= len(rest):
        return None
    module = rest[rest.index("-m") + 1]
    return module if module.startswith(PACKAGE + ".") else None


def builtin_suites() -> list[str]:
    """The suite modules benchrun ships (``benchrun.suites.<name>``, private helpers left out)."""
    pkg = importlib.import_module(PACKAGE)
    return sorted(m.name for m in pkgutil.iter_modules(pkg.__path__)
                  if not m.name.startswith("_") and m.name not in NOT_SUITES)


def rule_builtin_suite(doc: Any) -> Iterator[Finding]:
    """Extension: a built-in suite exists and takes every parameter the spec gives it."""
    for path, suite in suites(doc):
        command = suite.get("repoCommand")
        module = suite_module(command) if isinstance(command, str) else None
        if module is None:
            continue
        name = module[len(PACKAGE) + 1:]
        try:
            found = "." not in name and importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # benchrun.suites.gemm.main: gemm is no package
            found = False
        if name.startswith("_") or name in NOT_SUITES or not found:
            known = builtin_suites()
            yield path + ("repoCommand",), (f"{module} is not one of benchrun's suites{did_you_mean(name, known)}; "
                                            f"they are {', '.join(known)}")
            continue
        suite_mod = importlib.import_module(module)
        known_params = getattr(suite_mod, "PARAMETERS", None)
        params = suite.get("parameters")
        if known_params is None or not isinstance(params, dict):
            continue
        unknown = [key for key in params if key not in known_params]
        for key in unknown:
            yield path + ("parameters", key), (f"{key!r} is not a parameter of {name}{did_you_mean(str(key), known_params)}; "
                                               f"it takes {', '.join(sorted(known_params))}")
        # parameters that contradict each other or spec.workload: the suite refuses them when it
        # starts, so every replicate would fail with that line
        conflicts = getattr(suite_mod, "conflicts", None)
        workload = get(doc, SPEC + ("workload",))
        workload = workload if isinstance(workload, dict) else {}
        problems = conflicts(params, workload) if conflicts else []
        for problem in problems:
            yield path + ("parameters",), f"{name}: {problem}"
        if not unknown and not problems:  # the suite's parsing would stop at the same problem first
            yield from _check_values(name, path, suite, params, workload)


def local_trace_errors(doc: Any) -> Iterator[Finding]:
    """A local run's (``intent.schedulerPath: local``) built-in suites read a ``trace`` parameter on
    this machine (:func:`benchrun.loadgen.trace.local_file_error`): a trace no replicate would find is
    refused before the run, as a missing ``workload.dataset.path`` is. A Kubernetes run's trace is
    read where its suite runs, so it is not looked for here; a trace whose form is wrong is the
    suite's own parsing's finding (:func:`check_parameters`)."""
    from benchrun.loadgen.trace import local_file_error, spec_path_error

    scheduler = get(doc, SPEC + ("intent", "schedulerPath"))
    if not (isinstance(scheduler, str) and scheduler.strip().lower() == "local"):
        return
    for path, suite in suites(doc):
        command, params = suite.get("repoCommand"), suite.get("parameters")
        module = suite_module(command) if isinstance(command, str) else None
        if module is None or not isinstance(params, dict) or not isinstance(params.get("trace"), str) \
                or get(doc, path[:-2] + ("enabled",)) is False or spec_path_error(params["trace"]):
            continue
        try:
            takes = "trace" in getattr(importlib.import_module(module), "PARAMETERS", ())
        except ImportError:  # not one of benchrun's suites: rule_builtin_suite says so
            continue
        problem = local_file_error(params["trace"]) if takes else None
        if problem:
            yield path + ("parameters", "trace"), f"{module[len(PACKAGE) + 1:]}: {problem}"


def check_parameters(name: str, params: dict[str, Any], *, nodes: int = 1,
                     workload: dict[str, Any] | None = None) -> None:
    """Run built-in suite ``name``'s parameter parsing on ``params``, as when it starts: its module's
    ``check_parameters`` where it has its own, else its ``settings`` on the values as given (a
    :class:`benchrun.suites._common.StaticParams`); a suite with neither checks nothing here. A
    serving suite's common options are parsed there by :func:`benchrun.loadgen.suite.common_settings`,
    as when it runs. Raises ParamError naming the parameter (a BenchrunError of that parsing becomes
    one, its leading ``suite <name>:`` left out)."""
    from benchrun.errors import BenchrunError
    from benchrun.suites._common import ParamError, StaticParams

    suite_mod = importlib.import_module(f"{PACKAGE}.{name}")
    own, settings = getattr(suite_mod, "check_parameters", None), getattr(suite_mod, "settings", None)
    try:
        if own is not None:
            own(params, nodes=nodes, workload=workload)
        elif settings is not None:
            settings(StaticParams(name, params, nodes=nodes, workload=workload))
    except (ParamError, BenchrunError) as exc:
        # the finding names the suite already: "suite <name>: parameter x ..." reads as "parameter x ...",
        # so it is reported at that parameter's path
        message, prefix = str(exc), f"suite {name}: "
        if isinstance(exc, ParamError) and not message.startswith(prefix):
            raise
        raise ParamError(message[len(prefix):] if message.startswith(prefix) else message) from None


def _check_values(name: str, path: tuple[Any, ...], suite: dict[str, Any], params: dict[str, Any],
                  workload: dict[str, Any]) -> Iterator[Finding]:
    """The parsing the suite does when it starts (:func:`check_parameters`), run on the spec's
    values, so a value every replicate would refuse is refused here."""
    from benchrun.suites._common import ParamError

    nodes = suite.get("nodes", 1)
    try:
        check_parameters(name, params, nodes=nodes if isinstance(nodes, int) and not isinstance(nodes, bool) else 1,
                         workload=workload)
    except ParamError as exc:
        where = ("parameters", exc.parameter) if exc.parameter in params else ("parameters",)
        yield path + where, f"{name}: {exc}"
    except (OverflowError, ValueError) as exc:  # int(.inf), int(.nan): what the suite's parsing does not catch
        bad = [*_non_finite(params, path + ("parameters",)), *_non_finite(workload, SPEC + ("workload",))]
        for where in bad:
            yield where, f"{name}: is not a finite number (.inf or .nan); write a number"
        if not bad:
            yield path + ("parameters",), f"{name}: cannot read the parameters ({exc})"


def _non_finite(value: Any, path: tuple[Any, ...]) -> Iterator[tuple[Any, ...]]:
    """The path of every non-finite float (``.inf``, ``.nan``) in ``value``."""
    if isinstance(value, float) and not math.isfinite(value):
        yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _non_finite(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _non_finite(item, path + (i,))
