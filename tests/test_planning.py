"""Replicate planning from history (benchrun.stats.planning, ``benchrun plan``)."""

from __future__ import annotations

import numpy as np
import pytest

from benchrun.stats.planning import plan, pooled_cv, power
from benchrun.stats.synthetic import lognormal_replicates, make_run

def _history(home, cvs, nights, rng, *, n=5, prefix="h", unit="u", direction="higher"):
    """``nights`` Succeeded runs in ``home``, one a day from 2026-11-01, each with ``n`` lognormal
    replicates of CV ``cvs[key]`` for every (suite, case, metric) key."""
    for i in range(nights):
        make_run(home, f"{prefix}{i}", {k: (lognormal_replicates(rng, 100, cv, n), unit, direction)
                                        for k, cv in cvs.items()},
                 status={"created_utc": f"2026-11-0{i + 1}T00:00:00Z"})


DOC = {"spec": {"trials": {"minReplicates": 5, "confidenceLevel": 0.95},
                "comparison": {"deltaPct": 5.0},
                "metrics": {"inference": {"primary": ["serve/tps", "serve/quiet"]}}}}


@pytest.mark.slow
def test_plan_reads_the_noise_from_history_and_says_how_many_replicates(tmp_path):
    # before: no plan existed; the spec's minReplicates was a guess
    rng = np.random.default_rng(0)
    _history(tmp_path, {("serve", "", "tps"): 0.04, ("serve", "", "quiet"): 0.005}, 4, rng, n=6, prefix="n", unit="t/s")
    plans = {p.metric: p for p in plan(DOC, "w" * 64, tmp_path, sims=80)}
    noisy, quiet = plans["serve/tps"], plans["serve/quiet"]
    assert noisy.runs == 4 and 0.025 < noisy.cv < 0.06 and quiet.cv < 0.01
    assert quiet.needed is not None and noisy.needed is not None and noisy.needed > quiet.needed
    assert power(noisy.needed, noisy.cv, 5.0, 2, 0.05, sims=200) >= 0.65  # the plan's n does reach the power
    empty = plan(DOC, "w" * 64, tmp_path / "nowhere", sims=50)
    assert all(p.needed is None and "no history" in p.note for p in empty)


def test_pooled_cv_is_within_run():
    import pandas as pd

    t1 = pd.DataFrame({"suite": "s", "case": "", "metric": "m", "value": [100.0, 102.0, 98.0]})
    t2 = pd.DataFrame({"suite": "s", "case": "", "metric": "m", "value": [200.0, 204.0, 196.0]})
    cv, runs = pooled_cv([t1, t2], "s/m")
    assert runs == 2 and 0.015 < cv < 0.025  # the level between runs does not count


def test_replicates_auto_plans_each_suite_from_history_bounded_and_once_per_run(bench_home, canary_doc, write_spec,
                                                                                 tmp_path):
    # before: the spec could only name a fixed minReplicates; `replicates: auto` did not exist
    import json

    from benchrun.plan import plan_run
    from benchrun.spec import load_spec

    rng = np.random.default_rng(3)
    names = ("ttft_ms", "tokens_per_second", "p99_latency_ms", "jitter_ms", "cost_per_request_usd",
             "cost_per_token_usd")
    for i in range(3):
        make_run(bench_home, f"h{i}", {("serving_workflow", "c=4", m): (
            lognormal_replicates(rng, 100, 0.03 if m == "tokens_per_second" else 0.002, 5), "u",
            "higher" if m == "tokens_per_second" else "lower") for m in names},
            status={"created_utc": f"2026-11-0{i + 1}T00:00:00Z"})
    canary_doc["spec"]["trials"].update({"replicates": "auto", "maxReplicates": 8})
    run = load_spec(write_spec(canary_doc)).run
    run_dir = bench_home / "runs" / "auto-20261202000000-aaaaaaaa"
    plans = plan_run(run, run_dir.name, run_dir, home=bench_home)
    reps = {p.name: {inv.suite: 0 for inv in p.invocations} for p in plans}
    for p in plans:
        for inv in p.invocations:
            reps[p.name][inv.suite] += 1
    assert reps["end_to_end"]["serving_workflow"] == 8  # CV 3 % for δ 3 % in 6 tests: the bound
    assert reps["micro"]["gemm"] == 5  # no primary metric: minReplicates
    recorded = json.loads((run_dir / "structured" / f"{run_dir.name}_replicate_plan.json").read_text())
    assert recorded["suites"]["serving_workflow"]["replicates"] == 8 and recorded["max"] == 8
    assert "tokens_per_second" in recorded["suites"]["serving_workflow"]["why"]
    # decided once: later plannings of the run (a layer step, a confirmation round) read the record
    recorded["suites"]["serving_workflow"]["replicates"] = 7
    (run_dir / "structured" / f"{run_dir.name}_replicate_plan.json").write_text(json.dumps(recorded))
    again = plan_run(run, run_dir.name, run_dir, home=bench_home)
    assert sum(inv.suite == "serving_workflow" for p in again for inv in p.invocations) == 7


