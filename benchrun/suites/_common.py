"""Helpers the built-in micro/component suites share: parameter checks, percentiles, host facts.

Standard library + numpy (this runs inside benchmark pods), and the CPU rule of
``benchrun.envcapture`` (pod-side too), so the suites and the environment capture count usable
CPUs one way. Parameter checks raise
:class:`ParamError`, which ``_runtime.main`` records as a ``failed`` result whose reason
names the parameter and what it should be. They read a :class:`SuiteContext` when the suite
starts and a :class:`StaticParams` when ``benchrun validate`` runs the suite's ``settings``
(``benchrun.spec.builtin_suites.check_parameters``: the same parsing, so validate refuses what
every replicate would).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
from typing import Any, Mapping, Sequence, Union

import numpy as np

from benchrun import envcapture as _envcapture
from benchrun.envcapture import CGROUP_ROOT  # where usable_cpus() reads the CPU quota (tests point it elsewhere)
from benchrun.suites._runtime import SuiteContext, param_value

_NAMED = re.compile(r"parameter ([A-Za-z_][A-Za-z0-9_]*)")


class ParamError(ValueError):
    """A suite parameter with a value the suite cannot use (names the parameter and the fix).

    Every message starts ``parameter <name>``: :attr:`parameter` reads the name back, so
    ``benchrun validate`` reports the error at ``...parameters.<name>``."""

    @property
    def parameter(self) -> str | None:
        """The parameter the message starts with, else None."""
        match = _NAMED.match(str(self))
        return match.group(1) if match else None


class StaticParams:
    """A suite's parameters as a spec gives them, read without running the suite: what parameter
    parsing reads of a :class:`SuiteContext` (``suite``, ``params``, ``nodes``, ``workload``)."""

    def __init__(self, suite: str, params: Mapping[str, Any], *, nodes: int = 1,
                 workload: Mapping[str, Any] | None = None) -> None:
        self.suite = suite
        self.params: dict[str, Any] = dict(params)
        self.nodes = nodes
        self.workload: dict[str, Any] = dict(workload or {})

    def param(self, name: str, default: Any) -> Any:
        """As :meth:`SuiteContext.param`; a value of the wrong type is a :class:`ParamError`."""
        try:
            return param_value(self.suite, self.params, name, default)
        except ValueError:
            raise ParamError(f"parameter {name}={self.params[name]!r} should be {type(default).__name__}") from None


# what the parameter helpers read: a running replicate or a spec being validated
Params = Union[SuiteContext, StaticParams]


def _raw(ctx: Params, name: str) -> Any:
    # default=None makes ctx.param return the value as given; we check it ourselves so a
    # bad value becomes a failed result document rather than a bare SystemExit.
    return ctx.param(name, None)


def int_param(ctx: Params, name: str, default: int, *, minimum: int = 1, maximum: int | None = None) -> int:
    """An integer parameter within [minimum, maximum]."""
    value = _raw(ctx, name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ParamError(f"parameter {name}={value!r} must be an integer >= {minimum}")
    try:
        number = int(value)
        if isinstance(value, float) and number != value:
            raise ValueError
    except (TypeError, ValueError):
        raise ParamError(f"parameter {name}={value!r} must be an integer >= {minimum}") from None
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ParamError(f"parameter {name}={value!r} must be an integer {bound}")
    return number


def float_param(ctx: Params, name: str, default: float, *, minimum: float = 0.0) -> float:
    """A number parameter greater than ``minimum``."""
    value = _raw(ctx, name)
    if value is None:
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ParamError(f"parameter {name}={value!r} must be a number > {minimum}") from None
    if isinstance(value, bool) or not number > minimum or number != number:
        raise ParamError(f"parameter {name}={value!r} must be a number > {minimum}")
    return number


def int_list_param(ctx: Params, name: str, default: Sequence[int], *, minimum: int = 1) -> list[int]:
    """A non-empty list of integers >= minimum (a single integer is accepted as a list of one)."""
    value = _raw(ctx, name)
    if value is None:
        return list(default)
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not value:
        raise ParamError(f"parameter {name}={value!r} must be a non-empty list of integers >= {minimum}")
    out = []
    for item in value:
        try:
            if isinstance(item, bool):
                raise ValueError
            number = int(item)
            if isinstance(item, float) and number != item:
                raise ValueError
        except (TypeError, ValueError):
            raise ParamError(f"parameter {name}: {item!r} is not an integer (list of integers >= {minimum})") from None
        if number < minimum:
            raise ParamError(f"parameter {name}: {item!r} must be >= {minimum}")
        out.append(number)
    return out


def choice_param(ctx: Params, name: str, default: str, choices: Sequence[str]) -> str:
    """A string parameter from a fixed set."""
    value = _raw(ctx, name)
    if value is None:
        return default
    if not isinstance(value, str) or value not in choices:
        raise ParamError(f"parameter {name}={value!r} must be one of {', '.join(choices)}")
    return value


def bool_param(ctx: Params, name: str, default: bool) -> bool:
    """A boolean parameter (true/false, or the strings "true"/"false")."""
    value = _raw(ctx, name)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ParamError(f"parameter {name}={value!r} must be true or false")


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile with numpy's linear interpolation (CONTRACT.md §5)."""
    if len(values) == 0:
        raise ValueError("percentile of no values")
    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method="linear"))


