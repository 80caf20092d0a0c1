"""The fio JSON reader on output of the real fio, run here with a tiny job."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from benchrun.errors import BenchrunError
from benchrun.ingest import ingest_file
from benchrun.ingest.fio import fio_metrics, job_errors, parse_fio_json

pytestmark = pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed (apt-get install fio)")


@pytest.fixture(scope="module")
def fio_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real fio output: a 1 MiB sequential write and a 4 KiB random read-write mix."""
    work = tmp_path_factory.mktemp("fio")
    out = work / "fio.json"
    argv = ["fio", "--output-format=json", f"--output={out}", f"--directory={work}", "--size=1M",
            "--ioengine=psync", "--name=seqw", "--rw=write", "--bs=64k", "--stonewall",
            "--name=mixed", "--rw=randrw", "--bs=4k", "--stonewall"]
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    return out


def test_rows_match_the_numbers_fio_reported(fio_output: Path) -> None:
    doc = json.loads(fio_output.read_text())
    rows = ingest_file(fio_output, "fio")
    by = {(r["name"], r["case"]): r for r in rows}
    seqw = next(j for j in doc["jobs"] if j["jobname"] == "seqw")["write"]
    assert by[("bandwidth_mib_per_s", "seqw")]["value"] == pytest.approx(seqw["bw_bytes"] / 2**20)
    assert by[("iops", "seqw")]["value"] == pytest.approx(seqw["iops"])
    assert by[("p99_clat_ms", "seqw")]["value"] == pytest.approx(seqw["clat_ns"]["percentile"]["99.000000"] / 1e6)
    assert by[("bandwidth_mib_per_s", "seqw")]["direction"] == "higher"
    assert by[("p99_clat_ms", "seqw")]["unit"] == "ms" and by[("p99_clat_ms", "seqw")]["direction"] == "lower"
    # a job that reads and writes gets one case per direction; seqw only wrote
    assert {c for _, c in by} == {"seqw", "mixed:read", "mixed:write"}
    assert all(r["value"] > 0 for r in rows)


def test_text_before_the_json_is_skipped(fio_output: Path) -> None:
    text = "fio: note: both iodepth >= 1 and synchronous I/O engine are selected\n" + fio_output.read_text()
    assert fio_metrics(parse_fio_json(text)) == ingest_file(fio_output, "fio")


def test_failed_jobs_give_no_metrics_and_are_listed(fio_output: Path) -> None:
    doc = json.loads(fio_output.read_text())
    doc["jobs"][0]["error"] = 5
    assert job_errors(doc) == ["seqw: error 5"]
    assert {r["case"] for r in fio_metrics(doc)} == {"mixed:read", "mixed:write"}


@pytest.mark.parametrize(("content", "message"), [
    ("", "no JSON object"),
    ("{\"jobs\": [", "does not parse"),
    ("{\"fio version\": \"x\"}", "no 'jobs' list"),
])
def test_bad_files_name_the_file(tmp_path: Path, content: str, message: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    with pytest.raises(BenchrunError, match=message) as err:
        ingest_file(bad, "fio")
    assert str(bad) in str(err.value)


def test_unknown_kind_and_missing_file_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(BenchrunError, match="kind 'iperf' is not known"):
        ingest_file(tmp_path / "x", "iperf")
    with pytest.raises(BenchrunError, match="no such file"):
        ingest_file(tmp_path / "missing.json", "fio")
