"""Review fixes of the ingest readers (nccl-tests, fio, vllm bench serve).

The nccl-tests logs are trimmed copies of the reviewer's inputs (a combined log of two
collectives from nccl-tests 2.18.3 under mpirun, a DGX-2 style wrapper log of several
``Running:`` sections, a non-MPI sendrecv_perf build started by mpirun); the fio JSON comes from
the real fio, run here; the vLLM results are compact copies of the reviewer's samples (field
names as ``vllm bench serve --save-result [--save-detailed]`` writes them).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import benchrun.ingest.fio as fio_reader
from benchrun.errors import BenchrunError
from benchrun.ingest import ingest_file
from benchrun.ingest.nccl_tests import parse_nccl_tests
from benchrun.ingest.vllm_bench import points_from_file
from benchrun.loadgen.metrics import distribution, latencies

needs_fio = pytest.mark.skipif(shutil.which("fio") is None, reason="fio not installed (apt-get install fio)")
SEVERAL = r"more than one nccl-tests run in one file \(.*\): split it, or for a non-MPI build under mpirun rebuild with MPI=1"

# ---------------------------------------------------------------- nccl-tests: one run per file

MCA = """--------------------------------------------------------------------------
Two mutually-exclusive MCA variables were specified.  This can result
  1st MCA variable: btl_tcp_if_include
--------------------------------------------------------------------------
"""
HEADER = """#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
"""


def _section(program: str, redop: str, busbw: str) -> str:
    return (MCA + f"""# nccl-tests version 2.18.3 nccl-headers=23003 nccl-library=23003
# Collective test starting: {program}
# nThread 1 nGpus 1 minBytes 1024 maxBytes 8589934592 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
#  Rank  0 Group  0 Pid    653 on R6KD-CX8aaS-GPU-11 device  0 [0000:06:00] NVIDIA RTX 6000D
#  Rank  8 Group  0 Pid    641 on R6KD-CX8aaS-GPU-12 device  0 [0000:06:00] NVIDIA RTX 6000D
NCCL version 2.30.3+cuda13.0
#
""" + HEADER + f"""        1024           256     float    {redop}      -1    36.95    0.03    0.05       0    34.17    0.03    0.06       0
[R6KD-CX8aaS-GPU-11:00648] 15 more processes have sent help message help-mca-var.txt / mutually-exclusive-vars
  8589934592    2147483648     float    {redop}      -1   324761   26.45   49.59       0   324641   26.46   49.61       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : {busbw}
