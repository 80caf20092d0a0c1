"""Walking a published number (a median over replicates) back to the raw bytes it came from."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import statistics
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.paths import validate_run_id
from benchrun.stats.perlaunch import launch_values
from benchrun.store import open_store, portable_address
from benchrun.warehouse.views import connect, query_spec_digest

log = logging.getLogger(__name__)

# The rollup a run publishes (``benchrun show``, the report, the comparison: benchrun.stats.perlaunch):
# per (suite, case, metric, unit), each replicate's one value is the median of its rows (one per rank,
# node or GPU, or just one), then the median over those replicates' values; the count is of replicates.
# A metric written once per replicate under whichever rank was slowest (all-reduce's
# slowest_rank_arrival_lag_us) is one rollup, never split by that rank.
# Only the ok replicates, as every other reader takes them (``show``, the comparison): a replicate whose
# result or launch says otherwise (a suite that wrote ok and was then killed at its timeout: the launch
# record decides; a failed one's partial metrics) is no part of the published median.
_NOT_OK = """
    NOT EXISTS (SELECT 1 FROM measurement_fact f WHERE f.run_id = $run_id AND f.suite = m.suite
                AND f.replicate = m.replicate AND f.status IS NOT NULL AND f.status <> 'ok')
    AND NOT EXISTS (SELECT 1 FROM launch_fact l WHERE l.run_id = $run_id AND l.suite = m.suite
                    AND l.replicate = m.replicate AND l.status IS NOT NULL AND l.status <> 'ok')"""

MEDIAN_SQL = """
WITH launch AS (
    SELECT suite, "case", metric, unit, replicate,
           median(value) FILTER (WHERE NOT isnan(value)) AS value, count(*) AS n_rows,
           any_value(workload_spec_digest) AS workload_spec_digest,
           any_value(artifact_manifest_digest) AS artifact_manifest_digest
    FROM measurement_fact m
    WHERE run_id = $run_id AND metric = $metric AND ($case IS NULL OR "case" = $case) AND value IS NOT NULL
      AND""" + _NOT_OK + """
    GROUP BY suite, "case", metric, unit, replicate
)
SELECT suite, "case", metric, unit,
       median(value) AS median, count(value) AS replicates, max(n_rows) AS rows_per_replicate,
       any_value(workload_spec_digest) AS workload_spec_digest,
       any_value(artifact_manifest_digest) AS artifact_manifest_digest
FROM launch
GROUP BY suite, "case", metric, unit
HAVING count(value) > 0
ORDER BY suite, "case", unit NULLS FIRST
"""

ROWS_SQL = """
SELECT suite, "case", replicate, rank_id, value, benchmark_case_id, raw_uri, raw_path, raw_sha256,
       artifact_manifest_digest, workload_spec_digest
FROM measurement_fact m
WHERE run_id = $run_id AND metric = $metric AND suite = $suite AND "case" = $case
  AND unit IS NOT DISTINCT FROM $unit AND value IS NOT NULL AND""" + _NOT_OK + """
ORDER BY replicate, rank_id NULLS FIRST, raw_path
"""


@dataclasses.dataclass
class LineageStep:
    """One row of one replicate (its rank, for a per-rank row), the stored object it came from, with the checks made."""

    replicate: int
    value: float
    benchmark_case_id: str | None
    raw_uri: str | None
    raw_path: str | None
    raw_sha256: str | None
    checks: list[str]
    rank_id: int | None = None


@dataclasses.dataclass
class RankMedian:
    """Extra, never the published figure: one rank's own median over the replicates that reported it."""

    rank_id: int | None
    median: float
    replicates: int


