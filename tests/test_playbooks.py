"""The four scenario playbooks on constructed warehouse partitions: flagged, clear and unavailable."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from benchrun.errors import BenchrunError
from benchrun.playbooks import (
    PLAYBOOKS,
    distributed_straggler,
    low_gpu_utilization,
    run_playbooks,
    scheduler_backpressure,
    tail_latency_regression,
    write_playbooks_report,
)
from benchrun.playbooks import backpressure, gpu_utilization, straggler, tail_latency
from benchrun.warehouse import query_spec_digest
from benchrun.warehouse.curate import store_rows
from benchrun.warehouse.writer import rows_to_table

T0 = dt.datetime(2026, 11, 30, 9, 0, tzinfo=dt.timezone.utc)


def put(home: Path, table: str, run_id: str, rows: list[dict[str, Any]]) -> None:
    """Replace the run's rows of ``table`` through the warehouse's own writer (Iceberg, the default)."""
    store_rows(home, table, run_id, [rows_to_table(table, [{"run_id": run_id, **r} for r in rows])], T0)


def add_run(home: Path, run_id: str, pending_s: float | None = 2.0) -> None:
    started = T0 + dt.timedelta(seconds=pending_s) if pending_s is not None else None
    put(home, "benchmark_run_fact", run_id, [{"name": run_id, "phase": "Succeeded", "created_utc": T0,
                                               "started_utc": started, "selected_scheduler_path": "local"}])


def measurements(rows: list[tuple], suite: str, **extra: Any) -> list[dict[str, Any]]:
    """(replicate, case, metric, value[, rank_id]) tuples as measurement_fact rows of ``suite``."""
    out = []
    for rep, case, metric, value, *rank in rows:
        out.append({"suite": suite, "replicate": rep, "case": case, "metric": metric, "value": value,
                    "rank_id": rank[0] if rank else None, "status": "ok", **extra})
    return out


# -- tail_latency_regression ---------------------------------------------------------


def serving(point_rows: list[tuple], n_requests: int = 400) -> list[dict[str, Any]]:
    """(replicate, bucket, e2e mean, p50, p99, ttft mean, p50, p99) as serving_outcome_fact rows."""
    return [{"suite": "serving_sweep", "point": "c=4", "bucket": b, "replicate": rep, "n_requests": n_requests,
             "e2e_ms_mean": em, "e2e_ms_p50": e50, "e2e_ms_p99": e99,
             "ttft_ms_mean": tm, "ttft_ms_p50": t50, "ttft_ms_p99": t99}
            for rep, b, em, e50, e99, tm, t50, t99 in point_rows]


def put_serving(home: Path, run_id: str, rows: list[dict[str, Any]], failed: tuple[int, ...] = ()) -> None:
    """The run's serving rows and, as a serving suite writes them, a headline metric per replicate in
    measurement_fact carrying the result's status (``failed`` names the replicates that failed)."""
    put(home, "serving_outcome_fact", run_id, rows)
    reps = sorted({(r["suite"], r["replicate"]) for r in rows})
    put(home, "measurement_fact", run_id, [
        {"suite": suite, "replicate": rep, "case": "c=4", "metric": "output_tokens_per_s", "value": 100.0,
         "status": "failed" if rep in failed else "ok"} for suite, rep in reps])


BASE_SERVING = serving([(1, "all", 100.0, 90.0, 140.0, 10.0, 9.0, 20.0),
                        (2, "all", 101.0, 91.0, 150.0, 10.0, 9.0, 20.0),
                        (3, "all", 99.0, 89.0, 400.0, 10.0, 9.0, 20.0)])  # one wild p99: the median ignores it


@pytest.fixture
def serving_home(tmp_path: Path) -> Path:
    home = tmp_path
    add_run(home, "base")
    put_serving(home, "base", BASE_SERVING)
    return home


def test_tail_latency_flagged_when_p99_doubles_with_a_steady_mean(serving_home: Path) -> None:
    add_run(serving_home, "cand")
    put_serving(serving_home, "cand", serving([
        (1, "all", 104.0, 92.0, 330.0, 10.0, 9.0, 21.0),
        (2, "all", 105.0, 93.0, 320.0, 10.0, 9.0, 20.0),
        (3, "all", 103.0, 91.0, 340.0, 10.0, 9.0, 22.0)]))
    res = tail_latency_regression(serving_home, "cand", "base")
    assert res.verdict == "flagged"
    by_q = {r["quantity"]: r for r in res.rows}
    e2e = by_q["e2e_ms"]
    assert (e2e["n_replicates"], e2e["n_requests"], e2e["n_requests_per_replicate"]) == (3, 1200, 400)
    assert e2e["p99_backed"] is True
    assert e2e["p99_ms"] == 330.0 and e2e["base_p99_ms"] == 150.0  # medians over replicates
    assert e2e["p99_change"] == pytest.approx(2.2)
    assert e2e["mean_change"] == pytest.approx(104.0 / 100.0)
    assert e2e["tail_ratio"] == pytest.approx(330.0 / 92.0) and e2e["base_tail_ratio"] == pytest.approx(150.0 / 90.0)
    assert e2e["flagged"] is True
    assert by_q["ttft_ms"]["flagged"] is False and by_q["ttft_ms"]["p99_change"] == pytest.approx(21.0 / 20.0)
    assert "c=4" in res.reason and "e2e_ms" in res.reason
    assert res.query_spec_digest == query_spec_digest(tail_latency.SQL)


def test_tail_latency_clear_when_the_mean_moved_too(serving_home: Path) -> None:
    add_run(serving_home, "slow")
    put_serving(serving_home, "slow", serving([
        (1, "all", 150.0, 140.0, 330.0, 10.0, 9.0, 20.0),
        (2, "all", 150.0, 140.0, 330.0, 10.0, 9.0, 20.0)]))
    res = tail_latency_regression(serving_home, "slow", "base")
    assert res.verdict == "clear"
    e2e = next(r for r in res.rows if r["quantity"] == "e2e_ms")
    assert e2e["p99_change"] == pytest.approx(2.2) and e2e["mean_change"] == pytest.approx(1.5)
    assert e2e["flagged"] is False and "general slowdown" in e2e["why"]


def test_tail_latency_too_few_requests_is_not_flagged(serving_home: Path) -> None:
    add_run(serving_home, "thin")
    put_serving(serving_home, "thin", serving([
        (1, "all", 104.0, 92.0, 330.0, 10.0, 9.0, 20.0), (2, "all", 104.0, 92.0, 330.0, 10.0, 9.0, 20.0)],
        n_requests=24))
    res = tail_latency_regression(serving_home, "thin", "base")
    assert res.verdict == "unavailable" and "too few requests" in res.reason
    e2e = next(r for r in res.rows if r["quantity"] == "e2e_ms")
    assert e2e["p99_change"] == pytest.approx(2.2) and e2e["n_requests_per_replicate"] == 24
    assert e2e["p99_backed"] is False and e2e["flagged"] is False and "24 requests per replicate (< 368)" in e2e["why"]


def test_tail_latency_thin_p99s_are_not_called_clear_either(serving_home: Path) -> None:
    """A p99 from too few requests was refused for flagged but used for clear: 24 requests per
    replicate and an unchanged p99 read 'clear'. Thin rows are not judged either way."""
    add_run(serving_home, "thin")
    put_serving(serving_home, "thin", serving([
        (1, "all", 100.0, 90.0, 150.0, 10.0, 9.0, 20.0), (2, "all", 100.0, 90.0, 150.0, 10.0, 9.0, 20.0)],
        n_requests=24))
    res = tail_latency_regression(serving_home, "thin", "base")
    assert res.verdict == "unavailable"
    assert "at most 24 requests per replicate" in res.reason and "368 needed" in res.reason
    assert all(r["p99_backed"] is False and "not judged" in r["why"] for r in res.rows)


def test_tail_latency_without_request_counts_is_unavailable_not_a_crash(tmp_path: Path) -> None:
    """Review 2026-12-07: serving rows without n_requests and a p99 ×2.28 with a steady mean ended in
    `TypeError: unsupported format string passed to NoneType.__format__`, no verdict."""
    for run, p99s in (("base", (140.0, 150.0, 145.0)), ("cand", (330.0, 320.0, 340.0))):
        add_run(tmp_path, run)
        put_serving(tmp_path, run, serving([(k + 1, "all", 100.0, 90.0, p, 10.0, 9.0, 20.0) for k, p in enumerate(p99s)],
                                           n_requests=None))
    res = tail_latency_regression(tmp_path, "cand", "base")
    assert res.verdict == "unavailable", res.reason
    e2e = next(r for r in res.rows if r["quantity"] == "e2e_ms")
    assert e2e["flagged"] is False and "are not recorded" in e2e["why"]


def test_tail_latency_clear_names_the_largest_change_among_backed_rows_only(serving_home: Path) -> None:
    base = serving([(1, "short", 100.0, 90.0, 150.0, 10.0, 9.0, 20.0)], n_requests=400)
    base += serving([(1, "long", 100.0, 90.0, 150.0, 10.0, 9.0, 20.0)], n_requests=30)
    add_run(serving_home, "b2")
    put_serving(serving_home, "b2", base)
    cand = serving([(1, "short", 100.0, 90.0, 160.0, 10.0, 9.0, 21.0)], n_requests=400)
    cand += serving([(1, "long", 150.0, 90.0, 900.0, 10.0, 9.0, 20.0)], n_requests=30)  # thin, ×6 (mean moved)
    add_run(serving_home, "c2")
    put_serving(serving_home, "c2", cand)
    res = tail_latency_regression(serving_home, "c2", "b2")
    assert res.verdict == "clear"
    assert "largest p99 change ×1.07 at serving_sweep c=4 bucket short e2e_ms" in res.reason
    assert "2 row(s) with fewer than 368 requests not judged" in res.reason


def test_tail_latency_unavailable_without_baseline_or_serving_rows(serving_home: Path) -> None:
    res = tail_latency_regression(serving_home, "base", None)
    assert res.verdict == "unavailable" and "no baseline" in res.reason
    assert [r["p99_ms"] for r in res.rows if r["quantity"] == "e2e_ms"] == [150.0]  # the run's own numbers
    add_run(serving_home, "noserve")
    res = tail_latency_regression(serving_home, "noserve", "base")
    assert res.verdict == "unavailable" and res.rows == [] and "no serving_outcome_fact rows" in res.reason


