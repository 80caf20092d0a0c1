"""Options a user can get wrong with a number typer lets through (NaN compares false with every bound, inf
is a number), an empty BENCHRUN_HOME, an --out that cannot hold the outputs, and Ctrl-C inside DuckDB: each
is one line naming the option and a non-zero exit, before anything is measured or written (CLI review,
2026-12-06: a cancel that never ended, a date overflow traceback, "30 replicates for nan% power", NaN in a
summary's JSON, a whole load sweep lost after it ran)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import cli_in_process

URL = "http://127.0.0.1:9/v1/completions"  # nothing listens there: every case is refused before a request


@pytest.mark.parametrize("args, said", [
    (["cancel", "run-x-20261206000000-abcdef12", "--grace", "nan"], "--grace nan must be a number from 0 to 86400"),
    (["cancel", "run-x-20261206000000-abcdef12", "--grace", "inf"], "--grace inf must be a number"),
    (["maintain-warehouse", "--expire-days", "1e308"], "--expire-days 1e+308: give a number of days from 0 to 36500"),
    (["maintain-warehouse", "--expire-days", "nan"], "--expire-days nan: give a number of days"),
    (["plan", "specs/local/canary.yaml", "--power", "nan"], "--power nan must be a number from 0.5 to 0.99"),
    (["loadgen", "--url", URL, "--model", "m", "--out", "{tmp}/o", "--requests", "4", "--concurrency", "1",
      "--price-per-node-hour", "nan"], "--price-per-node-hour must be a finite number"),
    (["loadgen", "--url", URL, "--model", "m", "--out", "{tmp}/o", "--duration", "1e308", "--concurrency", "1"],
     "--duration 1e+308 must be a number from 0 to 604800"),
    (["loadgen", "--url", URL, "--model", "m", "--out", "{tmp}/afile/sub", "--requests", "4", "--concurrency", "1"],
     "--out {tmp}/afile/sub: cannot make raw/ there"),
    (["refserver", "--decode-base-ms", "nan"], "model times must be finite and >= 0"),
])
def test_a_bad_number_is_one_line_naming_its_option(tmp_path: Path, monkeypatch, capsys, args, said) -> None:
    monkeypatch.setenv("BENCHRUN_HOME", str(tmp_path))
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    (tmp_path / "afile").write_text("a file, not a folder")
    code, _out, err = cli_in_process([a.replace("{tmp}", str(tmp_path)) for a in args], monkeypatch, capsys)
    assert code == 1 and said.replace("{tmp}", str(tmp_path)) in err and "Traceback" not in err, err


def test_a_port_out_of_range_is_a_usage_error(monkeypatch, capsys) -> None:
    code, _out, err = cli_in_process(["refserver", "--port", "70000"], monkeypatch, capsys)
    assert code == 2 and "--port" in err and "Traceback" not in err, err


def test_an_empty_benchrun_home_is_refused_not_the_working_directory(tmp_path: Path, monkeypatch, capsys) -> None:
    # `BENCHRUN_HOME= benchrun rebuild-warehouse` made objects/ and warehouse/ in the working directory
    monkeypatch.setenv("BENCHRUN_HOME", "")
    monkeypatch.chdir(tmp_path)
    code, _out, err = cli_in_process(["rebuild-warehouse"], monkeypatch, capsys)
    assert code == 1 and "BENCHRUN_HOME is set but empty" in err, err
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_inside_duckdb_exits_130_without_a_traceback(monkeypatch, capsys) -> None:
    # DuckDB answers SIGINT with its own error (InterruptException, or RuntimeError("Query interrupted"))
    from benchrun import cli

    class Interrupted:
        rich_markup_mode = None

        def __call__(self, **_kw) -> None:
            try:
                raise KeyError("inner")
            except KeyError as exc:
                raise RuntimeError("Query interrupted") from exc

    monkeypatch.setattr(cli, "app", Interrupted())
    with pytest.raises(SystemExit) as out:
        cli.main()
    assert out.value.code == 130 and "aborted" in capsys.readouterr().err
    assert not cli._interrupted(RuntimeError("something else"))
