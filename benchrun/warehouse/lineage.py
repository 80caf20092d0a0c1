"""Walking a published number (a median over replicates) back to the raw bytes it came from."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.paths import validate_run_id
from benchrun.store import open_store, portable_address
from benchrun.warehouse.views import connect, query_spec_digest

log = logging.getLogger(__name__)

# The rollup a report publishes: median over replicates of one metric of one case (of one rank,
# for a per-rank metric: its ranks are not pooled, and the count is of replicates, not rows).
# Only the ok replicates, as every other reader takes them (``show``, the comparison): a replicate whose
# result or launch says otherwise (a suite that wrote ok and was then killed at its timeout: the launch
# record decides; a failed one's partial metrics) is no part of the published median.
_NOT_OK = """
    NOT EXISTS (SELECT 1 FROM measurement_fact f WHERE f.run_id = $run_id AND f.suite = m.suite
                AND f.replicate = m.replicate AND f.status IS NOT NULL AND f.status <> 'ok')
    AND NOT EXISTS (SELECT 1 FROM launch_fact l WHERE l.run_id = $run_id AND l.suite = m.suite
                    AND l.replicate = m.replicate AND l.status IS NOT NULL AND l.status <> 'ok')"""

MEDIAN_SQL = """
SELECT suite, "case", metric, rank_id, unit, direction,
       median(value) AS median, count(DISTINCT replicate) AS replicates,
       any_value(workload_spec_digest) AS workload_spec_digest,
       any_value(artifact_manifest_digest) AS artifact_manifest_digest
FROM measurement_fact m
WHERE run_id = $run_id AND metric = $metric AND ($case IS NULL OR "case" = $case) AND""" + _NOT_OK + """
GROUP BY suite, "case", metric, rank_id, unit, direction
ORDER BY suite, "case", rank_id NULLS FIRST
"""

ROWS_SQL = """
SELECT suite, "case", replicate, rank_id, value, benchmark_case_id, raw_uri, raw_path, raw_sha256,
       artifact_manifest_digest, workload_spec_digest
FROM measurement_fact m
WHERE run_id = $run_id AND metric = $metric AND suite = $suite AND "case" = $case
  AND rank_id IS NOT DISTINCT FROM $rank_id AND""" + _NOT_OK + """
ORDER BY replicate
"""


@dataclasses.dataclass
class LineageStep:
    """One replicate's value and the stored object it came from, with the checks made."""

    replicate: int
    value: float
    benchmark_case_id: str | None
    raw_uri: str | None
    raw_path: str | None
    raw_sha256: str | None
    checks: list[str]


@dataclasses.dataclass
class LineageReport:
    """A published median and the verified chain behind it."""

    run_id: str
    metric: str
    suite: str
    case: str
    rank_id: int | None  # the rank of a per-rank metric, else None
    unit: str
    median: float
    replicates: int
    workload_spec_digest: str | None
    artifact_manifest_digest: str | None
    query_spec_digest: str
    store_uri: str | None
    steps: list[LineageStep]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _find_metric(doc: dict[str, Any], metric: str, case: str, value: float, rank_id: int | None = None) -> bool:
    for m in doc.get("metrics", []):
        if m.get("name") == metric and (m.get("case") or "") == case and m.get("rank_id") == rank_id:
            v = m.get("value")
            if isinstance(v, (int, float)) and math.isclose(float(v), value, rel_tol=1e-12, abs_tol=0.0):
                return True
    return False


def trace(home: Path, run_id: str, metric: str, case: str | None = None) -> list[LineageReport]:
    """Every (suite, case) median of ``metric`` in ``run_id``, walked back to verified raw bytes.

    For each replicate: the stored object manifest (loaded by the row's
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
                                          "rank_id": m["rank_id"]}).fetchall()
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
            if not _find_metric(doc, m["metric"], m["case"], float(row["value"]), row["rank_id"]):
                raise BenchrunError(
                    f"lineage: {store.key_uri(entry.key)} ({entry.path}) does not hold {m['metric']}={row['value']} for case {m['case']!r}"
                )
            checks.append(f"raw document holds {m['metric']}={row['value']}")
        steps.append(LineageStep(
            replicate=int(row["replicate"]), value=float(row["value"]), benchmark_case_id=row["benchmark_case_id"],
            raw_uri=row["raw_uri"], raw_path=row["raw_path"], raw_sha256=row["raw_sha256"], checks=checks,
        ))
    return LineageReport(
        run_id=run_id, metric=m["metric"], suite=m["suite"], case=m["case"],
        rank_id=None if m["rank_id"] is None else int(m["rank_id"]), unit=m["unit"],
        median=float(m["median"]), replicates=int(m["replicates"]),
        workload_spec_digest=m["workload_spec_digest"], artifact_manifest_digest=m["artifact_manifest_digest"],
        query_spec_digest=query_spec_digest(MEDIAN_SQL), store_uri=store.uri, steps=steps,
    )
