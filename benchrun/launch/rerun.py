"""Contended replicates launched again: the rule the local layer runner (``benchrun.execute.run_layer``) and the publication-grade layer pod (``benchrun.launch.inpod``) share.

A replicate whose result document says its telemetry saw a contended machine is launched
again right after it, up to the layer's budget (``spec.trials.contendedReruns``); each
contended attempt's result and log are kept as ``raw/<run>_<suite>_r<k>_contended<i>.*``, its
raw files (telemetry, samples) as ``raw/<run>_<suite>_r<k>_contended<i>_*`` and the figures its
suite drew (a serving suite's latency-throughput figures) as
``figures/<run>_<suite>_r<k>_contended<i>_*`` (out of the results and samples the analysis reads,
still in the run's hashed files — and, in a pod without a run volume, in what it uploads), and
the attempt that stays says ``contention_rerun``.

A launch in a run directory where an earlier launch of the same replicate left files (a layer
retried, a run started again before it was sealed) first sets those aside the same way, as
``raw/<run>_<suite>_r<k>_earlier<i>.*`` / ``_earlier<i>_*`` (:func:`set_aside_earlier`): the failed
attempt's log stays for diagnosis, and none of its raw files is read or sealed as this launch's.
The contended attempts an earlier materialization of the replicate set aside go with it, as
``raw|figures/<run>_<suite>_r<k>_earlier<i>_contended<j>[._]*`` (:func:`launch_with_reruns`): its
document's ``contention_rerun.earlier`` still names them, and neither they nor it count as this
launch's attempts.
"""

from __future__ import annotations

import glob
import json
import logging
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from benchrun.fsio import atomic_write_json
from benchrun.launch.base import LaunchResult
from benchrun.plan import ATTEMPT_ENV, Invocation
from benchrun.rundir import contended_aside_name, contended_aside_raw_name

log = logging.getLogger(__name__)


