"""The playbook result type and the helpers every playbook shares (rows from SQL, run checks)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Literal

from benchrun.errors import BenchrunError
from benchrun.paths import validate_run_id
from benchrun.rundir import RunDir, finished_and_succeeded

Verdict = Literal["flagged", "clear", "unavailable"]
VERDICTS: tuple[str, ...] = ("flagged", "clear", "unavailable")


@dataclasses.dataclass(frozen=True)
class PlaybookResult:
    """One scenario playbook's answer for one run: the verdict, why, and the evidence rows.

    ``rows`` are the rows of ``sql`` (the evidence query, run over the warehouse views with
    the run ids as parameters) plus the columns the verdict added (``flagged``, ``why``);
    ``query_spec_digest`` is that query's identity (``benchrun.warehouse.query_spec_digest``), and
    ``params`` its parameters, so ``benchrun query "$sql" --param ...`` reproduces the rows.
    """

    name: str
    question: str
    verdict: Verdict
    reason: str
    rows: list[dict[str, Any]]
    query_spec_digest: str
    sql: str
    run_id: str = ""
    baseline_run_id: str | None = None
    # the values of ``sql``'s $1, $2, ...: `benchrun query "$sql" --param ...` gives the rows (and digest) again
    params: list[Any] = dataclasses.field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def clean(value: Any) -> Any:
    """JSON-safe cell: NaN/±inf → None (never a made-up number), others unchanged."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def fetch(sql: str, home: Path, params: list[Any]) -> tuple[list[dict[str, Any]], str]:
    """Run one playbook query over the warehouse views; rows as dicts and the query's digest."""
    from benchrun.warehouse.views import query

    result = query(sql, Path(home), params)
    rows = [{k: clean(v) for k, v in row.items()} for row in result.table.to_pylist()]
    return rows, result.query_spec_digest


# Each replicate's status in the run ($1) and its baseline ($2): 'ok' when every status recorded
# for it (its result's, in measurement_fact, and its launch's, in launch_fact) is ok, else the
# first other one (failed, timeout, ...). A replicate with neither has no row here.
REPLICATE_STATUS_CTE = """replicate_status AS (
    SELECT run_id, suite, replicate,
           CASE WHEN bool_and(status = 'ok') THEN 'ok' ELSE min(status) FILTER (WHERE status <> 'ok') END AS status
    FROM (SELECT run_id, suite, replicate, status FROM measurement_fact
          WHERE run_id IN ($1, $2) AND status IS NOT NULL
          UNION ALL
          SELECT run_id, suite, replicate, status FROM launch_fact
          WHERE run_id IN ($1, $2) AND status IS NOT NULL)
    GROUP BY run_id, suite, replicate
)"""


# Which runs the warehouse holds (benchmark_run_fact has one row per curated run), and how they ended.
RUN_PRESENT_SQL = "SELECT phase, outcome FROM benchmark_run_fact WHERE run_id = $1"


def _run_row(home: Path, run_id: str) -> dict[str, Any] | None:
    rows, _ = fetch(RUN_PRESENT_SQL, home, [run_id])
    return rows[0] if rows else None


def in_warehouse(home: Path, run_id: str) -> bool:
    """True when ``run_id`` has been curated into the warehouse."""
    return _run_row(home, run_id) is not None


def _not_curated(what: str, rid: str, home: Path) -> str:
    try:
        phase = RunDir(Path(home), rid).read_status().get("phase")
    except (BenchrunError, ValueError):
        phase = None
    if phase == "Canceled":  # never curated (rebuild-warehouse leaves it out too): nothing to rebuild
        return (f"{what} {rid!r} ended Canceled, so it is not in the warehouse and has nothing a playbook can judge; "
                "run the spec again, or give a finished run")
    return (f"{what} {rid!r} is not in the warehouse under {Path(home) / 'warehouse'}; "
            "a run is curated as it finishes (a submitted run once its Dagster run has run it); a finished run "
            f"missing there: `benchrun rebuild-warehouse {rid}`; list the curated runs with "
            "`benchrun query \"SELECT run_id FROM benchmark_run_fact\"`")


def baseline_problem(home: Path, baseline_run_id: str) -> str | None:
    """Why ``baseline_run_id`` cannot be a playbook baseline (not curated, not Succeeded), else None.

    The rule is the comparison's (benchrun.rundir.finished_and_succeeded, which stats.admit reads
    too): a finished, succeeded run, outcome succeeded or partial; a failed or unfinished run's
    numbers are no reference.
    """
    row = _run_row(home, baseline_run_id)
    if row is None:
        return _not_curated("baseline run", baseline_run_id, home)
    phase, outcome = row.get("phase"), row.get("outcome")
    if finished_and_succeeded(phase, outcome):
        return None
    what = f"phase {phase}" + (f", outcome {outcome}" if outcome else "")
    return (f"baseline run {baseline_run_id!r} is not Succeeded ({what}); playbooks judge a run only against a "
            "finished, succeeded baseline, as the comparison does")


def check_runs(home: Path, run_id: str, baseline_run_id: str | None) -> None:
    """Both runs are valid ids and curated and the baseline Succeeded, else a BenchrunError naming
    the run and the fix."""
    validate_run_id(run_id)
    if not in_warehouse(home, run_id):
        raise BenchrunError(_not_curated("run", run_id, home))
    if baseline_run_id is None:
        return
    validate_run_id(baseline_run_id)
    if baseline_run_id == run_id:
        raise BenchrunError(f"baseline run {baseline_run_id!r} is the run itself; give a different --baseline")
    problem = baseline_problem(home, baseline_run_id)
    if problem:
        raise BenchrunError(f"{problem}; give another --baseline (`benchrun runs` lists runs and their phase)")


def ratio(a: Any, b: Any) -> float | None:
    """a / b, or None when either is missing or b is zero."""
    if a is None or b is None or b == 0:
        return None
    return float(a) / float(b)


def replicates_phrase(replicates: list[tuple[str, int, str]]) -> str:
    """``(suite, replicate, status)`` as "serve r3, r4 (failed); allreduce r1 (status not recorded)"."""
    grouped: dict[tuple[str, str], list[int]] = {}
    for suite, rep, status in sorted(set(replicates)):
        grouped.setdefault((suite, status), []).append(rep)
    return "; ".join(f"{suite} {', '.join(f'r{k}' for k in reps)} ({status})"
                     for (suite, status), reps in grouped.items())


# A change between two runs is told from noise only where both have at least this many
# replicates and every replicate of the run lies beyond every replicate of the baseline (ranges
# apart; by chance 1 in 924 for 6 vs 6). Two identical canary runs on a shared machine moved
# medians by ×1.5 with overlapping ranges.
SEPARATION_MIN_REPLICATES = 2


def separation(n: int | None, lo: float | None, hi: float | None, base_n: int | None, base_lo: float | None,
               base_hi: float | None, worse: Literal["higher", "lower"]) -> Literal["apart", "overlap", "too few"]:
    """Whether the run's replicates (``n`` of them, ``lo``..``hi``) all lie on the ``worse`` side of every
    replicate of the baseline's: 'apart', 'overlap', or 'too few' where either arm has fewer than
    SEPARATION_MIN_REPLICATES replicates (or no range)."""
    if None in (n, lo, hi, base_n, base_lo, base_hi) or min(n, base_n) < SEPARATION_MIN_REPLICATES:
        return "too few"
    apart = lo > base_hi if worse == "higher" else hi < base_lo
    return "apart" if apart else "overlap"