def test_tail_latency_judges_only_ok_replicates_and_says_what_it_left_out(serving_home: Path) -> None:
    """Serving rows are curated from failed replicates too: three failed replicates with p99 ×2.2 and
    two ok ones with the baseline's p99 read "p99 ×2.20, flagged" while the comparison refused the pair."""
    add_run(serving_home, "cand")
    put_serving(serving_home, "cand", serving([
        (1, "all", 100.0, 90.0, 150.0, 10.0, 9.0, 20.0), (2, "all", 101.0, 91.0, 152.0, 10.0, 9.0, 20.0),
        (3, "all", 104.0, 92.0, 330.0, 10.0, 9.0, 20.0), (4, "all", 104.0, 92.0, 330.0, 10.0, 9.0, 20.0),
        (5, "all", 104.0, 92.0, 330.0, 10.0, 9.0, 20.0)]), failed=(3, 4, 5))
    res = tail_latency_regression(serving_home, "cand", "base")
    assert res.verdict == "clear", res.reason
    e2e = next(r for r in res.rows if r["quantity"] == "e2e_ms")
    assert e2e["n_replicates"] == 2 and e2e["p99_ms"] == pytest.approx(151.0) and e2e["flagged"] is False
    assert ("left out, not judged: run cand: 3 replicate(s) whose result is not ok "
            "(serving_sweep r3, r4, r5 (failed))") in res.reason
    # every replicate failed: nothing is judged, and the answer says why
    add_run(serving_home, "allfail")
    put_serving(serving_home, "allfail", serving([(1, "all", 104.0, 92.0, 330.0, 10.0, 9.0, 20.0)]), failed=(1,))
    res = tail_latency_regression(serving_home, "allfail", "base")
    assert res.verdict == "unavailable" and res.rows == []
    assert "none of run allfail's serving rows" in res.reason and "serving_sweep r1 (failed)" in res.reason
    # a replicate without a recorded status is not taken for ok either
    add_run(serving_home, "nostatus")
    put(serving_home, "serving_outcome_fact", "nostatus", serving([(1, "all", 104.0, 92.0, 330.0, 10.0, 9.0, 20.0)]))
    res = tail_latency_regression(serving_home, "nostatus", "base")
    assert res.verdict == "unavailable" and "serving_sweep r1 (status not recorded)" in res.reason


def test_tail_latency_leaves_out_points_the_load_generator_judged_invalid(serving_home: Path) -> None:
    """A point whose load-generator verdict is invalid (client saturated) is no evidence of a tail
    regression; invalid only for its own request count it stays in (the thin-p99 rule covers that)."""
    from benchrun.loadgen.metrics import COUNT_REASON_TAIL

    rows = serving([(k, b, 104.0, 92.0, 330.0, 10.0, 9.0, 20.0) for k in (1, 2, 3) for b in ("all", "short")])
    for r in rows:
        r.update(verdict="invalid", verdict_reasons=["client saturated: schedule lag p99 250 ms"])
    add_run(serving_home, "sat")
    put_serving(serving_home, "sat", rows)
    res = tail_latency_regression(serving_home, "sat", "base")
    assert res.verdict == "unavailable" and res.rows == []
    assert "6 replicate×point(s) the load generator judged invalid" not in res.reason  # one per replicate and point
    assert "3 replicate×point(s) the load generator judged invalid (serving_sweep r1 c=4: client saturated" in res.reason
    # only the bucket-'all' row invalid: the point's other buckets go with it
    for r in rows:
        if r["bucket"] == "short":
            r.update(verdict="valid", verdict_reasons=[])
    put_serving(serving_home, "sat", rows)
    assert tail_latency_regression(serving_home, "sat", "base").rows == []
    # invalid only for too few requests to bound its own p99: judged (flagged here: 400 requests a replicate)
    for r in rows:
        r.update(verdict="invalid", verdict_reasons=[f"only 300 requests, 368 needed for p99{COUNT_REASON_TAIL}"])
    put_serving(serving_home, "sat", rows)
    res = tail_latency_regression(serving_home, "sat", "base")
    assert res.verdict == "flagged" and "left out" not in res.reason
    # one replicate's point invalid (client saturated), the others valid: compare calls the row not
    # gateable; the playbook judged the other two replicates (found in review) — now it does not either
    for r in rows:
        bad = r["replicate"] == 2
        r.update(verdict="invalid" if bad else "valid", verdict_reasons=["client saturated: lag"] if bad else [])
    put_serving(serving_home, "sat", rows)
    res = tail_latency_regression(serving_home, "sat", "base")
    assert res.verdict == "unavailable" and "r2 at this point were judged invalid" in res.reason, res.reason
    assert not any(r["flagged"] for r in res.rows)


def canary_requests(seed: int, tail_ms: float | None = None, replicates: int = 5,
                    n: int = 80) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The local canary's shape: ``replicates`` × ``n`` requests at one point, e2e lognormal around
    100 ms (``tail_ms``: each replicate's two slowest become that slow); (serving_outcome_fact rows
    summarising each replicate as the load generator does, serving_request_fact rows)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    outcome, requests = [], []
    for rep in range(1, replicates + 1):
        e2e = np.sort(rng.lognormal(np.log(100.0), 0.05, n))
        if tail_ms is not None:
            e2e[-2:] = tail_ms
        ttft = rng.lognormal(np.log(10.0), 0.05, n)
        q = {k: float(np.quantile(v, p)) for k, v in (("e", e2e), ("t", ttft)) for p in (0.5, 0.99)}
        outcome += serving([(rep, "all", float(e2e.mean()), float(np.quantile(e2e, 0.5)), float(np.quantile(e2e, 0.99)),
                             float(ttft.mean()), float(np.quantile(ttft, 0.5)), float(np.quantile(ttft, 0.99)))],
                           n_requests=n)
        requests += [{"suite": "serving_sweep", "replicate": rep, "point": "c=4", "bucket": None,
                      "e2e_ms": float(e), "ttft_ms": float(t), "error": None} for e, t in zip(e2e, ttft)]
    return outcome, requests


def test_tail_latency_judges_the_p99_of_the_pooled_requests_as_compare_does(tmp_path: Path) -> None:
    """The canary runs 5 replicates × 80 requests: `benchrun compare` gates its p99 on the 400 pooled
    requests (368 needed), but the playbook asked 368 of every replicate and always answered
    "unavailable … at most 80 requests per replicate, 368 needed". Now each arm's p99 is the pooled
    one (benchrun.stats.tails.pooled_quantile) and the count is the pooled one; an errored request is
    censored (+inf) and failed replicates stay out, as in the comparison."""
    import numpy as np

    from benchrun.stats.tails import pooled_quantile

    base_out, base_req = canary_requests(0)
    add_run(tmp_path, "base")
    put_serving(tmp_path, "base", base_out)
    put(tmp_path, "serving_request_fact", "base", base_req)
    cand_out, cand_req = canary_requests(1, tail_ms=300.0, replicates=6)
    cand_req.append({"suite": "serving_sweep", "replicate": 1, "point": "c=4", "bucket": None,
                     "e2e_ms": 9000.0, "ttft_ms": None, "error": "timeout"})  # censored: slower than any
    add_run(tmp_path, "cand")
    put_serving(tmp_path, "cand", cand_out, failed=(6,))  # replicate 6's 80 requests are left out
    put(tmp_path, "serving_request_fact", "cand", cand_req)
    res = tail_latency_regression(tmp_path, "cand", "base")
    assert res.verdict == "flagged", res.reason
    e2e = next(r for r in res.rows if r["quantity"] == "e2e_ms")
    assert e2e["p99_basis"] == tail_latency.POOLED and e2e["p99_backed"] is True
    assert (e2e["n_requests"], e2e["base_n_requests"], e2e["n_requests_per_replicate"]) == (401, 400, 80)

    def arm(rows: list[dict[str, Any]], column: str = "e2e_ms") -> list[np.ndarray]:
        return [np.array([r[column] if r["error"] is None else np.inf for r in rows if r["replicate"] == k])
                for k in range(1, 6)]

    assert e2e["p99_ms"] == pytest.approx(pooled_quantile(arm(cand_req), 0.99))
    assert e2e["base_p99_ms"] == pytest.approx(pooled_quantile(arm(base_req), 0.99))
    assert e2e["p99_change"] == pytest.approx(e2e["p99_ms"] / e2e["base_p99_ms"]) and e2e["p99_change"] > 2
    assert e2e["replicate_p99_ms"] is not None  # the replicates' own p99s stay as context
    ttft = next(r for r in res.rows if r["quantity"] == "ttft_ms")
    assert ttft["p99_backed"] is True and ttft["flagged"] is False and ttft["n_requests"] == 401
    assert "serving_sweep r6 (failed)" in res.reason
    # fewer pooled requests than the rule needs (4 × 80 = 320): too thin, by the pooled count
    thin_out, thin_req = canary_requests(2, tail_ms=300.0, replicates=4)
    add_run(tmp_path, "thin")
    put_serving(tmp_path, "thin", thin_out)
    put(tmp_path, "serving_request_fact", "thin", thin_req)
    res = tail_latency_regression(tmp_path, "thin", "base")
    assert res.verdict == "unavailable" and "p99 from 320 pooled requests (< 368)" in res.reason, res.reason
    # 2 % of the requests timed out (the load generator still calls ≤ 1 % per point valid, here per
    # replicate 1.25-2.5 %): the p99 falls among them, a value the requests cannot show — not "clear"
    out_t, req_t = canary_requests(3)
    for r in req_t:
        if r["replicate"] in (1, 2, 3, 4) and r["e2e_ms"] >= sorted(x["e2e_ms"] for x in req_t if x["replicate"] == r["replicate"])[-2]:
            r.update(error="timeout", ttft_ms=None)
    add_run(tmp_path, "timeouts")
    put_serving(tmp_path, "timeouts", out_t)
    put(tmp_path, "serving_request_fact", "timeouts", req_t)
    res = tail_latency_regression(tmp_path, "timeouts", "base")
    e2e = next(r for r in res.rows if r["quantity"] == "e2e_ms")
    assert pooled_quantile(arm(req_t), 0.99) == np.inf
    assert e2e["p99_backed"] is False and e2e["flagged"] is False and "errored or timed-out" in e2e["why"]
    # and the answer is not "clear" (found in review: the censored row fell out of the count, and the ttft
    # row alone, compared with enough requests, made the answer "clear")
    assert res.verdict == "unavailable" and "falls among its errored or timed-out requests" in res.reason, res.reason