def test_max_replicates_below_min_is_an_error_naming_the_field(canary_doc, write_spec):
    from benchrun.errors import BenchrunError
    from benchrun.spec import load_spec

    canary_doc["spec"]["trials"].update({"replicates": "auto", "maxReplicates": 4})
    with pytest.raises(BenchrunError, match=r"spec\.trials\.maxReplicates: is 4; it must be at least"):
        load_spec(write_spec(canary_doc))


def test_still_contended_replicates_leave_the_planning_spread_as_they_leave_the_comparison(tmp_path):
    # review 2026-12-05: a replicate measured on a contended machine (10 % low), which the comparison
    # excludes, counted in the history's spread: CV 4.3 % instead of 0.4 %, 12 replicates asked for
    import json

    from benchrun.stats.planning import plan
    from benchrun.stats.synthetic import make_run
    from benchrun.suites.result import result_path

    rd = make_run(tmp_path, "h0", {("serve", "", "tps"): ([100.0, 100.5, 99.5, 100.2, 99.8, 90.0], "u", "higher")},
                  manifest=False)
    p = result_path(rd, "h0", "serve", 6)
    d = json.loads(p.read_text())
    d["telemetry"] = {"contended": True}
    p.write_text(json.dumps(d))
    doc = {"spec": {"trials": {"minReplicates": 5}, "comparison": {"deltaPct": 5.0},
                    "metrics": {"inference": {"primary": ["serve/tps"]}}}}
    got = plan(doc, "w" * 64, tmp_path, sims=200)[0]
    assert got.cv < 0.01, got.cv


NAMES = ("a", "b", "c", "d", "e", "f")


def test_the_planning_family_is_every_suite_case_and_metric_the_gate_tests(tmp_path):
    # review 2026-12-05: 6 bare names over 3 cases were planned as 6 tests where Holm runs 18
    # (n = 6 gave 0.62 power, and the plan chose the exact test where the gate uses Welch)
    rng = np.random.default_rng(1)
    _history(tmp_path, {("serve", f"c={c}", m): 0.02 for c in (1, 2, 4) for m in NAMES}, 3, rng)
    doc = {"spec": {"trials": {"minReplicates": 5}, "comparison": {"deltaPct": 3.0},
                    "metrics": {"inference": {"primary": list(NAMES)}}}}
    plans = plan(doc, "w" * 64, tmp_path, sims=60, max_n=12)
    assert len(plans) == 6 and {p.family for p in plans} == {18} and {p.suite for p in plans} == {"serve"}


def test_auto_gives_a_suite_that_reports_no_primary_metric_min_replicates(tmp_path):
    # review 2026-12-05: a bare primary name applied to every suite, so a suite that never reports
    # it got that metric's count; and "power now" used minReplicates for a suite with its own count
    from benchrun.stats.planning import auto_replicates

    rng = np.random.default_rng(2)
    _history(tmp_path, {("serve", "", "tps"): 0.05, ("other", "", "x"): 0.05}, 3, rng)
    doc = {"spec": {"trials": {"minReplicates": 3}, "comparison": {"deltaPct": 3.0},
                    "metrics": {"inference": {"primary": ["tps"]}},
                    "layers": [{"name": "micro", "suites": [{"name": "serve", "replicates": 7}, {"name": "other"}]}]}}
    got = auto_replicates(doc, "w" * 64, tmp_path, ["serve", "other"], 3, 10, sims=60)
    assert got["other"]["replicates"] == 3 and got["serve"]["replicates"] == 10
    (only,) = plan(doc, "w" * 64, tmp_path, sims=60, max_n=10)
    assert (only.suite, only.current) == ("serve", 7)


