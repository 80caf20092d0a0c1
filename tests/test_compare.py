"""Baseline comparison: HL/Mann–Whitney effects, verdicts, corrections, confirmation, the gate,
and seeded simulations proving the error rates (benchrun.stats.compare / gate)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from benchrun.stats import compare as C
from benchrun.stats.gate import check_gate
from benchrun.stats.load import load_run, replicate_table
from benchrun.stats.synthetic import lognormal_replicates, make_run

SIMS = 2000
N = 5


def _table(values, metric="tokens_per_second", direction="higher", suite="serve", case=""):
    return pd.DataFrame({"suite": suite, "case": case, "metric": metric, "unit": "u", "direction": direction,
                         "replicate": range(1, len(values) + 1), "value": list(values), "status": "ok"})


def _sim_verdicts(rng, shift, cv, n, n_gating=1, sims=SIMS, confidence=0.95, confirm=False):
    """Per simulation: the verdicts of a gating family of ``n_gating`` metrics (metric 0 shifted by
    ``shift``), decided by the gate itself (batch effects + compare.decide); with ``confirm``, the
    suspects get a fresh round (the same rules, the suspects as the family) and only confirmed
    regressions stay ``regression``."""
    from benchrun.stats import batch

    alpha = 1 - confidence
    rows = sims * n_gating
    base = lognormal_replicates(rng, 100.0, cv, rows * n).reshape(rows, n)
    factor = np.where(np.arange(rows) % n_gating == 0, 1 + shift, 1.0)[:, None]
    cand = lognormal_replicates(rng, 100.0, cv, rows * n).reshape(rows, n) * factor
    eff = batch.effects(base, cand, np.ones(rows, bool), confidence)
    margin = np.full(n_gating, math.log1p(0.03))
    sizes = np.full(n_gating, n)
    out = []
    for i in range(sims):
        sl = slice(i * n_gating, (i + 1) * n_gating)
        d = C.decide({k: v[sl] for k, v in eff.items()}, np.ones(n_gating, bool), sizes, sizes, margin, alpha)
        v = list(d.verdict)
        if confirm:
            sus = [j for j, x in enumerate(v) if x == "regression"]
            if sus:
                fb = lognormal_replicates(rng, 100.0, cv, len(sus) * n).reshape(len(sus), n)
                fc = lognormal_replicates(rng, 100.0, cv, len(sus) * n).reshape(len(sus), n)
                fc *= np.array([1 + shift if j == 0 else 1.0 for j in sus])[:, None]
                e2 = batch.effects(fb, fc, np.ones(len(sus), bool), confidence)
                k = len(sus)
                d2 = C.decide(e2, np.ones(k, bool), np.full(k, n), np.full(k, n), margin[:k], alpha)
                for j, x in zip(sus, d2.verdict):
                    v[j] = "regression" if x == "regression" else "not_confirmed"
        out.append(v)
    return out


def test_exact_null_distribution_matches_scipy():
    rng = np.random.default_rng(0)
    for n, m in [(5, 5), (3, 8), (10, 10), (7, 4)]:
        x, y = rng.normal(size=n), rng.normal(0.7, 1, size=m)
        res = stats.mannwhitneyu(x, y, method="exact")
        u = min(res.statistic, n * m - res.statistic)
        assert min(1.0, 2 * C.mw_null_cdf(n, m)[int(u)]) == pytest.approx(res.pvalue)
    # 5 vs 5: the smallest two-sided p is 2/252
    assert 2 * C.mw_null_cdf(5, 5)[0] == pytest.approx(0.0079365, abs=1e-6)


def test_hodges_lehmann_known_values():
    x, y = [3.0, 4.0, 5.0], [1.0, 2.0]
    s = C.hodges_lehmann(x, y, 0.8)
    assert s.estimate == np.median([2, 1, 3, 2, 4, 3])
    # 3 vs 2: P(U<=0)=0.1 so the 80 % interval is [D(1), D(6)] with coverage 0.8
    assert (s.low, s.high) == (1.0, 4.0) and s.coverage == pytest.approx(0.8)


def test_effect_orientation_by_direction():
    b, c = [100, 101, 99, 100.2, 100.5], [110, 111, 109, 110.2, 110.5]
    up = C.effect(b, c, "higher", 0.95)
    assert up["ratio"] == pytest.approx(1.1, rel=0.01) and up["ci_low"] > 1
    down = C.effect(b, c, "lower", 0.95)  # latency went up: worse
    assert down["ratio"] == pytest.approx(1 / 1.1, rel=0.01) and down["ci_high"] < 1
    assert up["p_value"] == pytest.approx(2 / 252) and up["test"] == "exact"


def test_verdict_rules():
    a = 0.05
    assert C.verdict(0.9, 0.85, 0.95, 0.01, a, 0.03) == "regression"
    assert C.verdict(0.9, 0.85, 0.95, 0.06, a, 0.03) == "inconclusive"  # not significant
    assert C.verdict(0.98, 0.975, 0.99, 0.01, a, 0.03) == "no_change"  # real but inside δ
    # the band is symmetric on the log scale: [1/1.03, 1.03], not [0.97, 1.03]
    assert C.verdict(0.98, 0.9705, 0.99, 0.01, a, 0.03) == "inconclusive"
    assert C.verdict(1.1, 1.05, 1.2, 0.01, a, 0.03) == "improvement"
    assert C.verdict(1.0, 0.98, 1.02, 0.9, a, 0.03) == "no_change"
    assert C.verdict(1.0, 0.9, 1.1, 0.9, a, 0.03) == "inconclusive"
    assert C.verdict(math.nan, math.nan, math.nan, math.nan, a, 0.03) == "inconclusive"


def test_holm_and_bh():
    p = [0.01, 0.04, 0.03, np.nan]
    assert C.holm(p)[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(C.holm(p)[3])
    assert C.benjamini_hochberg([0.01, 0.04, 0.03])[:3] == pytest.approx([0.03, 0.04, 0.04])


def test_aa_false_positive_rate_single_gating_metric():
    rng = np.random.default_rng(11)
    for cv in (0.02, 0.10):  # at CV 10 % the margin δ does not help: the test level does the work
        v = [r[0] for r in _sim_verdicts(rng, 0.0, cv, N)]
        regress = v.count("regression") / SIMS
        any_alarm = (v.count("regression") + v.count("improvement")) / SIMS
        assert regress <= 0.05 and any_alarm <= 0.05, (cv, regress, any_alarm)


def test_aa_familywise_rate_seed_primaries():
    rng = np.random.default_rng(12)
    rows = _sim_verdicts(rng, 0.0, 0.10, N, n_gating=6, sims=1000)
    fwer = sum(any(v == "regression" for v in r) for r in rows) / len(rows)
    assert fwer <= 0.05


def test_power_ten_percent_regression_cv2_n5():
    rng = np.random.default_rng(13)
    v = [r[0] for r in _sim_verdicts(rng, -0.10, 0.02, N)]
    assert v.count("regression") / SIMS >= 0.80
    assert v.count("improvement") == 0
    # with the seed's six primary metrics in the Holm family
    v6 = [r[0] for r in _sim_verdicts(rng, -0.10, 0.02, N, n_gating=6, sims=500)]
    assert v6.count("regression") / 500 >= 0.80


@pytest.mark.parametrize("n", [5, 10])
def test_hl_interval_coverage(n):
    rng = np.random.default_rng(100 + n)
    true_log_ratio = math.log(0.95)
    from benchrun.stats import batch  # the same numbers as C.effect, all simulations at once

    b = lognormal_replicates(rng, 100.0, 0.05, SIMS * n).reshape(SIMS, n)
    c = lognormal_replicates(rng, 95.0, 0.05, SIMS * n).reshape(SIMS, n)
    e = batch.effects(b, c, np.ones(SIMS, bool), 0.95)
    stated = float(e["ci_coverage"][0])
    cov = float(np.mean((np.log(e["ci_low"]) <= true_log_ratio) & (true_log_ratio <= np.log(e["ci_high"]))))
    assert C.effect(b[0], c[0], "higher", 0.95)["ci_coverage"] == stated
    assert stated >= 0.95
    assert abs(cov - stated) < 0.02  # the stated (exact, discrete) coverage holds
    if n == 10:
        assert abs(cov - 0.95) < 0.02  # and at n = 10 it is within 2 points of nominal


def test_compare_tables_gating_and_corrections():
    rng = np.random.default_rng(3)
    base = pd.concat([_table(lognormal_replicates(rng, 100, 0.02, 5)),
                      _table(lognormal_replicates(rng, 50, 0.02, 5), metric="p99_latency_ms", direction="lower"),
                      _table(lognormal_replicates(rng, 10, 0.02, 5), metric="gpu_utilization_pct")])
    cand = pd.concat([_table(lognormal_replicates(rng, 100, 0.02, 5)),
                      _table(lognormal_replicates(rng, 60, 0.02, 5), metric="p99_latency_ms", direction="lower"),
                      _table(lognormal_replicates(rng, 10, 0.02, 5), metric="gpu_utilization_pct")])
    res = C.compare_tables(base, cand, primary={"tokens_per_second", "p99_latency_ms"})
    r = res.rows.set_index("name")
    assert r.loc["p99_latency_ms", "verdict"] == "regression"
    assert r.loc["p99_latency_ms", "ratio"] < 0.9
    # utilization is context: no correction family, no verdict (issue 26 item 3)
    assert r.loc["p99_latency_ms", "correction"] == "holm" and r.loc["gpu_utilization_pct", "correction"] == "none"
    assert r.loc["gpu_utilization_pct", "verdict"] == "" and r.loc["gpu_utilization_pct", "role"] == "context"
    assert bool(r.loc["p99_latency_ms", "gating"]) and not bool(r.loc["gpu_utilization_pct", "gating"])
    # no confirm hook: suspected, not declared
    assert res.suspected == [("serve", "", "p99_latency_ms")]
    assert not res.regression_detected and res.condition()["status"] == "Unknown"
    for rec in res.records():
        assert {"metric", "baseline_median", "candidate_median", "ratio", "ci_low", "ci_high",
                "p_value", "verdict", "gating"} <= set(rec)


def test_confirmation_round_confirms_or_clears():
    rng = np.random.default_rng(4)
    base = _table(lognormal_replicates(rng, 100, 0.02, 5))
    cand = _table(lognormal_replicates(rng, 85, 0.02, 5))
    calls = []

    def confirm_regressed(keys):
        calls.append(keys)
        return _table(lognormal_replicates(rng, 100, 0.02, 5)), _table(lognormal_replicates(rng, 85, 0.02, 5))

    res = C.compare_tables(base, cand, primary={"tokens_per_second"}, confirm=confirm_regressed)
    assert calls == [[("serve", "", "tokens_per_second")]]
    assert res.regression_detected and res.condition()["status"] == "True"
    assert res.rows.confirmation.tolist() == ["confirmed"]

    def confirm_fluke(keys):  # the fresh round shows no difference
        return _table(lognormal_replicates(rng, 100, 0.02, 5)), _table(lognormal_replicates(rng, 100, 0.02, 5))

    res2 = C.compare_tables(base, cand, primary={"tokens_per_second"}, confirm=confirm_fluke)
    assert not res2.regression_detected and res2.confirmation == "not_confirmed"
    assert res2.condition() == {"type": "RegressionDetected", "status": "False", "reason": "NotConfirmed",
                                "message": res2.condition()["message"]}

    def never(keys):  # no regression, no call
        raise AssertionError("confirm must not be called")

    res3 = C.compare_tables(base, base, primary={"tokens_per_second"}, confirm=never)
    assert res3.confirmation == "not_needed" and res3.condition()["status"] == "False"


def test_confirmation_round_that_gives_no_answer_leaves_regression_unknown():
    from benchrun.errors import BenchrunError
    from benchrun.stats.load import REPLICATE_COLUMNS

    rng = np.random.default_rng(4)
    base = _table(lognormal_replicates(rng, 100, 0.02, 5))
    cand = _table(lognormal_replicates(rng, 85, 0.02, 5))

    def cannot_run(keys):  # what benchrun.confirm raises when a run's pinned spec is gone
        raise BenchrunError("run base-1: pinned spec /x/base-1_spec.yaml is missing; submit the run again")

    res = C.compare_tables(base, cand, primary={"tokens_per_second"}, confirm=cannot_run)
    assert not res.regression_detected and res.confirmation == "failed"
    cond = res.condition()
    assert (cond["status"], cond["reason"]) == ("Unknown", "ConfirmationFailed")
    assert "pinned spec /x/base-1_spec.yaml is missing" in cond["message"]
    assert "serve/tokens_per_second" in cond["message"]
    assert res.rows.confirmation.tolist() == ["failed"] and res.rows.verdict.tolist() == ["regression"]

    empty = pd.DataFrame([], columns=list(REPLICATE_COLUMNS)).astype({"replicate": "int64", "value": "float64"})
    res2 = C.compare_tables(base, cand, primary={"tokens_per_second"}, confirm=lambda keys: (empty, empty))
    assert res2.confirmation == "failed" and res2.condition()["status"] == "Unknown"
    assert "fewer than 2 ok fresh replicates of both arms, matched by replicate" in res2.condition()["message"]

    # one arm short of replicates: not cleared either
    res3 = C.compare_tables(base, cand, primary={"tokens_per_second"},
                            confirm=lambda keys: (_table([100.0]), _table(lognormal_replicates(rng, 85, 0.02, 5))))
    assert res3.confirmation == "failed" and res3.rows.confirmation.tolist() == ["failed"]

    # two suspects: one cleared by fresh replicates, one without fresh data: the round has no answer
    lat_b = _table(lognormal_replicates(rng, 50, 0.02, 5), metric="p99_latency_ms", direction="lower")
    lat_c = _table(lognormal_replicates(rng, 60, 0.02, 5), metric="p99_latency_ms", direction="lower")
    res4 = C.compare_tables(pd.concat([base, lat_b]), pd.concat([cand, lat_c]),
                            primary={"tokens_per_second", "p99_latency_ms"},
                            confirm=lambda keys: (_table(lognormal_replicates(rng, 100, 0.02, 5)),
                                                  _table(lognormal_replicates(rng, 100, 0.02, 5))))
    assert res4.confirmation == "failed" and res4.condition()["status"] == "Unknown"
    assert res4.rows.set_index("name").confirmation.to_dict() == {"p99_latency_ms": "failed",
                                                                  "tokens_per_second": "not_confirmed"}


def test_holm_family_note_when_n_too_small():
    rng = np.random.default_rng(5)
    metrics = [f"m{i}" for i in range(18)]
    base = pd.concat([_table(lognormal_replicates(rng, 100, 0.02, 5), metric=m) for m in metrics])
    res = C.compare_tables(base, base, primary=set(metrics))
    assert any("cannot pass Holm" in note and "Welch" in note and "with 6 replicates" in note for note in res.notes)
    assert set(res.rows["gate_test"]) == {"welch_t"}
    few = C.compare_tables(base, base, primary={"m0", "m1"})  # 2 tests: the exact rank test can gate
    assert set(few.rows.loc[few.rows.gating, "gate_test"]) == {"exact_rank"}
    assert not any("cannot pass Holm" in note for note in few.notes)


def test_gate_passes_declared_variable_and_refuses_two(tmp_path):
    m = {("serve", "", "tokens_per_second"): ([100, 101, 99, 100, 100], "tok/s", "higher")}
    make_run(tmp_path, "base", m)
    make_run(tmp_path, "same", m, environment={"hostname": "host-b", "background_load": {"before": {"loadavg_1m": 1.9}}})
    make_run(tmp_path, "rt", m, environment={"packages": {"torch": "2.14.0"}})
    make_run(tmp_path, "two", m, environment={"packages": {"torch": "2.14.0"}, "driver": "580.1"})
    make_run(tmp_path, "wl", m, status={"workload_spec_digest": "x" * 64})
    base = load_run(tmp_path / "runs" / "base")
    assert check_gate(base, load_run(tmp_path / "runs" / "same")).passed  # volatile fields ignored
    rt = check_gate(base, load_run(tmp_path / "runs" / "rt"))
    assert rt.passed and [d.field for d in rt.diffs] == ["environment.packages.torch"]
    two = check_gate(base, load_run(tmp_path / "runs" / "two"))
    assert not two.passed
    assert [d.field for d in two.refused] == ["environment.driver"]
    assert "environment.driver" in two.message() and "driver_stack" in two.message()
    wl = check_gate(base, load_run(tmp_path / "runs" / "wl"))
    assert not wl.passed and wl.refused[0].field == "status.workload_spec_digest"
    # the same pair is fine when the driver stack is the variable, but then torch is refused
    drv = check_gate(base, load_run(tmp_path / "runs" / "two"), variable="driver_stack")
    assert [d.field for d in drv.refused] == ["environment.packages.torch"]


def test_end_to_end_compare_runs(tmp_path):
    from benchrun.stats.analysis import compare_runs

    rng = np.random.default_rng(8)
    metrics_b = {("serve", "c=8", "tokens_per_second"): (lognormal_replicates(rng, 100, 0.02, 5), "tok/s", "higher"),
                 ("serve", "c=8", "p50_latency_ms"): (lognormal_replicates(rng, 40, 0.02, 5), "ms", "lower")}
    metrics_c = {("serve", "c=8", "tokens_per_second"): (lognormal_replicates(rng, 100, 0.02, 5), "tok/s", "higher"),
                 ("serve", "c=8", "p50_latency_ms"): (lognormal_replicates(rng, 40, 0.02, 5), "ms", "lower")}
    prim = {"metrics": {"inference": {"primary": ["tokens_per_second", "p50_latency_ms"]}}}
    b = make_run(tmp_path, "base", metrics_b, spec={"spec": prim})
    c = make_run(tmp_path, "cand", metrics_c, spec={"spec": {**prim, "comparison": {"deltaPctByMetric": {"p50_latency_ms": 10}}}})
    gate, res = compare_runs(b, c)
    assert gate.passed
    rows = res.rows.set_index("name")
    # the candidate's looser margin for p50 (10 %) is not the bar it is judged by: the baseline's 3 % is stricter
    assert rows.loc["p50_latency_ms", "delta_pct"] == 3.0 and rows.loc["tokens_per_second", "delta_pct"] == 3.0
    assert any("comparison.deltaPctByMetric differently" in n for n in res.notes)
    strict = make_run(tmp_path, "cand2", metrics_c,
                      spec={"spec": {**prim, "comparison": {"deltaPctByMetric": {"p50_latency_ms": 2}}}})
    _, res2 = compare_runs(b, strict)  # a stricter candidate margin is used
    assert res2.rows.set_index("name").loc["p50_latency_ms", "delta_pct"] == 2.0
    assert not rows.loc["tokens_per_second", "verdict"] == "regression"
    assert replicate_table(b).shape[0] == 10


def test_gate_on_real_environment_capture(tmp_path):
    from benchrun import envcapture  # a plain import: a broken capture must fail here, not skip
    env = envcapture.capture_environment(load_interval_s=0.05)
    m = {("serve", "", "tokens_per_second"): ([100, 101, 99, 100.2, 100.5], "tok/s", "higher")}
    make_run(tmp_path, "real-a", m, environment=env)
    later = envcapture.capture_environment(load_interval_s=0.05)  # new time, load, free memory
    make_run(tmp_path, "real-b", m, environment=later)
    upgraded = {**later, "packages": {**later["packages"], "torch": "9.9.9"},
                "key_inputs": {**later["key_inputs"],
                               "software": {**later["key_inputs"]["software"], "torch_cuda": "99.0"}}}
    make_run(tmp_path, "real-c", m, environment=upgraded)
    both = {**upgraded, "kernel": "9.0.0-other"}
    make_run(tmp_path, "real-d", m, environment=both)
    a = load_run(tmp_path / "runs" / "real-a")
    assert check_gate(a, load_run(tmp_path / "runs" / "real-b")).passed
    c = check_gate(a, load_run(tmp_path / "runs" / "real-c"))
    assert c.passed and {d.category for d in c.diffs} == {"software"}
    d = check_gate(a, load_run(tmp_path / "runs" / "real-d"))
    assert not d.passed and [x.field for x in d.refused] == ["environment.kernel"]
