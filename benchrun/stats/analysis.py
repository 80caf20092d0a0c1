"""Run-level analysis entry points: trial statistics of one run, and a gated comparison of two.

These glue the loaders to the pure statistics and write the results as files in the run
directory (``structured/<run_id>_trial_statistics.json``, ``_comparison.json``), each to
a temporary name and renamed.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchrun.stats import admit
from benchrun.stats import describe as D
from benchrun.stats.compare import Comparison, ConfirmHook, compare_tables
from benchrun.stats.gate import GateResult, check_gate
from benchrun.stats.load import (
    confidence_level,
    gate_policy,
    load_run,
    min_replicates,
    replicate_table,
    requests_tables,
)
from benchrun.fsio import atomic_write_json

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)


@dataclass
class TrialStatistics:
    """Everything the statistics say about one run."""

    run_id: str
    confidence: float
    min_replicates: int
    replicates: "pd.DataFrame"  # replicate table with robust_z and outlier columns
    summary: "pd.DataFrame"  # one row per (suite, case, metric)
    tails: "pd.DataFrame"  # per replicate x point x bucket: p99 with a descriptive within-replicate band
    tail_summary: "pd.DataFrame" = None  # type: ignore[assignment]  # per point x bucket: p99 over replicates

    def to_json(self) -> dict[str, Any]:
        def clean(df: "pd.DataFrame") -> list[dict[str, Any]]:
            return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                    for r in df.to_dict(orient="records")]

        return {"run_id": self.run_id, "confidence_level": self.confidence,
                "min_replicates": self.min_replicates, "metrics": clean(self.summary),
                "replicates": clean(self.replicates), "tails": clean(self.tails),
                "tail_summary": clean(self.tail_summary) if self.tail_summary is not None else []}


def trial_statistics_for_run(run_dir: str | os.PathLike[str], *, seed: int = D.DEFAULT_SEED) -> TrialStatistics:
    """Per-metric statistics, outlier flags and p99 intervals of one run, at the spec's confidence."""
    run = load_run(run_dir)
    conf = confidence_level(run.spec)
    table = replicate_table(run.path)
    flagged = D.flag_replicates(table) if not table.empty else table.assign(robust_z=[], outlier=[])
    summary = D.trial_statistics(table, conf, seed=seed) if not table.empty else table.iloc[0:0]
    tails = D.tail_intervals(requests_tables(run.path), conf)
    log.info("%s: %d metrics, %d replicate rows, %d tail rows", run.run_id, len(summary), len(table), len(tails))
    return TrialStatistics(run.run_id, conf, min_replicates(run.spec), flagged, summary, tails,
                           D.tail_summary(tails, conf))


def write_trial_statistics(stats: TrialStatistics, run_dir: str | os.PathLike[str]) -> Path:
    """``structured/<run_id>_trial_statistics.json`` (atomic)."""
    return atomic_write_json(Path(run_dir) / "structured" / f"{stats.run_id}_trial_statistics.json", stats.to_json())


def read_trial_statistics(run_dir: str | os.PathLike[str]) -> TrialStatistics:
    """The statistics written by :func:`write_trial_statistics`, else computed afresh."""
    import json

    import pandas as pd

    rd = Path(run_dir)
    path = rd / "structured" / f"{rd.name}_trial_statistics.json"
    if not path.is_file():
        return trial_statistics_for_run(rd)

    def frame(rows: list[dict[str, Any]]) -> "pd.DataFrame":
        df = pd.DataFrame(rows)
        for col in df.columns:  # JSON null: NaN in numeric columns, and in all-null ones
            if df[col].isna().all():
                df[col] = math.nan
        return df

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        reps = frame(doc["replicates"])
        if not reps.empty:
            reps["outlier"] = reps["outlier"].astype(bool)
        return TrialStatistics(doc["run_id"], float(doc["confidence_level"]), int(doc["min_replicates"]),
                               reps, frame(doc["metrics"]), frame(doc["tails"]), frame(doc.get("tail_summary") or []))
    except (OSError, ValueError, KeyError, TypeError) as exc:  # derived data: recompute rather than fail
        log.warning("%s: unreadable (%s); computing the statistics afresh", path, exc)
        return trial_statistics_for_run(rd)