#
# Collective test concluded: {program}
#
""")


COMBINED = _section("all_reduce_perf", "sum", "20.827") + _section("all_gather_perf", "none", "20.827")

DGX2 = """Running: CUDA_VISIBLE_DEVICES=1,2,6,7,8,9,10,11,12,13,14,15 ./build/all_reduce_perf -b 8 -e 10240M -f 2 -g 12
# nThread 1 nGpus 12 minBytes 8 maxBytes 10737418240 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  88131 on    seville device  0 [0x36] Tesla V100-SXM3-32GB
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2   float     sum    61.03    0.00    0.00  2e-07    61.04    0.00    0.00  1e-07
  8589934592    2147483648   float     sum   127453   67.40  123.56  2e-07   127443   67.40  123.57  2e-07
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 42.5578
#
Running: CUDA_VISIBLE_DEVICES=1,2,6,7,8,9,10,11,12,13,14,15 ./build/broadcast_perf -b 8 -e 10240M -f 2 -g 12
# nThread 1 nGpus 12 minBytes 8 maxBytes 10737418240 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  88618 on    seville device  0 [0x36] Tesla V100-SXM3-32GB
#
#                                                     out-of-place                       in-place
#       size         count    type    root     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2   float       0    59.75    0.00    0.00  0e+00    59.96    0.00    0.00  0e+00
  8589934592    2147483648   float       0    70321  122.15  122.15  0e+00    70368  122.07  122.07  0e+00
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 41.2456
#
"""


def _nompi(pid: int, node: str, starting: bool = True) -> list[str]:
    """One process of a non-MPI sendrecv_perf build under mpirun: a one-rank run of its own."""
    return (["# nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=22807"]
            + (["# Collective test starting: sendrecv_perf"] if starting else [])
            + ["# nThread 1 nGpus 1 minBytes 33554432 maxBytes 67108864 step: 2(factor) warmup iters: 5 iters: 20 "
               "agg iters: 1 validation: 1 graph: 0", "#", "# Using devices",
               f"#  Rank  0 Group  0 Pid {pid} on {node} device  0 [0000:1b:00] NVIDIA H100 80GB HBM3", "#"]
            + HEADER.splitlines()
            + ["    33554432       8388608     float     sum      -1    95.10  352.83  352.83       0    12.40  2706.0  2706.0       0",
               "    67108864      16777216     float     sum      -1   180.20  372.41  372.41       0    12.50  5368.7  5368.7       0",
               "# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 2200.0", "#"]
            + (["# Collective test concluded: sendrecv_perf", "#"] if starting else []))


def _line(text: str, start: str, nth: int = 1) -> int:
    hits = [n for n, ln in enumerate(text.splitlines(), 1) if ln.strip().startswith(start)]
    return hits[nth - 1]


def test_two_collectives_in_one_file_are_refused(tmp_path: Path) -> None:
    """Read as one table, every row was labelled all_gather and one avg busbw kept."""
    f = tmp_path / "combined_perf.log"
    f.write_text(COMBINED)
    n = _line(COMBINED, "# Collective test starting", 2)
    with pytest.raises(BenchrunError, match=rf"combined_perf.log, line {n}: {SEVERAL}"):
        ingest_file(f, "nccl_tests")
    # the same program twice is refused too (replicates in one file)
    twice = _section("all_reduce_perf", "sum", "20.8") + _section("all_reduce_perf", "sum", "20.9")
    with pytest.raises(BenchrunError, match=SEVERAL):
        parse_nccl_tests(twice, "all_reduce_perf.log")
    # one section alone reads
    assert len(parse_nccl_tests(_section("all_reduce_perf", "sum", "20.827"))["rows"]) == 2


def test_a_dgx2_style_log_of_several_running_sections_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "dgx2_runs.log"
    f.write_text(DGX2)
    n = _line(DGX2, "Running:", 2)
    with pytest.raises(BenchrunError, match=rf"dgx2_runs.log, line {n}: {SEVERAL}"):
        ingest_file(f, "nccl_tests")
    first = DGX2[: DGX2.index("Running:", 1)]
    assert len(parse_nccl_tests(first)["rows"]) == 2


def test_a_non_mpi_build_under_mpirun_is_refused() -> None:
    """Each process prints its own run, each ``Rank 0``: one after the other, interleaved, or
    without the 'Collective test starting' lines of older versions."""
    log = "\n".join(_nompi(223120, "cnode2-002") + _nompi(256267, "cnode2-001")) + "\n"
    with pytest.raises(BenchrunError, match=rf"line {_line(log, '# Collective test starting', 2)}: {SEVERAL}"):
        parse_nccl_tests(log, "sendrecv_perf.log")
    a, b = _nompi(223120, "cnode2-002", starting=False), _nompi(256267, "cnode2-001", starting=False)
    interleaved = "\n".join(x for pair in zip(a, b) for x in pair) + "\n"
    with pytest.raises(BenchrunError, match=rf"line {_line(interleaved, '#  Rank', 2)}: more than one nccl-tests run "
                                            r"in one file \(rank 0 is listed again"):
        parse_nccl_tests(interleaved, "sendrecv_perf.log")
    # no start line, no rank listed twice: the second results header
    no_ranks = [ln for ln in a + b if "Rank" not in ln]
    text = "\n".join(no_ranks) + "\n"
    n = [i for i, ln in enumerate(no_ranks, 1) if "#wrong" in ln][1]
    with pytest.raises(BenchrunError, match=rf"line {n}: more than one nccl-tests run in one file \(a second results table"):
        parse_nccl_tests(text, "sendrecv_perf.log")


# ---------------------------------------------------------------- nccl-tests: newer output options

def test_a_trailing_timestamp_column_is_read() -> None:
    text = """# Collective test starting: all_reduce_perf
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong  timestamp
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
        1024           256     float     sum      -1    36.95    0.03    0.05       0    34.17    0.03    0.06       0  2026-04-19 03:03:40
      131072         32768     float     sum      -1   199.03    0.66    1.23       0   192.53    0.68    1.28       0  2026-04-19 03:03:41
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.67
"""
    parsed = parse_nccl_tests(text)
    assert [r["timestamp"] for r in parsed["rows"]] == ["2026-04-19 03:03:40", "2026-04-19 03:03:41"]
    assert parsed["rows"][1]["in_place"] == {"time_us": 192.53, "algbw_gb_per_s": 0.68, "busbw_gb_per_s": 1.28, "wrong": 0.0}
    # a row still cut short is refused
    with pytest.raises(BenchrunError, match="has 11 fields, the header 14"):
        parse_nccl_tests(text.replace("    0.06       0  2026-04-19 03:03:40", ""))


def test_cputime_columns_are_read_as_cpu_time_not_latency(tmp_path: Path) -> None:
    """``-C 1`` names the time columns cputime: the host's time, a different quantity."""
    f = tmp_path / "all_reduce_perf.txt"
    f.write_text("""#       size         count      type   redop    root  cputime   algbw   busbw  #wrong  cputime   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
        1024           256     float     sum      -1    12.50    0.03    0.05       0    11.90    0.03    0.06       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.055
""")
    rows = ingest_file(f, "nccl_tests")
    by = {(r["name"], r["case"]): r["value"] for r in rows}
    case = "collective=all_reduce,bytes=1024,type=float,redop=sum,out_of_place"
    assert by[("mean_cputime_us", case)] == 12.5 and by[("busbw_gb_per_s", case)] == 0.05
    assert not [r for r in rows if r["name"] == "mean_latency_us"]


