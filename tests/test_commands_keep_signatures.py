"""Issue 28 item 3: benchrun's own commands keep a run's signature valid — each documented
command that writes into a run, then `verify`, passes (`benchrun report` rewrote the signed
report and figure index without re-signing: "2 signed file(s) changed since signing")."""

from __future__ import annotations

import time

import pytest
from typer.testing import CliRunner

from benchrun.cli import app
from benchrun.provenance.keys import load_signing_key
from helpers import tiny_spec

GEMM = {"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "parameters": {"sizes": [64], "iterations": 2}}


@pytest.mark.slow
def test_every_command_that_writes_into_a_run_leaves_verify_passing(bench_home, canary_doc, write_spec,
                                                                    monkeypatch) -> None:
    from benchrun.report.worker import wait_for_workers

    monkeypatch.setenv("BENCHRUN_WARM", "0")
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [GEMM])
    cli = CliRunner()
    for _ in range(2):  # a second run of the workload: the first one's report (its history) changes
        result = cli.invoke(app, ["run", str(write_spec(canary_doc))])
        assert result.exit_code == 0, result.output
        wait_for_workers(bench_home)
        time.sleep(1.1)  # run ids carry the second
    run_id = sorted(p.name for p in (bench_home / "runs").iterdir())[0]
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", load_signing_key(bench_home).keyid)
    out = cli.invoke(app, ["verify", run_id])
    assert out.exit_code == 0, out.output
    other = sorted(p.name for p in (bench_home / "runs").iterdir())[1]
    spec = str(write_spec(canary_doc))
    # every documented command that reads or writes a run's files or the warehouse (cli --help)
    refusals = {"cancel": (1, 2), "delete": (0,), "migrate-warehouse": (0, 1, 2)}
    for command in (["report", run_id], ["playbook", run_id], ["promote", run_id, "--alias", "t"],
                    ["compare", "published/t", run_id], ["show", run_id], ["runs"], ["rebuild-warehouse"],
                    ["retention"], ["lineage", run_id, "tflops"], ["query", "select count(*) from measurement_fact"],
                    ["maintain-warehouse"], ["migrate-warehouse"], ["plan", spec], ["render", spec],
                    ["cancel", run_id], ["delete", other], ["report", run_id]):
        out = cli.invoke(app, command)
        allowed = refusals.get(command[0], (0, 1))
        assert out.exit_code in allowed, (command, out.exit_code, out.output, out.exception)
        for check in (cli.invoke(app, ["verify", run_id]), cli.invoke(app, ["verify", "--store"])):
            assert check.exit_code == 0, (command, check.output, str(check.exception))


@pytest.mark.slow
def test_a_run_whose_publication_fails_after_its_final_phase_is_not_succeeded(bench_home, canary_doc, write_spec,
                                                                             monkeypatch) -> None:
    """run_status set the final phase, then rewrote the report, curated, signed and pushed: when one
    of those failed the run stayed Succeeded and `benchrun run` exited 0 (nothing could mark a
    terminal phase Failed)."""
    import benchrun.warehouse as warehouse
    from benchrun.rundir import RunDir

    monkeypatch.setenv("BENCHRUN_WARM", "0")
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [GEMM])
    real = warehouse.curate_run

    def curate(*args, **kwargs):
        if kwargs.get("tables") and "benchmark_run_fact" in kwargs["tables"] and len(kwargs["tables"]) < 5:
            raise RuntimeError("simulated failure after the final phase")
        return real(*args, **kwargs)

    monkeypatch.setattr(warehouse, "curate_run", curate)
    result = CliRunner().invoke(app, ["run", str(write_spec(canary_doc))])
    assert result.exit_code == 1, result.output
    run_id = next(p.name for p in (bench_home / "runs").iterdir())
    st = RunDir(bench_home, run_id).read_status()
    assert st["phase"] == "Failed" and st["outcome"] == "failed"
    assert "publishing the finished run failed: RuntimeError: simulated failure after the final phase" in \
        str(st["conditions"])
    # review 2026-12-07: the hot metrics, pushed again once Succeeded, kept saying Succeeded
    prom = (bench_home / "metrics" / f"{run_id}.prom").read_text()
    assert 'phase="Failed"' in prom and 'phase="Succeeded"' not in prom


