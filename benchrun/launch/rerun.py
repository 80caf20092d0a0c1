"""Contended replicates launched again: the rule the local layer runner (``benchrun.execute.run_layer``) and the publication-grade layer pod (``benchrun.launch.inpod``) share.

A replicate whose result document says its telemetry saw a contended machine is launched
again right after it, up to the layer's budget (``spec.trials.contendedReruns``); each
contended attempt's result and log are kept as ``raw/<run>_<suite>_r<k>_contended<i>.*`` (out
of the results the analysis reads, still in the run's hashed files — and, in a pod without a
run volume, in what it uploads), and the attempt that stays says ``contention_rerun``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable

from benchrun.fsio import atomic_write_json
from benchrun.launch.base import LaunchResult
from benchrun.plan import Invocation
from benchrun.rundir import contended_aside_name

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


def set_aside(run_dir: Path, inv: Invocation, attempt: int) -> list[str]:
    """Move a contended attempt's result document and log to ``raw/<run>_<suite>_r<k>_contended<attempt>.*``
    (out of the results the analysis reads, still in the run's hashed files); their new paths."""
    run_dir = Path(run_dir)
    moved = []
    for rel, ext in ((inv.result_relpath(), "json"), (inv.log_relpath(), "log")):
        src = run_dir / rel
        if src.is_file():
            dst = run_dir / "raw" / contended_aside_name(inv.run_id, inv.suite, inv.replicate, attempt, ext)
            dst.parent.mkdir(parents=True, exist_ok=True)
            src.replace(dst)
            moved.append(dst.relative_to(run_dir).as_posix())
    return moved


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


def launch_with_reruns(launch: Callable[[], LaunchResult], run_dir: Path, inv: Invocation, reruns: int) -> LaunchResult:
    """``launch()`` the replicate, then, while its result says contended and the budget of
    ``reruns`` lasts, set that attempt aside and launch it again; the last attempt's result.
    Attempts an earlier materialization of the run set aside are removed first: they are not
    this launch's, and the analysis would count them as its reruns."""
    raw = Path(run_dir) / "raw"
    for stale in raw.glob(f"{inv.run_id}_{inv.suite}_r{int(inv.replicate)}_contended*") if raw.is_dir() else []:
        stale.unlink(missing_ok=True)
    res = launch()
    earlier: list[str] = []
    for attempt in range(1, max(0, int(reruns)) + 1):
        why = contended(run_dir, inv)
        if why is None:
            break
        earlier += set_aside(run_dir, inv, attempt)
        log.info("%s r%d ran on a contended machine (%s): launching it again (%d of %d)", inv.suite,
                 inv.replicate, why, attempt, reruns)
        res = launch()
        mark_rerun(run_dir, inv, attempt, earlier, why)
    return res