# ---------------------------------------------------------------- fio

def _fio(work: Path, *args: str) -> dict:
    out = work / "fio.json"
    subprocess.run(["fio", "--output-format=json", f"--output={out}", "--ioengine=psync", f"--directory={work}", *args],
                   capture_output=True, timeout=120, cwd=work, check=True)
    return json.loads(out.read_text())


@needs_fio
def test_unified_rw_reporting_is_read_as_mixed(tmp_path: Path) -> None:
    doc = _fio(tmp_path, "--size=256k", "--name=u", "--rw=randrw", "--bs=4k", "--unified_rw_reporting=1")
    (job,) = doc["jobs"]
    assert job["mixed"]["io_bytes"] > 0 and "read" not in job  # fio writes the I/O only under "mixed"
    rows = ingest_file(tmp_path / "fio.json", "fio")
    by = {r["name"]: r for r in rows}
    assert {r["case"] for r in rows} == {"u:mixed"}
    assert by["bandwidth_mib_per_s"]["value"] == pytest.approx(job["mixed"]["bw_bytes"] / 2**20)
    assert by["iops"]["value"] == pytest.approx(job["mixed"]["iops"])
    # a job that moved bytes under a key the reader does not know: an error, never []
    job["surprise"] = job.pop("mixed")
    with pytest.raises(BenchrunError, match=r"fio job 'u' moved bytes \(surprise: \d+\).*would give no rows"):
        fio_reader.fio_metrics(doc, "x.json")


@needs_fio
def test_different_jobs_merged_by_group_reporting_are_refused(tmp_path: Path) -> None:
    # a job file (no name option in 'job options'): g1 reads, g2 writes, one reporting group
    (tmp_path / "jobs.fio").write_text(f"[global]\ndirectory={tmp_path}\nsize=256k\nbs=4k\nioengine=psync\n"
                                       "group_reporting\n[g1]\nrw=read\n[g2]\nrw=write\n")
    out = tmp_path / "merged.json"
    subprocess.run(["fio", "--output-format=json", f"--output={out}", "jobs.fio"], cwd=tmp_path, check=True,
                   capture_output=True, timeout=120)
    (job,) = json.loads(out.read_text())["jobs"]
    assert job["jobname"] == "g1" and job["job options"]["rw"] == "write" and job["read"]["io_bytes"] > 0
    with pytest.raises(BenchrunError, match=r"'g1' is several different jobs summed by --group_reporting \(it moved "
                                            r"read \(\d+ bytes\) but its rw=write\).*--stonewall or --new_group"):
        ingest_file(out, "fio")
    # named on the command line: the last job's name in the options gives it away
    _fio(tmp_path, "--size=256k", "--group_reporting", "--name=g1", "--rw=read", "--bs=4k", "--name=g2", "--rw=read",
         "--bs=4k")
    with pytest.raises(BenchrunError, match=r"'g1' is several different jobs .*job options are of job 'g2'"):
        ingest_file(tmp_path / "fio.json", "fio")
    # separate groups read; a write job's verify reads are its own
    _fio(tmp_path, "--size=256k", "--group_reporting", "--name=g1", "--rw=read", "--bs=4k", "--numjobs=2",
         "--name=g2", "--rw=write", "--bs=4k", "--new_group", "--name=v", "--rw=write", "--bs=4k", "--verify=md5",
         "--stonewall")
    assert {r["case"] for r in ingest_file(tmp_path / "fio.json", "fio")} == {"g1", "g2", "v:read", "v:write"}