# -- low_gpu_utilization -------------------------------------------------------------


def gpu_rows(util: list[float], tokens: list[float]) -> list[dict[str, Any]]:
    rows = [(i + 1, "", "gpu_utilization_pct", u) for i, u in enumerate(util)]
    rows += [(i + 1, "", "tokens_per_second", t) for i, t in enumerate(tokens)]
    out = measurements(rows, "train_step")
    for r in out:
        r.update(direction="higher" if r["metric"] == "tokens_per_second" else None,
                 unit="tokens/s" if r["metric"] == "tokens_per_second" else "%")
    return out


def test_low_gpu_utilization_flagged_and_clear(tmp_path: Path) -> None:
    for rid, util, tokens in (("base", [90, 92, 91], [1000, 1010, 990]),
                              ("starved", [30, 35, 40], [700, 690, 710]),
                              ("busy", [93, 95, 94], [700, 690, 710])):
        add_run(tmp_path, rid)
        put(tmp_path, "measurement_fact", rid, gpu_rows(util, tokens))
    res = low_gpu_utilization(tmp_path, "starved", "base")
    assert res.verdict == "flagged"
    [row] = res.rows
    assert (row["suite"], row["throughput_metric"], row["n_util_samples"]) == ("train_step", "tokens_per_second", 3)
    assert row["gpu_util_pct"] == 35.0 and row["base_gpu_util_pct"] == 91.0
    assert row["throughput"] == 700.0 and row["base_throughput"] == 1000.0
    assert row["throughput_change"] == pytest.approx(0.7) and row["flagged"] is True
    # The same throughput loss with a busy GPU is a different problem: not this playbook's.
    res = low_gpu_utilization(tmp_path, "busy", "base")
    assert res.verdict == "clear" and res.rows[0]["gpu_util_pct"] == 94.0 and res.rows[0]["flagged"] is False


def test_low_gpu_utilization_is_not_clear_when_the_starved_suites_throughput_was_never_compared(
        tmp_path: Path) -> None:
    """Review 2026-12-08: the starved suite's tokens/s had another case in the baseline, so its change was
    None; a busy suite beside it compared fine, and the answer was "clear" — a pass for lack of evidence."""
    def suite_rows(suite: str, util: list[float], tokens: list[float], case: str) -> list[dict[str, Any]]:
        out = gpu_rows(util, tokens)
        for r in out:
            r["suite"] = suite
            if r["metric"] == "tokens_per_second":
                r["case"] = case
        return out

    add_run(tmp_path, "base")
    put(tmp_path, "measurement_fact", "base", suite_rows("train_step", [90, 92, 91], [1000, 1010, 990], "seq=512")
        + suite_rows("gemm", [95, 95, 95], [100, 100, 100], ""))
    add_run(tmp_path, "cand")
    put(tmp_path, "measurement_fact", "cand", suite_rows("train_step", [30, 35, 40], [700, 690, 710], "seq=1024")
        + suite_rows("gemm", [95, 95, 95], [100, 101, 99], ""))
    res = low_gpu_utilization(tmp_path, "cand", "base")
    assert res.verdict == "unavailable", res.reason
    assert res.reason.startswith("GPU utilization below 50% in train_step, but no throughput metric of it is in "
                                 "both cand and baseline base"), res.reason
    # a suite with no throughput metric at all beside an idle GPU (job_startup on a GPU node) is no such case
    for rid in ("base2", "cand2"):
        add_run(tmp_path, rid)
        idle = [r for r in suite_rows("job_startup", [2, 2, 2], [1, 1, 1], "") if r["metric"] != "tokens_per_second"]
        put(tmp_path, "measurement_fact", rid, suite_rows("train_step", [93, 93, 93], [1000, 1001, 999], "seq=512")
            + idle)
    assert low_gpu_utilization(tmp_path, "cand2", "base2").verdict == "clear"


def test_low_gpu_utilization_counts_a_training_replicate_once(tmp_path: Path) -> None:
    """The training suite writes tokens_per_second to measurement_fact and training_outcome_fact: the
    union counted 10 replicates for 5, and n_util_samples came out a string (a HUGEINT sum)."""
    for rid, util, tokens in (("tbase", [80.0] * 5, [1000, 1010, 990, 1005, 995]),
                              ("tcand", [30.0] * 5, [700, 710, 690, 705, 695])):
        add_run(tmp_path, rid)
        rows = gpu_rows(util, tokens)
        for r in rows:
            r.update(suite="training", case="gpt-tiny")
        put(tmp_path, "measurement_fact", rid, rows)
        put(tmp_path, "training_outcome_fact", rid, [{"suite": "training", "replicate": k, "case": "gpt-tiny",
                                                      "tokens_per_second": float(t)} for k, t in enumerate(tokens, 1)])
    # a replicate only training_outcome_fact has (its metric row lost) still counts, once
    put(tmp_path, "training_outcome_fact", "tcand", [{"suite": "training", "replicate": k, "case": "gpt-tiny",
                                                      "tokens_per_second": t}
                                                     for k, t in enumerate([700.0, 710.0, 690.0, 705.0, 695.0, 702.0], 1)])
    res = low_gpu_utilization(tmp_path, "tcand", "tbase")
    [row] = res.rows
    assert res.verdict == "flagged"
    assert row["n_replicates"] == 6 and row["n_util_samples"] == 5 and isinstance(row["n_util_samples"], int)
    assert row["throughput"] == pytest.approx(701.0) and row["base_throughput"] == 1000.0


def test_low_gpu_utilization_from_telemetry_without_baseline(tmp_path: Path) -> None:
    add_run(tmp_path, "tele")
    put(tmp_path, "telemetry_slice_fact", "tele", [
        {"scope": "gpu", "source": "train_step", "metric": "gpu_utilization_pct", "value": v, "unit": "%",
         "gpu_uuid": f"GPU-{i}"} for i, v in enumerate([20.0, 24.0])])
    res = low_gpu_utilization(tmp_path, "tele", None)
    # "Throughput dropped" needs a baseline: low utilization alone is not this playbook's finding.
    assert res.verdict == "unavailable" and "no baseline" in res.reason and "below 50% in train_step" in res.reason
    [row] = res.rows
    # two GPUs (told apart by UUID): the busiest one judges the suite
    assert row["gpu_util_pct"] == 24.0 and row["n_gpus"] == 2 and row["judged_gpu"] == "GPU-1 (train_step)"
    assert row["gpu_util_low"] is True and row["flagged"] is None and row["throughput"] is None


def eight_gpu_node(busy_gpu: int = 0, util: float = 97.0) -> list[dict[str, Any]]:
    """NVML samples of every GPU of an 8-GPU node: the suite keeps one busy, the other seven idle."""
    return [{"scope": "gpu", "source": "nvml", "suite": "training", "replicate": rep, "metric": "gpu_utilization_pct",
             "value": util if gpu == busy_gpu else 0.0, "unit": "%", "device_index": gpu, "node_name": "n0",
             "raw_path": f"raw/x_training_r{rep}_telemetry.parquet"}
            for rep in (1, 2, 3) for _ in range(10) for gpu in range(8)]


def test_low_gpu_utilization_judges_the_suites_gpu_not_the_idle_ones_beside_it(tmp_path: Path) -> None:
    """A one-GPU suite at 97 % on an 8-GPU node whose other GPUs idle: the median over every sample
    read 0 % and a slower run was flagged as starved. Per GPU, the busiest judges: clear."""
    for rid, tokens in (("base", [1000.0, 1010.0, 990.0]), ("cand", [880.0, 870.0, 890.0])):
        add_run(tmp_path, rid)
        put(tmp_path, "telemetry_slice_fact", rid, eight_gpu_node())
        put(tmp_path, "training_outcome_fact", rid, [{"suite": "training", "case": "tiny", "replicate": i + 1,
                                                      "tokens_per_second": t} for i, t in enumerate(tokens)])
    res = low_gpu_utilization(tmp_path, "cand", "base")
    [row] = res.rows
    assert row["throughput_change"] == pytest.approx(0.88)
    assert (row["gpu_util_pct"], row["n_gpus"], row["judged_gpu"]) == (97.0, 8, "n0/0 (nvml)")
    assert row["base_gpu_util_pct"] == 97.0 and row["n_util_samples"] == 240
    assert row["flagged"] is False and res.verdict == "clear" and "busiest GPU" in res.reason
    assert row["gpu_medians"].startswith("n0/0 (nvml) 97.0%, n0/1 (nvml) 0.0%")


def test_low_gpu_utilization_prefers_dcgm_series_attributed_to_the_pod(tmp_path: Path) -> None:
    """DCGM by node covers every GPU of the node (another pod's busy GPU among them); the series
    attributed to the suite's pod, where queried, are the suite's own."""
    for rid, pod_util, tokens in (("base", 95.0, [1000.0, 1010.0]), ("cand", 20.0, [700.0, 705.0])):
        add_run(tmp_path, rid)
        rows = [{"scope": "gpu", "source": "prometheus:dcgm", "suite": "training", "replicate": 1,
                 "metric": "dcgm_gpu_utilization_pct", "value": v, "unit": "%", "device_index": gpu,
                 "node_name": "n0"} for gpu, v in ((0, pod_util), (1, 99.0))]  # GPU 1: another job's
        rows.append({"scope": "gpu", "source": "prometheus:dcgm", "suite": "training", "replicate": 1,
                     "metric": "dcgm_gpu_utilization_pct_pod", "value": pod_util, "unit": "%", "device_index": 0,
                     "node_name": "n0"})
        put(tmp_path, "telemetry_slice_fact", rid, rows)
        # two replicates each: a throughput drop is judged only with at least two a run (review fix)
        put(tmp_path, "training_outcome_fact", rid, [{"suite": "training", "case": "tiny", "replicate": k,
                                                      "tokens_per_second": t} for k, t in enumerate(tokens, 1)])
    res = low_gpu_utilization(tmp_path, "cand", "base")
    [row] = res.rows
    assert (row["gpu_util_pct"], row["n_gpus"], row["judged_gpu"]) == (20.0, 1, "n0/0 (prometheus:dcgm (pod))")
    assert res.verdict == "flagged" and row["flagged"] is True


