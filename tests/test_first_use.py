"""First use, end to end through the real CLI: live progress (piped and in a pseudo-terminal),
a report built from the final state, and that report in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from helpers import tiny_spec as with_tiny_layers

ROOT = Path(__file__).resolve().parent.parent
GEMM = {"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "parameters": {"sizes": [64], "iterations": 3}}
MEMBW = {"name": "membw", "repoCommand": "python -m benchrun.suites.membw",
         "parameters": {"elements": 100000, "iterations": 2}}


@pytest.fixture()
def tiny_spec(tmp_path, canary_doc):
    canary_doc["metadata"]["name"] = "first-use"
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    with_tiny_layers(canary_doc, [GEMM, MEMBW])
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(canary_doc, sort_keys=False))
    return path


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DAGSTER_HOME", "COLUMNS", "LINES")}
    return {**env, "BENCHRUN_HOME": str(home), "PYTHONPATH": str(ROOT), **extra}


def _run_dirs(home: Path) -> list[Path]:
    return sorted((home / "runs").iterdir(), key=lambda p: json.loads((p / "status.json").read_text())["created_utc"])


@pytest.mark.slow
def test_progress_then_a_final_report_with_this_run_starred_in_its_history(tmp_path, tiny_spec, monkeypatch):
    import pexpect

    from chrome_cdp import render

    home = tmp_path / "home"
    # 1. Piped: plain progress lines arrive while the run goes, not only at the end.
    proc = subprocess.Popen([sys.executable, "-m", "benchrun.cli", "run", str(tiny_spec)], cwd=ROOT,
                            env=_env(home, BENCHRUN_PROGRESS_INTERVAL_S="0.2"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    out_lines = list(proc.stdout)
    proc.wait(timeout=300)
    assert proc.returncode == 0, proc.stderr.read()[-3000:]
    progress = [ln for ln in out_lines if ln.startswith("progress ")]
    done_values = {int(m.group(1)) for m in (re.match(r"progress (\d+)/6 ", ln) for ln in progress) if m}
    assert len(done_values & {1, 2, 3, 4, 5}) >= 2, out_lines  # intermediate states, seen as they happened
    assert any(re.search(r"micro/(gemm|membw) r[123]/3", ln) for ln in progress)
    text = "".join(out_lines)  # then the headline, not every metric
    assert "headline" in text and "tflops" in text and "bandwidth_median_gb_per_s" in text
    assert "bandwidth_best_gb_per_s" not in text and "benchrun show" in text
    # The first run of a spec has no baseline: the summary says how to make this run the baseline.
    assert re.search(r"no baseline yet: .*benchrun promote first-use-\S+ --alias canary", text), text[-2000:]
    first_progress = out_lines.index(progress[0])
    assert first_progress < next(i for i, ln in enumerate(out_lines) if ln.startswith("phase "))

    time.sleep(1.1)  # run ids carry the second: the next run must not reuse this one's
    # 2. In a pseudo-terminal: the bar shows the suite and replicate before the run ends.
    child = pexpect.spawn(sys.executable, ["-m", "benchrun.cli", "run", str(tiny_spec)], cwd=str(ROOT),
                          env=_env(home), encoding="utf-8", timeout=300, dimensions=(40, 160))
    child.expect(r"micro/(gemm|membw) r[123]/3")
    child.expect(r"[^0-9][0-5]/6[^0-9]")  # a launch count short of the total (colour codes around it)
    child.expect(r"elapsed \d+s")
    child.expect(r"phase \S*Succeeded")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0

    from benchrun.report.worker import wait_for_workers

    second_id = _run_dirs(home)[-1].name
    assert wait_for_workers(home) in ([], [second_id])  # the figures are drawn after the run's status is final
    first, second = _run_dirs(home)
    # 3. The report of a finished run is written from its final status.
    status = json.loads((second / "status.json").read_text())
    assert status["phase"] == "Succeeded"
    report = second / "reports" / f"{second.name}_report.html"
    text = report.read_text()
    verdict = re.search(r"<section id='verdict'.*?</section>", text, re.S).group(0)
    assert "Succeeded" in verdict and "Analyzing" not in text and "figures-pending" not in text
    # ... and the run is the starred point of its history, next to the first run.
    index = json.loads((second / "figures" / f"{second.name}_report_figures.json").read_text())
    hist = [f for f in index["figures"] if f["section"] == "history"]
    assert len(hist) == 1 and "over 2 runs" in hist[0]["caption"] and "★ this run" in hist[0]["caption"]
    from benchrun.report import content as C
    from benchrun.stats.analysis import read_trial_statistics
    from benchrun.stats.load import load_run

    table = C.history_for(load_run(second), read_trial_statistics(second), home)
    assert list(dict.fromkeys(table["run_id"])) == [first.name, second.name]  # by date; this run last

    # The layer's suite × metric table is a Dagster table the UI shows inline.
    import dagster as dg

    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster_home"))
    with dg.DagsterInstance.get() as instance:
        ev = instance.get_latest_materialization_event(dg.AssetKey("micro_layer"))
        headline = ev.asset_materialization.metadata["headline"]
    assert isinstance(headline, dg.TableMetadataValue)
    assert [c.name for c in headline.schema.columns][:3] == ["suite", "case", "metric"]
    assert {r.data["suite"] for r in headline.records} == {"gemm", "membw"}

    # 4. Headless Chromium: no console errors, the verdict block in the first screen.
    page = render(report, "(() => { const b = document.getElementById('verdict').getBoundingClientRect();"
                          " return {bottom: b.bottom, height: innerHeight,"
                          " text: document.getElementById('verdict').innerText,"
                          " headline: document.getElementById('headline').getBoundingClientRect().top}; })()")
    assert page.errors == []
    assert page.screenshot[:8] == b"\x89PNG\r\n\x1a\n" and len(page.screenshot) > 10_000
    (tmp_path / "report.png").write_bytes(page.screenshot)
    assert 0 < page.value["bottom"] <= page.value["height"]
    assert page.value["headline"] < page.value["height"]  # the headline starts on the first screen too
    assert "Succeeded" in page.value["text"] and "regressions" in page.value["text"]