def _signed_run(bench_home, monkeypatch, rid: str):
    """A sealed, curated run with a published report file, signed with the home key (pinned)."""
    import json
    from pathlib import Path

    from benchrun.provenance import sign_run
    from benchrun.spec import load_spec_bytes
    from benchrun.stats.synthetic import make_run, seal_run, write_manifest
    from benchrun.warehouse.curate import curate_run

    rd = make_run(bench_home, rid, {("s", "c", "tps"): ([1.0, 2.0], "tok/s", "higher")}, manifest=False, sealed=False)
    raw = (Path(__file__).resolve().parents[1] / "specs/local/canary.yaml").read_bytes()
    (rd / "structured" / f"{rid}_spec.yaml").write_bytes(raw)  # a pinned spec that validates, so it can be re-signed
    st = json.loads((rd / "status.json").read_text())
    st["spec_digest"] = load_spec_bytes(raw, "pinned").spec_digest
    (rd / "status.json").write_text(json.dumps(st))
    write_manifest(rd)
    seal_run(rd, bench_home)
    curate_run(rd, bench_home)
    (rd / "reports" / f"{rid}_report.md").write_text("verdict: REGRESSION, tps -12%\n")  # published after sealing
    sign_run(rd, bench_home)
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", load_signing_key(bench_home).keyid)
    assert CliRunner().invoke(app, ["verify", rid]).exit_code == 0
    return rd


def test_rebuild_warehouse_does_not_sign_over_an_edited_published_file(bench_home, monkeypatch) -> None:
    """Re-signing checked only the sealed evidence: an edited report (a published, signed file) was
    signed over by the next `rebuild-warehouse RUN`, and verify passed again."""
    rid = "run-c"
    rd = _signed_run(bench_home, monkeypatch, rid)
    cli = CliRunner()
    (rd / "reports" / f"{rid}_report.md").write_text("verdict: no change\n")  # edited
    assert cli.invoke(app, ["verify", rid]).exit_code == 1
    out = cli.invoke(app, ["rebuild-warehouse", rid])
    assert "not signed again: signed files changed that this command did not write" in out.output, out.output
    assert f"reports/{rid}_report.md" in out.output
    assert cli.invoke(app, ["verify", rid]).exit_code == 1  # the edit stays visible


def test_an_edited_status_json_is_not_carried_into_a_new_signature(bench_home, monkeypatch) -> None:
    """The signed predicate takes the run's name, class, digests and times from status.json, which no
    signature covers: an edited class (realism → publication grade), name and finish time came out
    signed by the next `rebuild-warehouse RUN` or `report RUN`, and verify passed."""
    import base64
    import json

    rid = "run-s"
    rd = _signed_run(bench_home, monkeypatch, rid)
    env = rd / "reports" / f"{rid}_provenance.dsse.json"
    before = env.read_bytes()
    st = json.loads((rd / "status.json").read_text())
    st.update(benchmark_class_granted="publication_grade", name="forged-name", finished_utc="1999-01-01T00:00:00Z")
    (rd / "status.json").write_text(json.dumps(st))
    cli = CliRunner()
    for command in (["rebuild-warehouse", rid], ["report", rid]):
        out = cli.invoke(app, command)
        said = out.output + str(out.exception)  # report refuses (exit 1), its signed report kept
        assert "not signed again: status.json no longer names the run as its signature does" in said, said
        assert "benchmark_class.granted (signed 'realism_grade', status.json 'publication_grade')" in said
        assert env.read_bytes() == before  # the signature stays what it was
    predicate = json.loads(base64.b64decode(json.loads(env.read_text())["payload"]))["predicate"]
    assert predicate["benchmark_class"]["granted"] == "realism_grade" and predicate["run_name"] == "synthetic"
    # a time benchrun itself moves: the run, signed while it was Analyzing, is marked Failed (killed),
    # which sets its finish: signed again with it; an edited time is never signed (the warehouse curates it)
    from benchrun.provenance import sign_run
    from benchrun.rundir import mark_run_failed

    st.update(benchmark_class_granted="realism_grade", name="synthetic", phase="Analyzing", outcome="succeeded",
              finished_utc=None)
    (rd / "status.json").write_text(json.dumps(st))
    sign_run(rd, bench_home)
    assert mark_run_failed(bench_home, rid, "killed")
    finished = json.loads((rd / "status.json").read_text())["finished_utc"]
    out = cli.invoke(app, ["report", rid])
    assert "not signed again" not in out.output, out.output
    assert cli.invoke(app, ["verify", rid]).exit_code == 0
    predicate = json.loads(base64.b64decode(json.loads(env.read_text())["payload"]))["predicate"]
    assert predicate["timestamps"]["finished_utc"] == finished  # signed empty: set since
    assert predicate["curated_status"]["phase"] == "Failed"
    before = env.read_bytes()
    st = json.loads((rd / "status.json").read_text())
    st["finished_utc"] = "1999-01-01T00:00:00Z"
    (rd / "status.json").write_text(json.dumps(st))
    out = cli.invoke(app, ["report", rid])
    said = out.output + str(out.exception)
    assert out.exit_code == 1 and f"finished_utc (signed {finished!r}, status.json '1999-01-01T00:00:00Z')" in said, said
    assert env.read_bytes() == before


