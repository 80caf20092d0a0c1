"""The confirmation round: fresh replicates of both arms, launched interleaved.

A suspected gating regression is not alerted on its first sighting. The comparison asks for
one more round: the suites behind the suspect metrics are re-run from each run's own pinned
spec, one baseline and one candidate launch per replicate pair (so drift of the machine hits
both arms alike), into ``$BENCHRUN_HOME/confirmations/<candidate>/<arm>/<run_id>/`` — never
into the sealed run directories.

Which arm goes first within a pair is drawn, not fixed: a fixed "baseline first" would hand
any launch-position effect (warm caches, thermals) to the candidate, where it would be
confirmed like a real regression. Each suite's pairs are balanced (half baseline-first, half
candidate-first, the extra one of an odd count drawn too) and shuffled with a seed derived
from the two run ids and the suite's name; the seed and the order are the evidence of the round
(``confirmations/<candidate>/order.json`` and the comparison's ``confirmation_evidence``).

The round is analysed as pairs (``benchrun.stats.paired``): when its answer is unclear it asks
for more pairs through the hook's ``extend``, up to ``comparison.confirmation.maxPairs`` of the
candidate's pinned spec (default: three times the replicates); each extension is a fresh balanced,
shuffled set of pairs (its seed recorded too), numbered after the pairs already launched.
"""

from __future__ import annotations

import logging
import secrets
import shutil
import zlib
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from benchrun.launch.base import Launcher, LaunchResult
from benchrun.launch.local import LocalLauncher
from benchrun.lifecycle import load_pinned
from benchrun.plan import SCOPE_ENV, Invocation, plan_run, planned_replicates
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


def round_scope(candidate_id: str) -> str:
    """A fresh confirmation round's launch scope (:data:`benchrun.plan.SCOPE_ENV`): the candidate and a
    random token, so no two rounds send the same words — the baseline arm of a round against another
    candidate, or the same pair compared again, would otherwise resend an earlier round's prompts for a
    long-lived server's prefix cache to serve (recorded in the round's evidence)."""
    return f"confirmation/{candidate_id}/{secrets.token_hex(4)}"


def confirmation_invocations(home: Path, baseline_id: str, candidate_id: str, suites: set[str],
                             replicates: int | None = None, seed: int | None = None, *, first: int = 1,
                             scope: str = "confirmation") -> tuple[list[tuple[str, Invocation]], dict[str, Path]]:
    """(arm, invocation) pairs in launch order — per replicate k and suite, both arms' launches of
    that suite's k, the first arm drawn by :func:`pair_orders` over the suite's own pairs (seed
    :func:`suite_seed`), so each suite's pairs are balanced — and each arm's output dir. Only
    replicates both arms launch are pairs: where the runs planned different counts, the smaller. ``first`` > 1 plans an
    extension: replicates ``first`` .. ``first + replicates − 1``, into the round's existing dirs.
    Without ``replicates`` each suite runs as many pairs as its run planned (a ``replicates:
    auto`` run's recorded plan, read from the run, never planned again)."""
    root = home / "confirmations" / candidate_id
    arms: dict[str, list[Invocation]] = {}
    out_dirs: dict[str, Path] = {}
    for arm, run_id in (("baseline", baseline_id), ("candidate", candidate_id)):
        rd = RunDir.for_run(run_id, home)
        out = root / arm / run_id
        if first == 1:
            if out.exists():
                shutil.rmtree(out)  # a confirmation round is fresh by definition
            for sub in ("structured", "raw"):
                (out / sub).mkdir(parents=True)
        run = load_pinned(rd).run
        counts: int | dict[str, int] = (first + int(replicates or 0) - 1 if first > 1 else
                                        replicates or planned_replicates(run, run_id, rd.path))
        plans = plan_run(run, run_id, out, home=home, replicates=counts, record_plan=False)
        arms[arm] = [replace(inv, env={**inv.env, SCOPE_ENV: scope})  # its own prompts: see SCOPE_ENV, round_scope
                     for p in plans for inv in p.invocations if inv.suite in suites and inv.replicate >= first]
        out_dirs[arm] = out
    # a pair is a replicate of a suite that both arms launch: two `replicates: auto` runs may have
    # planned different counts, and a launch with no partner is no pair (it was counted as one)
    both = ({(i.suite, i.replicate) for i in arms["baseline"]} & {(i.suite, i.replicate) for i in arms["candidate"]})
    base = round_seed(baseline_id, candidate_id) if seed is None else seed
    first_arm: dict[tuple[str, int], tuple[str, str]] = {}
    for suite in sorted({s for s, _ in both}):  # balanced within each suite, not only over the round
        ks = sorted(k for s, k in both if s == suite)
        first_arm.update(zip(((suite, k) for k in ks), pair_orders(len(ks), suite_seed(base, suite))))
    order: list[tuple[str, Invocation]] = []
    for suite, k in sorted(first_arm, key=lambda sk: (sk[1], sk[0])):
        for arm in first_arm[(suite, k)]:
            order.extend((arm, inv) for inv in arms[arm] if (inv.suite, inv.replicate) == (suite, k))
    return order, out_dirs