def one_gpu_rows(run_id: str, busy: float, tokens: float | None, rep: int = 1, window: bool = True,
                 summaries: bool = True) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(telemetry_slice_fact rows, measurement_fact rows) of one replicate on one GPU, sampled at 1 Hz
    for 20 s: 12 s of imports and CUDA start-up at 0 % GPU with a busy host (80 % background), then the
    timed work (12 s to 19.5 s) at ``busy`` % on a quiet one. ``window``: the suite recorded that as its
    measured window (ctx.measuring()), else none. The summaries and the samples are the sampler's own
    (benchrun.telemetry.hook.measured_samples, summarise; mark_window's slice where the summaries are
    of the window), as the replicate's files carry them into the warehouse; ``summaries``: false, a
    replicate whose result has none."""
    from benchrun.telemetry.hook import WINDOW_METRIC, measured_samples
    from benchrun.telemetry.samples import Sample, samples_table
    from benchrun.telemetry.summary import summarise

    t0 = T0.timestamp() + 100 * rep
    samples = []
    for k in range(20):
        starting = k < 12
        samples.append(Sample(t0 + k, "nvml", "gpu", "gpu_utilization_pct", 0.0 if starting else busy, "%", device_index=0,
                              node_name="n0"))
        for metric, value in (("cpu_utilization_pct", 90.0 if starting else 30.0),
                              ("background_cpu_pct", 80.0 if starting else 2.0)):
            samples.append(Sample(t0 + k, "psutil", "node", metric, value, "%", interval_s=1.0 if k else None,
                                  node_name="n0"))
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        result.write_text(json.dumps({"measured_window": {"start_unix": t0 + 12, "end_unix": t0 + 19.5}} if window else {}))
        inside, used = measured_samples(samples_table(samples), result)
    assert used["from"] == ("the suite's measured window" if window else
                            "the whole process (the suite recorded no measured window)")
    summary = summarise(inside) if summaries else []
    if window and summary:  # the window itself, as the sampler's file records it beside windowed summaries
        samples.append(Sample(t0 + 19.5, "suite", "process", WINDOW_METRIC, 7.5, "s", interval_s=7.5, node_name="n0"))
    raw = f"raw/{run_id}_train_step_r{rep}_telemetry.parquet"
    slices = [{"scope": s.scope, "source": s.source, "suite": "train_step", "replicate": rep, "metric": s.metric,
               "value": s.value, "unit": s.unit, "device_index": s.device_index, "node_name": "n0", "raw_path": raw,
               "window_start_utc": dt.datetime.fromtimestamp(s.ts - (s.interval_s or 0.0), dt.timezone.utc),
               "window_end_utc": dt.datetime.fromtimestamp(s.ts, dt.timezone.utc)} for s in samples]
    rows = [{"suite": "train_step", "replicate": rep, "case": "telemetry", "metric": m["name"], "value": m["value"],
             "unit": m["unit"], "direction": m["direction"], "status": "ok", "node_name": "n0"} for m in summary]
    if tokens is not None:
        rows.append({"suite": "train_step", "replicate": rep, "case": "", "metric": "tokens_per_second", "value": tokens,
                     "unit": "tokens/s", "direction": "higher", "status": "ok"})
    return slices, rows


def one_gpu_replicate(tmp_path: Path, run_id: str, busy: float, tokens: float, window: bool = True) -> None:
    """The run's one replicate of :func:`one_gpu_rows`, in the warehouse."""
    slices, rows = one_gpu_rows(run_id, busy, tokens, window=window)
    put(tmp_path, "telemetry_slice_fact", run_id, slices)
    put(tmp_path, "measurement_fact", run_id, rows)


def test_low_gpu_utilization_reads_the_measured_window_not_the_start_up_before_it(tmp_path: Path) -> None:
    """The playbook took the median of every sample of the process: 12 s of start-up at 0 % beside 8 s
    of timed work at 95 % read 0 %, a starved GPU, and a slower run was flagged for it. Its
    measurement_fact branch asked for gpu_utilization_pct, where the windowed summary is
    gpu_utilization_pct_mean, so it never matched. Now the windowed summary is read, and said so."""
    for rid, tokens in (("base", 1000.0), ("cand", 700.0)):
        add_run(tmp_path, rid)
        one_gpu_replicate(tmp_path, rid, 95.0, tokens)
    res = low_gpu_utilization(tmp_path, "cand", "base")
    [row] = res.rows
    assert row["throughput_change"] == pytest.approx(0.7)
    assert row["gpu_util_pct"] == pytest.approx(95.0) and row["base_gpu_util_pct"] == pytest.approx(95.0)
    assert row["judged_gpu"] == "n0/0 (nvml, measured window)" and row["n_util_samples"] == 1
    assert row["flagged"] is False and res.verdict == "clear"
    assert row["util_source"].startswith("the suite's measured window for 1 replicate(s)")
    assert "gpu_utilization_pct_mean" in row["why"] and "measured window's summaries for 1 replicate(s)" in res.reason
    # the host beside it over the same window: the quiet timed part, not the busy start-up
    assert row["background_cpu_pct"] == pytest.approx(2.0) and row["host_cpu_util_pct"] == pytest.approx(30.0)


def test_low_gpu_utilization_falls_back_to_the_samples_where_a_summary_is_no_one_gpus(tmp_path: Path) -> None:
    """A replicate without a windowed summary (a pod's DCGM series, an older run) is judged from its
    samples, and so is one whose sampler saw every GPU of the node: its summary averages the busy GPU
    with seven idle ones (12 %), so the busiest GPU's samples judge it, and the answer says both."""
    for rid, tokens in (("base", [1000.0, 1010.0, 990.0]), ("cand", [880.0, 870.0, 890.0])):
        add_run(tmp_path, rid)
        marks = [{"scope": "process", "source": "suite", "suite": "training", "replicate": rep,
                  "metric": "measured_window_s", "value": 8.0, "unit": "s", "node_name": "n0"} for rep in (1, 2)]
        put(tmp_path, "telemetry_slice_fact", rid, eight_gpu_node() + marks)
        put(tmp_path, "measurement_fact", rid, [
            {"suite": "training", "replicate": rep, "case": "telemetry", "metric": "gpu_utilization_pct_mean",
             "value": 97.0 / 8, "unit": "%", "direction": "higher", "status": "ok"} for rep in (1, 2)])
        put(tmp_path, "training_outcome_fact", rid, [{"suite": "training", "case": "tiny", "replicate": i + 1,
                                                      "tokens_per_second": t} for i, t in enumerate(tokens)])
    res = low_gpu_utilization(tmp_path, "cand", "base")
    [row] = res.rows
    assert (row["gpu_util_pct"], row["judged_gpu"], row["flagged"]) == (97.0, "n0/0 (nvml)", False)
    assert (row["n_replicates_windowed"], row["n_replicates_from_slices"], row["n_replicates_several_gpus"]) == (0, 3, 2)
    assert "whole process" in row["util_source"] and "2 replicate(s) whose sampler saw several GPUs" in row["util_source"]


def test_a_whole_process_summary_is_not_read_as_the_measured_window(tmp_path: Path) -> None:
    """Found in review (2026-12-07): every gpu_utilization_pct_mean counted as a measured-window summary,
    but a suite that records no window (training did not) has its whole process summarised under that
    name: 12 s of start-up at 0 % then 8 s at 95 % read 40 %, labelled "measured window", the false
    "low utilization" the window was meant to end. Now only a replicate whose samples record its window
    is read from its summary; this one is read from its samples and said to be the whole process."""
    for rid, tokens in (("base", 1000.0), ("cand", 700.0)):
        add_run(tmp_path, rid)
        one_gpu_replicate(tmp_path, rid, 95.0, tokens, window=False)
    res = low_gpu_utilization(tmp_path, "cand", "base")
    [row] = res.rows
    assert row["judged_gpu"] == "n0/0 (nvml)" and row["n_util_samples"] == 20  # its samples, not the 40 % summary
    assert (row["n_replicates_windowed"], row["n_replicates_from_slices"], row["n_replicates_process_summary"]) == (0, 1, 1)
    assert "measured window for" not in row["util_source"] and "covers the whole process" in row["util_source"]
    assert "whole-process samples for 1" in res.reason
    # and the host beside it: the whole process's samples too, not the summary that claims nothing
    assert row["background_cpu_pct"] == pytest.approx((80.0 * 11 + 2.0 * 8) / 19)


def test_one_gpu_read_on_two_bases_is_one_gpu(tmp_path: Path) -> None:
    """Found in review (2026-12-07): the GPUs were grouped by source too, so one GPU read from one
    replicate's windowed summary ('nvml, measured window') and another's samples ('nvml') was two GPUs,
    n_gpus doubled and the busiest the higher of two medians on different bases. Now one GPU is its node
    and device, the bases counted beside it."""
    for rid, tokens in (("base", 1000.0), ("cand", 700.0)):
        add_run(tmp_path, rid)
        slices, rows = one_gpu_rows(rid, 95.0, tokens, rep=1)
        more_slices, more_rows = one_gpu_rows(rid, 95.0, tokens, rep=2, summaries=False)  # no summary of its own
        put(tmp_path, "telemetry_slice_fact", rid, slices + more_slices)
        put(tmp_path, "measurement_fact", rid, rows + more_rows)
    res = low_gpu_utilization(tmp_path, "cand", "base")
    [row] = res.rows
    assert row["n_gpus"] == 1 and row["judged_gpu"] == "n0/0 (nvml + nvml, measured window)"
    assert row["judged_gpu_bases"] == ("1 replicate(s) from the measured window, "
                                       "20 whole-process sample(s) of 1 replicate(s)")
    assert (row["n_replicates_windowed"], row["n_replicates_from_slices"], row["n_util_samples"]) == (1, 1, 21)
    assert row["gpu_medians"].count("n0/0") == 1 and row["base_gpu_util_pct"] == row["gpu_util_pct"]


def test_low_gpu_utilization_unavailable_on_a_cpu_only_run(tmp_path: Path) -> None:
    add_run(tmp_path, "cpu")
    put(tmp_path, "measurement_fact", "cpu", measurements([(1, "", "samples_per_s", 5000.0)], "dataloader"))
    res = low_gpu_utilization(tmp_path, "cpu", None)
    assert res.verdict == "unavailable" and res.rows == []
    assert "gpu_utilization_pct" in res.reason and "not measured" in res.reason