@dataclasses.dataclass
class LineageReport:
    """A published median (the rollup ``benchrun show`` prints) and the verified chain behind it."""

    run_id: str
    metric: str
    suite: str
    case: str
    rank_id: int | None  # the one rank every traced row carries, else None (ranks rolled up, or none)
    unit: str
    median: float  # the published value: median over replicates of each replicate's median over its rows
    replicates: int
    workload_spec_digest: str | None
    artifact_manifest_digest: str | None
    query_spec_digest: str
    store_uri: str | None
    steps: list[LineageStep]  # every row of every ok replicate, verified
    rows_per_replicate: int = 1  # the most rows one replicate has (per rank, node or GPU)
    ranks: list[RankMedian] = dataclasses.field(default_factory=list)  # per-rank breakdown (extra), where
    # a replicate has several rows with ranks

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _find_metric(doc: dict[str, Any], metric: str, case: str, value: float, rank_id: int | None = None) -> bool:
    for m in doc.get("metrics", []):
        if m.get("name") == metric and (m.get("case") or "") == case and m.get("rank_id") == rank_id:
            v = m.get("value")
            if isinstance(v, (int, float)) and (math.isclose(float(v), value, rel_tol=1e-12, abs_tol=0.0)
                                                or (math.isnan(float(v)) and math.isnan(value))):
                return True
    return False


def _median_of(per_rep: dict[int, float]) -> tuple[float, int]:
    """The median over the replicates' values (NaN left out, as ``show``'s summary leaves it) and their count."""
    vals = [v for v in per_rep.values() if not math.isnan(v)]
    return (statistics.median(vals) if vals else math.nan), len(vals)


def rollup(steps: list[LineageStep]) -> tuple[float, int]:
    """The published figure of these rows: per replicate the median of its rows
    (:func:`benchrun.stats.perlaunch.launch_value`), then the median over replicates; and the count of replicates."""
    return _median_of(launch_values((None, s.replicate, s.value) for s in steps).get(None, {}))


def rank_medians(steps: list[LineageStep]) -> list[RankMedian]:
    """Each rank's own median over the replicates that reported it (a replicate's rows of one rank taken as
    their median first): the per-rank breakdown shown beside the published rollup."""
    out = []
    for rank, per_rep in launch_values((s.rank_id, s.replicate, s.value) for s in steps).items():
        median, n = _median_of(per_rep)
        if n:
            out.append(RankMedian(rank_id=rank, median=median, replicates=n))
    return sorted(out, key=lambda r: (r.rank_id is not None, r.rank_id or 0))


def trace(home: Path, run_id: str, metric: str, case: str | None = None) -> list[LineageReport]:
    """Every (suite, case) published median of ``metric`` in ``run_id``, walked back to verified raw bytes.

    The median is the one ``benchrun show`` publishes: each ok replicate's rows (one per rank, node
    or GPU) taken as their median, then the median over replicates, recomputed here from the
    verified rows and checked against the warehouse's own rollup (``MEDIAN_SQL``). Every row of every
    ok replicate is a step: the stored object manifest (loaded by the row's
    artifact_manifest_digest, its digest recomputed) lists the row's raw object with the
    same sha256; the stored object re-hashes to it; and the raw document holds the value.
    Any break raises BenchrunError naming the object.
    """
    validate_run_id(run_id)
    con = connect(home)
    try:
        params = {"run_id": run_id, "metric": metric, "case": case}
        medians = con.execute(MEDIAN_SQL, params).fetchall()
        cols = [d[0] for d in con.description]
        if not medians:
            known = con.execute("SELECT count(*) FROM benchmark_run_fact WHERE run_id = ?", [run_id]).fetchone()[0]
            if not known:
                raise BenchrunError(f"lineage: no such run {run_id!r} in the warehouse; `benchrun runs` lists the "
                                    "runs (a run that is not curated yet: `benchrun rebuild-warehouse RUN_ID`)")
            raise BenchrunError(
                f"lineage: no rows of metric {metric!r} for run {run_id}"
                + (f" case {case!r}" if case is not None else "")
                + " in measurement_fact; check the names with `benchrun query`"
            )
        run_rows = con.execute(
            "SELECT raw_path_template, raw_retention_class FROM benchmark_run_fact WHERE run_id = ?", [run_id]
        ).fetchall()
        reports = []
        for values in medians:
            m = dict(zip(cols, values))
            rows = con.execute(ROWS_SQL, {"run_id": run_id, "metric": metric, "suite": m["suite"], "case": m["case"],
                                          "unit": m["unit"]}).fetchall()
            rcols = [d[0] for d in con.description]
            reports.append(_verify(home, run_id, m, [dict(zip(rcols, r)) for r in rows], run_rows))
        return reports
    finally:
        con.close()


