"""The report's training section, from training result documents in a run directory."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from benchrun.report.training import training_section

RUN_ID = "tr-20260101000000-abcdef12"


def _write(run_dir: Path, rep: int, mfu: float | None) -> None:
    (run_dir / "structured").mkdir(parents=True, exist_ok=True)
    (run_dir / "raw").mkdir(exist_ok=True)
    ranks = f"raw/{RUN_ID}_training_r{rep}_ranks.json"
    (run_dir / ranks).write_text(json.dumps({"warmup_steps": 1, "ranks": [
        {"rank_id": r, "node_name": f"n{r}", "step_times_s": [0.5, 0.010 + r / 1000, 0.012, 0.011]} for r in (0, 1)]}))
    row = {"case": "L1-d16", "world_size": 2, "nodes": 2, "ranks_per_node": 1, "device": "cpu", "dtype": "float32",
           "backend": "gloo", "measured_steps": 3, "warmup_steps": 1, "step_time_p50_ms": 11.0 + rep,
           "step_time_p99_ms": 12.5, "tokens_per_second": 4096.0, "tokens_per_second_per_device": 2048.0,
           "mfu_pct": mfu, "mfu_reason": None if mfu else "unavailable: no declared peak for cpu",
           "peak_tflops_used": 1.0 if mfu else None, "model_flops_per_token": 10752,
           "flops_formula": "6*N + 12*n_layers*d_model*seq_len", "checkpoint_bytes": 1234, "loss_first": 3.5,
           "loss_last": 2.0, "slowest_rank": 1}
    (run_dir / "structured" / f"{RUN_ID}_training_r{rep}.json").write_text(json.dumps({
        "suite": "training", "replicate": rep, "status": "ok", "training": [row],
        "context": {"losses": [3.6, 3.4, 2.5, 2.0]}, "samples": {"ranks": ranks}}))


def test_training_section_tabulates_every_replicate_with_its_figure(tmp_path: Path) -> None:
    _write(tmp_path, 1, None)
    _write(tmp_path, 2, None)
    ctx = SimpleNamespace(run=SimpleNamespace(path=tmp_path, run_id=RUN_ID, status={"straggler_nodes": ["n1"]}))
    sec = training_section(ctx)
    assert sec.title == "Training and distributed ranks"
    assert sec.html.count("<tr><td>") == 2 and "<td>12.00</td>" in sec.html and "<td>13.00</td>" in sec.html
    assert "10,752 = <code>6*N + 12*n_layers*d_model*seq_len</code>" in sec.html
    assert "MFU: unavailable: no declared peak for cpu" in sec.html and "<td>—</td>" in sec.html
    assert "Straggler nodes</b>" in sec.html and "n1</p>" in sec.html
    [(caption, png)] = sec.figures
    assert caption.startswith("training:") and png.startswith(b"\x89PNG")


def test_no_training_and_no_status_means_no_section(tmp_path: Path) -> None:
    ctx = SimpleNamespace(run=SimpleNamespace(path=tmp_path, run_id=RUN_ID, status={}))
    assert training_section(ctx) is None


def _edit_row(run_dir: Path, rep: int, **changes: object) -> None:
    path = run_dir / "structured" / f"{RUN_ID}_training_r{rep}.json"
    doc = json.loads(path.read_text())
    doc["training"][0].update(changes)
    path.write_text(json.dumps(doc))


def _ctx(run_dir: Path, status: dict | None = None) -> SimpleNamespace:
    return SimpleNamespace(run=SimpleNamespace(path=run_dir, run_id=RUN_ID, status=status or {}))


def test_a_training_row_without_a_flops_formula_is_drawn(tmp_path: Path) -> None:
    """A custom training suite's row without FLOPs: `{None:,}` raised and took the whole report down."""
    _write(tmp_path, 1, None)
    _edit_row(tmp_path, 1, model_flops_per_token=None, flops_formula=None)
    sec = training_section(_ctx(tmp_path))
    assert "model FLOPs per token — (no formula recorded)" in sec.html


def test_values_from_result_documents_are_escaped(tmp_path: Path) -> None:
    """nodes, ranks_per_node, measured_steps, warmup_steps (and the rest) went into the HTML as written."""
    bad = "<img src=x onerror=alert(1)>"
    _write(tmp_path, 1, 30.0)
    _edit_row(tmp_path, 1, nodes=bad, ranks_per_node=bad, measured_steps=bad, warmup_steps=bad,
              model_flops_per_token=bad, peak_tflops_used=bad, mfu_reason=None, step_time_p50_ms=bad)
    sec = training_section(_ctx(tmp_path, {"straggler_nodes": [bad, 3]}))
    assert "<img" not in sec.html and sec.html.count("&lt;img src=x onerror=alert(1)&gt;") >= 8
    assert "MFU against &lt;img" in sec.html


def _broken_section(ctx: object) -> None:
    raise KeyError("model_flops_per_token")


def test_a_section_that_raises_is_replaced_by_a_note_not_the_report(tmp_path: Path, monkeypatch) -> None:
    from benchrun.report import html as report_html
    from benchrun.stats.synthetic import make_run

    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    run_dir = make_run(tmp_path, RUN_ID, {("gemm", "n=64", "tflops"): ([1.0, 1.1, 1.0], "TFLOP/s", "higher")})
    [doc_path] = (run_dir / "structured").glob(f"{RUN_ID}_gemm_r1.json")
    doc = json.loads(doc_path.read_text())
    doc["training"] = [{"case": "tiny", "nodes": 1, "ranks_per_node": 1, "tokens_per_second": 1000.0}]
    doc_path.write_text(json.dumps(doc))
    monkeypatch.setattr(report_html, "EXTRA_SECTIONS",
                        [f"{__name__}:_broken_section", *report_html.EXTRA_SECTIONS])
    text = report_html.build_report(run_dir).read_text()
    assert "broken section" in text and "could not be drawn (KeyError: &#x27;model_flops_per_token&#x27;)" in text
    assert "Training and distributed ranks" in text  # the sections after it are still drawn


def test_rank_samples_are_read_only_from_inside_the_run_directory(tmp_path: Path) -> None:
    # before: samples.ranks was read from any path a result document named (a pod writes it)
    from benchrun.launch.k8s_collect import missing_outputs
    from benchrun.report.training import training_results

    run_dir = tmp_path / "run"
    _write(run_dir, 1, None)
    outside = tmp_path / "secret.json"
    outside.write_text(json.dumps({"warmup_steps": 0, "ranks": [{"rank_id": 9, "step_times_s": [1.0]}]}))
    path = run_dir / "structured" / f"{RUN_ID}_training_r1.json"
    assert training_results(run_dir, RUN_ID)[0]["ranks"]["ranks"][0]["rank_id"] == 0  # its own file is read
    for ref in (str(outside), "../secret.json", "raw/../../secret.json"):
        doc = json.loads(path.read_text())
        doc["samples"]["ranks"] = ref
        path.write_text(json.dumps(doc))
        assert training_results(run_dir, RUN_ID)[0]["ranks"] is None, ref
        assert missing_outputs(run_dir, doc) == [ref]  # declared, and not in the run directory
