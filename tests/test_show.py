"""`benchrun show`: what it prints of a run, and a damaged launch record file named."""

from __future__ import annotations


def test_show_names_the_straggler_nodes(bench_home) -> None:
    """`benchrun show` says which nodes the run named as stragglers (they were only in status.json)."""
    from typer.testing import CliRunner

    from benchrun.cli import app
    from benchrun.rundir import RunDir

    rd = RunDir(bench_home, "gang-run").create()
    rd.write_status({"run_id": "gang-run", "phase": "Succeeded", "conditions": [], "straggler_nodes": ["vm-node1"]})
    out = CliRunner().invoke(app, ["show", "gang-run"], env={"BENCHRUN_HOME": str(bench_home), "COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "straggler_nodes: vm-node1" in out.output


def test_show_names_a_damaged_launch_record_file(bench_home) -> None:
    """Launch records of another shape were a TypeError traceback from `benchrun show`."""
    import json

    import pytest

    from benchrun.commands import summary_rows
    from benchrun.errors import BenchrunError
    from benchrun.rundir import RunDir

    rd = RunDir(bench_home, "gang-run").create()
    path = rd.path / "structured" / "gang-run_launches.json"
    path.write_text(json.dumps([{"suite": "gemm"}]))
    with pytest.raises(BenchrunError, match="gang-run_launches.json: not a list of launch records"):
        summary_rows(rd.path, "gang-run")
