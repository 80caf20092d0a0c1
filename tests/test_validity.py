"""benchrun.stats.validity on serving suites: a load point judged invalid beyond its own request count.

A serving suite writes its verdicts per load point (``context.verdicts``) and its replicate stays ok;
before, :func:`judged_invalid` read only ``context.verdict``, so the readers that promise to leave
invalid figures out (hot metrics, the change-point history) took a point with 31 % errors as good.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from benchrun.loadgen.metrics import LEGACY_COUNT_REASON_TAILS, VerdictPolicy, verdict
from benchrun.stats.validity import drop_invalid, invalid_point_rows, invalid_points, judged_invalid


def point_verdict(n: int, errors: int = 0, cpu: float | None = None) -> dict[str, Any]:
    """A closed-loop c=4 point's verdict as the load generator writes it (its own words)."""
    v, reasons = verdict(load_model="closed_loop", offered_load=4, n_completed=n, n_errors=errors,
                         error_kinds={"http_500": errors} if errors else {}, stats={"achieved_concurrency": 4.0},
                         client={} if cpu is None else {"client_cpu_max": cpu}, policy=VerdictPolicy())
    return {"verdict": v, "reasons": reasons}


def serving_doc(rep: int, verdicts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rows = [{"name": name, "value": 1.0, "unit": "ms", "direction": "lower", "case": case}
            for case in ("c=1", "c=4") for name in ("ttft_ms", "p99_latency_ms")]
    return {"suite": "serving_workflow", "replicate": rep, "status": "ok", "context": {"verdicts": verdicts},
            "metrics": [*rows, {"name": "capacity_at_slo", "value": 4.0, "unit": "concurrency",
                                "direction": "higher", "case": "sweep"}]}


def test_a_point_invalid_beyond_its_request_count_is_judged_invalid() -> None:
    # the review's check: judged_invalid (context.verdict) stays a whole replicate's; the point is read here
    doc = {"status": "ok", "context": {"verdicts": {"c=4": {"verdict": "invalid",
                                                            "reasons": ["error rate 10/32 = 31.2% > 1.0% ..."]}}}}
    assert not judged_invalid(doc)
    assert invalid_points(doc) == {"c=4": ["error rate 10/32 = 31.2% > 1.0% ..."]}
    errors, saturated = point_verdict(22, errors=10), point_verdict(96, cpu=0.97)
    found = invalid_points({"status": "ok", "context": {"verdicts": {"c=4": errors, "c=8": saturated}}})
    assert sorted(found) == ["c=4", "c=8"]
    assert all("needed for a bounded" not in r for rs in found.values() for r in rs)  # the count reason is not one
    assert found["c=8"] == ["client saturated: a worker used 97% of a core (> 90%); add --workers"]
    # invalid with no reason listed: invalid
    assert invalid_points({"context": {"verdicts": {"c=2": {"verdict": "invalid", "reasons": []}}}}) == {"c=2": ["invalid"]}


def test_the_canary_points_few_requests_alone_are_not_invalid() -> None:
    # make run's canary: 24 (sweep) and 96 (workflow) requests a point, invalid for its own p99 only;
    # the pooled requests support it (the comparison's rule, pooled_reasons), so its figures stay
    canary = {"c=1": point_verdict(24), "c=4": point_verdict(96)}
    assert all(v["verdict"] == "invalid" for v in canary.values())
    assert invalid_points({"status": "ok", "context": {"verdicts": canary}}) == {}
    legacy = {"verdict": "invalid", "reasons": [f"24 completed requests < 459 needed for a p99 at 95%{LEGACY_COUNT_REASON_TAILS[0]}"]}
    assert invalid_points({"context": {"verdicts": {"c=1": legacy, "c=4": {"verdict": "valid", "reasons": []}}}}) == {}
    # other suites (no verdicts) and an ingested vLLM point (not judged, no context.verdicts): nothing
    assert invalid_points({"status": "ok", "context": {"verdict": "invalid"}}) == {}
    assert invalid_points({"status": "ok"}) == {} and invalid_points(None) == {}


def test_drop_invalid_leaves_out_only_the_invalid_points_rows() -> None:
    docs = [serving_doc(1, {"c=1": point_verdict(24), "c=4": point_verdict(22, errors=10)}),
            serving_doc(2, {"c=1": point_verdict(24), "c=4": point_verdict(24)})]
    points = invalid_point_rows(docs)
    assert list(points) == [("serving_workflow", 1, "c=4")]
    table = pd.DataFrame([{"suite": d["suite"], "replicate": d["replicate"], "case": m["case"], "metric": m["name"],
                           "value": m["value"]} for d in docs for m in d["metrics"]])
    kept = drop_invalid(table, {}, points)
    gone = table.drop(kept.index)
    assert sorted(zip(gone["replicate"], gone["case"], gone["metric"])) == [
        (1, "c=4", "p99_latency_ms"), (1, "c=4", "ttft_ms")]
    assert len(drop_invalid(table, {}, {})) == len(table)  # and nothing when no point is invalid
    # a failed replicate's verdicts are not read (it has no figures)
    assert invalid_point_rows([{**docs[0], "status": "failed"}]) == {}
