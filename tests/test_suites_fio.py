"""The fio suite run as a real subprocess over the real fio, and its failure paths."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from benchrun.suites.fio import CASES, build_argv
from helpers import run_builtin_suite

RUN_ID = "t-fio"
needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed (apt-get install fio)")


def run_suite(run_dir: Path, params: dict[str, Any], path: str | None = None):
    return run_builtin_suite("fio", RUN_ID, run_dir, params, **({"PATH": path} if path else {}))


@needs_fio
@pytest.mark.slow
def test_four_cases_measured_and_raw_json_kept(tmp_path: Path) -> None:
    proc, doc = run_suite(tmp_path, {"size_mb": 4, "runtime_s": 0.2, "ramp_s": 0.05})
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "ok"
    raw = tmp_path / doc["samples"]["fio_json"]
    assert raw.name == f"{RUN_ID}_fio_r1_fio.json"
    fio_doc = json.loads(raw.read_text())
    assert fio_doc["fio version"].startswith("fio-")
    assert [j["jobname"] for j in fio_doc["jobs"]] == list(CASES)
    by = {(m["name"], m["case"]): m["value"] for m in doc["metrics"]}
    for case, spec in CASES.items():
        bw, iops, p99 = by[("bandwidth_mib_per_s", case)], by[("iops", case)], by[("p99_clat_ms", case)]
        assert bw > 0 and iops > 0 and p99 > 0
        block = 2**20 if spec["bs"] == "1M" else 4096
        # fio's bandwidth and IOPS describe the same transfer: bw = iops * block size
        assert bw * 2**20 / block == pytest.approx(iops, rel=0.05)
    # the scratch directory under the run directory is gone, nothing else left behind
    assert not list(tmp_path.glob(".scratch-fio-*"))
    assert doc["context"]["direct"] is True and doc["context"]["filesystem"]["fstype"]


@needs_fio
def test_given_directory_is_used_and_left_clean(tmp_path: Path) -> None:
    target = tmp_path / "disk"
    target.mkdir()
    run_dir = tmp_path / "run"
    proc, doc = run_suite(run_dir, {"size_mb": 1, "runtime_s": 0.1, "ramp_s": 0, "cases": ["seq_write"],
                                    "directory": str(target)})
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "ok"
    assert [m["case"] for m in doc["metrics"]] == ["seq_write"] * 3
    assert any(a.startswith(f"--directory={target}/.scratch-fio-") for a in doc["context"]["argv"])
    assert list(target.iterdir()) == []


def test_missing_fio_is_a_failed_replicate_naming_the_package(tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    proc, doc = run_suite(tmp_path / "run", {"size_mb": 1}, path=str(empty))
    assert proc.returncode == 1
    assert doc["status"] == "failed"
    assert doc["reason"] == "FioMissing: fio is not installed: install the Debian package fio (apt-get install fio)"


@pytest.mark.parametrize(
    ("params", "named"),
    [({"directory": "/no/such/dir"}, "directory"), ({"cases": ["seq_read", "bogus"]}, "cases"),
     ({"size_mb": 0}, "size_mb"), ({"ioengine": "psync; rm -rf ~"}, "ioengine"),
     ({"runtime_s": 0}, "runtime_s"), ({"ramp_s": -1}, "ramp_s"), ({"runtime_s": "10"}, "runtime_s")],
)
def test_bad_parameters_fail_with_the_parameter_named(tmp_path: Path, params: dict[str, Any], named: str) -> None:
    proc, doc = run_suite(tmp_path, params)
    assert proc.returncode == 1
    assert doc["status"] == "failed" and f"parameter {named}" in doc["reason"]


@needs_fio
def test_fio_error_exit_is_a_failed_replicate_with_fio_message(tmp_path: Path) -> None:
    proc, doc = run_suite(tmp_path, {"size_mb": 1, "runtime_s": 0.1, "ramp_s": 0, "cases": ["seq_read"],
                                     "ioengine": "nosuchengine"})
    assert proc.returncode == 1
    assert doc["status"] == "failed" and doc["reason"].startswith("RuntimeError: fio exited")
    assert not list(tmp_path.glob(".scratch-fio-*"))


def test_argv_is_a_list_with_one_section_per_case(tmp_path: Path) -> None:
    argv = build_argv("/usr/bin/fio", tmp_path, tmp_path / "o.json", ["rand_read", "seq_write"], size_mb=8,
                      runtime_s=3, ramp_s=0.5, ioengine="libaio", iodepth=4, direct=False)
    assert argv[0] == "/usr/bin/fio" and "--output-format=json" in argv
    assert argv.count("--stonewall") == 2
    i, j = argv.index("--name=rand_read"), argv.index("--name=seq_write")
    assert argv[i:j] == ["--name=rand_read", "--rw=randread", "--bs=4k", "--stonewall"]
    assert argv[j:] == ["--name=seq_write", "--rw=write", "--bs=1M", "--stonewall", "--end_fsync=1"]
    assert "--direct=0" in argv and "--iodepth=4" in argv and "--size=8M" in argv
    assert "--time_based" in argv and "--runtime=3000ms" in argv and "--ramp_time=500ms" in argv


def _shm_is_tmpfs() -> bool:
    from benchrun.suites.fio import filesystem_of

    fs = filesystem_of(Path("/dev/shm")) if Path("/dev/shm").is_dir() else None
    return bool(fs and fs["fstype"] == "tmpfs" and os.access("/dev/shm", os.W_OK))


@needs_fio
@pytest.mark.skipif(not _shm_is_tmpfs(), reason="needs a writable tmpfs at /dev/shm")
def test_tmpfs_has_no_o_direct_default_falls_back_explicit_is_refused(tmp_path: Path) -> None:
    params = {"size_mb": 1, "runtime_s": 0.1, "ramp_s": 0, "cases": ["seq_read"], "directory": "/dev/shm"}
    proc, doc = run_suite(tmp_path / "a", params)
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "ok" and doc["context"]["direct"] is False
    assert "--direct=0" in doc["context"]["argv"] and "no O_DIRECT" in doc["context"]["direct_note"]
    proc, doc = run_suite(tmp_path / "b", {**params, "direct": True})
    assert proc.returncode == 1
    assert doc["status"] == "failed" and "parameter direct=true" in doc["reason"] and "tmpfs" in doc["reason"]


@needs_fio
def test_a_directory_with_a_colon_is_passed_escaped(tmp_path: Path) -> None:
    target = tmp_path / "disk:a"  # unescaped, fio would look for .../disk and a/...
    target.mkdir()
    proc, doc = run_suite(tmp_path / "run", {"size_mb": 1, "runtime_s": 0.1, "ramp_s": 0, "cases": ["seq_write"],
                                             "directory": str(target)})
    assert proc.returncode == 0, proc.stderr
    assert doc["status"] == "ok" and [m["case"] for m in doc["metrics"]] == ["seq_write"] * 3
    assert any(a.startswith(f"--directory={tmp_path}/disk\\:a/.scratch-fio-") for a in doc["context"]["argv"])
    assert list(target.iterdir()) == []


@needs_fio
def test_runtime_s_is_the_measured_time_of_every_case(tmp_path: Path) -> None:
    # a 1 MiB random read is done in a few ms; time-based, fio keeps reading for runtime_s
    proc, doc = run_suite(tmp_path, {"size_mb": 1, "runtime_s": 0.3, "ramp_s": 0.1, "cases": ["rand_read"]})
    assert proc.returncode == 0, proc.stderr
    case = doc["context"]["fio_report"]["jobs"]["rand_read"]
    assert 290 <= case["job_runtime_ms"] <= 400  # fio's own count of measured ms, the ramp left out
    assert case["total_ios"] > 256  # more 4 KiB reads than the file holds: it went round again
    by = {m["name"]: m for m in doc["metrics"]}
    assert by["p99_clat_ms"]["samples"] == case["total_ios"]
    assert {m["job_runtime_ms"] for m in doc["metrics"]} == {case["job_runtime_ms"]}


@needs_fio
def test_iodepth_above_one_needs_an_asynchronous_engine(tmp_path: Path) -> None:
    params = {"size_mb": 1, "runtime_s": 0.1, "ramp_s": 0, "cases": ["rand_read"], "iodepth": 8}
    proc, doc = run_suite(tmp_path / "a", params)  # psync, the default: fio would run at depth 1
    assert proc.returncode == 1 and doc["status"] == "failed"
    assert "parameter iodepth=8 with ioengine=psync" in doc["reason"] and "libaio" in doc["reason"]
    proc, doc = run_suite(tmp_path / "b", {**params, "ioengine": "libaio"})
    assert proc.returncode == 0, proc.stderr
    case = doc["context"]["fio_report"]["jobs"]["rand_read"]
    assert case["effective_iodepth"] == "8" and case["iodepth_level"]["8"] > 50


def test_libaio_buffered_depth_is_refused_at_validate() -> None:
    from benchrun.spec.builtin_suites import check_parameters
    from benchrun.suites._common import ParamError

    with pytest.raises(ParamError) as err:
        check_parameters("fio", {"ioengine": "libaio", "iodepth": 32, "direct": False})
    msg = str(err.value)
    assert "iodepth=32" in msg and "ioengine=libaio" in msg and "direct is false" in msg
    assert "direct: true" in msg and "io_uring" in msg
    # io_uring queues buffered I/O; libaio with O_DIRECT, or at depth 1, is fine
    check_parameters("fio", {"ioengine": "io_uring", "iodepth": 32, "direct": False})
    check_parameters("fio", {"ioengine": "libaio", "iodepth": 32, "direct": True})
    check_parameters("fio", {"ioengine": "libaio", "iodepth": 1, "direct": False})


@needs_fio
@pytest.mark.skipif(not _shm_is_tmpfs(), reason="needs a writable tmpfs at /dev/shm")
def test_libaio_depth_on_tmpfs_is_refused_naming_the_tmpfs_default(tmp_path: Path) -> None:
    params = {"directory": "/dev/shm", "ioengine": "libaio", "iodepth": 32, "cases": ["rand_read"], "size_mb": 4,
              "runtime_s": 0.1, "ramp_s": 0}
    proc, doc = run_suite(tmp_path, params)
    assert proc.returncode == 1 and doc["status"] == "failed"
    assert "parameter iodepth=32 with ioengine=libaio" in doc["reason"]
    assert "/dev/shm is tmpfs" in doc["reason"] and "turned off" in doc["reason"]
    assert not doc["metrics"]


def test_a_suite_ended_by_sigterm_cleans_up_and_its_scratch_is_never_evidence(tmp_path: Path) -> None:
    """Review: the launcher ends a suite past its timeout with SIGTERM, which Python answered by dying at
    once: fio's scratch files (256 MiB a case) stayed in the run directory and were hashed, sealed and
    stored as evidence."""
    import signal
    import subprocess
    import sys

    from benchrun.rundir import RunDir
    from benchrun.store.base import iter_run_files

    rd = RunDir(tmp_path, "run-x").create()
    body = ("import sys, tempfile, time, pathlib\n"
            "from benchrun.suites._runtime import main\n"
            "from benchrun.paths import SCRATCH_PREFIX\n"
            "def run(ctx):\n"
            "    d = pathlib.Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX + 'fio-', dir=ctx.run_dir))\n"
            "    (d / 'seq_read.0.0').write_bytes(b'x' * 4096)\n"
            "    try:\n"
            "        print('ready', flush=True); time.sleep(60)\n"
            "    finally:\n"
            "        import shutil; shutil.rmtree(d)\n"
            "main(run)\n")
    env = {**os.environ, "BENCHRUN_RUN_ID": "run-x", "BENCHRUN_RUN_DIR": str(rd.path), "BENCHRUN_SUITE": "fio",
           "BENCHRUN_REPLICATE": "1", "BENCHRUN_CASE_ID": "c", "BENCHRUN_PARAMS": "{}"}
    proc = subprocess.Popen([sys.executable, "-c", body], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert not list(rd.path.glob(".scratch-*"))  # its finally ran
    # a scratch folder a kill -9 left behind is skipped by both walkers of the evidence
    left = rd.path / ".scratch-fio-abc"
    left.mkdir()
    (left / "seq_read.0.0").write_bytes(b"x")
    (rd.path / "structured" / "run-x_fio_r1.json").write_text("{}")
    rels = [rel for rel, _ in iter_run_files(rd.path)]
    assert "structured/run-x_fio_r1.json" in rels and not any("scratch" in r for r in rels)
    rd.write_status({"run_id": "run-x", "phase": "Analyzing"})
    manifest = rd.write_manifest(status="succeeded", issues=[], suite_steps={})
    assert not any("scratch" in r for r in json.dumps(manifest).split('"'))


FAKE_FIO = '''#!{python}
import json, sys
if sys.argv[1:] == ["--version"]:
    print("fio-3.99"); sys.exit(0)
out = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--output="))
moved = {{"io_bytes": 1048576, "bw_bytes": 10485760, "iops": 10.0, "total_ios": 1,
          "clat_ns": {{"percentile": {{"99.000000": 1000000}}}}}}
idle = {{"io_bytes": 0, "bw_bytes": 0, "iops": 0.0, "total_ios": 0}}
jobs = [{{"jobname": "seq_read", "error": 0, "job_runtime": 100, "read": moved, "write": idle}},
        {{"jobname": "seq_write", "error": 0, "job_runtime": 100, "read": idle, "write": idle}}]
open(out, "w").write(json.dumps({{"fio version": "fio-3.99", "jobs": jobs}}))
'''


def test_a_case_that_moved_no_bytes_fails_the_replicate_naming_it(tmp_path: Path) -> None:
    """Review: only "no rows at all" was refused; a requested case that moved no bytes was dropped
    silently and the replicate was ok with it missing. A stand-in fio: seq_write moves nothing."""
    import sys

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "fio").write_text(FAKE_FIO.format(python=sys.executable))
    (fake / "fio").chmod(0o755)
    proc, doc = run_suite(tmp_path / "run", {"size_mb": 1, "runtime_s": 0.1, "ramp_s": 0,
                                             "cases": ["seq_read", "seq_write"]}, path=str(fake))
    assert proc.returncode == 1, proc.stderr
    assert doc["status"] == "failed"
    assert doc["reason"].startswith("RuntimeError: fio reported no I/O for case(s) seq_write of 2 asked"), doc["reason"]
    assert "seq_write (0 I/Os in 100 ms)" in doc["reason"] and "seq_read" not in doc["reason"].split("asked")[0]
