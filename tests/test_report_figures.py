"""The report's figures show the data: axes follow the data, an SLO far above it is named, not drawn to scale."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from benchrun.report import figures


def _serving(p99s: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"bucket": "all", "offered_load": [1.0, 2.0, 4.0], "tokens_per_second": [100.0, 190.0, 350.0],
                         "ttft_ms_p99": p99s})


@pytest.fixture()
def captured(monkeypatch):
    figs = []

    def keep(fig):
        figs.append(fig)
        return b""

    monkeypatch.setattr(figures, "_png", keep)
    yield figs
    import matplotlib.pyplot as plt

    for f in figs:
        plt.close(f)


def test_data_at_1_to_4_ms_under_a_200_ms_slo_fills_the_axis(captured):
    figures.latency_throughput(_serving([1.2, 2.5, 4.0]), {"ttft_ms": 200.0}, "t")
    ax = captured[0].axes[0]
    low, high = ax.get_ylim()
    assert low == 0 and 4.0 < high < 5.0  # the data, not the SLO, sets the scale
    texts = [t.get_text() for t in ax.texts]
    assert any("SLO ttft_ms 200 ms: above, off scale" in t for t in texts), texts
    assert any("off scale" in t.get_text() for t in ax.get_legend().get_texts())


def test_an_slo_near_the_data_is_drawn_as_a_line(captured):
    figures.latency_throughput(_serving([40.0, 80.0, 150.0]), {"ttft_ms": 200.0}, "t")
    ax = captured[0].axes[0]
    assert ax.get_ylim()[1] >= 200.0
    assert any(abs(line.get_ydata()[0] - 200.0) < 1e-9 for line in ax.get_lines() if line.get_linestyle() == "--")


def test_forest_plot_gating_rows_first_axis_on_top_and_no_context_rows(captured):
    rows = [{"metric": "cpu_pct_mean", "role": "context", "ratio": 1.5, "ci_low": 1.2, "ci_high": 1.8, "verdict": None},
            {"metric": "secondary_tps", "ratio": 1.1, "ci_low": 1.0, "ci_high": 1.2, "verdict": "improvement"},
            {"metric": "tflops", "gating": True, "ratio": 0.5, "ci_low": 0.4, "ci_high": 0.6, "verdict": "regression"}]
    figures.forest_plot(rows, "t")
    ax = captured[0].axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["★ tflops", "secondary_tps"]  # gating first, the context row left out
    assert ax.xaxis.get_ticks_position() == "top" and ax.xaxis.get_label_position() == "top"


def test_red_and_green_only_on_gating_rows():
    from benchrun.report.html import _change

    gating = _change({"gating": True, "verdict": "regression", "change_pct": -40.0, "better_worse": "worse"})
    reported = _change({"gating": False, "verdict": "regression", "change_pct": -40.0, "better_worse": "worse"})
    assert "class='v-regression'" in gating and "regression" in gating
    assert "class='muted'" in reported and "v-regression" not in reported and "regression" in reported


def test_a_history_of_runs_a_minute_and_a_half_apart_draws_without_a_matplotlib_warning():
    """Two canary runs ~95 s apart: AutoDateLocator(maxticks=4) found no interval and `benchrun report`
    printed two UserWarnings on stderr."""
    import warnings

    import pandas as pd

    from benchrun.report.figures import history_plot

    t0 = pd.Timestamp("2026-12-06T09:00:07Z")
    hist = pd.DataFrame({"suite": "gemm", "case": "n=64", "metric": "tflops", "run_id": ["r1", "r2"],
                         "created_utc": [t0, t0 + pd.Timedelta(seconds=95)], "median": [1.0, 1.1], "unit": "TFLOP/s"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert history_plot(hist, pd.DataFrame(), "history", current_run="r2").startswith(b"\x89PNG")


def test_an_slo_is_labelled_in_its_own_unit(captured):
    """The SLO label said "ms" for every SLO: the decode SLO is ms per token."""
    serving = _serving([1.2, 2.5, 4.0]).assign(decode_ms_per_token_p99=[10.0, 20.0, 25.0])
    figures.latency_throughput(serving, {"ttft_ms": 3.0, "decode_ms_per_token": 30.0}, "t")
    labels = {ax.get_ylabel(): [t.get_text() for t in ax.get_legend().get_texts()] for ax in captured[0].axes}
    assert "SLO decode_ms_per_token 30 ms/token" in labels["decode_ms_per_token_p99"], labels
    assert "SLO ttft_ms 3 ms" in labels["ttft_ms_p99"], labels
    assert [figures.slo_unit(n) for n in ("ttft_ms", "e2e_ms", "decode_ms_per_token", "x")] == ["ms", "ms", "ms/token", ""]


def test_history_panels_name_their_unit(tmp_path, captured):
    """history_plot labels each panel's y-axis with the `unit` column, which history_table never
    produced: every history panel had an empty y-axis."""
    import numpy as np

    from benchrun.stats.changepoint import history_table
    from benchrun.stats.synthetic import make_run

    rng = np.random.default_rng(3)
    for i in range(3):
        make_run(tmp_path, f"nightly-{i}", {("gemm", "n=64", "tflops"): (rng.normal(10, 0.1, 3), "TFLOP/s", "higher")},
                 status={"cadence": "nightly", "created_utc": f"2026-11-0{i + 1}T02:00:00Z"})
    hist = history_table(tmp_path)
    assert set(hist["unit"]) == {"TFLOP/s"}
    figures.history_plot(hist, pd.DataFrame(), "history")
    assert captured[0].axes[0].get_ylabel() == "TFLOP/s"


def test_a_history_panel_draws_a_tiny_wobble_flat_and_without_an_offset():
    # review 2026-12-07: a p99 moving 25.4005 → 25.4046 ms (0.02 %) was drawn on an offset axis
    # (+2.54e1, ticks 0.001–0.004) as a full-height slope, like a +75 % change beside it
    import matplotlib.pyplot as plt

    from benchrun.report.figures import HISTORY_MIN_SPAN_PCT, _floor_span

    fig, ax = plt.subplots()
    values = np.array([25.4005, 25.4046, 25.4020])
    ax.plot(range(3), values)
    _floor_span(ax, values)
    fig.canvas.draw()
    lo, hi = ax.get_ylim()
    assert hi - lo >= 2 * 25.402 * HISTORY_MIN_SPAN_PCT / 100 * 0.999 and lo < 25.4005 and hi > 25.4046
    assert ax.yaxis.get_offset_text().get_text() == ""
    plt.close(fig)


def test_report_numbers_keep_five_digits_and_coverage_is_a_percent():
    # review 2026-12-07: .4g printed an interval's upper end 9999.78 tokens/s as 1e+04 (past the
    # largest replicate) and 834,900 samples/s as 8.349e+05
    from benchrun.report.html import _fmt

    assert (_fmt(9999.78), _fmt(834900.0), _fmt(1234.5), _fmt(12.345678), _fmt(0.0001234)) == (
        "9,999.8", "834,900", "1,234.5", "12.35", "0.0001234")


def test_the_cli_tables_and_notes_print_numbers_as_the_report_does():
    """The report grouped 5 digits but the CLI's summary and compare tables, the playbooks and the
    pooled-p99 note still used .4g: `benchrun summary` printed 427,912 tok/s as 4.279e+05."""
    from benchrun.commands import _fmt as summary_cell
    from benchrun.playbooks.commands import _cell as playbook_cell
    from benchrun.stats.commands import _num as compare_cell
    from benchrun.stats.reading import POOLED_METHOD, pooled_note

    for cell in (summary_cell, playbook_cell, compare_cell):
        assert (cell(427912.3), cell(9999.78), cell(12.345678)) == ("427,912", "9,999.8", "12.35"), cell
    note = pooled_note({"metric": "ttft_p99_ms", "unit": "ms", "tail_method": POOLED_METHOD, "change_pct": 9.0,
                        "p99_pooled_baseline": 12345.6,
                        "p99_pooled_candidate": 13456.7, "baseline_median": 1.0})
    assert "12,346 → 13,457 ms" in note


def test_names_with_dollar_signs_are_drawn_as_written():
    """Review 2026-12-07: a case `c=$_$` stopped `benchrun report` (matplotlib read it as math text:
    ParseSyntaxException) and `price=$1-$2` was drawn as an italic `price=1-2`."""
    import matplotlib.pyplot as plt

    rows = [{"metric": "serve/tokens_per_second[c=$_$]", "gating": True, "ratio": 0.9, "ci_low": 0.85, "ci_high": 0.95,
             "verdict": "regression"},
            {"metric": "serve/cost[price=$1-$2]", "ratio": 1.0, "ci_low": 0.98, "ci_high": 1.02, "verdict": "no_change"}]
    fig = plt.figure()
    try:
        text = fig.text(0, 0, "price=$1-$2")
        assert not text._preprocess_math(text.get_text())[1]  # drawn as plain text, not math
    finally:
        plt.close(fig)
    assert figures.forest_plot(rows, "a $ title").startswith(b"\x89PNG")