@needs_fio
def test_repeated_job_names_advise_a_group_per_job(tmp_path: Path) -> None:
    _fio(tmp_path, "--size=64k", "--numjobs=2", "--name=rr", "--rw=randread", "--bs=4k")
    with pytest.raises(BenchrunError, match=r"'rr' more than once.*--group_reporting.*each different job in a group of "
                                            r"its own \(--stonewall or --new_group"):
        ingest_file(tmp_path / "fio.json", "fio")


@needs_fio
def test_job_runtime_is_documented_as_summed_over_a_group(tmp_path: Path) -> None:
    doc = _fio(tmp_path, "--size=256k", "--time_based", "--runtime=300ms", "--numjobs=2", "--group_reporting",
               "--name=rr", "--rw=randread", "--bs=4k")
    (job,) = doc["jobs"]
    assert job["job_runtime"] >= 590  # two clones of 300 ms: fio adds them
    assert {r["job_runtime_ms"] for r in ingest_file(tmp_path / "fio.json", "fio")} == {job["job_runtime"]}
    doc_text = " ".join(fio_reader.__doc__.split())
    assert "Under ``--group_reporting`` it is the SUM over the group's jobs" in doc_text


def test_fio_docstring_names_its_real_callers() -> None:
    text = " ".join(fio_reader.__doc__.split())
    assert "launcher" not in text  # nothing outside benchrun.ingest and the fio suite calls the reader
    assert ":func:`benchrun.ingest.ingest_file`" in text and ":mod:`benchrun.suites.fio`" in text


# ---------------------------------------------------------------- vllm bench serve

RAMP = {"date": "20260722-060114", "endpoint_type": "openai", "backend": "openai", "model_id": "./Qwen2.5-VL-3B-Instruct",
        "num_prompts": 200, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 64,
        "duration": 204.45408433000557, "completed": 199, "failed": 1, "total_input_tokens": 39800,
        "total_output_tokens": 25472, "request_throughput": 0.9733236714351853, "request_goodput": None,
        "output_throughput": 124.58542994370372, "mean_ttft_ms": 97.50969301155726, "median_ttft_ms": 98.94429985433817,
        "p99_ttft_ms": 113.88637554366143, "median_tpot_ms": 34.45028747967261, "p99_tpot_ms": 35.01290820802995,
        "ramp_up_strategy": "linear", "ramp_up_start_rps": 1, "ramp_up_end_rps": 20}


def test_a_ramped_rate_is_not_labelled_as_a_closed_loop(tmp_path: Path) -> None:
    closed = {k: v for k, v in RAMP.items() if not k.startswith("ramp_up")}
    f = tmp_path / "sweep.jsonl"
    f.write_text("\n".join(json.dumps(d) for d in (RAMP, closed, dict(RAMP, ramp_up_strategy="exponential"))) + "\n")
    pts = points_from_file(f)
    assert [(p["point"], p["load_model"], p["offered_load"]) for p in pts] == [
        ("ramp=linear:1-20,max_concurrency=64", "ramp_up", 20.0), ("c=64", "closed_loop", 64.0),
        ("ramp=exponential:1-20,max_concurrency=64", "ramp_up", 20.0)]
    cases = [r["case"] for r in ingest_file(f, "vllm_bench") if r["name"] == "ttft_ms"]
    assert len(set(cases)) == 3  # never pooled as replicates of one case


def _detailed(n_ok: int, failed_before: int, failed_after: list[tuple[float, int]]) -> dict:
    """A --save-detailed result: ``n_ok`` completed requests (10 tokens, ttft 100-109 ms, 30 ms gaps),
    ``failed_before`` timed out before their first token (ttft 0, vLLM's default), and per
    ``(ttft s, gaps)`` in ``failed_after`` one that failed after its first token."""
    ttfts = [0.100 + 0.009 * k / max(n_ok - 1, 1) for k in range(n_ok)]
    itls = [[0.03 + 0.001 * (k % 7)] * 9 for k in range(n_ok)]
    outs = [10] * n_ok
    errors = [""] * n_ok
    for _ in range(failed_before):
        ttfts.append(0.0), itls.append([]), outs.append(0), errors.append("Traceback ... TimeoutError")
    for t, gaps in failed_after:
        ttfts.append(t), itls.append([0.03] * gaps), outs.append(0), errors.append("ClientPayloadError")
    n = len(ttfts)
    return {"date": "x", "backend": "openai", "model_id": "m", "num_prompts": n, "request_rate": 4.0, "burstiness": 1.0,
            "max_concurrency": None, "duration": 30.0, "completed": n_ok, "failed": n - n_ok,
            "total_output_tokens": 10 * n_ok, "request_throughput": 3.0, "output_throughput": 30.0,
            "input_lens": [1] * n, "output_lens": outs, "ttfts": ttfts, "itls": itls, "errors": errors}