# -- distributed_straggler -----------------------------------------------------------


def allreduce(times: dict[int, list[float]], last: list[tuple[int, float]], p50: float = 500.0) -> list[dict]:
    """Per replicate k: each rank's rank_p50_time_us times[rank][k], the last rank and its lag."""
    rows = []
    for k, (rank_last, lag) in enumerate(last):
        rep = k + 1
        rows += [(rep, "bytes=1024", "rank_p50_time_us", t[k], r) for r, t in times.items()]
        rows += [(rep, "bytes=1024", "slowest_rank_arrival_lag_us", lag, rank_last),
                 (rep, "bytes=1024", "p50_latency_us", p50), (rep, "bytes=1024", "p99_latency_us", 4 * p50)]
    return measurements(rows, "allreduce")


def test_straggler_flagged_by_robust_z_across_replicates(tmp_path: Path) -> None:
    add_run(tmp_path, "ar")
    times = {0: [1000.0, 1001.0, 999.0], 1: [1010.0, 1011.0, 1009.0], 2: [400.0, 410.0, 390.0],
             3: [990.0, 991.0, 989.0]}
    put(tmp_path, "measurement_fact", "ar", allreduce(times, [(2, 600.0)] * 3))
    res = distributed_straggler(tmp_path, "ar", None)
    assert res.verdict == "flagged" and res.reason.startswith("rank 2 stands out in 1 message size")
    by_rank = {r["rank_id"]: r for r in res.rows}
    slow = by_rank[2]
    assert (slow["n_ranks"], slow["n_replicates"], slow["n_stood_out"], slow["n_arrived_last"]) == (4, 3, 3, 3)
    # replicate 1: median 995, |deviations| 5, 15, 595, 5 → MAD 10 → z = (400 − 995) / 14.826
    z1 = (400.0 - 995.0) / 14.826
    assert slow["median_robust_z"] == pytest.approx(z1, rel=0.05)
    assert slow["median_lag_share"] == pytest.approx(600.0 / 500.0)
    assert slow["collective_p99_over_p50"] == pytest.approx(4.0)
    assert slow["flagged"] is True
    assert [by_rank[r]["flagged"] for r in (0, 1, 3)] == [False, False, False]
    assert by_rank[0]["n_stood_out"] == 0 and abs(by_rank[1]["median_robust_z"]) < straggler.Z_MIN


def test_straggler_clear_when_nobody_stands_out_twice(tmp_path: Path) -> None:
    add_run(tmp_path, "ok")
    times = {0: [1000.0, 1002.0, 998.0], 1: [1010.0, 1004.0, 1001.0], 2: [990.0, 996.0, 1003.0],
             3: [1005.0, 999.0, 994.0]}
    # rank 1 is very late once (one bad replicate is noise), otherwise the last rank changes and lags little
    put(tmp_path, "measurement_fact", "ok", allreduce(times, [(1, 900.0), (3, 40.0), (0, 35.0)]))
    res = distributed_straggler(tmp_path, "ok", None)
    assert res.verdict == "clear"
    by_rank = {r["rank_id"]: r for r in res.rows}
    assert by_rank[1]["n_stood_out"] == 1 and by_rank[1]["flagged"] is False
    assert sum(r["n_arrived_last"] for r in res.rows) == 3


def test_straggler_two_ranks_flagged_by_repeated_late_arrival(tmp_path: Path) -> None:
    add_run(tmp_path, "two")
    times = {0: [900.0, 950.0, 920.0], 1: [300.0, 320.0, 310.0]}
    put(tmp_path, "measurement_fact", "two", allreduce(times, [(1, 400.0), (1, 420.0), (0, 30.0)]))
    res = distributed_straggler(tmp_path, "two", None)
    assert res.verdict == "flagged" and "only late arrival" in res.reason
    r1 = next(r for r in res.rows if r["rank_id"] == 1)
    assert r1["median_robust_z"] is None and r1["n_stood_out"] == 2 and r1["n_arrived_last"] == 2
    assert r1["median_lag_us"] == pytest.approx(410.0)


def test_straggler_with_mad_zero_a_rank_off_the_median_stands_out(tmp_path: Path) -> None:
    """Three ranks take exactly 1000 us, the straggler 200 us (it arrives last, the others wait for
    it): MAD 0 made z NULL, so the rank never stood out and the answer was "no rank stood out"."""
    add_run(tmp_path, "tie")
    times = {0: [1000.0] * 3, 1: [1000.0] * 3, 2: [1000.0] * 3, 3: [200.0] * 3}
    put(tmp_path, "measurement_fact", "tie", allreduce(times, [(3, 300.0)] * 3, p50=1000.0))  # lag 30 %: not late enough
    res = distributed_straggler(tmp_path, "tie", None)
    assert res.verdict == "flagged" and res.reason.startswith("rank 3 stands out")
    by_rank = {r["rank_id"]: r for r in res.rows}
    assert (by_rank[3]["n_stood_out"], by_rank[3]["n_off_zero_mad"], by_rank[3]["median_robust_z"]) == (3, 3, None)
    assert "MAD 0" in res.reason and "z is undefined" in by_rank[3]["why"]
    assert [by_rank[r]["n_stood_out"] for r in (0, 1, 2)] == [0, 0, 0]


def test_straggler_with_mad_zero_a_rank_a_hair_off_the_median_is_no_straggler(tmp_path: Path) -> None:
    """With MAD 0 any difference at all made a straggler: 1000.5 against 1000 us (a timer that
    rounds to whole us makes MAD 0 often) was flagged for a 0.05 % difference."""
    add_run(tmp_path, "hair")
    times = {0: [1000.0] * 3, 1: [1000.0] * 3, 2: [1000.0] * 3, 3: [1000.5] * 3}
    put(tmp_path, "measurement_fact", "hair", allreduce(times, [(3, 5.0)] * 3, p50=1000.0))
    res = distributed_straggler(tmp_path, "hair", None)
    assert res.verdict == "clear", res.reason
    assert {r["rank_id"]: r["n_off_zero_mad"] for r in res.rows}[3] == 0


def test_a_playbooks_query_reproduces_through_benchrun_query_with_its_recorded_params(tmp_path: Path,
                                                                                     monkeypatch) -> None:
    """Review 2026-12-08: --json recorded the SQL and its digest but not the values of its $1..$7, so
    `benchrun query` refused it ("Values were not provided ...") and the evidence could not be re-derived."""
    import json

    from typer.testing import CliRunner

    from benchrun.cli import app

    add_run(tmp_path, "ar")
    times = {0: [1000.0, 1001.0, 999.0], 1: [1010.0, 1011.0, 1009.0], 2: [400.0, 410.0, 390.0],
             3: [990.0, 991.0, 989.0]}
    put(tmp_path, "measurement_fact", "ar", allreduce(times, [(2, 600.0)] * 3))
    res = distributed_straggler(tmp_path, "ar", None)
    assert res.params[:2] == ["ar", None] and len(res.params) == 7
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    args = ["query", "--json", res.sql]
    for value in res.params:
        args += ["--param", value if isinstance(value, str) else json.dumps(value)]
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 0, out.output + str(out.exception)
    doc = json.loads(out.stdout)
    assert doc["query_spec_digest"] == res.query_spec_digest
    assert [(r["rank_id"], r["n_stood_out"]) for r in doc["rows"]] == [(r["rank_id"], r["n_stood_out"]) for r in res.rows]
    assert res.to_dict()["params"] == res.params


def test_straggler_robust_z_of_tightly_clustered_ranks_needs_a_real_difference_too(tmp_path: Path) -> None:
    """Review 2026-12-08: ranks at 1000/1000.5/1001 us make MAD tiny, so a rank at 1010 us (1 % slower) had
    z 12.5 and was flagged a straggler in 3 of 3 replicates; the MAD-0 rule already asked OFF_MEDIAN_MIN."""
    add_run(tmp_path, "tight")
    times = {0: [1000.0, 1000.2, 1000.1], 1: [1000.5, 1000.6, 1000.4], 2: [1001.0, 1001.1, 1000.9],
             3: [1010.0, 1010.2, 1010.1]}
    put(tmp_path, "measurement_fact", "tight", allreduce(times, [(3, 5.0)] * 3, p50=1000.0))
    res = distributed_straggler(tmp_path, "tight", None)
    assert res.verdict == "clear", res.reason
    r3 = {r["rank_id"]: r for r in res.rows}[3]
    assert abs(r3["median_robust_z"]) >= straggler.Z_MIN and r3["n_stood_out"] == 0


def test_a_straggler_playbook_that_judged_nothing_records_no_straggler_list(tmp_path: Path) -> None:
    """Found in review: an "unavailable" straggler answer (no per-rank rows: a training run, whose per-rank
    step times the playbook does not read) still wrote straggler_nodes=[] and the report printed "Straggler
    nodes ...: none" for a run whose ranks were never judged."""
    from benchrun.playbooks import record_straggler_nodes
    from benchrun.rundir import RunDir

    add_run(tmp_path, "trn")
    res = distributed_straggler(tmp_path, "trn", None)
    assert res.verdict == "unavailable"
    run_dir = tmp_path / "runs" / "trn"
    (run_dir / "structured").mkdir(parents=True)
    (run_dir / "status.json").write_text(json.dumps({"run_id": "trn", "phase": "Succeeded"}))
    assert record_straggler_nodes(run_dir, [res]) == []
    assert RunDir(tmp_path, "trn").read_status()["straggler_nodes"] is None


