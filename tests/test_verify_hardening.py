"""Issue 16 F and I: verify covers everything published, re-hashes the store, trusts a key only
from configuration or a pinned fingerprint; `verify --store`; evidence confined to the store root."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from benchrun.cli import app
from benchrun.errors import BenchrunError
from conftest import ROOT
from benchrun.provenance import sign_run, verify_run
from benchrun.provenance.keys import KEY_ENV, load_signing_key
from benchrun.store import open_store
from test_provenance import RUN_ID, make_sealed_run


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (KEY_ENV, "BENCHRUN_TRUSTED_KEYIDS", "BENCHRUN_VERIFY_PUBLIC_KEY", "BENCHRUN_STORE_ROOTS"):
        monkeypatch.delenv(name, raising=False)


def _verify(*args: str):
    return CliRunner().invoke(app, ["verify", *args])


def test_a_replaced_home_key_and_a_resign_do_not_pass(bench_home: Path, monkeypatch) -> None:
    """Replace keys/ed25519.pub.pem, re-sign: forged evidence passed `verify` by default."""
    rd = make_sealed_run(bench_home, stored=True)
    sign_run(rd.path, bench_home)
    genuine = load_signing_key(bench_home).keyid
    # The attacker swaps the home's key pair for their own and re-signs edited evidence.
    forged = Ed25519PrivateKey.generate()
    keys = bench_home / "keys"
    (keys / "ed25519.pem").write_bytes(forged.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    os.chmod(keys / "ed25519.pem", 0o600)
    (keys / "ed25519.pub.pem").unlink()
    sign_run(rd.path, bench_home)
    out = _verify(RUN_ID)
    assert out.exit_code != 0 and "is not trusted" in str(out.exception)  # no default trust in the home's key
    assert "do not match" not in str(out.exception)  # nothing was pinned
    out = _verify(RUN_ID, "--trust-keyid", genuine)
    assert out.exit_code != 0 and "is not trusted" in str(out.exception)  # the pinned fingerprint differs
    assert f"pinned ({genuine}) do not match it" in str(out.exception)  # and the message says so
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", load_signing_key(bench_home).keyid)
    assert _verify(RUN_ID).exit_code == 0  # the operator pinned this key on purpose


def test_a_forged_stored_object_is_caught(bench_home: Path, monkeypatch) -> None:
    rd = make_sealed_run(bench_home, stored=True)
    sign_run(rd.path, bench_home)
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", load_signing_key(bench_home).keyid)
    assert _verify(RUN_ID).exit_code == 0
    store = open_store(None, bench_home)
    entry = store.load_manifest(RUN_ID).entry(f"raw/{RUN_ID}_gemm_r1.log")
    obj = store.path_of(entry.key)
    os.chmod(obj, 0o644)
    obj.write_text("replicate 1, forged\n")
    out = _verify(RUN_ID)
    assert out.exit_code != 0
    assert f"raw/{RUN_ID}_gemm_r1.log" in str(out.exception) and "stored object(s) fail verification" in str(out.exception)


def test_everything_published_is_signed_and_what_is_not_is_named(bench_home: Path, monkeypatch) -> None:
    rd = make_sealed_run(bench_home, stored=True)
    # Written after the evidence was sealed: the report, statistics and playbooks.
    (rd.path / "reports" / f"{RUN_ID}_report.html").write_text("<html>median 1.573</html>")
    (rd.path / "structured" / f"{RUN_ID}_trial_statistics.json").write_text('{"median": 1.573}')
    (rd.path / "structured" / f"{RUN_ID}_playbooks.json").write_text("[]")
    sign_run(rd.path, bench_home)
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", load_signing_key(bench_home).keyid)
    st = verify_run(rd.path)
    assert {f"reports/{RUN_ID}_report.html", f"structured/{RUN_ID}_trial_statistics.json",
            f"structured/{RUN_ID}_playbooks.json"} <= set(st.subjects)
    assert st.predicate["not_signed"] == ["status.json", f"reports/{RUN_ID}_figures.log"]
    (rd.path / "figures" / "added.svg").write_text("<svg/>")
    out = _verify(RUN_ID)
    assert out.exit_code == 0, out.output
    assert "not covered: figures/added.svg (added or replaced after signing" in out.output
    assert "not covered: status.json (the run's live status" in out.output
    (rd.path / "reports" / f"{RUN_ID}_report.html").write_text("<html>median 1573.18</html>")
    with pytest.raises(BenchrunError, match=f"reports/{RUN_ID}_report.html \\(sha256 differs\\)"):
        verify_run(rd.path)


def test_the_figure_worker_log_written_after_signing_does_not_fail_verify(bench_home: Path, monkeypatch) -> None:
    """`benchrun run` draws figures in a detached worker that re-signs the run and then appends its
    cost to reports/<run>_figures.log: every fresh run failed `verify` ("signed file(s) changed")."""
    rd = make_sealed_run(bench_home, stored=True)
    log = rd.path / "reports" / f"{RUN_ID}_figures.log"
    log.write_text("")  # the worker opens its log before it draws and re-signs
    sign_run(rd.path, bench_home)
    log.write_text('{"figures_worker_wall_s": 2.7, "figures_worker_cpu_s": 1.97}\n')  # ... and writes it after
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", load_signing_key(bench_home).keyid)
    out = _verify(RUN_ID)
    assert out.exit_code == 0, (out.output, out.exception)
    assert f"not covered: reports/{RUN_ID}_figures.log (the report figure worker's own log" in out.output
    (rd.path / "reports" / f"{RUN_ID}_report.html").write_text("<html>forged</html>")  # other files stay signed
    sign_run(rd.path, bench_home)
    (rd.path / "reports" / f"{RUN_ID}_report.html").write_text("<html>forged again</html>")
    assert _verify(RUN_ID).exit_code != 0


def test_verify_store_walks_every_run(bench_home: Path, monkeypatch) -> None:
    a = make_sealed_run(bench_home, "run-a", stored=True)
    b = make_sealed_run(bench_home, "run-b", stored=True)
    for rd in (a, b):
        sign_run(rd.path, bench_home)
    monkeypatch.setenv("BENCHRUN_TRUSTED_KEYIDS", load_signing_key(bench_home).keyid)
    out = _verify("--store")
    assert out.exit_code == 0, out.output
    assert "run run-a: signature" in out.output and "run run-b: signature" in out.output
    (b.path / "raw" / "run-b_gemm_r2.log").write_text("edited\n")
    out = _verify("--store")
    assert out.exit_code != 0 and "run run-b" in str(out.exception) and "run-a" not in str(out.exception)


def test_verify_store_names_a_stored_run_by_its_own_location(bench_home: Path) -> None:
    """A stored run without a run directory is named by where its objects are, not the template."""
    import shutil

    rd = make_sealed_run(bench_home, "run-c", stored=True)
    shutil.rmtree(rd.path)
    out = _verify("--store")
    assert out.exit_code == 0, out.output
    [line] = [ln for ln in out.output.splitlines() if ln.startswith("stored run run-c")]
    assert "${RUN_ID}" not in line and "objects re-hashed: all match" in line
    where = line.split("(manifest ", 1)[1].split(")", 1)[0]
    assert where.startswith("file://") and Path(where[len("file://"):]).is_file() and "run-c" in where


@pytest.mark.parametrize("template, message", [
    ("objects/${BENCHRUN_HOME}/${RUN_ID}/", "placeholder ${BENCHRUN_HOME} is not supported"),
    ("objects/${SSH_KEY}/", "placeholder ${SSH_KEY} is not supported"),
    ("../../x/${RUN_ID}/", "'..' is not allowed"),
    # admission and opening the store read a template the same way (a host passed admission)
    ("file://otherhost/x/${RUN_ID}/", "file:// URI names host 'otherhost'"),
])
def test_path_template_is_checked_at_admission(canary_doc, write_spec, bench_home, template, message) -> None:
    """An unsupported placeholder was caught only after the whole run; '..' wrote outside the home."""
    from benchrun import submit as sub

    canary_doc["spec"]["sinks"]["rawArtifacts"]["pathTemplate"] = template
    with pytest.raises(BenchrunError) as info:
        sub.prepare(write_spec(canary_doc))
    assert message in str(info.value) and "sinks.rawArtifacts.pathTemplate" in str(info.value)
    assert not (bench_home / "runs").exists() or not any((bench_home / "runs").iterdir())


def test_validate_applies_the_admission_rule_for_path_template(canary_doc, write_spec, bench_home) -> None:
    """Issue 28 item 7: `validate` accepted a pathTemplate outside the home that `run` rejects."""
    from benchrun.spec.validation import validate_path

    canary_doc["spec"]["sinks"]["rawArtifacts"]["pathTemplate"] = "/etc/benchrun-${RUN_ID}/"
    [result] = validate_path(write_spec(canary_doc))
    assert not result.valid
    assert any(e.path.endswith("pathTemplate") and "BENCHRUN_STORE_ROOTS" in e.message for e in result.errors), \
        result.errors
    for i, bad in enumerate(("objects/../../../etc/${RUN_ID}/", "file:///etc/benchrun-${RUN_ID}/",
                             "file://otherhost/srv/${RUN_ID}/")):
        canary_doc["spec"]["sinks"]["rawArtifacts"]["pathTemplate"] = bad
        [result] = validate_path(write_spec(canary_doc, f"bad{i}.yaml"))
        assert not result.valid and any(e.path.endswith("pathTemplate") for e in result.errors), (bad, result.errors)
    canary_doc["spec"]["sinks"]["rawArtifacts"]["pathTemplate"] = "objects/${RUN_ID}/"
    assert validate_path(write_spec(canary_doc, "ok.yaml"))[0].valid


def test_local_stores_are_confined_to_the_home_or_configured_roots(tmp_path: Path, monkeypatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with pytest.raises(BenchrunError, match="outside the benchrun home"):
        open_store(f"file://{tmp_path}/elsewhere/${{RUN_ID}}/", home)
    with pytest.raises(BenchrunError, match="outside the benchrun home"):
        open_store("/etc/${RUN_ID}/", home)
    monkeypatch.setenv("BENCHRUN_STORE_ROOTS", str(tmp_path / "elsewhere"))
    assert open_store(f"file://{tmp_path}/elsewhere/${{RUN_ID}}/", home).root == (tmp_path / "elsewhere").resolve()


def test_a_store_cannot_write_into_the_homes_or_the_shared_states_own_folders(tmp_path: Path, monkeypatch) -> None:
    # security review: pathTemplate runs/<victim>/ put objects, manifests and .lock into another run's
    # directory (locally, and in S3 under BENCHRUN_SHARED_STATE's runs/, which pull_run copies into it)
    from benchrun.store import check_path_template

    home = tmp_path / "home"
    home.mkdir()
    for bad, said in (("runs/victim-20250101000000-abcdef12/", "the home's runs/ folder"),
                      ("keys/${RUN_ID}/", "the home's keys/ folder"), ("${RUN_ID}/", "the home itself"),
                      (f"file://{home}/specs/${{RUN_ID}}/", "the home's specs/ folder"), ("./", "the home itself")):
        with pytest.raises(BenchrunError, match=f"would write into {said}"):
            open_store(bad, home)
        with pytest.raises(BenchrunError, match="give a folder of its own"):
            check_path_template(bad, home)
    assert open_store("objects/${RUN_ID}/", home).root == home / "objects"
    assert open_store("stores/team-a/${RUN_ID}/", home).root == home / "stores" / "team-a"
    # review 2026-12-07: dagster_home/ and report_workers/ were not among them; every folder the code
    # makes in a home (`home / "name"`, read from the source) is, but the default store's own objects/
    import re

    from benchrun.store import HOME_FOLDERS

    made = {m.group(1) for p in (ROOT / "benchrun").rglob("*.py") for m in re.finditer(
        r'(?:(?:Path|benchrun_home)\(home\)|(?<![\w(])(?:\w+\.)?home)\s*/\s*"([^"/]+)"', p.read_text(encoding="utf-8"))}
    assert {"runs", "dagster_home", "report_workers", "locks"} <= made  # the reading finds them
    assert made - {"objects"} <= HOME_FOLDERS, made - HOME_FOLDERS
    for name in ("dagster_home", "report_workers"):
        with pytest.raises(BenchrunError, match=f"would write into the home's {name}/ folder"):
            check_path_template(f"{name}/${{RUN_ID}}/", home)
    monkeypatch.setenv("BENCHRUN_SHARED_STATE", "s3://benchrun-artifacts/benchrun")
    monkeypatch.setenv("BENCHRUN_WAREHOUSE_LOCATION", "s3://benchrun-artifacts/warehouse")
    for bad, said in (("s3://benchrun-artifacts/benchrun/runs/victim-20250101000000-abcdef12/", "the shared state's runs/"),
                      ("s3://benchrun-artifacts/benchrun/${RUN_ID}/", "the shared state itself"),
                      ("s3://benchrun-artifacts/warehouse/raw/${RUN_ID}/", "the warehouse's table location")):
        with pytest.raises(BenchrunError, match=f"would write into {said}"):
            check_path_template(bad, home)
        with pytest.raises(BenchrunError, match="BENCHRUN_"):
            open_store(bad, home)
    check_path_template("s3://benchrun-artifacts/raw/${RUN_ID}/", home)  # a prefix of its own
    check_path_template("s3://benchrun-artifacts/benchrun/objects/${RUN_ID}/", home)
    check_path_template("s3://other-bucket/benchrun/runs/${RUN_ID}/", home)


def test_an_unsigned_run_is_judged_alike_by_verify_and_verify_store(bench_home: Path, monkeypatch) -> None:
    """`verify <canceled run>` said "no provenance envelope there; sign the run first" (exit 1),
    which no command can do, while `verify --store` listed it "not signed", exit 0."""
    from benchrun.rundir import RunDir

    spec = (Path(__file__).resolve().parents[1] / "specs/local/canary.yaml").read_bytes()
    canceled = RunDir(bench_home, "run-canceled").create()
    canceled.write_status({"run_id": "run-canceled", "phase": "Canceled", "message": "canceled by ann"})
    queued = RunDir(bench_home, "run-queued").create()
    queued.write_status({"run_id": "run-queued", "phase": "Pending"})
    for rd in (canceled, queued):  # pinned when submitted, before anything else (it names the store)
        (rd.path / "structured" / f"{rd.run_id}_spec.yaml").write_bytes(spec)
    for rd, says in ((canceled, "never finished (phase Canceled: canceled by ann)"), (queued, "not signed yet")):
        out = _verify(rd.run_id, "--public-key", str(bench_home / "nowhere.pem"))
        assert out.exit_code == 0, out.output
        assert says in out.output and "nothing verified" in out.output and "sign the run first" not in out.output
    store = _verify("--store")
    assert store.exit_code == 0, store.output
    assert "run run-canceled: not signed: it never finished (phase Canceled" in store.output
    # fail-closed stays: a finished run whose envelope is gone fails both
    sealed = make_sealed_run(bench_home, "run-sealed", stored=True)
    sealed.update_status(phase="Succeeded")
    out = _verify("run-sealed")
    assert out.exit_code == 1 and "the envelope was removed or signing failed" in str(out.exception)
    store = _verify("--store")
    assert store.exit_code == 1 and "run run-sealed: not signed" in str(store.exception)
    assert "run-canceled" not in str(store.exception)


def test_promote_and_the_other_verify_run_callers_do_not_ask_to_sign_by_hand(bench_home: Path) -> None:
    rd = make_sealed_run(bench_home, "run-nosig", stored=True)
    load_signing_key(bench_home)  # the home has a key pair, and its public key is named
    with pytest.raises(BenchrunError) as info:
        verify_run(rd.path, bench_home / "keys" / "ed25519.pub.pem", home=bench_home)
    assert "the run is not signed" in str(info.value) and "sign the run first" not in str(info.value)


def test_verify_waits_for_a_figure_worker_first(bench_home: Path) -> None:
    """Right after `benchrun run`, its figure worker rewrites the report and then signs again: a
    verify in between failed ("1 signed file(s) changed since signing: ..._report.html")."""
    import subprocess
    import sys
    import time

    from benchrun.report.workerpids import pid_dir

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    try:
        pid_dir(bench_home).mkdir(parents=True, exist_ok=True)
        (pid_dir(bench_home) / "run-drawing.pid").write_text(str(sleeper.pid))
        t0 = time.monotonic()
        out = _verify("--store")
        assert out.exit_code == 0, out.output
        assert time.monotonic() - t0 >= 1.0 and sleeper.poll() is not None
        assert "run run-drawing: waited for its report figures" in out.output
    finally:
        sleeper.kill()


def test_verify_store_walks_one_local_store_once(bench_home: Path) -> None:
    """A run whose spec names the default store as "objects/" and the default itself (None) are one
    store: each stored manifest is re-hashed once and a bad one is one failure, not two."""
    import shutil

    make_sealed_run(bench_home, "run-a", stored=True,
                    spec_bytes=b"spec: {sinks: {rawArtifacts: {pathTemplate: objects/}}}\n")
    make_sealed_run(bench_home, "run-b", stored=True,
                    spec_bytes=b"spec: {sinks: {rawArtifacts: {pathTemplate: objects/}}}\n")
    gone = make_sealed_run(bench_home, "run-c", stored=True)
    from benchrun.liveness import beat

    for run_id in ("run-a", "run-b"):  # being analyzed (a live claim): "not signed yet", their stores re-hashed
        beat(bench_home, run_id)
    store = open_store(None, bench_home)
    shutil.rmtree(gone.path)
    for run_id in ("run-b", "run-c"):  # an object of each run alone (identical files are one object)
        obj = Path(store.load_manifest(run_id).entry(f"structured/{run_id}_gemm_r1.json").uri[len("file://"):])
        obj.chmod(0o644)
        obj.write_text("forged\n")
    out = _verify("--store")
    assert out.exit_code != 0
    lines = out.output.splitlines()
    assert len([ln for ln in lines if "run-a" in ln and "re-hashed" in ln]) == 1
    assert len([ln for ln in lines if "run-b" in ln and "FAILED" in ln]) == 1  # as a run, not again as stored
    assert len([ln for ln in lines if ln.startswith("stored run run-c: FAILED")]) == 1
    assert "verify --store: 2 failure(s)" in out.output