def torch_present() -> bool:
    """Whether torch can be imported here, without importing it (that takes a second)."""
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (Linux), else platform.processor()."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask, not the host's total, and no more than
    its cgroup's CPU quota allows at once (a pod limited to 4 CPUs on a 192-CPU node sees all
    192 in its mask, and threads beyond 4 are throttled, not run together). The rule is
    ``benchrun.envcapture.usable_cpus``, which the environment document records too."""
    return _envcapture.usable_cpus(CGROUP_ROOT)


def openblas_pools() -> list[tuple[str, Any, Any]]:
    """(path, set_num_threads, get_num_threads) of every OpenBLAS loaded in this process.

    threadpoolctl finds them and knows each build's C entry points (scipy's OpenBLAS exports a
    Fortran ``..._set_num_threads_`` that takes a pointer: called with an int it crashed the
    process, which a hand-written symbol list did)."""
    from threadpoolctl import ThreadpoolController

    return [(lc.filepath, lc.set_num_threads, lc.get_num_threads)
            for lc in ThreadpoolController().lib_controllers if lc.internal_api == "openblas"]


def cap_openblas_threads(cap: int) -> dict[str, Any]:
    """Cap every OpenBLAS loaded in this process (numpy's, once imported) at ``cap`` threads.

    OpenBLAS starts a thread per CPU it sees (the host's, not the pod's CPU quota), and is set
    through its own ``*_set_num_threads`` (what threadpoolctl calls; the environment variables
    are read only when it loads). A count already at or below ``cap`` (set by
    OPENBLAS_NUM_THREADS / OMP_NUM_THREADS) is kept. Returns, per library, the threads before
    and after; ``libraries`` empty (and ``note``) where no OpenBLAS is loaded (another BLAS
    is left as it is)."""
    out: dict[str, Any] = {"cap": cap, "libraries": []}
    for path, setter, getter in openblas_pools():
        before = int(getter())
        if before > cap:
            setter(cap)
        out["libraries"].append({"path": path, "threads_before": before, "threads": int(getter())})
    if not out["libraries"]:
        out["note"] = "no OpenBLAS loaded in this process: its BLAS threads were left as they are"
    return out


def cgroup_cpu_quota(root: str | None = None) -> int | None:
    """CPUs the cgroup quota allows (quota / period, rounded up); None without a quota
    (``benchrun.envcapture.cgroup_cpu_quota``, read under ``root`` or :data:`CGROUP_ROOT`)."""
    return _envcapture.cgroup_cpu_quota(root or CGROUP_ROOT)


def cuda_device_nodes() -> bool:
    """Whether this host exposes GPU device nodes (NVIDIA or ROCm); cheap, imports nothing.

    CUDA cannot work without them, so when they are absent the suites skip importing torch
    just to ask (that import costs a second per replicate on a small machine).
    """
    return any(os.path.exists(p) for p in ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia", "/dev/kfd"))


def cuda_available() -> bool:
    """Whether torch sees a CUDA (or ROCm) device; False when torch is absent."""
    if not cuda_device_nodes() or not torch_present():
        return False
    import torch

    return bool(torch.cuda.is_available())


def check_known(ctx: Params, known: Sequence[str]) -> None:
    """Refuse parameters the suite does not take (a typo would otherwise be silently ignored)."""
    unknown = sorted(set(ctx.params) - set(known))
    if unknown:
        raise ParamError(f"parameter {unknown[0]} is not a parameter of suite {ctx.suite}; "
                         f"it takes {', '.join(sorted(known))}")


def world_size_param(ctx: Params, gang: Any, default: int) -> int | None:
    """A distributed suite's world size: the gang's (nodes × gpusPerNode; None while validating a
    multi-node spec, before the gang exists), where ``world_size`` is refused; else the parameter."""
    if gang is not None or ctx.nodes > 1:
        if "world_size" in ctx.params:
            raise ParamError("parameter world_size: a multi-node suite's world size is nodes x gpusPerNode; drop it")
        return gang.world_size if gang is not None else None
    return int_param(ctx, "world_size", default, minimum=1, maximum=256)