def test_straggler_judges_only_ok_replicates(tmp_path: Path) -> None:
    """Rank 3 slow only in the three failed replicates was flagged and written to status.stragglerNodes."""
    from benchrun.playbooks import record_straggler_nodes

    add_run(tmp_path, "arf")
    times = {0: [1000.0] * 5, 1: [1001.0] * 5, 2: [999.0] * 5, 3: [5000.0] * 3 + [1000.0] * 2}
    rows = allreduce(times, [(3, 4000.0)] * 3 + [(0, 5.0)] * 2)
    for r in rows:
        r["status"] = "failed" if r["replicate"] <= 3 else "ok"
    put(tmp_path, "measurement_fact", "arf", rows)
    res = distributed_straggler(tmp_path, "arf", None)
    assert res.verdict == "clear", res.reason
    assert {r["n_replicates"] for r in res.rows} == {2}
    assert res.reason.endswith("left out, not judged: 3 replicate(s) whose result is not ok (allreduce r1, r2, r3 (failed))")
    run_dir = tmp_path / "runs" / "arf"
    (run_dir / "structured").mkdir(parents=True)
    (run_dir / "status.json").write_text(json.dumps({"run_id": "arf", "phase": "Succeeded"}))
    assert record_straggler_nodes(run_dir, [res]) == []
    # one ok replicate: a rank standing out once cannot repeat, so not "clear" either
    for r in rows:
        r["status"] = "ok" if r["replicate"] == 5 else "failed"
    put(tmp_path, "measurement_fact", "arf", rows)
    res = distributed_straggler(tmp_path, "arf", None)
    assert res.verdict == "unavailable" and "from 1 ok replicate(s)" in res.reason, res.reason
    # every replicate failed: nothing to judge, not "clear"
    for r in rows:
        r["status"] = "failed"
    put(tmp_path, "measurement_fact", "arf", rows)
    res = distributed_straggler(tmp_path, "arf", None)
    assert res.verdict == "unavailable" and res.rows == [] and "allreduce r1, r2, r3, r4, r5 (failed)" in res.reason


def test_straggler_judges_a_replicate_by_its_launch_status_too(tmp_path: Path) -> None:
    """A replicate whose launch failed or timed out while its result document said ok (a rank that
    wrote its numbers, then the gang hung) was judged: the straggler playbook read measurement_fact's
    status alone, where the other playbooks read the launch's too (REPLICATE_STATUS_CTE)."""
    add_run(tmp_path, "arl")
    times = {0: [1000.0] * 5, 1: [1001.0] * 5, 2: [999.0] * 5, 3: [5000.0] * 4 + [1000.0]}
    put(tmp_path, "measurement_fact", "arl", allreduce(times, [(3, 4000.0)] * 4 + [(0, 5.0)]))  # all "ok"
    put(tmp_path, "launch_fact", "arl", [{"suite": "allreduce", "replicate": rep, "status": s} for rep, s in
                                         ((1, "failed"), (2, "timeout"), (3, "failed"), (4, "ok"), (5, "ok"))])
    res = distributed_straggler(tmp_path, "arl", None)
    assert res.verdict == "clear", res.reason
    assert {r["n_replicates"] for r in res.rows} == {2}
    assert res.reason.endswith("left out, not judged: 3 replicate(s) whose result is not ok "
                               "(allreduce r1, r3 (failed); allreduce r2 (timeout))"), res.reason
    # launches all ok: every replicate is judged, and rank 3 stands out in 4 of 5
    put(tmp_path, "launch_fact", "arl", [{"suite": "allreduce", "replicate": rep, "status": "ok"} for rep in range(1, 6)])
    res = distributed_straggler(tmp_path, "arl", None)
    assert res.verdict == "flagged" and "left out" not in res.reason, res.reason
    assert {r["n_replicates"] for r in res.rows} == {5}


def test_straggler_unavailable_without_rank_rows(serving_home: Path) -> None:
    res = distributed_straggler(serving_home, "base", None)
    assert res.verdict == "unavailable" and res.rows == [] and "rank_p50_time_us" in res.reason


# -- scheduler_backpressure ----------------------------------------------------------


def startup(values: list[float]) -> list[dict[str, Any]]:
    rows = measurements([(i + 1, "", "launch_to_process_start_p50_s", v) for i, v in enumerate(values)], "job_startup")
    for r in rows:
        r["unit"] = "s"
    return rows


def test_backpressure_flagged_clear_and_unavailable(tmp_path: Path) -> None:
    for rid, pending, starts in (("base", 2.0, [0.030, 0.031, 0.029]),
                                 ("queued", 10.0, [0.090, 0.093, 0.087]),
                                 ("steady", 2.5, [0.032, 0.030, 0.031])):
        add_run(tmp_path, rid, pending)
        put(tmp_path, "measurement_fact", rid, startup(starts))
    res = scheduler_backpressure(tmp_path, "queued", "base")
    assert res.verdict == "flagged"
    by = {r["metric"]: r for r in res.rows}
    pend = by["run_pending_s"]
    assert pend["value_s"] == pytest.approx(10.0) and pend["base_value_s"] == pytest.approx(2.0)
    assert pend["change"] == pytest.approx(5.0) and pend["delta_s"] == pytest.approx(8.0) and pend["flagged"] is True
    proc = by["launch_to_process_start_p50_s"]
    # ×3, +0.06 s (≥ PENDING_ABS_MIN_S), every replicate above the baseline's slowest: flagged too
    assert proc["value_s"] == pytest.approx(0.090) and proc["change"] == pytest.approx(3.0) and proc["flagged"] is True
    assert (proc["min_s"], proc["base_max_s"], proc["n_replicates"]) == (0.087, 0.031, 3)
    assert "Kueue" in res.reason and pend["scheduler_path"] == "local"

    res = scheduler_backpressure(tmp_path, "steady", "base")
    assert res.verdict == "clear"
    assert {r["metric"]: r["change"] for r in res.rows} == pytest.approx(
        {"run_pending_s": 1.25, "launch_to_process_start_p50_s": 0.031 / 0.030})

    res = scheduler_backpressure(tmp_path, "queued", None)
    assert res.verdict == "unavailable" and "no baseline" in res.reason and len(res.rows) == 2


def test_backpressure_judges_the_kueue_waits_the_launches_recorded(tmp_path: Path) -> None:
    """Found in review: launch_fact holds each Kubernetes launch's queue wait (Job created → Kueue admitted),
    but the playbook said no column records it and judged only the run's own wait and job_startup: a
    queue wait grown ×10 read "clear". A replicate whose launch failed after its result said ok is not
    judged in the job_startup medians either (the launcher's record decides, as in compare)."""
    for rid, waits in (("base", [1.0, 1.2, 1.1]), ("queued", [11.0, 12.5, 10.2])):
        add_run(tmp_path, rid, 2.0)
        put(tmp_path, "measurement_fact", rid, startup([0.030, 0.031, 0.029]))
        put(tmp_path, "launch_fact", rid, [{"suite": "gemm", "replicate": i + 1, "status": "ok", "queue_wait_s": w,
                                            "scheduled_s": w + 0.5, "started_s": w + 3.0}
                                           for i, w in enumerate(waits)]
            + [{"suite": "job_startup", "replicate": i + 1, "status": "ok" if i else "failed"} for i in range(3)])
    res = scheduler_backpressure(tmp_path, "queued", "base")
    by = {(r["source"], r["metric"]): r for r in res.rows}
    wait = by[("launch_fact:gemm", "queue_wait_s")]
    assert wait["value_s"] == pytest.approx(11.0) and wait["base_value_s"] == pytest.approx(1.1) and wait["flagged"]
    assert res.verdict == "flagged" and "queue_wait_s" in res.reason, res.reason
    proc = by[("measurement_fact:job_startup", "launch_to_process_start_p50_s")]
    assert proc["n_replicates"] == 2 and proc["min_s"] == pytest.approx(0.029)  # replicate 1's launch failed


def test_backpressure_overlapping_replicates_are_not_flagged(tmp_path: Path) -> None:
    # The medians moved ×1.6 (the A/A pattern seen on this shared machine) but the ranges overlap.
    add_run(tmp_path, "a", 4.8)
    add_run(tmp_path, "b", 6.3)  # ×1.31, +1.5 s: below ×1.5
    put(tmp_path, "measurement_fact", "a", startup([0.31, 0.20, 0.17, 0.17, 0.14, 0.19]))
    put(tmp_path, "measurement_fact", "b", startup([0.30, 0.27, 0.29, 0.34, 0.22, 0.22]))
    res = scheduler_backpressure(tmp_path, "b", "a")
    row = next(r for r in res.rows if r["metric"] == "launch_to_process_start_p50_s")
    assert row["change"] == pytest.approx(0.28 / 0.18) and row["delta_s"] == pytest.approx(0.10)
    assert (row["min_s"], row["base_max_s"]) == (0.22, 0.31)
    assert row["flagged"] is False and "overlap" in row["why"] and res.verdict == "clear"


def test_backpressure_small_absolute_growth_is_not_flagged(tmp_path: Path) -> None:
    add_run(tmp_path, "a", 0.5)
    add_run(tmp_path, "b", 1.2)  # ×2.4 but +0.7 s: under the run-level floor (orchestration jitter)
    put(tmp_path, "measurement_fact", "a", startup([0.002]))
    put(tmp_path, "measurement_fact", "b", startup([0.006]))  # ×3, +4 ms
    res = scheduler_backpressure(tmp_path, "b", "a")
    by = {r["metric"]: r for r in res.rows}
    assert by["launch_to_process_start_p50_s"]["change"] == pytest.approx(3.0)
    assert by["run_pending_s"]["change"] == pytest.approx(2.4)
    assert [by[m]["flagged"] for m in by] == [False, False] and res.verdict == "clear"


def test_backpressure_a_2s_local_pending_increase_is_not_backpressure_and_the_rule_is_said(tmp_path: Path) -> None:
    # Two identical local canaries: the second waited 2 s longer for its turn (×2): not backpressure.
    add_run(tmp_path, "a", 2.0)
    add_run(tmp_path, "b", 4.0)
    res = scheduler_backpressure(tmp_path, "b", "a")
    pend = next(r for r in res.rows if r["metric"] == "run_pending_s")
    assert pend["change"] == pytest.approx(2.0) and pend["flagged"] is False and res.verdict == "clear"
    assert "≥ 5 s for the run's own submission→start wait" in res.reason and "≥ 0.05 s" in res.reason


def test_playbook_takes_the_runs_own_baseline_by_default(tmp_path: Path) -> None:
    import json

    from benchrun.playbooks.baseline import default_baseline

    run = tmp_path / "runs" / "cand"
    (run / "structured").mkdir(parents=True)
    assert default_baseline(tmp_path, "cand") == (None, "")
    add_run(tmp_path, "base")
    (run / "structured" / "cand_comparison.json").write_text(json.dumps(
        {"baseline": "base", "candidate": "cand", "gate": {"passed": True, "message": "one variable differs"}}))
    assert default_baseline(tmp_path, "cand") == ("base", "the run's own comparison")


