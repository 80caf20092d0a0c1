"""Change points over history (benchrun.stats.changepoint): detection, the head rule, the fact table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchrun.stats.changepoint import FACT_COLUMNS, change_points, detect, history_table, \
    write_change_point_fact
from benchrun.stats.synthetic import make_run


def test_step_is_found_at_its_index_with_magnitude():
    rng = np.random.default_rng(0)
    y = np.r_[rng.normal(100, 1, 20), rng.normal(90, 1, 20)]
    cps = detect(y)
    assert len(cps) == 1
    cp = cps[0]
    assert abs(cp.index - 20) <= 1 and 20 <= cp.alarm_index <= 23
    assert cp.magnitude_pct == pytest.approx((cp.after_mean - cp.before_mean) / cp.before_mean * 100)
    assert -12 < cp.magnitude_pct < -8


def test_flat_series_rarely_alarm_and_steps_are_found():
    rng = np.random.default_rng(1)
    false = sum(bool(detect(rng.normal(100, 1, 30))) for _ in range(200))
    assert false / 200 <= 0.02
    found = sum(any(abs(c.index - 15) <= 1 for c in detect(np.r_[rng.normal(100, 1, 15), rng.normal(96, 1, 15)]))
                for _ in range(100))
    assert found >= 80


def test_no_change_point_inside_the_head():
    y = np.r_[np.full(3, 100.0), np.full(27, 80.0)] + np.random.default_rng(2).normal(0, 0.5, 30)
    assert detect(y) == []
    assert detect(np.r_[np.full(14, 100.0), np.full(1, 50.0)]) == []  # 15 nights: all reference


def test_history_fact_table_from_run_directories(tmp_path):
    rng = np.random.default_rng(4)
    for i in range(28):
        level = 100.0 if i < 18 else 85.0
        make_run(tmp_path, f"nightly-{i:02d}",
                 {("serve", "c=8", "tokens_per_second"): (rng.normal(level, 1.0, 3), "tok/s", "higher"),
                  ("serve", "c=8", "p50_latency_ms"): (rng.normal(40, 0.4, 3), "ms", "lower")},
                 status={"cadence": "nightly", "created_utc": f"2026-11-{i + 1:02d}T02:00:00Z",
                         "artifact_manifest_digest": f"{i:064x}"}, sealed=False)  # the digest as given
    make_run(tmp_path, "canary-x", {("serve", "c=8", "tokens_per_second"): ([1, 2, 3], "tok/s", "higher")},
             status={"cadence": "canary"})
    make_run(tmp_path, "broken", {("serve", "c=8", "tokens_per_second"): ([1, 2, 3], "tok/s", "higher")},
             status={"cadence": "nightly"})
    (tmp_path / "runs" / "broken" / "status.json").write_text("{not json")
    hist = history_table(tmp_path)  # the damaged run is skipped, not fatal
    assert len(hist) == 56 and "canary-x" not in set(hist.run_id) and "broken" not in set(hist.run_id)
    assert hist.hardware_key.nunique() == 1
    fact = change_points(hist)
    assert list(fact.columns) == FACT_COLUMNS
    tps = fact[fact.metric == "tokens_per_second"]
    assert len(tps) == 1
    row = tps.iloc[0]
    assert row.run_id == "nightly-18" and row.kind == "regression"
    assert row.artifact_manifest_digest == f"{18:064x}"
    assert abs(row.before_mean - 100) < 1 and abs(row.after_mean - 85) < 1
    assert fact[fact.metric == "p50_latency_ms"].empty
    path = write_change_point_fact(fact, tmp_path)
    assert path == tmp_path / "warehouse" / "change_point_fact" / "change_points.parquet"
    back = pd.read_parquet(path)
    assert back.run_id.tolist() == ["nightly-18"]
    assert not list(path.parent.glob(".*tmp"))
    from benchrun.warehouse import query  # queryable beside the other facts

    rows = query("SELECT run_id, kind FROM change_point_fact", tmp_path).table.to_pylist()
    assert rows == [{"run_id": "nightly-18", "kind": "regression"}]


def _ar1(rng, phi, n):
    e = rng.standard_normal(n + 50)
    y = np.empty_like(e)
    y[0] = e[0] / np.sqrt(1 - phi**2)
    for t in range(1, e.size):
        y[t] = phi * y[t - 1] + e[t]
    return 100 + y[50:]


@pytest.mark.slow
def test_false_alarms_stay_at_5_percent_on_autocorrelated_nulls():
    # before: 14 % at φ = 0.2 and 58 % at φ = 0.5 (the plain rank permutation test)
    rng = np.random.default_rng(31)
    for phi, sims in ((0.2, 200), (0.5, 300)):
        alarms = sum(bool(detect(_ar1(rng, phi, 40), floor_pct=0)) for i in range(sims))
        assert alarms / sims <= 0.05, (phi, alarms / sims)
    # and a 3-sd step 25 nights into a 40-night φ = 0.5 series is still found, located within 2
    # nights, in 30 % or more (it was 60 %+ under the per-pass test, whose per-history false
    # alarms were 24 % at φ = 0.5; the sequential detector trades this for ~5 % per history, and
    # the young factor of the φ margin (2026-12-05) for 3.9-4.4 %: 33-38 % found over 300 series
    # at seeds 31-33, where the 1/√n margin found 39-45 %)
    found = 0
    for i in range(100):
        y = _ar1(rng, 0.5, 40)
        y[25:] += 3 / np.sqrt(1 - 0.25)
        found += any(abs(c.index - 25) <= 2 for c in detect(y, floor_pct=0))
    assert found >= 30


def _history(n_series, steps, n=30):
    rng = np.random.default_rng(7)
    rows = []
    for s in range(n_series):
        y = rng.normal(100, 1, n)
        if s in steps:
            y[20:] -= 8
        for i, v in enumerate(y):
            rows.append({"run_id": f"r{i:02d}", "created_utc": f"2026-11-{i + 1:02d}T00:00:00Z",
                         "workload_spec_digest": "w", "hardware_key": "h", "suite": "s", "case": "",
                         "metric": f"m{s}", "direction": "higher", "median": v, "n": 3,
                         "artifact_manifest_digest": "a"})
    return pd.DataFrame(rows)


def test_only_the_stepped_series_alarms_and_only_new_breaks_are_new():
    hist = _history(20, {3})
    fact = change_points(hist)
    assert fact.metric.tolist() == ["m3"] and fact.run_id.tolist() == ["r20"] and bool(fact.new.iloc[0])
    # the next pass sees one more night: the same break is carried, not announced again
    more = pd.concat([hist, _history(20, {3}, n=31).query("run_id == 'r30'")], ignore_index=True)
    again = change_points(more, previous=fact)
    assert again.run_id.tolist() == ["r20"] and not bool(again.new.iloc[0])
    assert set(FACT_COLUMNS) >= {"new", "ar1_phi"}


def _nights(rng, phi, n, cv=0.02):
    return 100 * (1 + cv * np.sqrt(1 - phi**2) * (_ar1(rng, phi, n) - 100))


def test_change_points_do_not_move_or_multiply_as_nights_are_added():
    # before: the whole history was re-tested every night; breaks moved, and new ones appeared
    # among old nights (27-58 % of 200-night null histories alarmed at some pass)
    rng = np.random.default_rng(11)
    for phi in (0.0, 0.5):
        for _ in range(5):
            y = _nights(rng, phi, 80)
            y[50:] *= 1.06
            full = [(c.index, c.alarm_index, c.magnitude_pct) for c in detect(y)]
            for night in range(20, 80, 3):
                prefix = [(c.index, c.alarm_index, c.magnitude_pct) for c in detect(y[:night])]
                assert prefix == [c for c in full if c[1] < night], (phi, night)


def test_per_history_false_alarms_and_detection_delay():
    # 200-night histories without change, iid and φ = 0.5 at CV 2 %: few ever alarm (before:
    # 27-58 % over 200 nights); a 5 % step is mostly found within 7 nights
    rng = np.random.default_rng(12)
    for phi in (0.0, 0.5):
        alarms = sum(bool(detect(_nights(rng, phi, 200))) for _ in range(40))
        assert alarms <= 4, (phi, alarms)
    found = 0
    for _ in range(40):
        y = _nights(rng, 0.0, 130)
        y[100:] *= 1.05
        cps = detect(y)
        found += bool(cps) and 100 <= cps[0].alarm_index < 107
    assert found >= 34


def test_the_floor_keeps_small_clear_moves_quiet_and_every_alarm_states_its_detector():
    import json

    y = _nights(np.random.default_rng(13), 0.0, 60, cv=0.002)
    y[35:] *= 1.02  # 10 sd, but 2 %: under a 3 % floor
    assert detect(y, floor_pct=3.0) == []
    assert [c.index for c in detect(y, floor_pct=1.0)] == [35]
    hist = _history(3, {1})
    hist["floor_pct"] = 5.0
    fact = change_points(hist)
    det = json.loads(fact.detector.iloc[0])
    assert det["floor_pct"] == 5.0 and {"k", "h", "warmup", "lag", "phi_margin", "clip", "method"} <= set(det)
    assert fact.alarm_run_id.iloc[0] >= fact.run_id.iloc[0]
    hist["floor_pct"] = 9.0  # the 8 % step is under this spec's δ
    assert change_points(hist).empty


def _siblings(rng, phis, n, step_at=None):
    out = []
    for phi in phis:
        y = _nights(rng, phi, n)
        if step_at is not None:
            y[step_at:] *= 1.05
        out.append(y)
    return out


def test_young_iid_steps_are_found_sooner_with_the_sibling_pool():
    # a young segment's own phi comes from ~23 nights; pooled over 7 iid siblings it is known to
    # ~0.75/sqrt(150), so fewer young steps are damped (the gain is small since the long-run z:
    # 162 -> 166 of 200 here, 82.4 -> 84.4 % in benchmarks/statistics_audit.py; what the pool
    # buys most now is quiet on autocorrelated families, below)
    from benchrun.stats.changepoint import detect_series, sibling_pool

    rng = np.random.default_rng(21)
    found = {"own": 0, "pool": 0}
    for _ in range(25):
        ys = _siblings(rng, [0.0] * 8, 60, step_at=30)
        pools = sibling_pool([(np.arange(60), y) for y in ys])
        for y, pool in zip(ys, pools):
            for key, prior in (("own", None), ("pool", pool)):
                hit = [c for c in detect_series(y, phi_prior=prior) if c.alarm_index >= 30]
                found[key] += bool(hit) and hit[0].alarm_index < 37
    assert found["pool"] >= found["own"] + 2 and found["own"] >= 150, found  # of 200


def test_siblings_that_step_together_are_found_sooner_with_the_joint_rule():
    # with the true phi (0) 96 % of the audit's young steps are found within 7 nights, with the
    # own 23-night estimate and its margin 79-80 %: the price is phi's estimation, not the
    # threshold. The joint CUSUM (the pool's phi alone) alarms only on a night when >= 30 % of the
    # siblings' newest 3 nights shifted past their floor too: 160 -> 186 of 200 here (seed 21)
    from benchrun.stats.changepoint import Detector, detect_series, sibling_pool

    rng = np.random.default_rng(21)
    found = {0.0: 0, 0.3: 0}
    for _ in range(25):
        ys = _siblings(rng, [0.0] * 8, 60, step_at=30)
        for share in found:
            det = Detector(joint=share)
            for y, pool in zip(ys, sibling_pool([(np.arange(60), y) for y in ys], detector=det)):
                hit = [c for c in detect_series(y, phi_prior=pool, detector=det) if c.alarm_index >= 30]
                found[share] += bool(hit) and hit[0].alarm_index < 37
    assert found[0.3] >= 180 and found[0.3] >= found[0.0] + 15, found  # of 200


def test_a_series_that_steps_alone_is_judged_as_without_the_joint_rule():
    # siblings that do not shift give no corroboration: every change point (the stepping series'
    # and the quiet siblings') is the same with the joint rule on and off
    from benchrun.stats.changepoint import Detector, detect_series, sibling_pool

    rng = np.random.default_rng(26)
    for _ in range(10):
        ys = _siblings(rng, [0.5] + [0.0] * 7, 60)
        ys[0][30:] *= 1.05
        got = []
        for det in (Detector(joint=0.0), Detector()):
            pools = sibling_pool([(np.arange(60), y) for y in ys], detector=det)
            got.append([[(c.index, c.alarm_index, c.phi) for c in detect_series(y, phi_prior=p, detector=det)]
                        for y, p in zip(ys, pools)])
        assert got[0] == got[1]


@pytest.mark.slow
def test_autocorrelated_families_stay_quiet_with_the_long_run_z():
    # 40 families of 8 series at AR(1) phi 0.8, 200 nights each: standardised by the long-run
    # spread, 14 series ever alarm alone and 0 with the pool (seed 25); z on the innovations at the
    # same margin (the rule before): 30 and 8, and 24 and 6 at its own margin of 1.0
    from benchrun.stats.changepoint import Detector, detect_series, sibling_pool

    def ever(det: Detector) -> tuple[int, int]:
        rng = np.random.default_rng(25)
        own = pooled = 0
        for _ in range(40):
            ys = _siblings(rng, [0.8] * 8, 200)
            for y, pool in zip(ys, sibling_pool([(np.arange(200), y) for y in ys], detector=det)):
                own += bool(detect_series(y, detector=det))
                pooled += bool(detect_series(y, phi_prior=pool, detector=det))
        return own, pooled

    own, pooled = ever(Detector())
    assert own <= 20 and pooled <= 3, (own, pooled)  # of 320 series
    own_w, pooled_w = ever(Detector(whiten=True))
    assert own_w >= own + 8 and pooled_w >= pooled + 4, (own_w, pooled_w)


def test_a_high_phi_series_among_iid_siblings_is_not_whitened_less_than_by_its_own_rule():
    import math

    from benchrun.stats.changepoint import DETECTOR, _own_phi, _reference

    rng = np.random.default_rng(22)
    worse = 0
    for _ in range(300):
        x = _nights(rng, 0.5, 23)
        own = _own_phi(x, float(x.mean()))
        _m, phi_own_rule, _s = _reference(x, 0, 23, DETECTOR.phi_margin)
        _m, phi, _s = _reference(x, 0, 23, DETECTOR.phi_margin, (0.0, 160.0), DETECTOR.pool_below, DETECTOR.pool_gap)
        if own - 0.0 > DETECTOR.pool_gap * math.sqrt(1 / 23 + 1 / 160):
            assert phi == phi_own_rule  # clearly not like its siblings: its own rule, full margin
        else:
            assert phi >= min(max(own, 0.0), 0.95)  # never below its own estimate
        worse += phi < phi_own_rule
    assert worse / 300 < 0.25, worse  # the pool lowers its phi only when its own estimate is near the pool's


def test_a_high_phi_series_among_iid_siblings_alarms_about_as_often_as_alone():
    from benchrun.stats.changepoint import detect_series, sibling_pool

    rng = np.random.default_rng(23)
    alone = pooled = 0
    for _ in range(400):
        ys = _siblings(rng, [0.5] + [0.0] * 7, 40)
        pool = sibling_pool([(np.arange(40), y) for y in ys])[0]
        alone += bool(detect(ys[0], floor_pct=0))
        pooled += bool(detect_series(ys[0], floor_pct=0, phi_prior=pool))
    assert pooled <= alone + 8, (alone, pooled)  # of 400: at most 2 points more


def test_pooled_alarms_do_not_move_as_nights_are_added_and_state_the_pool():
    import json

    from benchrun.stats.changepoint import detect_series, sibling_pool

    rng = np.random.default_rng(24)
    ys = _siblings(rng, [0.0] * 4, 80, step_at=40)
    ys[1][60:] *= 0.94  # a sibling's own later break: its segment restarts in the pool
    full_pool = sibling_pool([(np.arange(80), y) for y in ys])
    full = [(c.index, c.alarm_index, c.phi) for c in detect_series(ys[0], phi_prior=full_pool[0])]
    for night in range(20, 80, 4):
        pre = sibling_pool([(np.arange(night), y[:night]) for y in ys])
        for part in range(4):  # the pool's phi and nights, the siblings' shares shifted up and down
            assert np.allclose(pre[0][part], full_pool[0][part][:night], equal_nan=True)
        got = [(c.index, c.alarm_index, c.phi) for c in detect_series(ys[0][:night], phi_prior=pre[0])]
        assert got == [c for c in full if c[1] < night], night
    rows = []
    for s, y in enumerate(ys):
        for i, v in enumerate(y):
            rows.append({"run_id": f"r{i:02d}", "created_utc": f"2026-10-{1 + i // 24:02d}T{i % 24:02d}:00:00Z",
                         "workload_spec_digest": "w", "hardware_key": "h", "suite": "s", "case": "",
                         "metric": f"m{s}", "direction": "higher", "median": v, "n": 3,
                         "artifact_manifest_digest": "a"})
    fact = change_points(pd.DataFrame(rows))
    det = json.loads(fact[fact.metric == "m0"].detector.iloc[0])
    assert 0 <= det["phi_pool"] < 0.3 and det["phi_pool_n"] > 40 and det["pool_gap"] == 0.5
    alone = change_points(pd.DataFrame(rows), pool=False)
    assert "phi_pool" not in json.loads(alone.detector.iloc[0])


@pytest.mark.slow
def test_a_segment_after_a_change_carries_the_series_noise_and_says_so():
    # after a real change the new segment used to start from nothing: 15-23 nights of its own
    # for its phi, so an AR(1) series alarmed again soon after a true step (a 10 % step: 7.6 % of
    # 800 series, 4.1 % carrying the previous segment's phi; seed 5); the first alarm is the same
    import dataclasses
    import json

    from benchrun.stats.changepoint import DETECTOR, detect_series

    fresh = dataclasses.replace(DETECTOR, carry=False)
    rng = np.random.default_rng(41)
    other = {"carry": 0, "fresh": 0}
    for _ in range(300):
        y = _nights(rng, 0.5, 200)
        y[100:] *= 1.10
        got = {"carry": detect_series(y), "fresh": detect_series(y, detector=fresh)}
        assert got["carry"][:1] == got["fresh"][:1]
        for k, cps in got.items():
            other[k] += len(cps) > 1 or any(c.alarm_index < 100 for c in cps)
        cps = got["carry"]
        for i in range(1, len(cps)):  # a previous segment of at least warmup nights is carried
            if cps[i - 1].index - (cps[i - 2].index if i > 1 else 0) >= DETECTOR.warmup:
                assert cps[i].prior_from == "previous segment"
    assert other["carry"] * 3 <= other["fresh"] * 2, other  # at least a third fewer
    hist = _history(3, {1})
    det = json.loads(change_points(hist, pool=False).detector.iloc[0])
    assert det["carry"] is True and "phi_prior_from" not in det  # the first change had no prior


def test_a_young_reference_covers_its_phi_as_often_as_an_old_one():
    """The φ margin was phi_margin/√n at every n, but a short reference's lag-1 estimate is more
    spread and more skewed than 1/√n says: the φ used covered a true 0.5 in 69 % of 15-night
    references and 77 % of 93-night ones, so young autocorrelated series were standardised too
    tightly (a lone φ 0.5 series ever alarmed in 5.0-5.8 % of 200-night histories, most of them
    before night 50). With the young factor the coverage is the same at every length."""
    from benchrun.stats.changepoint import _reference

    rng = np.random.default_rng(5)
    for phi in (0.3, 0.5):
        cover = {}
        for n in (15, 23, 30, 93):
            refs = [_nights(rng, phi, n) for _ in range(1500)]
            cover[n] = np.mean([_reference(x, 0, n, 0.75)[1] >= phi for x in refs])
        assert min(cover[15], cover[23], cover[30]) >= cover[93] - 0.04, (phi, cover)  # before: 8 points below
        assert min(cover.values()) >= 0.75, (phi, cover)


def test_uncorrelated_siblings_that_step_together_judge_with_the_pools_phi_without_its_margin():
    # the joint CUSUM's margin on the pool's phi scales with the siblings' mean squared
    # correlation (Detector.joint_rho): iid siblings (rho^2 ~ 1/n) shift together only when
    # something moved them, so the margin only damps the step. Steps after 30 nights found within
    # 7: 186 -> 189 of 200 here (seed 21); the audit 92.9-93.75 % -> 95.0-95.75 % (seeds 0-3)
    from benchrun.stats.changepoint import Detector, detect_series, sibling_pool

    rng = np.random.default_rng(21)
    found = {0.0: 0, 0.25: 0}
    for _ in range(25):
        ys = _siblings(rng, [0.0] * 8, 60, step_at=30)
        pools = sibling_pool([(np.arange(60), y) for y in ys])
        for rho in found:
            det = Detector(joint_rho=rho)
            for y, pool in zip(ys, pools):
                hit = [c for c in detect_series(y, phi_prior=pool, detector=det) if c.alarm_index >= 30]
                found[rho] += bool(hit) and hit[0].alarm_index < 37
    assert found[0.25] >= found[0.0] + 3, found  # of 200


def test_siblings_with_shared_noise_keep_the_joint_rules_margin():
    # 80 % of the variance common (rho^2 ~ 0.64): a common excursion corroborates itself, so the
    # joint CUSUM keeps the pool's whole margin; without it the audit's family ever alarms in
    # 7.1-7.8 % of series (3.1-3.9 % with it). Every change point is the same with joint_rho on
    # and off, and the 4-tuple pool (no rho^2) gives the full margin too
    from benchrun.stats.changepoint import Detector, detect_series, sibling_pool

    rng = np.random.default_rng(27)
    for _ in range(6):
        common = _nights(rng, 0.5, 120) / 100 - 1
        ys = [100 * (1 + np.sqrt(0.8) * common + np.sqrt(0.2) * (_nights(rng, 0.5, 120) / 100 - 1))
              for _ in range(8)]
        pools = sibling_pool([(np.arange(120), y) for y in ys])
        assert all(p[4][30:].min() > 0.25 for p in pools)
        for y, p in zip(ys, pools):
            got = [[(c.index, c.alarm_index, c.phi) for c in detect_series(y, phi_prior=q, detector=det)]
                   for det, q in ((Detector(), p), (Detector(joint_rho=0.0), p), (Detector(), p[:4]))]
            assert got[0] == got[1] == got[2]


def test_a_sibling_prior_keeps_its_own_margin_continuously_at_the_in_line_edge():
    # the sibling rule was discontinuous: just above the edge a series kept its own phi plus the
    # whole margin, just below it at most its bare estimate (or the pool's), so a young phi 0.5
    # series whose own estimate read low borrowed its iid siblings' phi ~ 0. Below the edge the own
    # margin now falls by Detector.pool_slope per unit of distance (the previous segment's prior,
    # `carry`, keeps the earlier rule)
    import math

    from benchrun.stats.changepoint import DETECTOR, _margin, _own_phi, _reference

    d = DETECTOR
    young = (d.young_factor, d.young_below)
    rng = np.random.default_rng(28)
    jumps = []
    for _ in range(50):
        x = _nights(rng, 0.5, 23)
        own = _own_phi(x, float(x.mean()))
        pn = 160.0
        edge = d.pool_gap * math.sqrt(1 / 23 + 1 / pn)
        margin = _margin(d.phi_margin, 23, young)
        phis = {}
        for slope in (d.pool_slope, math.inf):
            for side, eps in (("above", 1e-9), ("below", -1e-9)):
                pp = own - edge - eps  # own - pp just above / below the edge
                phis[slope, side] = _reference(x, 0, 23, d.phi_margin, (pp, pn), d.pool_below, d.pool_gap,
                                               young, slope)[1]
        if own + margin >= 0.95 or own + margin <= 0:
            continue  # clipped either way
        assert abs(phis[d.pool_slope, "above"] - phis[d.pool_slope, "below"]) < 1e-6
        jumps.append(phis[math.inf, "above"] - phis[math.inf, "below"])
        for dist in (0.05, 0.1, 0.2):  # well inside: the own margin less the slope times the distance
            pp = own - edge + dist
            got = _reference(x, 0, 23, d.phi_margin, (pp, pn), d.pool_below, d.pool_gap, young, d.pool_slope)[1]
            want = max(pp + _margin(d.phi_margin, pn, young), own + max(0.0, margin - d.pool_slope * dist))
            assert got == pytest.approx(min(max(want, 0.0), 0.95))
    assert len(jumps) >= 30 and min(jumps) > 0.1, jumps  # the earlier rule's jump: about the own margin


def test_a_phi_half_series_among_iid_siblings_alarms_less_with_the_continuous_sibling_rule():
    # the audit's "1 phi 0.5 + 7 phi 0" and "4 + 4" cells: 7.0 / 5.0 / 5.0 / 2.0 % and 6.5 / 4.0 /
    # 6.0 / 6.75 % of the phi 0.5 series ever alarmed (seeds 0-3), 6.0 / 3.0 / 2.0 / 2.0 % and
    # 4.75 / 3.0 / 5.0 / 5.5 % with pool_slope 0.5 (benchmarks/README.md)
    import math

    from benchrun.stats.changepoint import Detector, detect_series, sibling_pool

    rng = np.random.default_rng(29)
    ever = {0.5: 0, math.inf: 0}
    for _ in range(150):
        ys = _siblings(rng, [0.5] * 4 + [0.0] * 4, 60)
        pools = sibling_pool([(np.arange(60), y) for y in ys])
        for slope in ever:
            det = Detector(pool_slope=slope)
            ever[slope] += sum(bool(detect_series(y, floor_pct=0, phi_prior=p, detector=det))
                               for y, p in zip(ys[:4], pools[:4]))
    assert ever[0.5] <= ever[math.inf] - 5, ever  # of 600 phi 0.5 series: 33 -> 25 (seed 29, floor 0, 60 nights)


def test_siblings_that_just_changed_still_corroborate_the_joint_rule():
    # a sibling's joint-rule window is judged against its segment's nights before it, and only
    # with 8 of them: after its own alarm it dropped out for ~10 nights, so once the quicker
    # siblings had alarmed no one corroborated the slower ones (the share read 0). Detector.
    # joint_hold judges such a sibling against the segment before its change instead
    from benchrun.stats.changepoint import Detector, detect_series, sibling_pool

    rng = np.random.default_rng(21)
    found = {True: 0, False: 0}
    zero_nights = {True: 0, False: 0}
    for _ in range(25):
        ys = _siblings(rng, [0.0] * 8, 60, step_at=30)
        for hold in found:
            det = Detector(joint_hold=hold)
            pools = sibling_pool([(np.arange(60), y) for y in ys], detector=det)
            for y, pool in zip(ys, pools):
                zero_nights[hold] += int((pool[2][33:40] == 0).sum())
                hit = [c for c in detect_series(y, phi_prior=pool, detector=det) if c.alarm_index >= 30]
                found[hold] += bool(hit) and hit[0].alarm_index < 37
    assert zero_nights[True] <= zero_nights[False] // 4, zero_nights  # 434 -> 0 series-nights 3-9 after the step
    assert found[True] >= found[False] + 2, found  # of 200: 189 -> 192 (seed 21)


def test_a_series_with_no_better_direction_only_shifts():
    """Host CPU utilization is read with no direction (benchrun.stats.directions): its change point is
    a shift, neither a regression nor an improvement."""
    hist = _history(20, {3})
    hist.loc[hist.metric == "m3", "direction"] = "none"
    assert change_points(hist).kind.tolist() == ["shift"]
    assert change_points(_history(20, {3})).kind.tolist() == ["regression"]  # higher is better, it fell


def _nightly_run(home, i, metrics, contexts):
    """Night ``i`` of a nightly history (one an hour from 2026-11-01), its suites' contexts as given."""
    from benchrun.stats.synthetic import make_run

    make_run(home, f"nightly-{i:02d}", metrics, contexts=contexts, sealed=False,
             status={"cadence": "nightly", "created_utc": f"2026-11-{i // 24 + 1:02d}T{i % 24:02d}:00:00Z"})


