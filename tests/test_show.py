"""`benchrun show`: what it prints of a run, and a damaged launch record file named."""

from __future__ import annotations

from pathlib import Path


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


def test_the_read_only_commands_make_no_home(tmp_path, monkeypatch) -> None:
    """`benchrun runs --home /tmp/typo` made that directory and listed 0 runs; a write makes one."""
    import json

    from typer.testing import CliRunner

    from benchrun.cli import app

    typo = tmp_path / "typo"
    for args in (["runs", "--home", str(typo)], ["runs", "--json", "--home", str(typo)],
                 ["show", "r1", "--home", str(typo)]):
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 1 and "(--home) does not exist" in str(out.exception), args
        assert not typo.exists(), args
    monkeypatch.chdir(tmp_path)  # the default home, ./.benchrun, not made yet: no runs, and none made
    monkeypatch.delenv("BENCHRUN_HOME", raising=False)
    out = CliRunner().invoke(app, ["runs", "--json"])
    assert out.exit_code == 0 and json.loads(out.stdout) == [] and "(no such home)" in out.stderr
    assert not (tmp_path / ".benchrun").exists()
    out = CliRunner().invoke(app, ["show", "r1"])
    assert out.exit_code == 1 and "no benchrun home" in str(out.exception) and not (tmp_path / ".benchrun").exists()
    # the other commands that only read a home (before: each made ./.benchrun)
    for args in (["verify", "r1"], ["verify", "--store"], ["query", "SELECT 1"], ["lineage", "r1", "m"]):
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 1 and "there is no benchrun home at" in str(out.exception), (args, out.exception)
    out = CliRunner().invoke(app, ["compare", "r1", "r2"])
    assert out.exit_code == 1 and "not found under" in str(out.exception)
    assert not (tmp_path / ".benchrun").exists()
    from benchrun.paths import benchrun_home

    assert benchrun_home(typo) == typo.resolve() and typo.is_dir()  # what run and submit use: made


def test_validate_digest_and_compare_by_path_make_no_home(tmp_path, monkeypatch) -> None:
    """Each made ./.benchrun (or $BENCHRUN_HOME): validate for the path-template rule, compare
    for the key it looks up; none of them writes there."""
    from typer.testing import CliRunner

    from benchrun.cli import app

    spec = str(Path(__file__).resolve().parent.parent / "specs/local/canary.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BENCHRUN_HOME", raising=False)
    for env in ("BENCHRUN_VERIFY_PUBLIC_KEY", "BENCHRUN_SIGNING_KEY"):
        monkeypatch.delenv(env, raising=False)
    for args in (["validate", spec], ["digest", spec]):
        out = CliRunner().invoke(app, args)
        assert out.exit_code == 0, (args, out.output, out.exception)
        assert not (tmp_path / ".benchrun").exists(), args
    # two signed runs of another home, compared by path: the key is looked up in ./.benchrun/keys
    import numpy as np

    from benchrun.stats.synthetic import lognormal_replicates, make_run

    rng = np.random.default_rng(1)
    spec = {"spec": {"metrics": {"inference": {"primary": ["tokens_per_second"]}},
                     "layers": [{"name": "component", "enabled": True,
                                 "suites": [{"name": "serve", "repoCommand": "python -m x"}]}]}}
    a, b = (make_run(tmp_path / "elsewhere", r, {("serve", "", "tokens_per_second"): (
        lognormal_replicates(rng, 100, 0.02, 5), "tok/s", "higher")}, spec=spec) for r in ("run-a", "run-b"))
    out = CliRunner().invoke(app, ["compare", str(a), str(b)])
    assert out.exit_code != 0 and "no trusted public key" in str(out.exception), out.exception
    assert not (tmp_path / ".benchrun").exists()