def compare_runs(
    baseline_dir: str | os.PathLike[str],
    candidate_dir: str | os.PathLike[str],
    *,
    confirm: ConfirmHook | None = None,
    variable: str | None = None,
    candidate_in_progress: bool = False,
    baseline_alias: str | None = None,
    allow_differences: tuple[str, ...] | list[str] = (),
    allowed_by: str = "--allow-differences",
    home: Path | None = None,
) -> tuple[GateResult, Comparison | None]:
    """Admit the pair (fail closed: :mod:`benchrun.stats.admit`), gate it, and, if it passes,
    compare with the candidate spec's settings.

    Returns the gate result and the comparison (None when the pair was refused: then
    ``gate.refusals`` says why it is not comparable, or the gate's diffs what differs).
    ``candidate_in_progress``: the candidate is the run being analysed (phase Analyzing).
    ``baseline_alias``: the baseline was named by ``published/<alias>``; what promote recorded
    there is checked again. ``allow_differences``: spec paths (or environment field names)
    allowed to differ besides the variable under test; recorded in the gate's result, with
    ``allowed_by`` (the CLI option, or the spec's ``comparison.allowDifferences``).
    ``home``: whose key (the configured one, else that home's own) verifies both runs' signatures;
    by default the candidate's home — never a key found beside the baseline.
    """
    from benchrun.stats.tails import RequestTails, kept_replicates

    base, cand = load_run(baseline_dir), load_run(candidate_dir)
    refusals = admit.admit_runs(base, cand, candidate_in_progress=candidate_in_progress, home=home)
    if baseline_alias is not None:
        from benchrun.stats.baseline import alias_refusals

        refusals.extend(alias_refusals(base, baseline_alias))
    gate = check_gate(base, cand, variable, allow_differences, allowed_by)
    gate.refusals.extend(refusals)
    if not gate.passed:
        log.info("%s", gate.message())
        return gate, None
    from benchrun.stats import contention

    # replicates measured on a contended machine leave the comparison by a stated rule (benchrun.stats.contention)
    table_b, b_info, _ = contention.compared_table(base.path)
    table_c, c_info, _ = contention.compared_table(cand.path)
    units = admit.unit_mismatches(table_b, table_c)
    if units:
        gate.refusals.extend(units)
        log.info("%s", gate.message())
        return gate, None
    policy = gate_policy(base.spec, cand.spec)  # the candidate never sets a laxer bar than the baseline's
    measured = admit.measured_rows(table_b, table_c)
    unmeasured = admit.unmeasured_primaries(measured, policy.primary, admit.failed_launches(table_b, table_c))
    neither = admit.neither_measured(measured, policy.primary)
    result = compare_tables(
        table_b,
        table_c,
        confidence=policy.confidence,
        primary=policy.primary,
        secondary=policy.secondary,
        delta_pct=policy.delta,
        abs_margin=policy.margin,
        confirm=confirm,
        tails=RequestTails(base.path, cand.path, confidence=policy.confidence,
                           keep=(kept_replicates(table_b), kept_replicates(table_c))),
    )
    if policy.differs:
        result.notes.append(f"the runs' specs set {', '.join(policy.differs)} differently: gated on the stricter "
                            "of the two (both runs' primaries, the smaller margins, the lower confidence level)")
    contention.annotate(result.rows, b_info, c_info, contention.reruns(base.path), contention.reruns(cand.path))
    result.contended_kept = contention.kept_in_gating(result.rows, b_info, c_info)
    if result.contended_kept:  # the keep-rule stands (a busy CI machine), but nothing it shows is said clean
        result.notes.append("gating suites compared on contended replicates kept (fewer than "
                            f"{contention.MIN_QUIET} quiet ones; a change there may be the machine's, not the "
                            f"candidate's): {'; '.join(result.contended_kept)}")
    secondary = _secondary_regressions(result.rows)
    if secondary:
        result.notes.append(f"secondary regressions (not gating): {', '.join(secondary)}")
    unmeasured = unmeasured + admit.ungateable_primaries(result.rows) + admit.failure_refusals(result.rows)
    if unmeasured and not result.gating_regression:
        # "no regression" is only said about what both runs measured; a regression (e.g. a
        # failure count) is still said when the measured part shows one
        gate.refusals.extend(unmeasured)
        gate.unjudged = result
        log.info("%s", gate.message())
        return gate, None
    if unmeasured:
        result.notes.extend(f"not comparable: {r.message}" for r in unmeasured)
    if neither:
        result.notes.append(f"primaries measured in neither run, so not judged: {', '.join(neither)}")
        result.unjudged = list(neither)  # the condition names them: NoRegressionShown, never NoGatingRegression
    return gate, result