def test_replicates_their_suite_judged_invalid_stay_out_of_the_history(tmp_path):
    # membw on a host whose cache holds its arrays measures cache bandwidth (its own verdict: invalid).
    # Before, those medians entered the series like memory bandwidth: 20 nights of in-cache figures then
    # 10 valid ones read as a -90 % "regression" change point.
    import json

    from benchrun.report import content as C
    from benchrun.stats.analysis import trial_statistics_for_run
    from benchrun.stats.load import load_run

    rng = np.random.default_rng(7)
    why = ["each array is 30.5 MiB, under 4x the 300.0 MiB L3 cache"]
    for i in range(30):
        cache = i < 20
        ctx = {"membw": {"verdict": "invalid" if cache else "valid", "verdict_reasons": why if cache else []}}
        _nightly_run(tmp_path, i, {
            ("membw", "threads=2", "triad_gb_per_s"): (rng.normal(300.0 if cache else 30.0, 1.0, 3), "GB/s", "higher"),
            ("gemm", "n=256", "tflops"): (rng.normal(10.0, 0.05, 3), "TFLOP/s", "higher")}, ctx)
    hist = history_table(tmp_path)
    membw = hist[hist.suite == "membw"]
    assert sorted(membw.run_id) == [f"nightly-{i:02d}" for i in range(20, 30)] and (membw["median"] < 40).all()
    assert (hist.suite == "gemm").sum() == 30 and change_points(hist).empty
    # one invalid replicate of three: the night's median is of the other two
    rd = tmp_path / "runs" / "nightly-25"
    path = rd / "structured" / "nightly-25_membw_r1.json"
    doc = json.loads(path.read_text())
    doc["context"] = {"verdict": "invalid", "verdict_reasons": why}
    doc["metrics"][0]["value"] = 999.0
    path.write_text(json.dumps(doc))
    row = history_table(tmp_path).set_index(["run_id", "suite"]).loc[("nightly-25", "membw")]
    assert row["n"] == 2 and row["median"] < 40
    # the report's history (this run by the same rule, whatever its phase)
    run = load_run(rd)
    mine = C.history_for(run, trial_statistics_for_run(rd), tmp_path)
    assert mine[(mine.run_id == "nightly-25") & (mine.suite == "membw")]["n"].tolist() == [2]
    assert len(mine[mine.suite == "membw"]) == 10