def test_the_simulated_change_is_the_log_shift_the_margin_is():
    # review 2026-12-05: the plan simulated a change of x(1 - delta), larger than the gate's margin
    # log(1 + delta): at delta 15 % it said 8 replicates where 9 are needed. Checked against
    # scipy's exact Mann-Whitney test on a change of exactly 1 / (1 + delta).
    from scipy.stats import mannwhitneyu

    cv, delta, n = 0.307, 40.0, 6
    rng = np.random.default_rng(5)
    sims, hits = 2000, 0
    for _ in range(sims):
        base = lognormal_replicates(rng, 100.0, cv, n)
        cand = lognormal_replicates(rng, 100.0, cv, n) / (1 + delta / 100)
        hits += mannwhitneyu(base, cand, alternative="greater", method="exact").pvalue < 0.05
    assert abs(power(n, cv, delta, 1, 0.05, sims=2000) - hits / sims) < 0.05, hits / sims


def test_a_metric_the_workloads_runs_do_not_report_is_planned_from_runs_that_do(tmp_path):
    # review 2026-12-05: "else of any run that reports it" was not done: other workloads' runs were
    # read only when the workload had no runs at all, so a metric it does not report had no history
    rng = np.random.default_rng(4)
    for i in range(3):
        make_run(tmp_path, f"own{i}", {("s", "", "a"): (lognormal_replicates(rng, 100, 0.02, 5), "u", "higher")},
                 status={"created_utc": f"2026-11-0{i + 1}T00:00:00Z"})
        make_run(tmp_path, f"oth{i}", {("s", "", "b"): (lognormal_replicates(rng, 100, 0.02, 5), "u", "higher")},
                 status={"created_utc": f"2026-11-0{i + 1}T00:00:00Z", "workload_spec_digest": "o" * 64})
    doc = {"spec": {"trials": {"minReplicates": 5}, "comparison": {"deltaPct": 5.0},
                    "metrics": {"inference": {"primary": ["s/a", "s/b"]}}}}
    plans = {p.metric: p for p in plan(doc, "w" * 64, tmp_path, sims=60, max_n=10)}
    assert plans["s/a"].runs == 3 and "other workloads" not in plans["s/a"].note
    assert plans["s/b"].runs == 3 and "other workloads" in plans["s/b"].note and plans["s/b"].needed is not None


def test_a_workload_with_a_default_written_out_is_the_same_workloads_history(bench_home, canary_doc, write_spec,
                                                                            tmp_path):
    """dataset.format: auto written out changed workload_spec_digest, so `replicates: auto` and
    `benchrun plan` read another workload's history. Runs record the normalized digest beside it,
    and the history matches on it where both sides have it — on the digest as written otherwise."""
    import copy
    import json

    from benchrun import submit as sub
    from benchrun.rundir import RunDir
    from benchrun.spec.normal import NORMALIZED_KEY, WorkloadDigests
    from benchrun.stats.planning import _history

    canary_doc["spec"]["workload"]["dataset"] = {"path": "specs/datasets/benchrun-conversations.jsonl"}
    written = copy.deepcopy(canary_doc)
    written["spec"]["workload"]["dataset"]["format"] = "auto"
    status = {}
    for name, doc in (("plain", canary_doc), ("written", written)):
        run_id = sub.prepare(write_spec(doc, f"{name}.yaml")).run_id
        status[name] = json.loads((RunDir.for_run(run_id, bench_home).path / "status.json").read_text())
    assert status["plain"]["workload_spec_digest"] != status["written"]["workload_spec_digest"]
    assert status["plain"][NORMALIZED_KEY] == status["written"][NORMALIZED_KEY] is not None
    rng = np.random.default_rng(1)
    m = {("s", "", "a"): (lognormal_replicates(rng, 100, 0.02, 5), "u", "higher")}
    make_run(tmp_path, "new", m, status={k: status["written"][k] for k in ("workload_spec_digest", NORMALIZED_KEY)})
    make_run(tmp_path, "old", m, status={"workload_spec_digest": status["plain"]["workload_spec_digest"]})
    make_run(tmp_path, "other", m, status={"workload_spec_digest": "o" * 64, NORMALIZED_KEY: "o" * 64})
    h = _history(tmp_path, WorkloadDigests.of_status(status["plain"]))
    same, other = h.same, h.other
    assert [p.name for p in same] == ["new", "old"] and [p.name for p in other] == ["other"]
    same = _history(tmp_path, status["plain"]["workload_spec_digest"]).same  # a bare digest: as written
    assert [p.name for p in same] == ["old"]


