"""Reader of nccl-tests result tables (``all_reduce_perf`` and its siblings) into metric rows.

nccl-tests (github.com/NVIDIA/nccl-tests) print, on stdout, a parameter line
(``# nThread 1 nGpus 1 minBytes 8 ...``), the ranks and devices, then a table whose header
names its columns::

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
               8             2     float     sum      -1    36.37    0.00    0.00      0    35.63    0.00    0.00      0

The first ``time algbw busbw #wrong`` group is out-of-place, the second in-place. Older
versions have no ``root`` column and a floating-point ``error`` column instead of
``#wrong``; ``N/A`` appears when validation is off. The reader goes by the header's
column names, so both read the same; any other line (NCCL INFO logs, mpirun noise) is
ignored. Newer options read too: ``-C 1`` names the time columns ``cputime`` (the host's time
per iteration instead of the GPU's; the bandwidths are still of the GPU time), read into
``mean_cputime_us`` rather than ``mean_latency_us``, a different quantity; a trailing
``timestamp`` column (one header label, a row's ``2026-04-19 03:03:40`` two fields or one)
is kept as the row's ``timestamp``. The footer (src/common.cu) gives ``# Out of bounds values : <n> OK|FAILED`` and
``# Avg bus bandwidth : <GB/s> [OK|FAILED]``.

Refused with BenchrunError naming the file and line, never read into rows: a failed
validation (``Out of bounds values`` not 0 / ``FAILED``), a failed bandwidth check
(``Avg bus bandwidth ... FAILED``, with ``NCCL_TESTS_MIN_BW``), a row whose ``#wrong`` is
not 0, truncated output (a row with fewer fields than the header, or no footer after
the table: the run died or the log was cut), and a file holding more than one run: a second
results header, a second ``# Collective test starting`` or ``Running:`` section (two programs
one after the other, a DGX-2 style log of several), or a rank listed twice (a build without
MPI=1 started by mpirun: every process is a one-rank run of its own, each ``Rank 0``). Read as
one table, such a file would label every row with one collective, keep one run's average and
let the same rank's rows be pooled as if they were one measurement; split it instead.

Metric rows (``case`` = ``collective=<c>,bytes=<size>,type=<type>,redop=<op>,out_of_place`` or
``...,in_place``, with ``root=<r>`` before the placement when the root is not -1, and
type/redop left out when the table has no such column):
``mean_latency_us`` (nccl-tests' time is the mean over its iterations; ``mean_cputime_us`` for a
``cputime`` column), ``algbw_gb_per_s``,
``busbw_gb_per_s`` and, when validated, ``wrong_values`` (the ``#wrong`` column: a count of
wrong elements, unit ``count``) or ``max_abs_error`` (older versions' ``error`` column: the
largest deviation from the expected result, a float, unit ``1``); plus ``avg_busbw_gb_per_s``
(case ``collective=<c>``) from the footer. GB = 1e9 bytes, as nccl-tests print them.

The collective (``all_reduce``, ``all_gather``, ...) is in every case, so the tables of two
programs (all_reduce_perf and all_gather_perf measure different things at the same sizes) never
share a case. It is, in this order: the caller's (``metrics_from_file(path, collective=...)``),
the output's own ``# Collective test starting: all_reduce_perf`` line (newer nccl-tests), or
the file name (``all_gather_perf.txt``, ``node1_all_gather_perf_r1.log``, which is how
:func:`benchrun.ingest.ingest_file` reaches it); none of them is a BenchrunError naming the file.
A caller's name that the output's own line contradicts is refused too.

Standard library only.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.suites.result import metric

PLACEMENTS = ("out_of_place", "in_place")
# footer lines src/common.cu prints after the table: "%d %s" (FAILED when any result was
# wrong, else OK) and "%g %s" (FAILED / OK only with NCCL_TESTS_MIN_BW set)
# The footer; older nccl-tests print it without the leading "#" (" Out of bounds values : 0 OK")
_OOB = re.compile(r"^#?\s*Out of bounds values\s*:\s*(\d+)\s*(\w*)")
_AVG = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+|-?nan|-?inf)\s*(\w*)")
_PARAMS = re.compile(r"^#\s*nThread\b")
# "# Collective test starting: all_reduce_perf" (nccl-tests 2.13 and later print the program's name)
_STARTING = re.compile(r"^#\s*Collective test starting\s*:\s*(\S+)")
# "Running: CUDA_VISIBLE_DEVICES=... ./build/all_reduce_perf -b 8 ..." (wrapper scripts' logs of several runs)
_RUNNING = re.compile(r"^Running\s*:")
# the time columns: "time" (GPU time), "cputime" with -C 1 (host time)
TIME_COLUMNS = ("time", "cputime")
# nccl-tests programs, the longer name first where one contains another (reduce_scatter, reduce)
COLLECTIVES = ("all_reduce", "all_gather", "alltoall", "reduce_scatter", "reduce", "broadcast", "sendrecv",
               "scatter", "gather", "hypercube")
_PROGRAM = re.compile(r"(" + "|".join(COLLECTIVES) + r")_perf")
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}\Z")
# "#  Rank  0 Group  0 Pid   4100 on   node-a01 device  0 [0x18] NVIDIA H100 80GB HBM3"
# (no "Group" in older versions): which host and GPU each rank ran on.
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)"
                   r"\s+\[([^\]]*)\]\s*(.*)$")


def _several_runs(where: str, what: str) -> BenchrunError:
    return BenchrunError(f"{where}: more than one nccl-tests run in one file ({what}): split it, or for a non-MPI "
                         "build under mpirun rebuild with MPI=1 (each process then prints a run of its own)")


def _number(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None


def parse_nccl_tests(text: str, source: str = "nccl-tests output") -> dict[str, Any]:
    """The table as data: ``{"parameters", "devices", "ranks", "rows": [...], "avg_busbw_gb_per_s"}``.

    ``ranks``: per rank line, ``rank_id, group, pid, node_name, device, bus_id, gpu_name``
    (the placement of every rank across nodes; nccl-tests print no per-rank times).

    Each row: ``size_bytes, count, type, redop, root`` (None when absent), ``timestamp`` (None
    without that column) and per placement ``{"time_us", "algbw_gb_per_s", "busbw_gb_per_s",
    "wrong"}`` (wrong None for ``N/A``). ``time_column``: ``"time"``, or ``"cputime"`` (``-C 1``).

    One run per text: a second results header, ``# Collective test starting`` or ``Running:``
    line, or a rank listed twice is a BenchrunError naming the line (module docstring).
    """
    columns: list[str] | None = None
    time_scale = 1.0
    rows: list[dict[str, Any]] = []
    parameters = ""
    devices: list[str] = []
    ranks: list[dict[str, Any]] = []
    avg: float | None = None
    out_of_bounds: int | None = None
    avg_line = False
    collective: str | None = None
    started: int | None = None  # the line of the run's "Collective test starting" / "Running:"
    kinds: set[str] = set()  # which of those two markers the run had
    rank_ids: dict[int, int] = {}  # rank -> line it was listed on
    header_line = 0
    lines = text.splitlines()
    for i, line in enumerate(lines):
        where = f"{source}, line {i + 1}"
        stripped = line.strip()
        kind = "running" if _RUNNING.match(stripped) else "starting" if _STARTING.match(stripped) else None
        if kind is not None:
            # a wrapper's "Running: mpirun ... all_reduce_perf" before an nccl-tests 2.13+ run's own "Collective
            # test starting" line is one run: a second run is a marker of a kind seen before, or any marker
            # after a results table (found in the re-review: that one-run log was refused)
            if kind in kinds or columns is not None:
                raise _several_runs(where, f"a second run starts here, the first at line {started}")
            kinds.add(kind)
            started = started or i + 1
        if (m := _OOB.match(stripped)) is not None:
            out_of_bounds = int(m.group(1))
            if out_of_bounds or m.group(2) == "FAILED":
                raise BenchrunError(f"{where}: nccl-tests validation FAILED ({out_of_bounds} out-of-bounds "
                                    f"results: {stripped!r}); the collective returned wrong data")
            continue
        if (m := _AVG.match(stripped)) is not None:
            avg_line = True
            avg = float(m.group(1)) if math.isfinite(float(m.group(1))) else None  # nan: no rows timed
            if m.group(2) == "FAILED":
                raise BenchrunError(f"{where}: nccl-tests bandwidth check FAILED ({stripped!r}): the average "
                                    "bus bandwidth is below 90 % of NCCL_TESTS_MIN_BW")
            continue
        if stripped.startswith("#"):
            body = stripped.lstrip("#").split()
            if (m := _STARTING.match(stripped)) is not None:
                collective = collective_name(m.group(1))
            elif _PARAMS.match(stripped):
                parameters = stripped.lstrip("# ").strip()
            elif body[:1] == ["Rank"]:
                if len(body) > 1 and body[1].isdigit():
                    rank = int(body[1])
                    if rank in rank_ids:
                        raise _several_runs(where, f"rank {rank} is listed again, first at line {rank_ids[rank] + 1}")
                    rank_ids[rank] = i
                devices.append(stripped.lstrip("# ").strip())
                if (m := _RANK.match(stripped)) is not None:
                    ranks.append({"rank_id": int(m.group(1)), "group": int(m.group(2)) if m.group(2) else None,
                                  "pid": int(m.group(3)), "node_name": m.group(4), "device": int(m.group(5)),
                                  "bus_id": m.group(6), "gpu_name": m.group(7).strip() or None})
            elif "size" in body and "algbw" in body and "busbw" in body and any(c in body for c in TIME_COLUMNS):
                if columns is not None:
                    raise _several_runs(where, f"a second results table; the first header is at line {header_line}")
                columns = body
                header_line = i + 1
                units = lines[i + 1] if i + 1 < len(lines) else ""
                time_scale = 1e3 if "(ms)" in units else 1.0
            continue
        if columns is None:
            continue
        tokens = stripped.split()
        if not tokens or not tokens[0].isdigit():
            continue
        stamp = columns[-1] == "timestamp"  # one label; "2026-04-19 03:03:40" is two fields
        if stamp and len(tokens) in (len(columns), len(columns) + 1):
            tokens = tokens[: len(columns) - 1] + [" ".join(tokens[len(columns) - 1:])]
        if len(tokens) != len(columns):
            raise BenchrunError(f"{where}: table row {stripped!r} has {len(tokens)} fields, the header "
                                f"{len(columns)}; the output was cut short or is malformed")
        times = [k for k, c in enumerate(columns) if c in TIME_COLUMNS]
        if len(times) != 2 or columns[times[0]] != columns[times[1]]:
            raise BenchrunError(f"{source}: table header {' '.join(columns)!r} lacks the two time/algbw/busbw groups")
        row: dict[str, Any] = {"size_bytes": int(tokens[0]), "timestamp": tokens[-1] if stamp else None}
        for name in ("count", "type", "redop", "root"):
            if name in columns[: times[0]]:
                raw = tokens[columns.index(name)]
                row[name] = int(raw) if name in ("count", "root") and re.fullmatch(r"-?\d+", raw) else raw
            else:
                row[name] = None
        for placement, start in zip(PLACEMENTS, times):
            t, alg, bus = (_number(tokens[start + k]) for k in range(3))
            if t is None or alg is None or bus is None:
                raise BenchrunError(f"{where}: row {stripped!r} has a non-numeric time or bandwidth")
            check = _number(tokens[start + 3]) if start + 3 < len(tokens) else None
            # "#wrong" counts wrong elements; older versions' "error" is the largest deviation, a float
            is_error = start + 3 < len(columns) and columns[start + 3] == "error"
            if check and not is_error:
                raise BenchrunError(f"{where}: {int(check)} wrong elements {placement.replace('_', '-')} at "
                                    f"{tokens[0]} bytes (#wrong is not 0): the collective returned wrong data")
            row[placement] = {"time_us": t * time_scale, "algbw_gb_per_s": alg, "busbw_gb_per_s": bus,
                              ("max_error" if is_error else "wrong"): check}
        rows.append(row)
    if columns is None:
        raise BenchrunError(f"{source}: no nccl-tests result table (a '#  size  count  type ... time  algbw  busbw' "
                            "header); is this the stdout of all_reduce_perf?")
    if not rows:
        raise BenchrunError(f"{source}: the nccl-tests table has a header but no rows (did the run fail?)")
    if out_of_bounds is None or not avg_line:
        missing = "'# Out of bounds values'" if out_of_bounds is None else "'# Avg bus bandwidth'"
        raise BenchrunError(f"{source}: no {missing} line after the table's {len(rows)} rows (last: "
                            f"{rows[-1]['size_bytes']} bytes); the output was cut short or the run died before "
                            "finishing")
    return {"parameters": parameters, "devices": devices, "ranks": ranks, "rows": rows, "avg_busbw_gb_per_s": avg,
            "collective": collective, "time_column": next(c for c in columns if c in TIME_COLUMNS)}


def collective_name(program: str) -> str | None:
    """``all_reduce`` of ``all_reduce``, ``all_reduce_perf``, ``./build/all_reduce_perf_mpi``; None when
    ``program`` is not such a name."""
    name = os.path.basename(program.strip()).lower()
    for suffix in ("_mpi", "_perf"):
        name = name.removesuffix(suffix)
    return name if _NAME.match(name) else None


def collective_of_file(path: str | os.PathLike[str]) -> str | None:
    """The collective a file's name names (``all_gather_perf.txt`` → ``all_gather``), else None."""
    m = _PROGRAM.search(Path(path).name.lower())
    return m.group(1) if m else None


