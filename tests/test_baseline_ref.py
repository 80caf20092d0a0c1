"""A spec names its baseline inside the home that compares (benchrun.spec.refs), and a baseline's
signature is checked with this home's key, never with a key found beside the baseline."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from benchrun.errors import BenchrunError
from benchrun.spec.rules import check
from benchrun.stats.analysis import compare_runs
from benchrun.stats.load import resolve_run
from benchrun.stats.synthetic import make_run

SPEC = {"spec": {"metrics": {"inference": {"enabled": True, "primary": ["s/tps"]}}}}
REF = ("spec", "comparison", "baseline", "artifactRef")


def _tps(values):
    return {("s", "", "tps"): (values, "t/s", "higher")}


@pytest.mark.parametrize("ref", ["/tmp/evil/runs/base", "../evil/runs/base", "./runs/base", "evil/home/runs/base",
                                 "published/..", "../published/current", "C:\\runs\\x"])
def test_a_path_is_not_a_baseline_name(canary_doc, ref):
    canary_doc["spec"]["comparison"]["baseline"]["artifactRef"] = ref
    found = [msg for path, msg in check(canary_doc) if tuple(path) == REF]
    assert found and "not a baseline name" in found[0] and "benchrun promote" in found[0]


@pytest.mark.parametrize("ref", ["local/published/canary", "published/current", "cluster/runs/run-1", "runs/run-1",
                                 "run-1"])
def test_run_ids_and_aliases_are_baseline_names(canary_doc, ref):
    canary_doc["spec"]["comparison"]["baseline"]["artifactRef"] = ref
    assert not [p for p, _ in check(canary_doc) if tuple(p) == REF]


def test_a_spec_ref_never_resolves_to_a_directory(tmp_path, bench_home):
    elsewhere = make_run(tmp_path / "elsewhere", "base", _tps([100, 101, 99]), spec=SPEC)
    assert resolve_run(str(elsewhere)) == elsewhere.resolve()  # what a user types on the command line
    with pytest.raises(BenchrunError, match="artifactRef.*not a baseline name"):
        resolve_run(str(elsewhere), paths=False)


def test_a_baseline_signed_with_its_own_key_is_refused(tmp_path, bench_home, monkeypatch):
    # before: the baseline was verified with the key under its own "home" (<baseline>/../../keys),
    # so a directory anyone wrote, signed with a key they made, was admitted and judged
    for env in ("BENCHRUN_VERIFY_PUBLIC_KEY", "BENCHRUN_SIGNING_KEY", "BENCHRUN_TRUSTED_KEYIDS"):
        monkeypatch.delenv(env, raising=False)
    forged = make_run(tmp_path / "forged", "base", _tps([200, 201, 199, 200, 202]), spec=SPEC)
    cand = make_run(bench_home, "cand", _tps([100, 101, 99, 100, 102]), spec=SPEC)
    gate, res = compare_runs(forged, cand)
    assert res is None and gate.not_comparable
    assert "baseline base's evidence does not verify" in gate.message()
    assert "signature does not verify" in gate.message()
    from benchrun.cli import app

    out = CliRunner().invoke(app, ["compare", str(forged), "cand"])
    assert getattr(out.exception, "exit_code", None) == 5, out.output  # benchrun.cli's main maps it to exit 5
    assert "does not verify" in str(out.exception)
    # the same runs in one home still compare (the home's own key verifies both)
    own = make_run(bench_home, "base", _tps([200, 201, 199, 200, 202]), spec=SPEC)
    gate, res = compare_runs(own, cand)
    assert res is not None and not gate.not_comparable


def test_a_site_placeholder_names_the_baseline_run(canary_doc, tmp_path, bench_home, monkeypatch):
    # the reference template's cluster/runs/${BASELINE_RUN_ID}: valid, filled from $BENCHRUN_VAR_BASELINE_RUN_ID
    canary_doc["spec"]["comparison"]["baseline"]["artifactRef"] = "cluster/runs/${BASELINE_RUN_ID}"
    assert not [p for p, _ in check(canary_doc) if tuple(p) == REF]
    canary_doc["spec"]["comparison"]["baseline"]["artifactRef"] = "cluster/runs/${RUN_DIR}"
    assert [m for p, m in check(canary_doc) if tuple(p) == REF][0].count("not a site placeholder") == 1
    monkeypatch.delenv("BENCHRUN_VAR_BASELINE_RUN_ID", raising=False)
    with pytest.raises(BenchrunError, match="BENCHRUN_VAR_BASELINE_RUN_ID is not set"):
        resolve_run("cluster/runs/${BASELINE_RUN_ID}", paths=False)
    base = make_run(bench_home, "base-7", _tps([100, 101, 99]), spec=SPEC)
    monkeypatch.setenv("BENCHRUN_VAR_BASELINE_RUN_ID", "base-7")
    assert resolve_run("cluster/runs/${BASELINE_RUN_ID}", paths=False) == base
    monkeypatch.setenv("BENCHRUN_VAR_BASELINE_RUN_ID", "../../etc")
    with pytest.raises(BenchrunError, match="not valid"):
        resolve_run("cluster/runs/${BASELINE_RUN_ID}", paths=False)