def test_serving_points_judged_invalid_beyond_their_request_count_stay_out_of_the_history(tmp_path):
    # review: a serving suite judges each load point (context.verdicts) and its replicate stays ok. Before,
    # 10 nights of a c=4 point with 31 % errors (a p99 of timeouts, 5 s) entered its series as good values
    # and read as a "regression" change point. Now that point's rows leave (c=1 and the other nights stay);
    # the canary's points, invalid only for their 24 requests (the pooled p99 is supported), stay in
    import json

    from benchrun.loadgen.metrics import VerdictPolicy, verdict

    def judged(n, errors=0):
        v, why = verdict(load_model="closed_loop", offered_load=4, n_completed=n, n_errors=errors,
                         error_kinds={"http_500": errors} if errors else {}, stats={"achieved_concurrency": 4.0},
                         client={}, policy=VerdictPolicy())
        return {"verdict": v, "reasons": why}

    rng = np.random.default_rng(11)
    for i in range(30):
        failing = i >= 20
        ctx = {"serving_sweep": {"verdicts": {"c=1": judged(24), "c=4": judged(22, errors=10) if failing else judged(24)}}}
        _nightly_run(tmp_path, i, {
            ("serving_sweep", "c=4", "p99_latency_ms"): (rng.normal(5000.0 if failing else 100.0, 1.0, 3), "ms", "lower"),
            ("serving_sweep", "c=1", "p99_latency_ms"): (rng.normal(50.0, 0.5, 3), "ms", "lower")}, ctx)
    hist = history_table(tmp_path)
    c4, c1 = hist[hist["case"] == "c=4"], hist[hist["case"] == "c=1"]
    assert sorted(c4.run_id) == [f"nightly-{i:02d}" for i in range(20)] and (c4["median"] < 200).all()
    assert len(c1) == 30 and (c1["n"] == 3).all() and (c4["n"] == 3).all()  # 24 requests alone: kept
    assert change_points(hist).empty
    # one replicate's point invalid: the night's c=4 median is of the other two, its c=1 of all three
    path = tmp_path / "runs" / "nightly-05" / "structured" / "nightly-05_serving_sweep_r1.json"
    doc = json.loads(path.read_text())
    doc["context"]["verdicts"]["c=4"] = judged(22, errors=10)
    next(m for m in doc["metrics"] if m["case"] == "c=4")["value"] = 9999.0
    path.write_text(json.dumps(doc))
    rows = history_table(tmp_path).set_index(["run_id", "case"])
    assert rows.loc[("nightly-05", "c=4"), "n"] == 2 and rows.loc[("nightly-05", "c=4"), "median"] < 200
    assert rows.loc[("nightly-05", "c=1"), "n"] == 3
