"""The commands that read or repair a home never make one where BENCHRUN_HOME or --home names none."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchrun.cli import app

RID = "run-a"


READERS = (["rebuild-warehouse"], ["promote", RID], ["delete", RID], ["cancel", RID], ["tag-warehouse", "t"],
           ["maintain-warehouse", "--dry-run"], ["migrate-warehouse"], ["retention"], ["playbook", RID],
           ["plan", str(Path(__file__).resolve().parents[1] / "specs/local/canary.yaml")])


@pytest.mark.parametrize("args", READERS, ids=[a[0] for a in READERS])
def test_a_command_that_reads_or_repairs_a_home_never_makes_one(tmp_path: Path, monkeypatch, args) -> None:
    """Each made the home a mistyped BENCHRUN_HOME named (promote even exited 1 after making it)."""
    typo = tmp_path / "typo"
    monkeypatch.setenv("BENCHRUN_HOME", str(typo))
    out = CliRunner().invoke(app, args)
    assert out.exit_code == 1 and f"{args[0]}: there is no benchrun home at {typo} (BENCHRUN_HOME)" in \
        str(out.exception), (out.output, out.exception)
    assert not typo.exists()


@pytest.mark.parametrize("command", ["delete", "cancel"])
def test_a_mistyped_home_option_is_named(tmp_path: Path, monkeypatch, command) -> None:
    monkeypatch.delenv("BENCHRUN_HOME", raising=False)
    typo = tmp_path / "typo"
    out = CliRunner().invoke(app, [command, RID, "--home", str(typo)])
    assert out.exit_code == 1 and f"no benchrun home at {typo} (--home)" in str(out.exception)
    assert "point --home at yours" in str(out.exception) and not typo.exists()