def _auto_runs(bench_home, canary_doc, write_spec, recorded):
    """Two prepared `replicates: auto` runs of a one-suite spec, each with its recorded plan."""
    import datetime as dt
    import json

    from benchrun import submit as sub
    from benchrun.rundir import RunDir
    from helpers import tiny_spec

    canary_doc["spec"]["trials"].update({"minReplicates": 3, "replicates": "auto", "maxReplicates": 8})
    tiny_spec(canary_doc, [{"name": "other", "repoCommand": "/bin/true"}])
    ids = []
    for i, (name, n) in enumerate(zip(("base", "cand"), recorded)):
        doc = {**canary_doc, "metadata": {**canary_doc["metadata"], "name": name}}
        run_id = sub.prepare(write_spec(doc, f"{name}.yaml"),
                             now=dt.datetime(2026, 1, 1, 0, 0, i, tzinfo=dt.timezone.utc)).run_id
        if n is not None:
            path = RunDir.for_run(run_id, bench_home).path / "structured" / f"{run_id}_replicate_plan.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"suites": {"other": {"replicates": n, "why": "test"}}}))
        ids.append(run_id)
    return ids


def test_a_confirmation_round_of_an_auto_run_reads_the_runs_plan_and_extends(bench_home, canary_doc, write_spec):
    # review 2026-12-05: the round planned again from all history (replicates 1..7 against a recorded 4)
    # and wrote a plan into the round's directory; extending a round of an auto run launched nothing
    from benchrun.confirm import confirmation_invocations

    base, cand = _auto_runs(bench_home, canary_doc, write_spec, (4, 4))
    order, dirs = confirmation_invocations(bench_home, base, cand, {"other"}, seed=1)
    assert sorted(inv.replicate for _arm, inv in order) == [1, 1, 2, 2, 3, 3, 4, 4]
    assert not list((bench_home / "confirmations").rglob("*_replicate_plan.json"))
    more, _dirs = confirmation_invocations(bench_home, base, cand, {"other"}, 2, seed=2, first=5)
    assert sorted(inv.replicate for _arm, inv in more) == [5, 5, 6, 6]


def test_a_round_of_two_auto_runs_with_different_counts_pairs_only_what_both_launch(bench_home, canary_doc,
                                                                                      write_spec):
    # review 2026-12-07: baseline planned 5, candidate 8: pairs 6-8 were candidate-only launches that
    # counted as pairs launched (n0 = 8, looks planned on pairs that did not exist)
    from benchrun.confirm import confirmation_invocations

    base, cand = _auto_runs(bench_home, canary_doc, write_spec, (5, 8))
    order, _dirs = confirmation_invocations(bench_home, base, cand, {"other"}, seed=1)
    assert sorted(inv.replicate for _arm, inv in order) == [k for k in range(1, 6) for _ in (0, 1)]
    assert sorted(arm for arm, _inv in order) == ["baseline"] * 5 + ["candidate"] * 5


def test_an_auto_run_without_a_readable_plan_is_an_error_naming_the_file(bench_home, canary_doc, write_spec):
    # review 2026-12-05: a record that could not be read was planned again (and overwritten): the
    # run's replicates could change under it
    from benchrun.confirm import confirmation_invocations
    from benchrun.errors import BenchrunError
    from benchrun.lifecycle import load_pinned
    from benchrun.plan import plan_run
    from benchrun.rundir import RunDir

    base, cand = _auto_runs(bench_home, canary_doc, write_spec, (None, 99))
    with pytest.raises(BenchrunError, match=r"_replicate_plan\.json: missing"):
        confirmation_invocations(bench_home, base, cand, {"other"}, seed=1)
    rd = RunDir.for_run(cand, bench_home)
    with pytest.raises(BenchrunError, match=r"suites\.other\.replicates is 99; .*\[3, 8\]"):
        plan_run(load_pinned(rd).run, cand, rd.path, home=bench_home)
    (rd.path / "structured" / f"{cand}_replicate_plan.json").write_text("{not json")
    with pytest.raises(BenchrunError, match=r"replicate plan cannot be read"):
        plan_run(load_pinned(rd).run, cand, rd.path, home=bench_home)