def _secondary_regressions(rows: "pd.DataFrame") -> list[str]:
    """``metric change %`` of each non-gating outcome row whose verdict is ``regression``, the
    largest change first: a −90 % secondary was said in its row alone."""
    if rows is None or rows.empty or "verdict" not in rows.columns:
        return []
    sel = rows[~rows["gating"].astype(bool) & (rows["verdict"].astype(str) == "regression")
               & (rows["role"].astype(str) != "context" if "role" in rows.columns else True)]
    pct = sel["change_pct"] if "change_pct" in sel.columns else [math.nan] * len(sel)
    said = sorted(((abs(p) if isinstance(p, float) and math.isfinite(p) else -1.0,
                    f"{m} {p:+.1f} %" if isinstance(p, float) and math.isfinite(p) else str(m))
                   for m, p in zip(sel["metric"], pct)), reverse=True)
    return [s for _, s in said]


def gate_condition(gate: GateResult) -> dict[str, str]:
    """``RegressionDetected`` for a refused pair: Unknown, since nothing was judged."""
    if gate.not_comparable:
        cond = admit.condition(gate.refusals)
        ran = gate.unjudged.confirmation if gate.unjudged is not None else "not_needed"
        if ran == "not_confirmed":
            cond["message"] += ("; a confirmation round ran and did not confirm the suspected regression: the rows "
                                "and its launches are in the comparison document ('unjudged', "
                                "'confirmation_evidence')")
        return cond
    return {"type": "RegressionDetected", "status": "Unknown", "reason": "GateRefused",
            "message": gate.message()}


def write_comparison(
    gate: GateResult, result: Comparison | None, baseline_id: str, candidate_dir: str | os.PathLike[str]
) -> Path:
    """``structured/<run_id>_comparison.json`` with the gate, the rows and the condition (atomic)."""
    rd = Path(candidate_dir)
    doc: dict[str, Any] = {
        "baseline": baseline_id, "candidate": rd.name, "variable_under_test": gate.variable,
        "gate": {"passed": gate.passed, "message": gate.message(),
                 "differences": [d.__dict__ for d in gate.diffs],
                 "comparable": not gate.not_comparable,
                 "allowed_differences": list(gate.allowed_differences),
                 "allowed_by": gate.allowed_by if gate.allowed_differences else None,
                 "refusals": [r.to_json() for r in gate.refusals]},
    }
    if not gate.passed:
        doc["condition"] = gate_condition(gate)
    if result is not None:
        doc.update(confidence_level=result.confidence, metrics=result.records(), notes=result.notes,
                   confirmation=result.confirmation, condition=result.condition(),
                   confirmation_evidence=result.confirmation_evidence)
    elif gate.unjudged is not None:  # refused on what the rows showed: they, and any round, stay on record
        un = gate.unjudged
        doc.update(confirmation=un.confirmation, confirmation_evidence=un.confirmation_evidence,
                   unjudged={"confidence_level": un.confidence, "metrics": un.records(), "notes": un.notes})
    return atomic_write_json(rd / "structured" / f"{rd.name}_comparison.json", doc)