def suite_seed(seed: int, suite: str) -> int:
    """The seed of one suite's balanced order within a round (recorded with the round's seed)."""
    return (int(seed) + zlib.crc32(suite.encode())) % 2**32


def max_pairs(home: Path, candidate_id: str) -> int | None:
    """``comparison.confirmation.maxPairs`` of the candidate's pinned spec (None: not set)."""
    comp = load_pinned(RunDir.for_run(candidate_id, home)).run.spec.comparison
    conf = getattr(comp, "confirmation", None) if comp is not None else None
    return getattr(conf, "max_pairs", None)


class ConfirmationRound:
    """A ConfirmHook for :func:`benchrun.stats.compare.compare_tables`: called with the suspected
    keys, it launches the round and returns the fresh tables of both arms (failed replicates
    included) and the round's evidence (seeds and launch order); :meth:`extend` launches more
    pairs of the same round and returns both arms' tables so far. ``max_pairs`` is the spec's
    budget (None: the analysis's default)."""

    def __init__(self, home: Path, baseline_id: str, candidate_id: str, *, launcher: Launcher | None = None,
                 replicates: int | None = None, on_launch: Callable[[Any], None] | None = None) -> None:
        self.home, self.baseline_id, self.candidate_id = home, baseline_id, candidate_id
        self.launcher = launcher or LocalLauncher()
        self.replicates, self.on_launch = replicates, on_launch
        self.max_pairs: int | None = None
        self.pairs = 0
        self.scope = round_scope(candidate_id)  # the round's, its extensions' too
        self.evidence: dict[str, Any] = {}
        self._out_dirs: dict[str, Path] = {}

    def _launch(self, order: list[tuple[str, Invocation]]) -> None:
        from benchrun.execute import record_launches

        done: dict[str, list[LaunchResult]] = {arm: [] for arm in self._out_dirs}
        first = min((inv.replicate for _, inv in order), default=1)
        try:
            for arm, inv in order:
                res = self.launcher.launch(inv, self._out_dirs[arm])
                done[arm].append(res)
                if self.on_launch:
                    self.on_launch(res)
        finally:  # interrupted too: what finished is recorded, as run_layer records a layer's launches
            # each look's launches recorded, as a run's are: a pair killed before it wrote a result is a failure
            for arm, results in done.items():
                if results:
                    record_launches(self._out_dirs[arm], f"confirmation from pair {first}", results)

    def _tables(self) -> tuple[Any, Any]:
        from benchrun.stats.load import replicate_table

        return (replicate_table(self._out_dirs["baseline"], include_failed=True),
                replicate_table(self._out_dirs["candidate"], include_failed=True))

    def __call__(self, keys: Keys) -> tuple[Any, Any, dict[str, Any]]:
        suites = {suite for suite, _case, _metric in keys}
        seed = round_seed(self.baseline_id, self.candidate_id)
        order, self._out_dirs = confirmation_invocations(self.home, self.baseline_id, self.candidate_id, suites,
                                                         self.replicates, seed, scope=self.scope)
        self.max_pairs = max_pairs(self.home, self.candidate_id)  # the pinned specs loaded above
        self.pairs = max((inv.replicate for _arm, inv in order), default=0)
        self.evidence = {
            "scheme": "paired launches, first arm per pair balanced within each suite and shuffled (seeded: the "
                      "round's seed plus crc32 of the suite's name)",
            "seed": seed,
            "prompt_scope": self.scope,  # a serving suite's prompt salt: <run>/r<k>/<scope>
            "order": [{"arm": arm, "suite": inv.suite, "replicate": inv.replicate} for arm, inv in order],
        }
        atomic_write_json(self.home / "confirmations" / self.candidate_id / "order.json", self.evidence)
        log.info("confirmation round: %d launches of %s, paired in a seeded balanced order", len(order),
                 sorted(suites))
        self._launch(order)
        return (*self._tables(), self.evidence)

    def extend(self, keys: Keys, pairs: int) -> tuple[Any, Any]:
        suites = {suite for suite, _case, _metric in keys}
        seed = round_seed(self.baseline_id, self.candidate_id) + self.pairs
        order, _dirs = confirmation_invocations(self.home, self.baseline_id, self.candidate_id, suites, pairs,
                                                seed, first=self.pairs + 1, scope=self.scope)
        self.pairs += pairs
        self.evidence.setdefault("extensions", []).append({
            "seed": seed, "order": [{"arm": arm, "suite": inv.suite, "replicate": inv.replicate} for arm, inv in order]})
        atomic_write_json(self.home / "confirmations" / self.candidate_id / "order.json", self.evidence)
        log.info("confirmation round extended: %d more launches of %s", len(order), sorted(suites))
        self._launch(order)
        return self._tables()


def confirmation_hook(home: Path, baseline_id: str, candidate_id: str, *,
                      launcher: Launcher | None = None, replicates: int | None = None,
                      on_launch: Callable[[Any], None] | None = None) -> ConfirmationRound:
    """The confirmation round of ``candidate_id`` against ``baseline_id`` (:class:`ConfirmationRound`)."""
    return ConfirmationRound(home, baseline_id, candidate_id, launcher=launcher, replicates=replicates,
                             on_launch=on_launch)
