"""The confirmation round: fresh replicates of both arms, launched interleaved.

A suspected gating regression is not alerted on its first sighting. The comparison asks for
one more round: the suites behind the suspect metrics are re-run from each run's own pinned
spec, baseline and candidate alternating replicate by replicate (so drift of the machine hits
both arms alike), into ``$BENCHRUN_HOME/confirmations/<candidate>/<arm>/<run_id>/`` — never
into the sealed run directories.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any, Callable

from benchrun.launch.base import Launcher
from benchrun.launch.local import LocalLauncher
from benchrun.lifecycle import load_pinned
from benchrun.plan import Invocation, plan_run
from benchrun.rundir import RunDir

log = logging.getLogger(__name__)

Keys = list[tuple[str, str, str]]  # (suite, case, metric)


def confirmation_invocations(home: Path, baseline_id: str, candidate_id: str, suites: set[str],
                             replicates: int | None = None) -> tuple[list[tuple[str, Invocation]], dict[str, Path]]:
    """Interleaved (arm, invocation) pairs (b1, c1, b2, c2, ...) and each arm's output dir."""
    root = home / "confirmations" / candidate_id
    arms: dict[str, list[Invocation]] = {}
    out_dirs: dict[str, Path] = {}
    for arm, run_id in (("baseline", baseline_id), ("candidate", candidate_id)):
        rd = RunDir.for_run(run_id, home)
        out = root / arm / run_id
        if out.exists():
            shutil.rmtree(out)  # a confirmation round is fresh by definition
        for sub in ("structured", "raw"):
            (out / sub).mkdir(parents=True)
        plans = plan_run(load_pinned(rd).run, run_id, out, home=home)
        arms[arm] = [inv for p in plans for inv in p.invocations if inv.suite in suites]
        out_dirs[arm] = out
    n = replicates or max((inv.replicate for invs in arms.values() for inv in invs), default=0)
    order: list[tuple[str, Invocation]] = []
    for k in range(1, n + 1):
        for arm in ("baseline", "candidate"):
            order.extend((arm, inv) for inv in arms[arm] if inv.replicate == k)
    return order, out_dirs


def confirmation_hook(home: Path, baseline_id: str, candidate_id: str, *,
                      launcher: Launcher | None = None, replicates: int | None = None,
                      on_launch: Callable[[Any], None] | None = None) -> Callable[[Keys], tuple[Any, Any]]:
    """A ConfirmHook for :func:`benchrun.stats.compare.compare`."""
    from benchrun.stats.load import replicate_table

    launcher = launcher or LocalLauncher()

    def hook(keys: Keys) -> tuple[Any, Any]:
        suites = {suite for suite, _case, _metric in keys}
        order, out_dirs = confirmation_invocations(home, baseline_id, candidate_id, suites, replicates)
        log.info("confirmation round: %d launches of %s, interleaved", len(order), sorted(suites))
        for arm, inv in order:
            res = launcher.launch(inv, out_dirs[arm])
            if on_launch:
                on_launch(res)
        return replicate_table(out_dirs["baseline"]), replicate_table(out_dirs["candidate"])

    return hook