def test_render_of_an_auto_spec_writes_no_plan(bench_home, canary_doc, monkeypatch):
    # review 2026-12-05: `benchrun render` of an auto spec wrote a replicate plan into a run
    # directory that does not exist (a preview must leave the home as it was)
    import yaml

    from benchrun.launch.render import render_objects

    canary_doc["spec"]["trials"].update({"replicates": "auto", "maxReplicates": 8})
    path = bench_home / "auto.yaml"
    path.write_text(yaml.safe_dump(canary_doc))
    monkeypatch.setenv("BENCHRUN_LAUNCHER_KIND", "kubernetes")
    assert render_objects(path)
    assert not (bench_home / "runs").exists() or not list((bench_home / "runs").rglob("*"))


def test_the_noisiest_case_of_a_suite_decides_its_plan(tmp_path):
    # review 2026-12-05: the CV was pooled over a suite's cases, so a quiet c=1 hid a noisy c=16
    # that the same replicate count must also detect (here pooled 3.3 % where c=16's is 4.5 %)
    from benchrun.stats.load import replicate_table
    from benchrun.stats.planning import _needed

    rng = np.random.default_rng(4)
    _history(tmp_path, {("serve", f"c={c}", "p99_latency_ms"): cv for c, cv in ((1, 0.01), (16, 0.06))}, 4, rng,
             n=6, unit="ms", direction="lower")
    doc = {"spec": {"trials": {"minReplicates": 3}, "comparison": {"deltaPct": 5.0},
                    "metrics": {"inference": {"primary": ["p99_latency_ms"]}}}}
    [got] = plan(doc, "w" * 64, tmp_path, sims=120, max_n=30)
    tables = [replicate_table(rd) for rd in sorted((tmp_path / "runs").iterdir())]
    pooled, _runs = pooled_cv(tables, "p99_latency_ms")
    noisy, _runs = pooled_cv([t[t["case"] == "c=16"] for t in tables], "p99_latency_ms")
    assert got.case == "c=16" and got.cv == pytest.approx(noisy) and got.cv > pooled * 1.2, (got, pooled)
    assert "noisiest of 2 cases, p99_latency_ms[c=16]" in got.note
    at_pooled, _p, _n = _needed(pooled, 5.0, 2, 0.05, 3, target=0.8, max_n=20, sims=120)
    assert got.needed is not None and at_pooled is not None and got.needed > at_pooled, (got.needed, at_pooled)


def test_a_request_percentile_is_planned_for_the_pooled_requests_the_comparison_needs(tmp_path, canary_doc):
    """The canary's serving_workflow runs 96 requests a replicate; its p99 is judged on the arms'
    pooled requests and needs 368. With quiet history the replicate-level power asked for fewer
    replicates than the 368 requests need (at 80 a replicate, 4 replicates: 320, a count every
    comparison refuses, PrimaryNotGateable)."""
    rng = np.random.default_rng(0)
    for layer in canary_doc["spec"]["layers"]:  # the canary's count before 2026-12-07 (now 96)
        for suite in layer.get("suites") or []:
            if suite["name"] == "serving_workflow":
                suite["parameters"]["requests"] = 80
    doc = {**canary_doc, "spec": {**canary_doc["spec"], "metrics": {"inference": {
        "primary": ["serving_workflow/p99_latency_ms[c=4]", "serving_workflow/tokens_per_second[c=4]"]}}}}
    _history(tmp_path, {("serving_workflow", "c=4", "p99_latency_ms"): 0.01,
                        ("serving_workflow", "c=4", "tokens_per_second"): 0.01}, 4, rng)
    plans = {p.metric: p for p in plan(doc, "w" * 64, tmp_path, sims=60)}
    p99, tps = plans["serving_workflow/p99_latency_ms[c=4]"], plans["serving_workflow/tokens_per_second[c=4]"]
    assert tps.needed is not None and tps.needed < 5
    assert p99.needed == 5 and "needs 368: at 80 requests a replicate (requests) at least 5 replicates" in p99.note