def test_run_says_a_confirmed_regression_and_show_prints_data_as_it_is(bench_home, monkeypatch) -> None:
    """`benchrun run` printed only conditions that were not True, so RegressionDetected=True (a
    confirmed regression) was hidden while =False was printed; `show` read condition messages and
    case labels as rich markup: `[c=4]` vanished, and a `[/]` crashed it."""
    import types

    from typer.testing import CliRunner

    import benchrun.submit as sub
    from benchrun.cli import app
    from benchrun.rundir import RunDir

    message = "gating regression confirmed by a fresh round: serving_workflow/ttft_ms[c=4] [/]"

    def fake_execute(prepared, instance=None):
        rd = RunDir.for_run(prepared.run_id)
        rd.update_status(phase="Succeeded", outcome="succeeded", finished_utc="2026-12-06T06:00:00Z")
        rd.set_condition("Complete", True, "Succeeded", "every replicate succeeded")
        rd.set_condition("RegressionDetected", True, "ConfirmedRegression", message)
        return types.SimpleNamespace(success=True, all_events=[])

    monkeypatch.setattr(sub, "execute", fake_execute)
    spec = str(Path(__file__).resolve().parent.parent / "specs/local/canary.yaml")
    out = CliRunner().invoke(app, ["run", spec])
    assert f"RegressionDetected=True (ConfirmedRegression) {message}" in out.output, out.output
    run_id = next(p.name for p in (bench_home / "runs").iterdir())
    out = CliRunner().invoke(app, ["show", run_id])
    assert out.exit_code == 0 and out.exception is None, (out.output, out.exception)
    assert "ttft_ms[c=4]" in out.output.replace("\n", "").replace(" ", "").replace("│", ""), out.output


def test_show_all_takes_one_value_per_replicate_before_the_median(bench_home) -> None:
    """`benchrun show --all` took the median, min and max of every rank's value pooled over the
    replicates (allreduce rank_p50_time_us: the median of 10 rank values beside "ok 5"), while the
    report takes each replicate's median first (trial statistics): one rule now, for both."""
    import json

    from typer.testing import CliRunner

    from benchrun.cli import app
    from benchrun.commands import summary_rows
    from benchrun.rundir import RunDir

    rd = RunDir(bench_home, "rank-run").create()
    rd.write_status({"run_id": "rank-run", "phase": "Succeeded", "conditions": []})

    def launch(k: int, status: str, values: list[float]) -> dict:
        return {"run_id": "rank-run", "layer": "micro", "suite": "allreduce", "replicate": k,
                "benchmark_case_id": "ar", "status": status, "reason": None, "exit_code": 0, "wall_s": 1.0,
                "t_request": 0.0, "t_spawned": 0.0, "t_finished": 1.0, "log": "raw/x.log", "result": None,
                "metrics": [{"name": "rank_p50_time_us", "value": v, "unit": "us", "direction": "lower",
                             "case": "bytes=1024", "rank_id": i} for i, v in enumerate(values)]}

    rows = [launch(1, "ok", [1.0, 2.0, 3.0]), launch(2, "ok", [10.0, 20.0, 30.0]), launch(3, "ok", [11.0, 12.0, 13.0]),
            launch(4, "failed", [1000.0, 1000.0, 1000.0])]
    (rd.path / "structured" / "rank-run_launches.json").write_text(json.dumps(rows))
    [row] = summary_rows(rd.path, "rank-run")
    # per replicate 2, 20, 12 (pooled ranks: median 11, min 1, max 30; the failed replicate's 1000s)
    assert (row["median"], row["min"], row["max"], row["n_ok"], row["n_failed"]) == (12.0, 2.0, 20.0, 3, 1)
    out = CliRunner().invoke(app, ["show", "rank-run", "--all"], env={"BENCHRUN_HOME": str(bench_home),
                                                                      "COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    line = next(x for x in out.output.splitlines() if "rank_p50_time_us" in x)
    assert [c.strip() for c in line.split("│")][5:10] == ["12", "2", "20", "3", "1"], line


def test_the_trial_statistics_and_show_all_share_the_per_replicate_rule() -> None:
    from benchrun.stats.perlaunch import launch_value, launch_values

    assert launch_value([3.0, 1.0, 2.0, float("nan")]) == 2.0 and launch_value([1.0, 4.0]) == 2.5
    assert launch_values([("a", 1, 1.0), ("a", 1, 3.0), ("a", 2, 5.0), ("b", 1, 7.0)]) == {"a": {1: 2.0, 2: 5.0},
                                                                                            "b": {1: 7.0}}