def test_a_run_whose_envelope_and_manifest_were_removed_fails_verify(bench_home, monkeypatch) -> None:
    """With the envelope and manifest.json deleted and status.json set back to Running, a sealed
    run with an edited measurement passed `verify RUN` and `verify --store` ("not signed yet"), though
    its artifact store holds its sealed object manifest."""
    import json

    rid = "run-u"
    rd = _signed_run(bench_home, monkeypatch, rid)
    (rd / "reports" / f"{rid}_provenance.dsse.json").unlink()
    (rd / "manifest.json").unlink()
    st = json.loads((rd / "status.json").read_text())
    st.update(phase="Running", artifact_manifest_digest=None)
    (rd / "status.json").write_text(json.dumps(st))
    result = rd / "structured" / f"{rid}_s_r1.json"
    result.write_text(result.read_text().replace('"value": 1.0', '"value": 99.0'))
    cli = CliRunner()
    for command in (["verify", rid], ["verify", "--store"]):
        out = cli.invoke(app, command)
        assert out.exit_code == 1, (command, out.output)
        assert "yet the run sealed its evidence" in out.output + str(out.exception), (command, out.output)
    # the pinned spec names the store: removing it too does not make the run "never sealed"
    (rd / "structured" / f"{rid}_spec.yaml").unlink()
    for command in (["verify", rid], ["verify", "--store"]):
        out = cli.invoke(app, command)
        assert out.exit_code == 1 and "its pinned spec" in out.output + str(out.exception), (command, out.output)


def test_report_signs_over_only_what_it_writes_and_nothing_added(bench_home, monkeypatch) -> None:
    """`benchrun report` allowed any change under reports/ and figures/ (an edited playbook verdict
    there was signed over), and no re-signing looked at files added after signing: signing
    hashes every file of the run, so a file dropped into structured/ came out signed."""
    rid = "run-d"
    rd = _signed_run(bench_home, monkeypatch, rid)
    cli = CliRunner()
    (rd / "reports" / f"{rid}_report.md").write_text("verdict: no change\n")  # not a file `report` writes
    out = cli.invoke(app, ["report", rid])
    said = out.output + str(out.exception)  # refused (exit 1): the signed report is kept as it was
    assert out.exit_code == 1 and "not signed again: signed files changed that this command did not write" in said, said
    assert cli.invoke(app, ["verify", rid]).exit_code == 1
    (rd / "reports" / f"{rid}_report.md").write_text("verdict: REGRESSION, tps -12%\n")  # restored
    (rd / "structured" / f"{rid}_notes.json").write_text('{"verdict": "fine"}')  # added after signing
    for command in (["report", rid], ["rebuild-warehouse", rid]):
        out = cli.invoke(app, command)
        said = out.output + str(out.exception)
        assert "not signed again: files were added since signing" in said, said
        assert f"structured/{rid}_notes.json" in said
        verified = cli.invoke(app, ["verify", rid]).output
        assert f"not covered: structured/{rid}_notes.json" in verified, verified  # it stays unsigned
    (rd / "structured" / f"{rid}_notes.json").unlink()
    out = cli.invoke(app, ["report", rid])
    assert "not signed again" not in out.output, out.output
    assert cli.invoke(app, ["verify", rid]).exit_code == 0  # its own report and figures signed again