def test_without_its_own_comparison_a_run_takes_the_baseline_its_spec_names(tmp_path: Path) -> None:
    """Issue 26 7g: no comparison of its own: the run its spec's comparison.baseline.artifactRef
    names now (a published alias); itself or nothing published: no baseline."""
    from benchrun.playbooks.baseline import default_baseline
    from benchrun.stats.baseline import promote
    from benchrun.stats.synthetic import make_run

    spec = {"spec": {"comparison": {"baseline": {"artifactRef": "local/published/canary"}}}}
    metrics = {("s", "", "tps"): ([100.0, 101.0, 99.0], "t/s", "higher")}
    add_run(tmp_path, "base")  # before make_run signs base: rows added after signing fail promote's verify
    make_run(tmp_path, "base", metrics, spec=spec)
    make_run(tmp_path, "cand", metrics, spec=spec)
    assert default_baseline(tmp_path, "cand") == (None, "")  # nothing published under that alias yet
    promote("base", tmp_path, alias="canary")
    assert default_baseline(tmp_path, "cand") == ("base", "its spec's local/published/canary")
    assert default_baseline(tmp_path, "base") == (None, "")  # the alias names the run itself


def _cli() -> typer.Typer:
    from benchrun.playbooks.commands import register

    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps "playbook" a subcommand
    return app


