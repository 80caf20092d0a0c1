"""The nccl-tests table reader.

The fixtures in tests/fixtures/nccl_tests_*.txt were written by hand from nccl-tests'
documented output format (README, doc/PERFORMANCE.md, the header printed by src/common.cu);
their numbers are synthetic and self-consistent, not measured (the files say so).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchrun.errors import BenchrunError
from benchrun.ingest import ingest_file
from benchrun.ingest.nccl_tests import parse_nccl_tests

FIXTURES = Path(__file__).parent / "fixtures"
V2 = FIXTURES / "nccl_tests_all_reduce_perf_v2.txt"
LEGACY = FIXTURES / "nccl_tests_all_reduce_perf_legacy.txt"


def test_v2_table_rows_and_values() -> None:
    parsed = parse_nccl_tests(V2.read_text())
    assert len(parsed["rows"]) == 12 and len(parsed["devices"]) == 8
    assert parsed["parameters"].startswith("nThread 1 nGpus 1 minBytes 8 maxBytes 33554432")
    last = parsed["rows"][-1]
    assert last["size_bytes"] == 33554432 and last["count"] == 8388608 and last["type"] == "float"
    assert last["redop"] == "sum" and last["root"] == -1
    assert last["out_of_place"] == {"time_us": 245.70, "algbw_gb_per_s": 136.57, "busbw_gb_per_s": 239.00, "wrong": 0.0}
    assert last["in_place"]["time_us"] == 242.25
    assert parsed["avg_busbw_gb_per_s"] == 48.6337


def test_metric_rows_keep_nccl_tests_definitions() -> None:
    rows = ingest_file(V2, "nccl_tests")
    by = {(r["name"], r["case"]): r["value"] for r in rows}
    assert len(rows) == 12 * 2 * 4 + 1
    n = 8
    for size in (2097152, 8388608, 33554432):
        for placement in ("out_of_place", "in_place"):
            case = f"collective=all_reduce,bytes={size},type=float,redop=sum,{placement}"
            t, alg, bus = by[("mean_latency_us", case)], by[("algbw_gb_per_s", case)], by[("busbw_gb_per_s", case)]
            assert alg == pytest.approx(size / t / 1e3, abs=0.01)  # GB/s from bytes and us
            assert bus == pytest.approx(alg * 2 * (n - 1) / n, abs=0.02)
            assert by[("wrong_values", case)] == 0
    assert by[("avg_busbw_gb_per_s", "collective=all_reduce")] == 48.6337


def test_legacy_table_without_root_column() -> None:
    parsed = parse_nccl_tests(LEGACY.read_text())
    assert [r["size_bytes"] for r in parsed["rows"]] == [1024, 4096, 16384, 65536, 262144, 1048576]
    first = parsed["rows"][0]
    assert first["root"] is None and first["redop"] == "sum"
    assert first["out_of_place"]["time_us"] == 9.53 and first["in_place"]["busbw_gb_per_s"] == 0.11
    rows = ingest_file(LEGACY, "nccl_tests")
    by = {(r["name"], r["case"]): r["value"] for r in rows}
    # n = 2: busbw equals algbw
    case = "collective=all_reduce,bytes=1048576,type=float,redop=sum,out_of_place"  # no root column: no root
    assert by[("busbw_gb_per_s", case)] == by[("algbw_gb_per_s", case)]


def test_an_older_footer_without_its_hash_is_read(tmp_path: Path) -> None:
    # older nccl-tests print " Out of bounds values : %d %s" without "#": a complete run was
    # refused as cut short, and a FAILED there went unseen
    text = LEGACY.read_text().replace("# Out of bounds", " Out of bounds").replace("# Avg bus", " Avg bus")
    plain = tmp_path / "all_reduce_perf_legacy_nohash.txt"
    plain.write_text(text)
    assert len(ingest_file(plain, "nccl_tests")) == len(ingest_file(LEGACY, "nccl_tests"))
    plain.write_text(text.replace(" Out of bounds values : 0 OK", " Out of bounds values : 3 FAILED"))
    with pytest.raises(BenchrunError, match="validation FAILED"):
        ingest_file(plain, "nccl_tests")


def test_interleaved_log_lines_and_unvalidated_runs() -> None:
    lines = V2.read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip().startswith("8388608"))
    lines.insert(at, "node-a01:4100:4180 [0] NCCL INFO comm 0x5555 rank 0 nranks 8 - Init COMPLETE")
    row = lines[at + 1].split()
    row[8], row[12] = "N/A", "N/A"
    lines[at + 1] = "  ".join(row)
    parsed = parse_nccl_tests("\n".join(lines))
    assert len(parsed["rows"]) == 12
    r = next(r for r in parsed["rows"] if r["size_bytes"] == 8388608)
    assert r["out_of_place"]["wrong"] is None and r["in_place"]["algbw_gb_per_s"] == 109.39


def test_not_an_nccl_tests_output(tmp_path: Path) -> None:
    bad = tmp_path / "out.txt"
    bad.write_text("Segmentation fault (core dumped)\n")
    with pytest.raises(BenchrunError, match="no nccl-tests result table") as err:
        ingest_file(bad, "nccl_tests")
    assert str(bad) in str(err.value)
    lines = V2.read_text().splitlines()
    header_only = "\n".join(lines[: next(i for i, ln in enumerate(lines) if "(B)" in ln) + 1])
    with pytest.raises(BenchrunError, match="no rows"):
        parse_nccl_tests(header_only)


def test_rank_lines_give_each_ranks_node_and_gpu() -> None:
    v2 = parse_nccl_tests(V2.read_text())
    assert [r["rank_id"] for r in v2["ranks"]] == list(range(8))
    assert v2["ranks"][1] == {"rank_id": 1, "group": 0, "pid": 4101, "node_name": "node-a01", "device": 1,
                              "bus_id": "0x28", "gpu_name": "NVIDIA H100 80GB HBM3"}
    legacy = parse_nccl_tests(LEGACY.read_text())
    assert [(r["rank_id"], r["group"], r["node_name"], r["device"]) for r in legacy["ranks"]] == [
        (0, None, "gpubox", 0), (1, None, "gpubox", 1)]


def _variant(tmp_path: Path, edit) -> Path:
    """The v2 fixture with one change, as a file (the errors name the file and line)."""
    lines = V2.read_text().splitlines()
    edit(lines)
    out = tmp_path / "variant.txt"
    out.write_text("\n".join(lines) + "\n")
    return out


def _line_of(lines: list[str], start: str) -> int:
    return next(i for i, ln in enumerate(lines) if ln.strip().startswith(start))


def test_failed_validation_is_refused_naming_file_and_line(tmp_path: Path) -> None:
    # src/common.cu: "# Out of bounds values : %d %s" with FAILED when any result was wrong
    def oob(lines: list[str]) -> None:
        lines[_line_of(lines, "# Out of bounds")] = "# Out of bounds values : 8192 FAILED"

    bad = _variant(tmp_path, oob)
    n = _line_of(bad.read_text().splitlines(), "# Out of bounds") + 1
    with pytest.raises(BenchrunError, match=rf"variant.txt, line {n}: nccl-tests validation FAILED \(8192"):
        ingest_file(bad, "nccl_tests")

    # "# Avg bus bandwidth : %g %s": FAILED when below 90 % of NCCL_TESTS_MIN_BW
    def slow(lines: list[str]) -> None:
        lines[_line_of(lines, "# Avg bus")] = "# Avg bus bandwidth    : 48.6337 FAILED"

    with pytest.raises(BenchrunError, match=r"line \d+: nccl-tests bandwidth check FAILED"):
        ingest_file(_variant(tmp_path, slow), "nccl_tests")
    ok = _variant(tmp_path, lambda lines: lines.__setitem__(_line_of(lines, "# Avg bus"),
                                                             "# Avg bus bandwidth    : 48.6337 OK"))
    assert parse_nccl_tests(ok.read_text())["avg_busbw_gb_per_s"] == 48.6337


def test_a_row_with_wrong_elements_is_refused(tmp_path: Path) -> None:
    def wrong(lines: list[str]) -> None:
        i = _line_of(lines, "33554432")
        row = lines[i].split()
        row[12] = "4096"  # in-place #wrong
        lines[i] = "  ".join(row)

    bad = _variant(tmp_path, wrong)
    n = _line_of(bad.read_text().splitlines(), "33554432") + 1
    with pytest.raises(BenchrunError, match=rf"line {n}: 4096 wrong elements in-place at 33554432 bytes"):
        ingest_file(bad, "nccl_tests")


def test_truncated_output_is_refused(tmp_path: Path) -> None:
    # no footer: the run died (or the log was cut) after some rows
    def no_footer(lines: list[str]) -> None:
        del lines[_line_of(lines, "# Out of bounds"):]

    with pytest.raises(BenchrunError, match=r"no '# Out of bounds values' line after the table's 12 rows"):
        ingest_file(_variant(tmp_path, no_footer), "nccl_tests")

    # the last row half written
    def half_row(lines: list[str]) -> None:
        i = _line_of(lines, "33554432")
        del lines[i + 1:]
        lines[i] = lines[i][:60]

    bad = _variant(tmp_path, half_row)
    n = _line_of(bad.read_text().splitlines(), "33554432") + 1
    with pytest.raises(BenchrunError, match=rf"variant.txt, line {n}: table row .* has 6 fields, the header 13"):
        ingest_file(bad, "nccl_tests")


def test_rows_of_other_types_reductions_and_roots_are_other_cases(tmp_path: Path) -> None:
    # one table with -d all / -o all / -r: same size, different type, redop or root
    lines = V2.read_text().splitlines()
    i = _line_of(lines, "33554432")
    base = lines[i].split()
    extra = []
    for col, value in ((2, "half"), (3, "max")):
        row = list(base)
        row[col] = value
        extra.append("  ".join(row))
    rooted = list(base)
    rooted[4] = "3"
    extra.append("  ".join(rooted))
    lines[i + 1:i + 1] = extra
    out = tmp_path / "all_reduce_perf_multi.txt"
    out.write_text("\n".join(lines) + "\n")
    rows = [r for r in ingest_file(out, "nccl_tests") if r["name"] == "busbw_gb_per_s" and "33554432" in r["case"]]
    assert sorted(r["case"] for r in rows if r["case"].endswith("out_of_place")) == [
        "collective=all_reduce,bytes=33554432,type=float,redop=max,out_of_place",
        "collective=all_reduce,bytes=33554432,type=float,redop=sum,out_of_place",
        "collective=all_reduce,bytes=33554432,type=float,redop=sum,root=3,out_of_place",
        "collective=all_reduce,bytes=33554432,type=half,redop=sum,out_of_place",
    ]
    assert len({r["case"] for r in rows}) == len(rows) == 8
