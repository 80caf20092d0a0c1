"""The confirmation round: fresh replicates of both arms, launched interleaved.

A suspected gating regression is not alerted on its first sighting. The comparison asks for
one more round: the suites behind the suspect metrics are re-run from each run's own pinned
spec, one baseline and one candidate launch per replicate pair (so drift of the machine hits
both arms alike), into ``$BENCHRUN_HOME/confirmations/<candidate>/<arm>/<run_id>/`` — never
into the sealed run directories.

Which arm goes first within a pair is drawn, not fixed: a fixed "baseline first" would hand
any launch-position effect (warm caches, thermals) to the candidate, where it would be
confirmed like a real regression. The pairs are balanced (half baseline-first, half
candidate-first, the extra one of an odd count drawn too) and shuffled with a seed derived
from the two run ids; the seed and the order are the evidence of the round
(``confirmations/<candidate>/order.json`` and the comparison's ``confirmation_evidence``).
"""

from __future__ import annotations

import logging
import shutil
import zlib
from pathlib import Path
from typing import Any, Callable

from benchrun.launch.base import Launcher
from benchrun.launch.local import LocalLauncher
from benchrun.lifecycle import load_pinned
from benchrun.plan import Invocation, plan_run
from benchrun.rundir import RunDir
from benchrun.fsio import atomic_write_json

log = logging.getLogger(__name__)

Keys = list[tuple[str, str, str]]  # (suite, case, metric)


ARMS = ("baseline", "candidate")


def pair_orders(n_pairs: int, seed: int) -> list[tuple[str, str]]:
    """Which arm launches first in each of ``n_pairs`` pairs: balanced, in a seeded random order."""
    import numpy as np

    rng = np.random.default_rng(seed)
    firsts = ["baseline"] * (n_pairs // 2) + ["candidate"] * (n_pairs // 2)
    if n_pairs % 2:
        firsts.append(ARMS[int(rng.integers(2))])
    rng.shuffle(firsts)
    return [(f, ARMS[1] if f == ARMS[0] else ARMS[0]) for f in firsts]


def round_seed(baseline_id: str, candidate_id: str) -> int:
    """The seed of a confirmation round's order: stable for the pair of runs, recorded."""
    return zlib.crc32(f"{baseline_id}|{candidate_id}".encode())


def confirmation_invocations(home: Path, baseline_id: str, candidate_id: str, suites: set[str],
                             replicates: int | None = None, seed: int | None = None
                             ) -> tuple[list[tuple[str, Invocation]], dict[str, Path]]:
    """(arm, invocation) pairs in launch order — per replicate k, both arms' launches of k, the
    first arm drawn by :func:`pair_orders` — and each arm's output dir."""
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
    orders = pair_orders(n, round_seed(baseline_id, candidate_id) if seed is None else seed)
    order: list[tuple[str, Invocation]] = []
    for k, pair in zip(range(1, n + 1), orders):
        for arm in pair:
            order.extend((arm, inv) for inv in arms[arm] if inv.replicate == k)
    return order, out_dirs


def confirmation_hook(home: Path, baseline_id: str, candidate_id: str, *,
                      launcher: Launcher | None = None, replicates: int | None = None,
                      on_launch: Callable[[Any], None] | None = None) -> Callable[[Keys], tuple[Any, Any]]:
    """A ConfirmHook for :func:`benchrun.stats.compare.compare_tables`: the fresh tables of both arms
    (failed replicates included) and the round's evidence (seed and launch order)."""
    from benchrun.stats.load import replicate_table

    launcher = launcher or LocalLauncher()

    def hook(keys: Keys) -> tuple[Any, Any, dict[str, Any]]:
        suites = {suite for suite, _case, _metric in keys}
        seed = round_seed(baseline_id, candidate_id)
        order, out_dirs = confirmation_invocations(home, baseline_id, candidate_id, suites, replicates, seed)
        evidence = {
            "scheme": "paired launches, first arm per pair balanced and shuffled (seeded)",
            "seed": seed,
            "order": [{"arm": arm, "suite": inv.suite, "replicate": inv.replicate} for arm, inv in order],
        }
        atomic_write_json(home / "confirmations" / candidate_id / "order.json", evidence)
        log.info("confirmation round: %d launches of %s, paired in a seeded balanced order", len(order),
                 sorted(suites))
        for arm, inv in order:
            res = launcher.launch(inv, out_dirs[arm])
            if on_launch:
                on_launch(res)
        return (replicate_table(out_dirs["baseline"], include_failed=True),
                replicate_table(out_dirs["candidate"], include_failed=True), evidence)

    return hook
