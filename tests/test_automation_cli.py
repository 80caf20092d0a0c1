"""``benchrun cadence run``: submits a cadence's specs, lists invalid ones with errors, exit 1 then."""

from __future__ import annotations

import subprocess
from pathlib import Path

import dagster as dg
import pytest
from typer.testing import CliRunner

from benchrun.cli import app
from test_automation_fixtures import ROOT, invalid_spec_bytes, spec_bytes
from test_store_helpers import s3_env  # noqa: F401  (fixture)


@pytest.fixture
def specs_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "specs"
    (folder / "nested").mkdir(parents=True)
    (folder / "a.yaml").write_bytes(spec_bytes("nightly-a", "nightly"))
    (folder / "nested" / "b.yaml").write_bytes(spec_bytes("nightly-b", "nightly"))
    (folder / "canary.yaml").write_bytes(spec_bytes("canary-a", "canary"))
    return folder


def partitions(home: Path) -> list[str]:
    with dg.DagsterInstance.from_config(str(home / "dagster_home")) as inst:
        return sorted(inst.get_dynamic_partitions("benchmark_run"))


def test_cadence_run_submits_every_matching_spec(specs_dir: Path, bench_home: Path) -> None:
    result = CliRunner().invoke(app, ["cadence", "run", "nightly", "--specs", str(specs_dir)])
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.stdout.splitlines() if line.startswith("submitted ")]
    assert [(w[2]) for w in lines] == ["a.yaml", "nested/b.yaml"]
    run_ids = sorted(w[1] for w in lines)
    assert [r.rsplit("-", 2)[0] for r in run_ids] == ["nightly-a", "nightly-b"]
    assert sorted(p.name for p in (bench_home / "runs").iterdir()) == run_ids
    assert partitions(bench_home) == run_ids  # registered where `make ui` looks


def test_invalid_specs_are_listed_with_errors_and_exit_1(specs_dir: Path, bench_home: Path) -> None:
    (specs_dir / "broken.yaml").write_bytes(invalid_spec_bytes("broken"))
    result = CliRunner().invoke(app, ["cadence", "run", "canary", "--specs", str(specs_dir)])
    assert result.exit_code == 1
    assert [line.split()[2] for line in result.stdout.splitlines() if line.startswith("submitted")] == ["canary.yaml"]
    assert "invalid broken.yaml (not run): 2 error(s)" in result.stderr
    assert "spec.trials.minReplicates (line" in result.stderr
    assert not any(p.name.startswith("broken") for p in (bench_home / "runs").iterdir())


def test_specs_the_storage_failed_are_named_not_invalid_and_exit_1(specs_dir: Path, bench_home: Path, s3_env: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import uuid  # moto's buckets outlive its server in this process: a name no other test made

    monkeypatch.setenv("BENCHRUN_SHARED_STATE", f"s3://missing-{uuid.uuid4().hex[:10]}/benchrun")
    result = CliRunner().invoke(app, ["cadence", "run", "canary", "--specs", str(specs_dir)])
    assert result.exit_code == 1 and "invalid" not in result.stderr
    assert "not submitted: canary.yaml is valid but could not be registered" in result.stderr
    assert "NoSuchBucket" in result.stderr and "run this command again once that is fixed" in result.stderr


def test_dry_run_submits_nothing(specs_dir: Path, bench_home: Path) -> None:
    result = CliRunner().invoke(app, ["cadence", "run", "pre-release", "--dry-run", "--specs", str(specs_dir)])
    assert result.exit_code == 0 and "no pre_release specs" in result.stdout
    result = CliRunner().invoke(app, ["cadence", "run", "nightly", "--dry-run", "--specs", str(specs_dir)])
    assert result.exit_code == 0
    assert [line.split()[2] for line in result.stdout.splitlines()] == ["a.yaml", "nested/b.yaml"]
    assert not (bench_home / "runs").exists()


def test_unknown_cadence_is_one_line_without_traceback(bench_home: Path) -> None:
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "benchrun"), "cadence", "run", "weekly"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "error: unknown cadence 'weekly': use one of canary, nightly, pre_release"


@pytest.mark.slow
def test_execute_runs_each_run_as_benchrun_run_does_and_waits_for_the_turn(bench_home: Path, canary_doc, tmp_path: Path,
                                                                            monkeypatch, capsys) -> None:
    """Review 2026-12-07: `cadence run --execute` called Dagster directly: no one-benchmark-at-a-time
    turn (it measured beside a run that held it), no liveness claim, and a Ctrl-C read Failed."""
    import datetime as dt
    import json
    import time

    import yaml

    from helpers import cli_in_process, tiny_spec
    from test_lifecycle_review_fixes import _hold_turn

    canary_doc["metadata"]["name"] = "cadence-exec"
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [{"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm",
                            "parameters": {"sizes": [64], "iterations": 3}}])
    folder = tmp_path / "cadence-specs"
    folder.mkdir()
    (folder / "canary.yaml").write_text(yaml.safe_dump(canary_doc, sort_keys=False))
    holder = _hold_turn(tmp_path / "other-home", "run-x", 3.0)  # another home's run holds the machine
    released = time.time() + 3.0
    try:
        code, out, err = cli_in_process(["cadence", "run", "canary", "--specs", str(folder), "--execute"],
                                        monkeypatch, capsys)
    finally:
        holder.kill()
        holder.wait()
    assert code == 0, out + err
    assert "run run-x of home" in out and "holds this machine's one-benchmark-at-a-time turn" in out
    [rd] = (bench_home / "runs").iterdir()
    st = json.loads((rd / "status.json").read_text())
    assert st["phase"] == "Succeeded", st.get("message")
    started = dt.datetime.fromisoformat(st["started_utc"].replace("Z", "+00:00")).timestamp()
    assert started >= released - 0.5, "the cadence's run measured while another held the turn"
    assert f"{rd.name}: headline" in out and "phase Succeeded" in out  # printed as `benchrun run` prints it


def test_execute_refuses_a_bad_progress_interval_before_it_submits_anything(specs_dir: Path, bench_home: Path,
                                                                           monkeypatch, capsys) -> None:
    """As `benchrun run` does: the setting was read only once a run held the turn, after submitting."""
    from helpers import cli_in_process

    monkeypatch.setenv("BENCHRUN_PROGRESS_INTERVAL_S", "abc")
    code, out, err = cli_in_process(["cadence", "run", "canary", "--specs", str(specs_dir), "--execute"],
                                    monkeypatch, capsys)
    assert code == 2 and "BENCHRUN_PROGRESS_INTERVAL_S='abc'" in out + err
    assert not (bench_home / "runs").exists() or not any((bench_home / "runs").iterdir())