def _hazen(values: list[float], n_censored: int, q: float) -> float:
    """The q-quantile of ``values`` ranked among ``len(values) + n_censored`` requests, the censored
    slowest: each value at the middle of its 1/N, linear in between, the last value past it."""
    total = len(values) + n_censored
    pos = [(k + 0.5) / total for k in range(len(values))]
    return float(np.interp(q, pos, sorted(values)))


def test_failed_requests_rank_slowest_in_the_recomputed_percentiles(tmp_path: Path) -> None:
    """The reviewer's sample: 90 completed, 10 timed out before a token; plus two that failed
    after their first token (their TTFT is a value, their decode is censored)."""
    doc = _detailed(90, 10, [(0.5, 3), (0.7, 1)])
    f = tmp_path / "detail.json"
    f.write_text(json.dumps(doc))
    [pt] = points_from_file(f)
    ok = range(90)
    ttft = [doc["ttfts"][i] * 1000 for i in ok]
    e2e = [(doc["ttfts"][i] + sum(doc["itls"][i])) * 1000 for i in ok]
    decode = [(e - t) / 9 for e, t in zip(e2e, ttft)]
    for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        assert pt[f"e2e_ms_{name}"] == pytest.approx(_hazen(e2e, 12, q))  # every failure
        assert pt[f"ttft_ms_{name}"] == pytest.approx(_hazen(ttft + [500.0, 700.0], 10, q))  # before a token
        assert pt[f"decode_ms_per_token_{name}"] == pytest.approx(_hazen(decode, 2, q))  # after it
    assert pt["e2e_ms_p90"] > float(np.percentile(e2e, 90))  # not the completed requests' own p90
    assert pt["percentiles_censored"] == {"ttft_ms": ["p90", "p95", "p99", "p999"],
                                          "e2e_ms": ["p90", "p95", "p99", "p999"],
                                          "decode_ms_per_token": ["p99", "p999"]}

    # the load generator's own rule on the same requests gives the same numbers
    rows_ok = [{"ttft_ms": t, "e2e_ms": e, "decode_ms_per_token": d} for t, e, d in zip(ttft, e2e, decode)]
    rows_err = [{"error": "timeout", "first_token_mono_ns": None, "send_mono_ns": 0}] * 10 + [
        {"error": "payload", "first_token_mono_ns": int(t * 1e6), "send_mono_ns": 0} for t in (500.0, 700.0)]
    for base, (values, n_cens) in latencies(rows_ok, rows_err).items():
        if base != "connect_ms":
            want = distribution(values, base, n_cens or None)  # as loadgen.metrics.summarize passes it
            assert {k: pt[k] for k in want} == pytest.approx(want)

    # failures only before the first token: the decode censors none and keeps numpy's linear percentiles
    f.write_text(json.dumps(_detailed(90, 10, [])))
    [early] = points_from_file(f)
    assert early["decode_ms_per_token_p90"] == pytest.approx(float(np.percentile(decode, 90)))
    assert early["e2e_ms_p90"] == pytest.approx(_hazen(e2e, 10, 0.9))

    # without failures nothing changes: numpy's linear percentiles of the completed requests
    f.write_text(json.dumps(_detailed(90, 0, [])))
    [clean] = points_from_file(f)
    assert clean["e2e_ms_p90"] == pytest.approx(float(np.percentile(e2e, 90)))
    assert clean["percentiles_censored"] is None


def test_a_wrappers_running_line_before_one_runs_own_start_line_is_one_run() -> None:
    """Found in the re-review: a wrapper echoing `Running: mpirun ... all_reduce_perf` before an nccl-tests
    2.13+ run's own `# Collective test starting` line was refused as two runs."""
    from benchrun.ingest.nccl_tests import parse_nccl_tests

    one = _section("all_reduce_perf", "sum", "20.827")  # has its own "# Collective test starting" line
    text = "Running: mpirun -np 16 ./build/all_reduce_perf -b 1K -e 8G -f 2\n" + one
    assert parse_nccl_tests(text, "wrapped.log")["rows"]  # was: "more than one nccl-tests run in one file"
    with pytest.raises(BenchrunError, match="more than one nccl-tests run"):
        parse_nccl_tests(text + text, "twice.log")
