"""End to end: the code location loads in its own process and spec_commit_sensor submits exactly a new spec."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from test_automation_fixtures import ROOT, GitRepo, spec_bytes

LOCATION = '''
import dagster as dg
from bench_assets.definitions import defs as base
from sensors import all_sensors
from schedules import all_schedules

# the project's definitions, plus this issue's sensors and schedules until they are wired in
defs = base if any(s.name == "spec_commit_sensor" for s in base.sensors or []) else dg.Definitions.merge(
    base, dg.Definitions(sensors=all_sensors, schedules=all_schedules))
'''


@pytest.mark.slow
def test_committing_a_spec_to_a_clone_submits_exactly_it(tmp_path: Path, bench_home: Path) -> None:
    repo = GitRepo(tmp_path / "clone")
    root = repo.commit("root", {"specs/local/old.yaml": spec_bytes("old-spec"), "README.md": "x\n"})
    repo.commit("add a spec", {"specs/local/new.yaml": spec_bytes("new-spec", "canary")})
    location = tmp_path / "location.py"
    location.write_text(LOCATION)
    (bench_home / "dagster_home").mkdir()
    (bench_home / "dagster_home" / "dagster.yaml").write_text("")
    env = {**os.environ, "BENCHRUN_SPEC_REPO": str(repo.path), "BENCHRUN_SPEC_BRANCH": "main",
           "DAGSTER_HOME": str(bench_home / "dagster_home")}
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "dagster"), "sensor", "preview", "spec_commit_sensor",
         "-f", str(location), "-a", "defs", "-d", str(ROOT), "--cursor", root],
        capture_output=True, text=True, env=env, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Sensor returning run requests for 1 run(s)" in proc.stdout
    runs = [p.name for p in (bench_home / "runs").iterdir()]
    assert len(runs) == 1 and runs[0].startswith("new-spec-")
    assert runs[0] in proc.stdout + proc.stderr
