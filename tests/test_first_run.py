"""What a first experiment meets (issue 26, item 7): messages, the baseline hint, Ctrl-C,
cancel and delete."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args: str, home: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "BENCHRUN_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("DAGSTER_HOME", None)
    return subprocess.run([sys.executable, "-m", "benchrun.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout)


def test_error_messages_say_it_once_and_name_what_is_missing(tmp_path):
    r = _cli("runz", home=tmp_path)
    assert r.returncode == 2 and r.stderr.count("Did you mean") == 1, r.stderr
    assert "'run', 'runs'" in r.stderr
    r = _cli("rebuild-warehouse", "nosuch", home=tmp_path)
    assert r.returncode != 0 and "${RUN_ID}" not in r.stderr, r.stderr
    assert f"{tmp_path}/objects/nosuch/" in r.stderr
    r = _cli("lineage", "nosuch", "tflops", home=tmp_path)
    assert r.returncode != 0 and "no such run 'nosuch'" in r.stderr and "no rows of metric" not in r.stderr, r.stderr


def test_the_baseline_hint_names_the_alias_only_while_it_is_unset(tmp_path):
    from benchrun.commands import baseline_hint
    from benchrun.stats.load import promote
    from benchrun.stats.synthetic import make_run

    rd = make_run(tmp_path, "first-20261202000000-aaaaaaaa", {("gemm", "", "tflops"): ([1.0, 1.1, 1.0], "TFLOP/s",
                                                                                        "higher")},
                  spec={"spec": {"comparison": {"baseline": {"artifactRef": "local/published/canary"}}}})
    hint = baseline_hint(rd, rd.name, {"phase": "Succeeded"})
    assert hint and "local/published/canary" in hint and f"benchrun promote {rd.name} --alias canary" in hint
    assert baseline_hint(rd, rd.name, {"phase": "Failed"}) is None  # a failed run is no baseline
    promote(rd.name, tmp_path, alias="canary")
    assert baseline_hint(rd, rd.name, {"phase": "Succeeded"}) is None


@pytest.mark.slow
def test_ctrl_c_ends_canceled_keeps_the_finished_launches_and_says_which(tmp_path, canary_doc):
    import json
    import signal
    import time

    import yaml
    from helpers import tiny_layers

    canary_doc["metadata"]["name"] = "ctrl-c"
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    canary_doc["spec"]["layers"] = tiny_layers([
        {"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "parameters": {"sizes": [64], "iterations": 3}},
        {"name": "membw", "repoCommand": "python -m benchrun.suites.membw",
         "parameters": {"elements": 5_000_000, "iterations": 4}},  # long enough to be interrupted in
    ])
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(canary_doc, sort_keys=False))
    home = tmp_path / "home"
    env = {**os.environ, "BENCHRUN_HOME": str(home), "PYTHONPATH": str(ROOT), "BENCHRUN_WARM": "0"}
    env.pop("DAGSTER_HOME", None)
    proc = subprocess.Popen([sys.executable, "-m", "benchrun.cli", "run", str(spec)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 240
    progress = None
    while time.monotonic() < deadline and proc.poll() is None:
        found = list((home / "runs").glob("*/progress/run_progress.json")) if (home / "runs").is_dir() else []
        if found:
            try:
                progress = json.loads(found[0].read_text())
            except ValueError:
                progress = None
            if progress and progress.get("done", 0) >= 3 and (progress.get("current") or {}).get("suite") == "membw":
                break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends: the whole foreground group
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out[-3000:], err[-3000:])
    [run_dir] = (home / "runs").iterdir()
    status = json.loads((run_dir / "status.json").read_text())
    assert status["phase"] == "Canceled" and status["outcome"] == "canceled", status
    from benchrun.commands import finished_launches

    # Replicates interleave (gemm r1, membw r1, gemm r2, then membw r2 was interrupted).
    launches = json.loads((run_dir / "structured" / f"{run_dir.name}_launches.json").read_text())
    assert [(r["suite"], r["replicate"], r["status"]) for r in launches][:3] == [
        ("gemm", 1, "ok"), ("membw", 1, "ok"), ("gemm", 2, "ok")]  # their results are kept
    said = finished_launches(run_dir, run_dir.name)
    assert said.startswith("gemm r1-r2 ok, membw r1") and said in status["message"]
    assert "canceled:" in out and said in out and "DagsterExecutionInterruptedError" not in out
    assert "gemm" in out and "tflops" in out  # the table shows what was measured
    assert "phase Canceled" in out
