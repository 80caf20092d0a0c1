"""The report's training section: per replicate the training figures, the FLOPs formula, loss
curves and per-rank step times, from the training suites' result documents; and the
stragglers the run named."""

from __future__ import annotations

import html
import json
import logging
from pathlib import Path
from typing import Any

from benchrun.paths import sample_path

log = logging.getLogger(__name__)

# (row key, column title, format)
COLUMNS = (
    ("replicate", "replicate", "{:d}"),
    ("world_size", "ranks", "{:d}"),
    ("step_time_p50_ms", "step p50 (ms)", "{:.2f}"),
    ("step_time_p99_ms", "step p99 (ms)", "{:.2f}"),
    ("tokens_per_second", "tokens/s", "{:,.0f}"),
    ("tokens_per_second_per_device", "tokens/s/device", "{:,.0f}"),
    ("mfu_pct", "MFU %", "{:.2f}"),
    ("scaling_efficiency_pct", "scaling eff. %", "{:.1f}"),
    ("time_to_first_step_s", "first step (s)", "{:.2f}"),
    ("checkpoint_save_s", "ckpt save (s)", "{:.3f}"),
    ("checkpoint_restore_s", "ckpt restore (s)", "{:.3f}"),
    ("checkpoint_bytes", "ckpt bytes", "{:,d}"),
    ("peak_memory_bytes", "peak mem bytes", "{:,d}"),
    ("loss_first", "loss first", "{:.3f}"),
    ("loss_last", "loss last", "{:.3f}"),
    ("slowest_rank", "slowest rank", "{:d}"),
)


def training_results(run_dir: Path, run_id: str) -> list[dict[str, Any]]:
    """Every ok training replicate: its suite, replicate, ``training`` row, losses and rank samples."""
    out = []
    for path in sorted((Path(run_dir) / "structured").glob(f"{run_id}_*_r*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if not isinstance(doc, dict) or doc.get("status") != "ok" or not doc.get("training"):
            continue
        ranks = None
        sample = sample_path(run_dir, (doc.get("samples") or {}).get("ranks"))  # inside the run directory only
        if sample is not None and sample.is_file():
            try:
                ranks = json.loads(sample.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                ranks = None
        for row in doc["training"]:
            out.append({"suite": doc.get("suite"), "replicate": int(doc.get("replicate") or 0), "row": row,
                        "losses": (doc.get("context") or {}).get("losses") or [], "ranks": ranks})
    return sorted(out, key=lambda r: (r["suite"], r["replicate"]))


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "—"
    try:
        return fmt.format(int(value) if fmt.endswith("d}") else float(value))
    except (TypeError, ValueError):
        return html.escape(str(value))


def _figure(results: list[dict[str, Any]], suite: str) -> bytes:
    """PNG: loss per step (every replicate) and each rank's measured step times (last replicate)."""
    from benchrun.report.figures import _png, plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2))
    for r in results:
        if r["losses"]:
            ax1.plot(range(len(r["losses"])), r["losses"], lw=1, alpha=0.8, label=f"r{r['replicate']}")
    ax1.set_xlabel("step (warm-up included)")
    ax1.set_ylabel("training loss")
    ax1.set_title(f"{suite}: loss per replicate")
    if len(results) <= 8:
        ax1.legend(fontsize=7, ncol=2)
    last = next((r for r in reversed(results) if r["ranks"]), None)
    if last is not None:
        warm = int(last["ranks"].get("warmup_steps") or 0)
        data = [[t * 1e3 for t in rk["step_times_s"][warm:]] for rk in last["ranks"]["ranks"]]
        labels = [f"rank {rk['rank_id']}\n{rk.get('node_name') or ''}" for rk in last["ranks"]["ranks"]]
        ax2.boxplot(data, tick_labels=labels)
        ax2.set_ylabel("step time (ms)")
        ax2.set_title(f"per-rank step times, replicate {last['replicate']}")
        ax2.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    return _png(fig)


def training_section(ctx: Any) -> Any:
    """The report section (``benchrun.report.html.EXTRA_SECTIONS``): training figures per replicate."""
    from benchrun.report.html import ReportSection

    run_dir, run_id = Path(ctx.run.path), ctx.run.run_id
    results = training_results(run_dir, run_id)
    stragglers = (ctx.run.status or {}).get("straggler_nodes")
    if not results and not stragglers:
        return None
    parts = []
    figures = []
    for suite in sorted({r["suite"] for r in results}):
        rows = [r for r in results if r["suite"] == suite]
        first = rows[0]["row"]
        head = "".join(f"<th>{html.escape(title)}</th>" for _, title, _ in COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{_cell(r['replicate'] if key == 'replicate' else r['row'].get(key), fmt)}</td>"
                             for key, _, fmt in COLUMNS) + "</tr>" for r in rows)
        # Every value comes from a result document (a custom suite writes what it likes): each
        # is formatted by _cell or escaped, never interpolated as is.
        def text(key: str) -> str:
            return html.escape(str(first.get(key)))

        flops = _cell(first.get("model_flops_per_token"), "{:,.0f}")
        formula = first.get("flops_formula")
        notes = [f"case {text('case')}: {text('nodes')} node(s) × {text('ranks_per_node')} rank(s), {text('device')}, "
                 f"{text('dtype')}, backend {text('backend')}, "
                 f"{text('measured_steps')} measured steps after {text('warmup_steps')} warm-up",
                 f"model FLOPs per token {flops}"
                 + (f" = <code>{html.escape(str(formula))}</code>" if formula else " (no formula recorded)")]
        if first.get("mfu_reason"):
            notes.append(f"MFU: {text('mfu_reason')}")
        elif first.get("peak_tflops_used"):
            notes.append(f"MFU against {_cell(first['peak_tflops_used'], '{:g}')} TFLOP/s per device")
        if first.get("scaling_reason"):
            notes.append(f"scaling efficiency: {text('scaling_reason')}")
        parts.append(f"<h3>{html.escape(suite)}</h3><ul>" + "".join(f"<li>{n}</li>" for n in notes) + "</ul>"
                     f"<table><tr>{head}</tr>{body}</table>")
        try:
            figures.append((f"{suite}: loss per step and per-rank step times", _figure(rows, suite)))
        except Exception as exc:  # a figure must never cost the report
            log.warning("training figure for %s: %s", suite, exc)
    if stragglers is not None:
        parts.append("<p><b>Straggler nodes</b> (named by the distributed_straggler playbook when one rank stood out "
                     "in most replicates): " + (html.escape(", ".join(map(str, stragglers))) if stragglers else "none") + "</p>")
    return ReportSection("Training and distributed ranks", "".join(parts), figures)