@pytest.mark.slow
def test_a_finished_run_materialized_again_succeeds_and_keeps_its_earlier_attempt(bench_home, canary_doc,
                                                                                 write_spec, monkeypatch) -> None:
    """Re-materializing a finished partition (the UI's Materialize) failed in run_status: the first
    attempt's report, statistics and figures were sealed into the new manifest, rewritten by the
    assets after, and signing refused ("the sealed evidence changed"); verify failed after."""
    import types

    from benchrun import submit as sub
    from benchrun.report.worker import wait_for_workers
    from benchrun.rundir import RunDir

    monkeypatch.setenv("BENCHRUN_WARM", "0")
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [GEMM])
    cli = CliRunner()
    assert cli.invoke(app, ["run", str(write_spec(canary_doc))]).exit_code == 0
    wait_for_workers(bench_home)
    run_id = next(p.name for p in (bench_home / "runs").iterdir())
    rd = RunDir(bench_home, run_id)
    first = (rd.path / "manifest.json").read_bytes()
    result = sub.execute(types.SimpleNamespace(run_id=run_id))
    wait_for_workers(bench_home)
    st = rd.read_status()
    assert result.success and st["phase"] == "Succeeded", st.get("conditions")
    assert (rd.path / "attempts" / "1" / "manifest.json").read_bytes() == first
    assert any(c["type"] == "Rematerialized" and "attempts/1/" in c["message"] for c in st["conditions"])
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", load_signing_key(bench_home).keyid)
    out = cli.invoke(app, ["verify", run_id])
    assert out.exit_code == 0, out.output


def test_setting_an_earlier_attempt_aside_finishes_after_a_crash_half_way(tmp_path, monkeypatch) -> None:
    """Review: the files moved in name order, manifest.json among the first; a crash after it left the
    reports, statistics and results in place, and the next start (no manifest.json: nothing sealed) moved
    nothing more, so the stale reports were sealed into the new manifest and signing refused."""
    import shutil

    from benchrun.lifecycle import set_earlier_attempt_aside
    from benchrun.rundir import RunDir

    rd = RunDir(tmp_path, "run-x").create()
    rd.write_status({"run_id": "run-x", "phase": "Analyzing"})
    files = ["manifest.json", "figures/a.png", "raw/r.parquet", "reports/run-x_report.html",
             "reports/run-x_provenance.dsse.json", "structured/run-x_gemm_r1.json", "structured/run-x_spec.yaml"]
    for rel in files:
        (rd.path / rel).parent.mkdir(parents=True, exist_ok=True)
        (rd.path / rel).write_text(rel)
    real_move, moved = shutil.move, []

    def crash_after_two(src, dst):
        if len(moved) == 2:
            raise KeyboardInterrupt("killed")
        moved.append(src)
        return real_move(src, dst)

    monkeypatch.setattr(shutil, "move", crash_after_two)
    with pytest.raises(KeyboardInterrupt):
        set_earlier_attempt_aside(rd)
    assert (rd.path / "manifest.json").is_file()  # moved last: the next start knows it has work left
    monkeypatch.setattr(shutil, "move", real_move)
    assert set_earlier_attempt_aside(rd) == "attempts/1/"  # finished in the same folder
    left = sorted(p.relative_to(rd.path).as_posix() for p in rd.path.rglob("*") if p.is_file())
    assert left == sorted(["status.json", "structured/run-x_spec.yaml"] +
                          [f"attempts/1/{r}" for r in files if r != "structured/run-x_spec.yaml"])
    assert set_earlier_attempt_aside(rd) is None  # nothing sealed since: nothing to set aside