def test_an_adhoc_experiment_is_no_history_for_a_scheduled_specs_plan(tmp_path):
    # review: gemm-threads.yaml (cadence adhoc, OMP_NUM_THREADS=1) has the canary's workload digest,
    # and `benchrun plan specs/local/canary.yaml` read "CV … from 3 runs" with the experiment among them
    from benchrun.stats.planning import auto_replicates

    rng = np.random.default_rng(5)
    for i in range(2):
        make_run(tmp_path, f"can{i}", {("s", "", "a"): (lognormal_replicates(rng, 100, 0.01, 5), "u", "higher")},
                 status={"created_utc": f"2026-11-0{i + 1}T00:00:00Z"})
    make_run(tmp_path, "exp", {("s", "", "a"): ([100.0, 130.0, 80.0, 120.0, 70.0], "u", "higher")},
             status={"created_utc": "2026-11-03T00:00:00Z", "cadence": "adhoc"},
             spec={"spec": {"intent": {"cadence": "adhoc"}}})
    doc = {"spec": {"intent": {"cadence": "canary"}, "trials": {"minReplicates": 3}, "comparison": {"deltaPct": 5.0},
                    "metrics": {"inference": {"primary": ["s/a"]}}}}
    got = plan(doc, "w" * 64, tmp_path, sims=60, max_n=10)[0]
    assert got.runs == 2 and got.cv < 0.02 and got.adhoc_left_out == 1, got
    assert "1 ad-hoc run(s) of this workload left out" in got.note
    why = auto_replicates(doc, "w" * 64, tmp_path, ["s"], 3, 10, sims=60)["s"]["why"]
    assert "from 2 runs" in why and "1 ad-hoc run(s) left out" in why
    # an experiment's own plan reads every run of its workload, the experiments' included
    doc["spec"]["intent"]["cadence"] = "adhoc"
    got = plan(doc, "w" * 64, tmp_path, sims=60, max_n=10)[0]
    assert got.runs == 3 and got.adhoc_left_out == 0 and "ad-hoc" not in got.note


@pytest.mark.slow
def test_a_plan_from_little_history_plans_for_the_upper_bound_of_its_noise(tmp_path):
    # review 2026-12-07: the plan used the point estimate of the CV, which a short history reads
    # below the truth about half the time: one run of 3 replicates (true CV 2 %, δ 3 %, one gating
    # test, 7 needed) planned fewer than 7 in 62 % of 40 histories, at 0.66 mean power for 0.8
    doc = {"spec": {"trials": {"minReplicates": 3, "confidenceLevel": 0.95}, "comparison": {"deltaPct": 3.0},
                    "metrics": {"inference": {"primary": ["serve/tps"]}}}}
    rng = np.random.default_rng(7)
    short, dofs = 0, set()
    for h in range(30):
        home = tmp_path / f"home{h}"
        _history(home, {("serve", "", "tps"): 0.02}, 1, rng, n=3)
        [got] = plan(doc, "w" * 64, home, sims=150, max_n=30)
        short += got.needed is not None and got.needed < 7
        dofs.add(got.dof)
        assert got.cv_planned > got.cv and "80% upper confidence bound" in got.note and "2 degrees of freedom" in got.note
    assert dofs == {2} and short <= 9, short  # the bound is below the truth in 20 % of histories


def test_a_metric_with_values_at_or_below_zero_is_not_planned_on_log_ratios(tmp_path):
    # review 2026-12-07: the plan dropped the values ≤ 0 and planned the log spread of the rest
    # against deltaPct (CV 75 %: "more than 10 replicates needed", so auto took maxReplicates),
    # where the comparison judges such a metric as differences against an absolute margin
    from benchrun.stats.planning import auto_replicates

    rng = np.random.default_rng(3)
    for i in range(3):
        make_run(tmp_path, f"h{i}", {("serve", "", "slack"): (rng.normal(0.3, 0.3, 5), "s", "higher")},
                 status={"created_utc": f"2026-11-0{i + 1}T00:00:00Z"})
    doc = {"spec": {"trials": {"minReplicates": 3}, "comparison": {"deltaPct": 5.0},
                    "metrics": {"inference": {"primary": ["serve/slack"]}}}}
    [got] = plan(doc, "w" * 64, tmp_path, sims=50, max_n=10)
    assert got.needed is None and got.runs == 0 and got.note.startswith("not planned:") and "≤ 0" in got.note
    auto = auto_replicates(doc, "w" * 64, tmp_path, ["serve"], 3, 10, sims=50)
    assert auto["serve"]["replicates"] == 3 and "not planned" in auto["serve"]["why"], auto
