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


def _fio(work: Path, *args: str) -> Path:
    out = work / "fio.json"
    subprocess.run(["fio", "--output-format=json", f"--output={out}", "--ioengine=psync", *args],
                   capture_output=True, timeout=120, cwd=work)
    return out


def test_failed_jobs_are_refused_naming_the_job(tmp_path: Path) -> None:
    # a job fio cannot run (writing /proc/version fails even for root) next to one that ran
    out = _fio(tmp_path, "--size=64k", "--name=ok", "--rw=read", "--bs=4k",
               "--name=bad", "--filename=/proc/version", "--rw=write", "--bs=4k")
    doc = parse_fio_json(out.read_text())  # fio's error line comes before the JSON
    assert job_errors(doc) == ["bad: error 1"]
    with pytest.raises(BenchrunError, match=r"fio jobs failed.*bad: error 1") as err:
        ingest_file(out, "fio")  # not the ok job's rows with the failed job silently absent
    assert str(out) in str(err.value)


def test_clones_of_numjobs_without_group_reporting_are_refused(tmp_path: Path) -> None:
    out = _fio(tmp_path, "--size=64k", "--numjobs=2", "--name=rr", "--rw=randread", "--bs=4k")
    assert [j["jobname"] for j in json.loads(out.read_text())["jobs"]] == ["rr", "rr"]
    with pytest.raises(BenchrunError, match="'rr' more than once.*--group_reporting"):
        ingest_file(out, "fio")
    out = _fio(tmp_path, "--size=64k", "--numjobs=2", "--group_reporting", "--name=rr", "--rw=randread", "--bs=4k")
    doc = json.loads(out.read_text())
    (bw,) = [r for r in ingest_file(out, "fio") if r["name"] == "bandwidth_mib_per_s"]
    assert bw["case"] == "rr" and bw["value"] == pytest.approx(doc["jobs"][0]["read"]["bw_bytes"] / 2**20)


def test_status_interval_output_is_read_from_its_final_document(tmp_path: Path) -> None:
    # --status-interval makes fio write a snapshot per interval and the final result last
    out = _fio(tmp_path, "--size=1M", "--status-interval=200ms", "--time_based", "--runtime=700ms",
               "--name=rr", "--rw=randread", "--bs=4k")
    text = out.read_text()
    docs, pos = [], text.find("{")
    while pos >= 0:
        doc, end = json.JSONDecoder().raw_decode(text, pos)
        docs.append(doc)
        pos = text.find("{", end)
    assert len(docs) >= 3
    final = docs[-1]["jobs"][0]
    assert final["job_runtime"] == max(d["jobs"][0]["job_runtime"] for d in docs) >= 650
    by = {r["name"]: r for r in ingest_file(out, "fio")}
    assert by["iops"]["value"] == pytest.approx(final["read"]["iops"])
    assert by["p99_clat_ms"]["samples"] == final["read"]["total_ios"]
    assert {r["job_runtime_ms"] for r in by.values()} == {final["job_runtime"]}
    # a final document cut short is an error, not a fall-back to an earlier snapshot
    cut = tmp_path / "cut.json"
    cut.write_text(text[: text.rindex('"jobs"')])
    with pytest.raises(BenchrunError, match=r"JSON document \d+ \(after \d+ that parsed\) does not parse"):
        ingest_file(cut, "fio")


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


def test_total_latency_percentiles_are_named_p99_lat_ms_not_p99_clat_ms(tmp_path: Path) -> None:
    """Review: with only total-latency percentiles (lat_ns: --lat_percentiles=1 --clat_percentiles=0)
    the reader reported submission + completion latency under the name p99_clat_ms."""
    out = _fio(tmp_path, "--size=64k", "--lat_percentiles=1", "--clat_percentiles=0", "--name=rr", "--rw=randread",
               "--bs=4k")
    read = json.loads(out.read_text())["jobs"][0]["read"]
    assert "percentile" in read["lat_ns"] and "percentile" not in read["clat_ns"]
    by = {r["name"]: r for r in ingest_file(out, "fio")}
    assert "p99_clat_ms" not in by
    assert by["p99_lat_ms"]["value"] == pytest.approx(read["lat_ns"]["percentile"]["99.000000"] / 1e6)
    assert by["p99_lat_ms"]["unit"] == "ms" and by["p99_lat_ms"]["direction"] == "lower"
    assert by["p99_lat_ms"]["samples"] == read["total_ios"]
