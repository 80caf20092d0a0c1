"""End to end: the project's code location, in its own process, submits exactly the spec a new commit adds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from test_automation_fixtures import ROOT, GitRepo, spec_bytes


@pytest.mark.slow
def test_committing_a_spec_to_a_clone_submits_exactly_it(tmp_path: Path, bench_home: Path) -> None:
    repo = GitRepo(tmp_path / "clone")
    root = repo.commit("root", {"specs/local/old.yaml": spec_bytes("old-spec"), "README.md": "x\n"})
    repo.commit("add a spec", {"specs/local/new.yaml": spec_bytes("new-spec", "canary")})
    (bench_home / "dagster_home").mkdir()
    (bench_home / "dagster_home" / "dagster.yaml").write_text("")
    env = {**os.environ, "BENCHRUN_SPEC_REPO": str(repo.path), "BENCHRUN_SPEC_BRANCH": "main",
           "DAGSTER_HOME": str(bench_home / "dagster_home")}
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "dagster"), "sensor", "preview", "spec_commit_sensor",
         "-m", "bench_assets.definitions", "-a", "defs", "-d", str(ROOT), "--cursor", root],
        capture_output=True, text=True, env=env, timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Sensor returning run requests for 1 run(s)" in proc.stdout
    runs = [p.name for p in (bench_home / "runs").iterdir()]
    assert len(runs) == 1 and runs[0].startswith("new-spec-")
    assert runs[0] in proc.stdout + proc.stderr