def contended(run_dir: Path, inv: Invocation) -> str | None:
    """The contention reason of the replicate's ok result document, or None (quiet, failed, none)."""
    try:
        doc = json.loads((Path(run_dir) / inv.result_relpath()).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(doc, dict):
        return None
    tel = doc.get("telemetry")
    if doc.get("status") != "ok" or not isinstance(tel, dict) or not tel.get("contended"):
        return None
    return str(tel.get("contention_reason") or "contended")


# Where a replicate's own files are ``<run>_<suite>_r<k>_*``: its raw files, and the figures its
# suite drew (benchrun.loadgen.suite.report); a rerun writes them again under the same names.
ASIDE_DIRS = ("raw", "figures")

# The rest of a raw file name after ``<run>_<suite>_r<k>_`` that belongs to another suite whose
# name extends this one's (suite ``a`` r1 and suite ``a_r1_x``: ``<run>_a_r1_x_r1_telemetry.parquet``).
_OTHER_SUITE = re.compile(r"(^|_)r\d+(_|\.)")
# The tags of files already set aside (contended attempts, earlier launches): never set aside again.
CONTENDED, EARLIER = "contended", "earlier"
_ASIDE = re.compile(rf"^({CONTENDED}|{EARLIER})(\d+)[._]")


def _replicate_files(run_dir: Path, inv: Invocation) -> list[tuple[Path, str, str | None, int]]:
    """(path, rest, tag, index) of every raw file and figure of the replicate
    (``raw|figures/<run>_<suite>_r<k>_<rest>``), not another suite's: ``tag`` the one it was set aside
    under (``contended`` or ``earlier``, its ``index``), None (0) for the replicate's own files. One
    listing of each folder serves every question asked of them."""
    prefix = f"{inv.run_id}_{inv.suite}_r{int(inv.replicate)}_"
    out = []
    for folder in (run_dir / d for d in ASIDE_DIRS):
        for src in sorted(folder.glob(glob.escape(prefix) + "*")) if folder.is_dir() else []:
            rest = src.name[len(prefix):]
            if src.is_file() and not _OTHER_SUITE.search(rest):
                m = _ASIDE.match(rest)
                out.append((src, rest, m.group(1) if m else None, int(m.group(2)) if m else 0))
    return out


def _own_files(run_dir: Path, inv: Invocation) -> list[tuple[Path, str]]:
    """(path, rest) of every raw file and figure of the replicate not set aside already."""
    return [(src, rest) for src, rest, tag, _i in _replicate_files(run_dir, inv) if tag is None]


def set_aside(run_dir: Path, inv: Invocation, attempt: int, tag: str = CONTENDED, *,
              moved_before: dict[str, str] | None = None, own: list[tuple[Path, str]] | None = None) -> list[str]:
    """Move a contended attempt's result document, log, raw files (telemetry, Prometheus and
    suite samples, a gang's node logs: every ``raw/<run>_<suite>_r<k>_*``) and figures (every
    ``figures/<run>_<suite>_r<k>_*``) aside under ``raw/<run>_<suite>_r<k>_contended<attempt>[._]*``
    and ``figures/<run>_<suite>_r<k>_contended<attempt>_*`` (out of the results and samples the
    analysis and the warehouse read, still in the run's hashed files), so the rerun neither
    deletes nor overwrites them; the moved document's paths name the moved files (and those of
    ``moved_before``: old → new run-relative paths of files moved with it). Their new paths."""
    run_dir = Path(run_dir)
    raw = run_dir / "raw"
    renamed: dict[str, str] = dict(moved_before or {})
    for src, rest in _own_files(run_dir, inv) if own is None else own:  # own: listed by the caller already
        dst = src.parent / contended_aside_raw_name(inv.run_id, inv.suite, inv.replicate, attempt, rest, tag)
        src.replace(dst)
        renamed[src.relative_to(run_dir).as_posix()] = dst.relative_to(run_dir).as_posix()
    moved = []
    for rel, ext in ((inv.result_relpath(), "json"), (inv.log_relpath(), "log")):
        src = run_dir / rel
        if src.is_file():
            dst = raw / contended_aside_name(inv.run_id, inv.suite, inv.replicate, attempt, ext, tag)
            dst.parent.mkdir(parents=True, exist_ok=True)
            src.replace(dst)
            moved.append(dst.relative_to(run_dir).as_posix())
            if ext == "json" and renamed:
                _repoint(dst, renamed)
    return moved + sorted(set(renamed.values()) - set((moved_before or {}).values()))


def _contended_files(run_dir: Path, inv: Invocation) -> list[tuple[Path, str]]:
    """(path, rest) of every file of the replicate set aside as a contended attempt
    (``raw|figures/<run>_<suite>_r<k>_contended<j>[._]<...>``)."""
    return [(src, rest) for src, rest, tag, _i in _replicate_files(run_dir, inv) if tag == CONTENDED]


def set_aside_earlier(run_dir: Path, inv: Invocation, *, with_contended: bool = False) -> list[str]:
    """Before a launch: what an earlier launch of the replicate left in the run directory (its
    result document, log, raw files and figures) set aside as :func:`set_aside` does, tagged
    ``earlier<i>`` (i: one more than the last earlier launch set aside), so this launch neither
    truncates the earlier log nor leaves its raw files to be read and sealed as its own. Files set
    aside as contended are this launch's own attempts (:func:`launch_with_reruns`): left alone,
    unless ``with_contended`` (before a materialization's first attempt: they are the earlier
    one's), when they go with it as ``_earlier<i>_contended<j>[._]*`` and every document moved
    (its own, its contended attempts') names their new paths. Their new paths (none on a first launch)."""
    run_dir = Path(run_dir)
    files = _replicate_files(run_dir, inv)
    contended_files = [(src, rest) for src, rest, tag, _i in files if tag == CONTENDED] if with_contended else []
    own = [(src, rest) for src, rest, tag, _i in files if tag is None]
    if not contended_files and not own and \
            not any((run_dir / rel).is_file() for rel in (inv.result_relpath(), inv.log_relpath())):
        return []
    prefix = f"{inv.run_id}_{inv.suite}_r{int(inv.replicate)}_"
    i = max([0] + [k for _src, _rest, tag, k in files if tag == EARLIER]) + 1
    renamed: dict[str, str] = {}
    for src, rest in contended_files:
        dst = src.parent / contended_aside_raw_name(inv.run_id, inv.suite, inv.replicate, i, rest, EARLIER)
        src.replace(dst)
        renamed[src.relative_to(run_dir).as_posix()] = dst.relative_to(run_dir).as_posix()
    for rel in renamed.values():  # a contended attempt's document names its own raw files and figures
        if re.fullmatch(rf"raw/{re.escape(f'{prefix}{EARLIER}{i}_{CONTENDED}')}\d+\.json", rel):
            _repoint(run_dir / rel, renamed)
    moved = set_aside(run_dir, inv, i, EARLIER, moved_before=renamed, own=own) + sorted(renamed.values())
    log.info("%s r%d: an earlier launch's files set aside before this one: %s", inv.suite, inv.replicate,
             ", ".join(moved))
    return moved


def _repoint(path: Path, renamed: dict[str, str]) -> None:
    """Rewrite every string of a result document that names a moved file (``samples``,
    ``telemetry.samples``, ``telemetry.prometheus.samples``, ...) to the file's new name."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return  # kept as the attempt wrote it: evidence, even unreadable

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return renamed.get(value, value)
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    atomic_write_json(path, walk(doc))


def mark_rerun(run_dir: Path, inv: Invocation, attempt: int, earlier: list[str], why: str) -> None:
    """Record in the new attempt's result document that it is a rerun of a contended one."""
    path = Path(run_dir) / inv.result_relpath()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return
    if isinstance(doc, dict):
        doc["contention_rerun"] = {"attempt": attempt + 1, "earlier": list(earlier), "earlier_reason": why}
        atomic_write_json(path, doc)


def attempt_of(inv: Invocation, attempt: int) -> Invocation:
    """``inv`` as its ``attempt``-th launch (1: ``inv`` itself)."""
    return inv if attempt <= 1 else replace(inv, env={**inv.env, ATTEMPT_ENV: str(int(attempt))})


def launch_with_reruns(launch: Callable[[Invocation], LaunchResult], run_dir: Path, inv: Invocation,
                       reruns: int) -> LaunchResult:
    """``launch(inv)`` the replicate, then, while its result says contended and the budget of
    ``reruns`` lasts, set that attempt aside and launch it again (as :func:`attempt_of` the next
    attempt); the last attempt's result. Attempts an earlier materialization of the run set aside
    are not this launch's (the analysis would count them as its reruns): they are set aside first
    with that materialization's files, as ``_earlier<i>_contended<j>`` (:func:`set_aside_earlier`),
    where its document, set aside with them, still names them. (They were deleted, and the earlier
    document named files that no longer existed.)"""
    if _contended_files(Path(run_dir), inv):
        set_aside_earlier(run_dir, inv, with_contended=True)
    res = launch(inv)
    earlier: list[str] = []
    for attempt in range(1, max(0, int(reruns)) + 1):
        why = contended(run_dir, inv)
        if why is None:
            break
        earlier += set_aside(run_dir, inv, attempt)
        log.info("%s r%d ran on a contended machine (%s): launching it again (%d of %d)", inv.suite,
                 inv.replicate, why, attempt, reruns)
        res = launch(attempt_of(inv, attempt + 1))
        mark_rerun(run_dir, inv, attempt, earlier, why)
    return res
