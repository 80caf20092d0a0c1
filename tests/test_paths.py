"""Run ids and file names are checked before they touch a path."""

import pytest

from benchrun.errors import BenchrunError
from benchrun.paths import safe_join, validate_name, validate_run_id
from benchrun.rundir import RunDir
from benchrun.submit import mint_run_id


@pytest.mark.parametrize("bad", ["../etc", "a/b", "..", "", "UPPER", "-lead", "trail-", "a" * 64, "x\x00y", "a..b/c"])
def test_bad_run_ids_are_refused(bad):
    with pytest.raises(BenchrunError):
        validate_run_id(bad)


@pytest.mark.parametrize("bad", ["..", "../x", "a/b", "", ".hidden", "a\\b", "x..y"])
def test_bad_names_are_refused(bad):
    with pytest.raises(BenchrunError):
        validate_name(bad)


def test_rundir_refuses_traversal(tmp_path):
    with pytest.raises(BenchrunError):
        RunDir(tmp_path, "../../etc")
    with pytest.raises(BenchrunError):
        safe_join(tmp_path, "runs", "..", "x")


def test_mint_run_id_is_a_dns_label():
    import datetime as dt

    rid = mint_run_id("Publication Inference/Stack_B200" + "x" * 80, dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc),
                      "sha256:0123456789abcdef")
    assert len(rid) <= 63
    assert rid.endswith("-20260102030405-01234567")
    assert validate_run_id(rid) == rid


@pytest.mark.parametrize("bad", ["ok\n", "run-a\n", "a\nb"])
def test_names_with_a_trailing_newline_are_refused(bad: str) -> None:
    """Issue 16 J: `$` matches before a final newline; the name regexes end in \\Z."""
    from benchrun.paths import validate_name, validate_run_id

    with pytest.raises(BenchrunError):
        validate_name(bad)
    with pytest.raises(BenchrunError):
        validate_run_id(bad)


def test_promote_refuses_an_alias_with_a_newline(tmp_path) -> None:
    from benchrun.stats.baseline import promote

    (tmp_path / "runs" / "run-a").mkdir(parents=True)
    (tmp_path / "runs" / "run-a" / "status.json").write_text('{"phase": "Succeeded"}')
    with pytest.raises(BenchrunError, match="baseline alias"):
        promote("run-a", tmp_path, alias="ok\n")
    assert not (tmp_path / "published" / "ok\n").exists()


def test_parse_result_name_reads_the_run_id_up_to_its_first_underscore() -> None:
    from benchrun.paths import parse_result_name

    run = "local-canary-20261206114422-09054d21"
    assert parse_result_name(f"{run}_serving_workflow_r3.json") == ("serving_workflow", 3)
    assert parse_result_name(f"{run}_serving_workflow_r3.json", run) == ("serving_workflow", 3)
    assert parse_result_name(f"{run}_gemm_r12.json", run) == ("gemm", 12)
    assert parse_result_name(f"{run}_a_r2_b_r1.json", run) == ("a_r2_b", 1)
    assert parse_result_name(f"{run}_gemm_r1.json", "other-run") is None
    for name in (f"{run}_launches.json", f"{run}_gemm_r1_requests.parquet", f"{run}_gemm_rx.json",
                 f"{run}__r1.json", "Upper_gemm_r1.json", f"{run}_gemm_r1.json.tmp"):
        assert parse_result_name(name, run) is None, name