def test_the_instance_settings_are_written_whole_or_not_at_all(tmp_path, monkeypatch) -> None:
    """Review: dagster.yaml was copied straight into its name and never again once it existed: a copy cut
    short (an empty file reads as no settings) left Dagster's defaults, with no one-run-at-a-time limit."""
    import os

    from benchrun import fsio
    from benchrun.submit import _REPO_ROOT, dagster_home

    real = os.link

    def crash(*a, **k):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(os, "link", crash)
    with pytest.raises(KeyboardInterrupt):
        dagster_home(tmp_path)
    assert not (tmp_path / "dagster_home" / "dagster.yaml").exists()  # nothing half-written where Dagster reads
    assert not [p for p in (tmp_path / "dagster_home").iterdir()]  # and no temporary left beside it
    monkeypatch.setattr(os, "link", real)
    target = dagster_home(tmp_path) / "dagster.yaml"
    assert target.read_bytes() == (_REPO_ROOT / "dagster.yaml").read_bytes()
    assert fsio.create_once(target, lambda fh: fh.write(b"x")) is False  # the first writer's copy is kept


def test_a_run_that_ends_later_publishes_its_hot_metrics_again(bench_home, monkeypatch) -> None:
    """Review 2026-12-07: the phase gauge was pushed while Analyzing and once final in run_status, never
    when the run ended after that (a cancel, the reaper, the failure sensors): it kept the phase before."""
    import json

    from benchrun.hotpublish import publish_hot_metrics
    from benchrun.rundir import RunDir
    from benchrun.runend import cancel_run

    rid = "run-hot-20261207000000-abcdef12"
    rd = _signed_run(bench_home, monkeypatch, rid)
    st = json.loads((rd / "status.json").read_text())
    (rd / "status.json").write_text(json.dumps({**st, "phase": "Analyzing", "outcome": None}))
    publish_hot_metrics(RunDir.for_run(rid, bench_home), print)  # as the hot_metrics asset does
    prom = bench_home / "metrics" / f"{rid}.prom"
    assert 'phase="Analyzing"' in prom.read_text()
    assert cancel_run(bench_home, rid, "canceled while it was being analysed")
    assert 'phase="Canceled"' in prom.read_text() and 'phase="Analyzing"' not in prom.read_text()


def test_report_that_cannot_sign_again_keeps_the_signed_report_and_exits_non_zero(bench_home, monkeypatch, tmp_path):
    """With a verify key that is not the one that signed the run (a rotated or another site's key),
    `benchrun report` rewrote the signed report, could not sign again, warned and exited 0: the run
    then failed verify and promote."""
    from pathlib import Path

    import benchrun.report.html as html
    from benchrun.provenance.keys import KEY_ENV, VERIFY_KEY_ENV

    rid = "run-k"
    rd = _signed_run(bench_home, monkeypatch, rid)
    cli = CliRunner()
    assert cli.invoke(app, ["report", rid]).exit_code == 0
    report = rd / "reports" / f"{rid}_report.html"
    signed = report.read_bytes()
    assert cli.invoke(app, ["verify", rid]).exit_code == 0
    real = html.build_report

    def built_differently(run_dir, *a, **k):  # what a later run of the workload (its history) does to it
        path = real(run_dir, *a, **k)
        Path(path).write_bytes(Path(path).read_bytes() + b"<!-- history grew -->")
        return path

    monkeypatch.setattr(html, "build_report", built_differently)
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    other = Ed25519PrivateKey.generate()
    (tmp_path / "other.pub.pem").write_bytes(other.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    monkeypatch.setenv(VERIFY_KEY_ENV, str(tmp_path / "other.pub.pem"))
    out = cli.invoke(app, ["report", rid])
    said = out.output + str(out.exception)
    assert out.exit_code == 1, said
    assert f"{rid}: report not rewritten, its signed report and figures are kept as they were: not signed again: " \
           "the current signature cannot be checked" in said, said
    assert report.read_bytes() == signed
    monkeypatch.delenv(VERIFY_KEY_ENV)
    assert cli.invoke(app, ["verify", rid]).exit_code == 0
    # with the key that signed it, the new report is written and signed
    monkeypatch.delenv(KEY_ENV, raising=False)
    assert cli.invoke(app, ["report", rid]).exit_code == 0
    assert report.read_bytes() != signed and cli.invoke(app, ["verify", rid]).exit_code == 0
