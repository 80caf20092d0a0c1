"""rebuild-warehouse curates only the stored evidence (a run directory file edited, added or removed
since the run was stored is not curated: the stored copy is, or the run is refused); a run rebuilt
from the store carries the start its directory's rows were signed by; the commands that read or
repair a home never make one where BENCHRUN_HOME or --home names none."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from benchrun.cli import app
from benchrun.fsio import atomic_write_json
from benchrun.store import open_store
from benchrun.warehouse import curate_run, lake, query
from benchrun.warehouse.rebuild import rebuild_warehouse
from test_store_helpers import make_run_dir

RID = "run-a"


def _stored(home: Path, run_id: str = RID) -> tuple[Path, object]:
    """A curated run whose evidence is stored (status.json names its object manifest)."""
    run_dir = make_run_dir(home, run_id)
    manifest = open_store(None, home).put_run_dir(run_dir, run_id, exclude=("status.json",))
    status = json.loads((run_dir / "status.json").read_text())
    atomic_write_json(run_dir / "status.json", {**status, "artifact_manifest_digest": manifest.digest})
    curate_run(run_dir, home)
    return run_dir, manifest


def _gflops(home: Path) -> list[tuple[str, float, str]]:
    sql = ("SELECT raw_path, value, raw_sha256 FROM measurement_fact WHERE metric = 'gflops' ORDER BY raw_path")
    return [tuple(r.values()) for r in query(sql, home).table.to_pylist()]


def _requests(home: Path) -> list[float]:
    return sorted(query("SELECT ttft_ms FROM serving_request_fact", home).table.column(0).to_pylist())


def _edit_result(run_dir: Path) -> str:
    rel = f"structured/{RID}_gemm_r1.json"
    doc = json.loads((run_dir / rel).read_text())
    doc["metrics"][0]["value"] = 999.0  # gflops r1 was 10.0
    (run_dir / rel).write_text(json.dumps(doc))
    return rel


def _add_result(run_dir: Path) -> str:
    rel = f"structured/{RID}_gemm_r9.json"
    doc = json.loads((run_dir / f"structured/{RID}_gemm_r1.json").read_text())
    doc.update(replicate=9, benchmark_case_id="case-micro-9")
    doc["metrics"][0]["value"] = 999.0
    (run_dir / rel).write_text(json.dumps(doc))
    return rel


def _remove_result(run_dir: Path) -> str:
    rel = f"structured/{RID}_gemm_r3.json"
    (run_dir / rel).unlink()
    return rel


def _edit_requests(run_dir: Path) -> str:
    rel = f"raw/{RID}_serving_r1_requests.parquet"
    table = pq.read_table(run_dir / rel)
    pq.write_table(table.set_column(table.schema.get_field_index("ttft_ms"), "ttft_ms",
                                    [[1.0] * table.num_rows]), run_dir / rel)
    return rel


@pytest.mark.parametrize("tamper", [_edit_result, _add_result, _remove_result, _edit_requests])
def test_rebuild_curates_the_stored_evidence_not_an_edited_run_directory(bench_home: Path, tamper) -> None:
    """The rebuild curated the run directory's files but stamped the rows with the stored files'
    sha256 (and exited 0): a forged value sat in measurement_fact under the untampered digest."""
    run_dir, manifest = _stored(bench_home)
    before, requests = _gflops(bench_home), _requests(bench_home)
    assert [v for _, v, _ in before] == [10.0, 12.0, 11.0]
    assert all(sha == manifest.entry(rel).sha256 for rel, _, sha in before)
    rel = tamper(run_dir)
    out = CliRunner().invoke(app, ["rebuild-warehouse"])
    assert out.exit_code == 0, out.output
    assert f"warning: {RID}: run directory file {rel}:" in out.stderr and "curated from the stored evidence" in out.stderr
    assert "(the stored evidence: 1 file(s) of" in out.stdout
    assert _gflops(bench_home) == before and _requests(bench_home) == requests  # the stored numbers, as signed


def test_rebuild_refuses_a_run_whose_directory_and_stored_copy_both_differ(bench_home: Path) -> None:
    run_dir, manifest = _stored(bench_home)
    before = _gflops(bench_home)
    rel = _edit_result(run_dir)
    stored = bench_home / "objects" / manifest.entry(rel).key
    stored.chmod(0o644)
    stored.write_text(stored.read_text().replace("10.0", "999.0"))
    out = CliRunner().invoke(app, ["rebuild-warehouse"])
    assert out.exit_code == 1
    why = str(out.exception)
    assert f"{RID}: {run_dir}: not its stored evidence ({rel}: differs from the stored copy" in why, why
    assert "the object was tampered with" in why and "1 failed" in out.stdout
    assert _gflops(bench_home) == before  # the run's rows are left as they were


def test_an_untouched_run_is_still_curated_from_its_directory(bench_home: Path) -> None:
    run_dir, _ = _stored(bench_home)
    (run_dir / "reports" / f"{RID}_report.md").write_text("rewritten after storing: not a curation source\n")
    report = rebuild_warehouse(bench_home)
    assert report.source == {RID: str(run_dir)} and not report.diverged and not report.failed


def test_a_run_rebuilt_from_the_store_carries_the_start_its_directory_signed(bench_home: Path) -> None:
    """A run rebuilt from the store took its start from the environment capture (earlier than the
    start status.json has, which the directory's rows were partitioned and signed by): every table's
    run_started_utc differed and verify failed on every table once the directory was back."""
    import yaml

    from benchrun.rundir import RunDir
    from benchrun.spec.digest import spec_digest, workload_spec_digest
    from test_store_helpers import SPEC_YAML

    run_dir = make_run_dir(bench_home, RID)
    pinned = yaml.safe_load(SPEC_YAML)  # the digests submission wrote, as the store path computes them
    status = {**json.loads((run_dir / "status.json").read_text()), "spec_digest": spec_digest(pinned),
              "workload_spec_digest": workload_spec_digest(pinned)}
    env = run_dir / "structured" / f"{RID}_environment.json"
    atomic_write_json(env, {**json.loads(env.read_text()), "captured_utc": "2026-11-30T08:59:09.937+00:00"})
    (run_dir / "manifest.json").unlink()
    sealed = RunDir(bench_home, RID).write_manifest(status="succeeded", issues=[], suite_steps={})
    assert sealed["started_utc"] == status["started_utc"] == "2026-11-30T08:59:10+00:00"
    manifest = open_store(None, bench_home).put_run_dir(run_dir, RID, exclude=("status.json",))
    # the finish as the store path reads it (the seal): the columns compared below do not hinge on it
    atomic_write_json(run_dir / "status.json", {**status, "artifact_manifest_digest": manifest.digest,
                                                "finished_utc": sealed["timestamp_utc"]})
    curate_run(run_dir, bench_home)
    signed = lake.run_rows_digest(bench_home, RID)

    def starts() -> dict[str, set]:
        return {t: set(lake.load_or_create(lake.catalog(bench_home), t).scan().to_arrow()
                       .column(lake.RUN_START).to_pylist()) for t in signed}

    started = starts()
    assert len(signed) >= 8 and all(len(v) == 1 for v in started.values())
    saved = bench_home.parent / "saved"
    shutil.move(str(run_dir), str(saved))
    report = rebuild_warehouse(bench_home, [RID])
    assert not report.failed and "no run directory" in report.source[RID]
    assert starts() == started
    now = lake.run_rows_digest(bench_home, RID)
    # benchmark_run_fact holds what only the live status says (the class granted, the Dagster run id)
    assert {t for t in signed if now[t] != signed[t]} <= {"benchmark_run_fact"}, (signed, now)


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