def _case(collective: str, row: dict[str, Any], placement: str) -> str:
    """``collective=<c>,bytes=<size>,type=<t>,redop=<op>[,root=<r>],<placement>``: rows of one table that
    differ in type, reduction or root (``-d all``, ``-o all``, ``-r``) are different cases, and so are
    the tables of different collectives."""
    parts = [f"collective={collective}", f"bytes={row['size_bytes']}"]
    for name in ("type", "redop"):
        if row.get(name) not in (None, ""):
            parts.append(f"{name}={row[name]}")
    if row.get("root") not in (None, -1):  # -1: the collective has no root
        parts.append(f"root={row['root']}")
    return ",".join(parts + [placement])


def nccl_metrics(parsed: dict[str, Any], collective: str) -> list[dict[str, Any]]:
    """Metric rows for every size and placement of a parsed table of ``collective`` (see the module
    docstring)."""
    out: list[dict[str, Any]] = []
    # -C 1: the host's time per iteration, not the latency (the bandwidths stay of the GPU time)
    time_name = "mean_cputime_us" if parsed.get("time_column") == "cputime" else "mean_latency_us"
    for row in parsed["rows"]:
        for placement in PLACEMENTS:
            v = row[placement]
            case = _case(collective, row, placement)
            out.append(metric(time_name, v["time_us"], "us", "lower", case=case))
            out.append(metric("algbw_gb_per_s", v["algbw_gb_per_s"], "GB/s", "higher", case=case))
            out.append(metric("busbw_gb_per_s", v["busbw_gb_per_s"], "GB/s", "higher", case=case))
            if v.get("wrong") is not None:
                out.append(metric("wrong_values", v["wrong"], "count", "lower", case=case))
            if v.get("max_error") is not None:
                out.append(metric("max_abs_error", v["max_error"], "1", "lower", case=case))
    if parsed["avg_busbw_gb_per_s"] is not None:
        out.append(metric("avg_busbw_gb_per_s", parsed["avg_busbw_gb_per_s"], "GB/s", "higher",
                          case=f"collective={collective}"))
    return out