def test_a_refused_comparisons_baseline_is_no_playbook_baseline(serving_home: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison refused cand against a Failed baseline (RunNotSucceeded) but recorded "baseline":
    "bfail"; the playbooks took it as "the run's own comparison" and flagged, the report said "not compared"."""
    from benchrun.playbooks.baseline import default_baseline
    from benchrun.stats.analysis import compare_runs, write_comparison
    from benchrun.stats.synthetic import make_run

    metrics = {("serving_sweep", "c=4", "output_tokens_per_s"): ([100.0, 101.0, 99.0], "tok/s", "higher")}
    make_run(serving_home, "bfail", metrics, status={"phase": "Failed", "outcome": "failed"})
    make_run(serving_home, "cand", metrics)
    gate, res = compare_runs(serving_home / "runs" / "bfail", serving_home / "runs" / "cand", home=serving_home)
    assert not gate.passed and "[RunNotSucceeded]" in gate.message()
    write_comparison(gate, res, "bfail", serving_home / "runs" / "cand")
    put(serving_home, "benchmark_run_fact", "bfail", [{"name": "bfail", "phase": "Failed", "outcome": "failed"}])
    add_run(serving_home, "cand")
    put_serving(serving_home, "bfail", BASE_SERVING)
    put_serving(serving_home, "cand", serving([(1, "all", 100.0, 90.0, 400.0, 10.0, 9.0, 20.0)]))
    base, note = default_baseline(serving_home, "cand")
    assert base is None
    assert note.startswith("comparison refused: the run's comparison with bfail judged nothing ([RunNotSucceeded] baseline bfail")
    monkeypatch.setenv("BENCHRUN_HOME", str(serving_home))
    out = CliRunner().invoke(_cli(), ["playbook", "cand", "tail_latency_regression"], env={"COLUMNS": "300"})
    assert out.exit_code == 0, out.output
    assert "(no baseline: comparison refused: the run's comparison with bfail judged nothing ([RunNotSucceeded]" in out.output
    assert "tail_latency_regression: unavailable" in out.output
    out = CliRunner().invoke(_cli(), ["playbook", "cand", "--json"])
    doc = json.loads(out.output)
    assert doc["baseline_run_id"] is None and doc["baseline_note"].startswith("comparison refused")
    # given explicitly, a baseline that did not succeed is refused, naming why and the fix
    with pytest.raises(BenchrunError, match=r"baseline run 'bfail' is not Succeeded \(phase Failed, outcome failed\)"
                                            r".*give another --baseline"):
        run_playbooks(serving_home, "cand", "bfail")
    out = CliRunner().invoke(_cli(), ["playbook", "cand", "--baseline", "bfail"])
    assert out.exit_code != 0 and "is not Succeeded" in str(out.exception)


def test_a_recorded_baseline_deleted_since_is_skipped_not_fatal(serving_home: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`benchrun playbook RUN` exited 1 ("baseline run 'base1' is not in the warehouse") when the
    baseline its comparison recorded was deleted since: none of the four playbooks ran."""
    from benchrun.playbooks.baseline import default_baseline

    add_run(serving_home, "cand")
    put_serving(serving_home, "cand", serving([(1, "all", 100.0, 90.0, 400.0, 10.0, 9.0, 20.0)]))
    structured = serving_home / "runs" / "cand" / "structured"
    structured.mkdir(parents=True)
    (structured / "cand_comparison.json").write_text(json.dumps(
        {"baseline": "gone1", "candidate": "cand", "gate": {"passed": True, "message": "one variable differs"}}))
    base, note = default_baseline(serving_home, "cand")
    assert base is None and "baseline run 'gone1' is not in the warehouse" in note
    monkeypatch.setenv("BENCHRUN_HOME", str(serving_home))
    out = CliRunner().invoke(_cli(), ["playbook", "cand"], env={"COLUMNS": "300"})
    assert out.exit_code == 0, out.output
    assert "(no baseline: the run's comparison baseline is left out: baseline run 'gone1' is not in the warehouse" in out.output
    assert all(f"{name}: " in out.output for name in PLAYBOOKS)


def test_backpressure_unavailable_without_any_wait(tmp_path: Path) -> None:
    add_run(tmp_path, "bare", pending_s=None)
    res = scheduler_backpressure(tmp_path, "bare", None)
    assert res.verdict == "unavailable" and res.rows == [] and "neither start times" in res.reason


# -- running them together, the document, the CLI --------------------------------------


def test_run_playbooks_errors_name_the_fix(serving_home: Path) -> None:
    with pytest.raises(BenchrunError, match="not in the warehouse") as missing:
        run_playbooks(serving_home, "missing-run")
    # the fix a person can run for a run id (`benchrun run` takes a spec, and would start a new run)
    assert "benchrun rebuild-warehouse missing-run" in str(missing.value) and "benchrun run`" not in str(missing.value)
    with pytest.raises(BenchrunError, match="unknown playbook"):
        run_playbooks(serving_home, "base", None, ["tail_latency_regression", "nope"])
    with pytest.raises(BenchrunError, match="is the run itself"):
        run_playbooks(serving_home, "base", "base")
    with pytest.raises(BenchrunError, match="not valid"):
        run_playbooks(serving_home, "Bad_Id")


def test_report_document_holds_every_verdict(serving_home: Path) -> None:
    results = run_playbooks(serving_home, "base")
    assert [r.name for r in results] == list(PLAYBOOKS)
    path = write_playbooks_report(serving_home / "runs" / "base", results)
    assert path == serving_home / "runs" / "base" / "reports" / "base_playbooks.json"
    doc = json.loads(path.read_text())
    assert doc["verdicts"] == {"tail_latency_regression": "unavailable", "low_gpu_utilization": "unavailable",
                               "distributed_straggler": "unavailable", "scheduler_backpressure": "unavailable"}
    assert doc["playbooks"][0]["sql"] == tail_latency.SQL and not list(path.parent.glob(".*tmp*"))


def test_cli_prints_verdicts_and_json(serving_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchrun.playbooks.commands import register

    add_run(serving_home, "cand")
    put_serving(serving_home, "cand", serving([(1, "all", 100.0, 90.0, 400.0, 10.0, 9.0, 20.0)]))
    monkeypatch.setenv("BENCHRUN_HOME", str(serving_home))
    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps "playbook" a subcommand
    out = CliRunner().invoke(app, ["playbook", "cand", "tail_latency_regression", "--baseline", "base", "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert doc["verdicts"] == {"tail_latency_regression": "flagged"} and doc["baseline_run_id"] == "base"
    assert doc["playbooks"][0]["rows"][0]["p99_change"] == pytest.approx(400.0 / 150.0)
    out = CliRunner().invoke(app, ["playbook", "cand", "--baseline", "base"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "tail_latency_regression: flagged" in out.output and "low_gpu_utilization: unavailable" in out.output
    assert "query_spec_digest" in out.output


def test_every_playbook_sql_is_documented_and_registered() -> None:
    for mod in (tail_latency, gpu_utilization, straggler, backpressure):
        assert PLAYBOOKS[mod.NAME].__module__ == mod.__name__
        assert set(mod.DISPLAY) and mod.SQL.strip().upper().startswith("WITH")


def test_scenario_playbooks_asset_writes_the_report(serving_home: Path) -> None:
    import dagster as dg

    from bench_assets.playbook_assets import playbook_assets, scenario_playbooks
    from resources.warehouse import WarehouseResource

    add_run(serving_home, "cand")
    put_serving(serving_home, "cand", serving([(1, "all", 100.0, 90.0, 400.0, 10.0, 9.0, 20.0)]))
    structured = serving_home / "runs" / "cand" / "structured"
    structured.mkdir(parents=True)
    # the baseline baseline_comparison resolved for this run
    (structured / "cand_comparison.json").write_text(json.dumps({"baseline": "base", "candidate": "cand",
                                                                 "gate": {"passed": True, "message": "ok"}}))
    assert playbook_assets == [scenario_playbooks]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("benchmark_run", ["cand"])
        result = dg.materialize([scenario_playbooks], instance=instance, partition_key="cand",
                                resources={"warehouse": WarehouseResource(home=str(serving_home))})
    assert result.success
    meta = result.asset_materializations_for_node("scenario_playbooks")[0].metadata
    assert meta["baseline"].value == "base" and meta["flagged"].value == 1
    assert "| tail_latency_regression | **flagged** |" in meta["verdicts"].value
    assert meta["query_spec_digest/tail_latency_regression"].value == query_spec_digest(tail_latency.SQL)
    doc = json.loads((serving_home / "runs" / "cand" / "reports" / "cand_playbooks.json").read_text())
    assert doc["baseline_run_id"] == "base" and doc["verdicts"]["tail_latency_regression"] == "flagged"


def test_scenario_playbooks_asset_takes_no_baseline_from_a_refused_comparison(serving_home: Path) -> None:
    import dagster as dg

    from bench_assets.playbook_assets import scenario_playbooks
    from resources.warehouse import WarehouseResource

    add_run(serving_home, "cand")
    put_serving(serving_home, "cand", serving([(1, "all", 100.0, 90.0, 400.0, 10.0, 9.0, 20.0)]))
    structured = serving_home / "runs" / "cand" / "structured"
    structured.mkdir(parents=True)
    refused = "comparison refused (fail closed): [ReplicatesFailed] candidate cand: serving_sweep r3 failed"
    (structured / "cand_comparison.json").write_text(json.dumps(
        {"baseline": "base", "candidate": "cand", "gate": {"passed": False, "message": refused}}))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("benchmark_run", ["cand"])
        result = dg.materialize([scenario_playbooks], instance=instance, partition_key="cand",
                                resources={"warehouse": WarehouseResource(home=str(serving_home))})
    meta = result.asset_materializations_for_node("scenario_playbooks")[0].metadata
    assert meta["baseline"].value == ("none: comparison refused: the run's comparison with base judged nothing "
                                      "([ReplicatesFailed] candidate cand: serving_sweep r3 failed)")
    assert meta["flagged"].value == 0
    doc = json.loads((serving_home / "runs" / "cand" / "reports" / "cand_playbooks.json").read_text())
    assert doc["baseline_run_id"] is None and doc["baseline_note"].startswith("comparison refused")


def test_low_gpu_utilization_cites_replicate_telemetry_and_the_host_beside_it(tmp_path: Path) -> None:
    add_run(tmp_path, "nvml")
    raw = "raw/nvml_train_step_r1_telemetry.parquet"
    rows = [{"scope": "gpu", "source": "nvml", "suite": "train_step", "replicate": 1, "metric": "gpu_utilization_pct",
             "value": v, "unit": "%", "device_index": 0, "raw_path": raw} for v in (10.0, 30.0, 20.0)]
    rows += [{"scope": "node", "source": "psutil", "suite": "train_step", "replicate": 1, "metric": m, "value": v,
              "unit": "%", "raw_path": raw} for m, v in (("cpu_utilization_pct", 96.0), ("cpu_utilization_pct", 98.0),
                                                         ("background_cpu_pct", 40.0))]
    put(tmp_path, "telemetry_slice_fact", "nvml", rows)
    res = low_gpu_utilization(tmp_path, "nvml", None)
    [row] = res.rows
    assert res.verdict == "unavailable" and row["gpu_util_low"] is True
    assert (row["suite"], row["n_util_samples"], row["gpu_util_pct"]) == ("train_step", 3, 20.0)
    assert row["telemetry_evidence"] == raw and row["host_cpu_util_pct"] == 97.0 and row["background_cpu_pct"] == 40.0
    assert "host CPU 97% busy, background 40%" in row["why"] and raw in row["why"]


def test_low_gpu_utilization_weighs_host_cpu_by_the_window_each_sample_describes(tmp_path: Path) -> None:
    # the sampler's closing tick (50 ms at 60 % background) weighed like a full second: 23 %, not 6 %
    add_run(tmp_path, "nvml")
    raw = "raw/nvml_train_step_r1_telemetry.parquet"
    rows = [{"scope": "gpu", "source": "nvml", "suite": "train_step", "replicate": 1, "metric": "gpu_utilization_pct",
             "value": v, "unit": "%", "device_index": 0, "raw_path": raw} for v in (10.0, 30.0, 20.0)]
    for metric, values in (("cpu_utilization_pct", (90.0, 90.0, 100.0)), ("background_cpu_pct", (5.0, 5.0, 60.0))):
        for (start, end), v in zip(((0.0, 1.0), (1.0, 2.0), (2.0, 2.05)), values):
            rows.append({"scope": "node", "source": "psutil", "suite": "train_step", "replicate": 1, "metric": metric,
                         "value": v, "unit": "%", "raw_path": raw, "window_start_utc": T0 + dt.timedelta(seconds=start),
                         "window_end_utc": T0 + dt.timedelta(seconds=end)})
    put(tmp_path, "telemetry_slice_fact", "nvml", rows)
    [row] = low_gpu_utilization(tmp_path, "nvml", None).rows
    assert row["background_cpu_pct"] == pytest.approx((5 + 5 + 60 * 0.05) / 2.05)
    assert row["host_cpu_util_pct"] == pytest.approx((90 + 90 + 100 * 0.05) / 2.05)
    assert "host CPU 90% busy, background 6%" in row["why"]


def test_straggler_joins_the_rank_nodes_telemetry(tmp_path: Path) -> None:
    add_run(tmp_path, "art")
    times = {0: [1000.0, 1001.0, 999.0], 1: [1010.0, 1011.0, 1009.0], 2: [400.0, 410.0, 390.0],
             3: [990.0, 991.0, 989.0]}
    rows = allreduce(times, [(2, 600.0)] * 3)
    for r in rows:
        if r["rank_id"] is not None:
            r["node_name"] = f"node-{r['rank_id']}"
    put(tmp_path, "measurement_fact", "art", rows)
    tele = []
    for rep in (1, 2, 3):
        for node, cpu, thr in (("node-2", 90.0, 1.0), ("node-0", 20.0, 0.0)):
            raw = f"raw/art_allreduce_r{rep}_telemetry.parquet"
            tele += [{"suite": "allreduce", "replicate": rep, "node_name": node, "scope": "node", "source": "psutil",
                      "metric": "cpu_utilization_pct", "value": cpu, "unit": "%", "raw_path": raw},
                     {"suite": "allreduce", "replicate": rep, "node_name": node, "scope": "gpu", "source": "nvml",
                      "metric": "gpu_throttled", "value": thr, "unit": "bool", "device_index": 0, "raw_path": raw}]
    put(tmp_path, "telemetry_slice_fact", "art", tele)
    res = distributed_straggler(tmp_path, "art", None)
    by_rank = {r["rank_id"]: r for r in res.rows}
    slow = by_rank[2]
    assert slow["flagged"] and slow["node_cpu_util_pct"] == 90.0 and slow["node_gpu_throttled_pct"] == 100.0
    assert "node telemetry: host CPU 90%, GPU throttled 100%" in slow["why"]
    assert "raw/art_allreduce_r1_telemetry.parquet" in slow["telemetry_evidence"]
    assert by_rank[0]["node_cpu_util_pct"] == 20.0 and by_rank[1]["node_cpu_util_pct"] is None  # node-1 not sampled


def test_low_gpu_utilization_leaves_out_failed_replicates_utilization(tmp_path: Path) -> None:
    """A replicate that failed (its GPU idle while it crashed or hung) is no evidence of a starved GPU:
    its utilization samples were counted beside the ok replicates' and could turn a busy GPU "low"."""
    for rid, tokens in (("base", [1000.0, 1010.0, 990.0]), ("cand", [700.0, 690.0, 710.0])):
        add_run(tmp_path, rid)
        rows = [{"scope": "gpu", "source": "nvml", "suite": "training", "replicate": rep,
                 "metric": "gpu_utilization_pct", "value": 95.0 if rep == 1 else 2.0, "unit": "%",
                 "device_index": 0, "node_name": "n0"} for rep in (1, 2, 3) for _ in range(10)]
        put(tmp_path, "telemetry_slice_fact", rid, rows)
        # replicate 1 ran; 2 and 3 failed (a failed replicate writes no training row)
        put(tmp_path, "training_outcome_fact", rid, [{"suite": "training", "case": "tiny", "replicate": 1,
                                                      "tokens_per_second": tokens[0]}])
        put(tmp_path, "launch_fact", rid, [{"suite": "training", "replicate": rep, "status": s}
                                           for rep, s in ((1, "ok"), (2, "failed"), (3, "timeout"))])
    res = low_gpu_utilization(tmp_path, "cand", "base")
    [row] = res.rows
    assert (row["gpu_util_pct"], row["n_util_samples"]) == (95.0, 10)
    assert row["n_util_samples_left_out"] == 20 and row["flagged"] is False and res.verdict == "clear"
    assert "20 sample(s) of 2 replicate(s) that did not succeed left out" in row["why"]
    # measurement_fact's status says the same where the launch record is missing
    put(tmp_path, "launch_fact", "cand", [])
    put(tmp_path, "measurement_fact", "cand", [{"suite": "training", "replicate": rep, "case": "tiny",
                                                "metric": "gpu_utilization_pct", "value": 1.0, "status": "failed"}
                                               for rep in (2, 3)])
    res = low_gpu_utilization(tmp_path, "cand", "base")
    [row] = res.rows
    assert (row["gpu_util_pct"], row["n_util_samples"], row["n_util_samples_left_out"]) == (95.0, 10, 22)


def test_low_gpu_utilization_judges_the_throughput_of_the_ok_replicates_only(tmp_path: Path) -> None:
    """Numbers review: the throughput beside the utilization was read from every replicate whose result said
    ok, one the launcher failed after it wrote ok (killed at its timeout) included."""
    add_run(tmp_path, "base")
    put(tmp_path, "measurement_fact", "base", gpu_rows([90, 92, 91], [1000, 1010, 990]))
    add_run(tmp_path, "cand")
    put(tmp_path, "measurement_fact", "cand", gpu_rows([90, 92, 91], [1000, 1005, 100]))
    put(tmp_path, "launch_fact", "cand", [{"suite": "train_step", "replicate": rep, "status": s}
                                          for rep, s in ((1, "ok"), (2, "ok"), (3, "failed"))])
    [row] = low_gpu_utilization(tmp_path, "cand", "base").rows
    assert row["n_replicates"] == 2 and row["throughput"] == pytest.approx(1002.5)  # was 1000 over 3


def test_a_baseline_the_gate_refuses_is_said_beside_the_answers(tmp_path: Path) -> None:
    """Found in review: `playbook RUN --baseline OTHER`, or the baseline the run's spec names, was never put
    through the one-variable gate: a baseline on another model got its tail-latency verdict without a word."""
    from benchrun.playbooks.commands import _gate_note
    from benchrun.stats.synthetic import make_run

    m = {("s", "", "tps"): ([1.0, 2.0, 3.0], "tok/s", "higher")}
    make_run(tmp_path, "base", m)
    make_run(tmp_path, "same", m)
    make_run(tmp_path, "other", m, spec={"spec": {"workload": {"model": {"name": "other-model"}}}})
    assert _gate_note(tmp_path, "same", "base") == ""
    note = _gate_note(tmp_path, "other", "base")
    assert "differ in more than the variable under test" in note and "spec.workload.model.name" in note
    assert _gate_note(tmp_path, "other", "gone") == ""  # no run directory: nothing to gate, nothing said