def _verify(home: Path, run_id: str, m: dict[str, Any], rows: list[dict[str, Any]], run_rows: list[tuple]) -> LineageReport:
    template = run_rows[0][0] if run_rows else None
    store = open_store(template, home)
    manifests: dict[str, Any] = {}
    steps = []
    for row in rows:
        checks = []
        rank = None if row["rank_id"] is None else int(row["rank_id"])
        digest = row["artifact_manifest_digest"]
        if not digest or not row["raw_uri"]:
            raise BenchrunError(
                f"lineage: run {run_id} {m['suite']} r{row['replicate']} {m['metric']} has no stored raw object "
                "(curated before its evidence was stored); store the evidence and curate again"
            )
        if digest not in manifests:
            manifests[digest] = store.load_manifest(run_id, digest)  # recomputes the digest from the object list
        manifest = manifests[digest]
        checks.append(f"object manifest {digest[:12]}… recomputes to its digest")
        # Found by path and hash, re-hashed through the store opened on this home: the recorded
        # address is relative to the store's root, so a moved home still verifies.
        entry = next((o for o in manifest.objects if o.path == row["raw_path"]), None)
        if entry is None or entry.sha256 != row["raw_sha256"] or row["raw_uri"] not in (
                entry.key, entry.uri, portable_address(entry.uri, entry.key)):
            raise BenchrunError(f"lineage: {row['raw_uri']} ({row['raw_path']}) is not in object manifest {digest} as recorded")
        checks.append(f"{entry.path} listed with sha256 {entry.sha256[:12]}…")
        actual = store.hash_key(entry.key)
        if actual != entry.sha256:
            raise BenchrunError(
                f"lineage: stored object {store.key_uri(entry.key)} ({entry.path}) was tampered with: "
                f"sha256 {actual} != recorded {entry.sha256}"
            )
        checks.append("stored bytes re-hash to it")
        if entry.path.endswith(".json"):
            try:
                doc = json.loads(store.get(manifest, entry.path))
            except json.JSONDecodeError as exc:
                raise BenchrunError(f"lineage: {store.key_uri(entry.key)} ({entry.path}) is not JSON ({exc})") from exc
            at = f" for rank {rank}" if rank is not None else ""
            if not _find_metric(doc, m["metric"], m["case"], float(row["value"]), rank):
                raise BenchrunError(
                    f"lineage: {store.key_uri(entry.key)} ({entry.path}) does not hold {m['metric']}={row['value']}"
                    f"{at} for case {m['case']!r}"
                )
            checks.append(f"raw document holds {m['metric']}={row['value']}{at}")
        steps.append(LineageStep(
            replicate=int(row["replicate"]), value=float(row["value"]), benchmark_case_id=row["benchmark_case_id"],
            raw_uri=row["raw_uri"], raw_path=row["raw_path"], raw_sha256=row["raw_sha256"], checks=checks,
            rank_id=rank,
        ))
    median, replicates = rollup(steps)
    # The figure is recomputed from the verified values by show's own rule; the warehouse's rollup must agree.
    if replicates != int(m["replicates"]) or not math.isclose(median, float(m["median"]), rel_tol=1e-9, abs_tol=1e-12):
        raise BenchrunError(
            f"lineage: run {run_id} {m['suite']} {m['metric']} case {m['case']!r}: the verified rows give median "
            f"{median!r} over {replicates} replicates, the warehouse {m['median']!r} over {m['replicates']}"
        )
    per_rep_rows = int(m["rows_per_replicate"] or 1)
    ranks = {s.rank_id for s in steps}
    return LineageReport(
        run_id=run_id, metric=m["metric"], suite=m["suite"], case=m["case"],
        rank_id=next(iter(ranks)) if len(ranks) == 1 else None, unit=m["unit"],
        median=median, replicates=replicates,
        workload_spec_digest=m["workload_spec_digest"], artifact_manifest_digest=m["artifact_manifest_digest"],
        query_spec_digest=query_spec_digest(MEDIAN_SQL), store_uri=store.uri, steps=steps,
        rows_per_replicate=per_rep_rows,
        ranks=rank_medians(steps) if per_rep_rows > 1 and ranks != {None} else [],
    )
