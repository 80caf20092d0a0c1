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