def metrics_from_file(path: str | os.PathLike[str], collective: str | None = None) -> list[dict[str, Any]]:
    """Metric rows from a file holding an nccl-tests program's stdout; ``collective`` (``all_reduce``,
    or the program's name ``all_reduce_perf``) else the output's or the file name's (module docstring)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise BenchrunError(f"{p}: cannot read nccl-tests output ({exc.strerror})") from None
    parsed = parse_nccl_tests(text, str(p))
    said = parsed["collective"]
    if collective is not None:
        asked = collective_name(collective)
        if asked is None:
            raise BenchrunError(f"{p}: collective={collective!r} is not an nccl-tests collective name "
                                "such as all_reduce or all_gather_perf")
        if said is not None and said != asked:
            raise BenchrunError(f"{p}: collective={collective!r}, but the output says it is of {said}_perf "
                                "('# Collective test starting'); pass the collective the file holds")
        return nccl_metrics(parsed, asked)
    name = said or collective_of_file(p)
    if name is None:
        raise BenchrunError(f"{p}: which collective is this table of? The output has no '# Collective test "
                            "starting' line and the file name names no nccl-tests program; name the file after "
                            f"it (all_reduce_perf.txt, all_gather_perf.txt) or pass collective= "
                            f"(one of {', '.join(COLLECTIVES)})")
    return nccl_metrics(parsed, name)
