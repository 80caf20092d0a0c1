"""The training suite: FLOPs arithmetic against a hand count, a real tiny DDP run across 2
local nodes, and a diverging loss that fails the replicate with the reason."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from benchrun.launch.local import LocalLauncher, local_node_name
from benchrun.plan import Invocation, base_env
from benchrun.rundir import RunDir
from benchrun.suites.training import (
    known_peak_tflops,
    loss_verdict,
    model_flops_per_token,
    model_params_matmul,
)

ROOT = Path(__file__).resolve().parents[1]
TINY = {"layers": 1, "hidden": 16, "heads": 2, "seq_len": 8, "vocab": 32, "global_batch": 4, "steps": 6,
        "warmup_steps": 1, "lr": 0.01}


def test_flops_per_token_against_a_hand_count() -> None:
    # L=2, d=8, V=16, T=4. Per block: QKV 8x24=192, out 8x8=64, MLP 8x32 + 32x8 = 512 → 768 = 12·d²;
    # two blocks 1536, LM head 8x16 = 128 → N = 1664. 6N = 9984; attention 12·L·d·T = 12·2·8·4 = 768.
    assert model_params_matmul(2, 8, 16) == 1664
    assert model_flops_per_token(2, 8, 4, 16) == 9984 + 768


def test_matmul_parameter_count_is_the_models_own() -> None:
    torch = pytest.importorskip("torch")
    from benchrun.suites._training_worker import build_model

    model = build_model(3, 32, 4, 16, 64)
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert linear == model_params_matmul(3, 32, 64)


def test_loss_verdicts_and_known_peaks() -> None:
    assert loss_verdict([5.0, 4.8, 4.1, 3.0, 2.5, 2.0]) is None
    assert loss_verdict([5.0, float("nan"), 4.0]) == "loss diverged: nan at step 1"
    assert loss_verdict([3.0, 3.1, 3.0, 3.2, 3.3, 3.4]).startswith("loss did not fall")
    assert known_peak_tflops("NVIDIA H100 80GB HBM3") == 989.4
    assert known_peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert known_peak_tflops("cpu") is None and known_peak_tflops(None) is None


@pytest.mark.slow
def test_training_across_two_local_nodes_reports_the_figures(tmp_path: Path) -> None:
    run_id = "tr-20260101000000-abcdef12"
    rd = RunDir(tmp_path, run_id).create().path
    params = {**TINY, "scaling_sweep": True, "peak_tflops_per_device": 1.0, "peak_device": "cpu",
              "target_tokens": 10**9}
    env = {**base_env(), "PYTHONPATH": str(ROOT), "BENCHRUN_RUN_ID": run_id, "BENCHRUN_RUN_DIR": str(rd),
           "BENCHRUN_SUITE": "training", "BENCHRUN_REPLICATE": "1", "BENCHRUN_PARAMS": json.dumps(params)}
    inv = Invocation(run_id, "end_to_end", "training", 1, "bc-t", (sys.executable, "-m", "benchrun.suites.training"),
                     env, 120.0, params, nodes=2, ranks_per_node=1)
    res = LocalLauncher().launch(inv, rd)
    assert res.status == "ok", res.reason
    doc = json.loads((rd / res.result).read_text())
    [row] = doc["training"]
    assert (row["world_size"], row["nodes"], row["device"], row["backend"]) == (2, 2, "cpu", "gloo")
    assert row["measured_steps"] == 6 and row["warmup_steps"] == 1
    assert row["model_flops_per_token"] == model_flops_per_token(1, 16, 8, 32) and "6*N" in row["flops_formula"]
    tps = row["tokens_per_second"]
    assert row["tokens_per_second_per_device"] == pytest.approx(tps / 2)
    # MFU against the declared 1 TFLOP/s per device, from the same measured throughput
    assert row["mfu_pct"] == pytest.approx(100 * row["model_flops_per_token"] * tps / 2e12)
    assert row["peak_tflops_used"] == 1.0 and row["mfu_reason"] is None
    assert row["time_to_train_hours"] == pytest.approx(1e9 / tps / 3600)
    assert 0 < row["scaling_efficiency_pct"] and row["step_time_p50_ms"] <= row["step_time_p99_ms"]
    assert row["checkpoint_bytes"] > 0 and row["checkpoint_save_s"] > 0 and row["checkpoint_restore_s"] > 0
    assert row["loss_last"] < row["loss_first"] and row["training_reliability_pct"] == 100.0
    assert row["time_to_first_step_s"] > 0
    assert row["peak_memory_kind"] == "process_max_rss" and row["peak_memory_bytes"] > 10 * 2**20  # torch alone
    ranks = {m["rank_id"]: m["node_name"] for m in doc["metrics"] if m["name"] == "rank_step_time_p50_ms"}
    assert ranks == {0: local_node_name(0), 1: local_node_name(1)}
    samples = json.loads((rd / doc["samples"]["ranks"]).read_text())
    assert [len(r["step_times_s"]) for r in samples["ranks"]] == [7, 7]


def test_diverging_loss_fails_the_replicate_with_the_reason(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from benchrun.suites._runtime import SuiteContext
    from benchrun.suites._training_worker import worker
    from benchrun.suites.training import report

    cfg = {**TINY, "vocab": 32, "seed": 0, "device": "cpu", "backend": "gloo", "scaling_sweep": False,
           "checkpoint": True, "timeout_s": 60.0, "local_ranks": 1, "lr": 1e4}
    doc = worker(0, 0, 1, None, cfg, "n0")  # in-process: one rank, no process group
    assert doc["diverged"].startswith("loss diverged: nan at step") and "checkpoint_bytes" not in doc
    ctx = SuiteContext({"BENCHRUN_RUN_DIR": str(tmp_path), "BENCHRUN_SUITE": "training"})
    with pytest.raises(RuntimeError, match="^loss diverged: nan at step"):
        report(ctx, doc, cfg, 1, 1, None, None)
    assert ctx.training == [] and not [m for m in ctx.metrics if m["name"] == "tokens_per_second"]


def test_synthetic_batch_is_the_recurrence_vectorised() -> None:
    torch = pytest.importorskip("torch")
    from benchrun.suites._training_worker import synthetic_batch

    for batch, seq_len, vocab in ((4, 8, 32), (3, 1, 16), (5, 63, 1000), (2, 300, 50257)):
        x, y = synthetic_batch(torch.Generator().manual_seed(7), batch, seq_len, vocab, torch.device("cpu"))
        g = torch.Generator().manual_seed(7)  # the same draws, stepped one position at a time
        ref = torch.empty(batch, seq_len + 1, dtype=torch.long)
        ref[:, 0] = torch.randint(0, vocab, (batch,), generator=g)
        noise = torch.randint(0, 2, (batch, seq_len), generator=g)
        for t in range(seq_len):
            ref[:, t + 1] = (5 * ref[:, t] + 7 + noise[:, t]) % vocab
        assert torch.equal(x, ref[:, :-1]) and torch.equal(y, ref[:, 1:])


def test_throughput_is_of_the_wall_clock_window_not_the_timed_regions(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("torch")
    import statistics
    import time

    from benchrun.suites import _training_worker
    from benchrun.suites._runtime import SuiteContext
    from benchrun.suites.training import report

    real = _training_worker.synthetic_batch

    def slow_batch(*args, **kw):  # a slow input pipeline: outside the timed region, inside each step
        time.sleep(0.2)
        return real(*args, **kw)

    monkeypatch.setattr(_training_worker, "synthetic_batch", slow_batch)
    cfg = {**TINY, "seed": 0, "device": "cpu", "backend": "gloo", "scaling_sweep": False, "checkpoint": False,
           "timeout_s": 60.0, "local_ranks": 1, "peak_device": "cpu"}  # the declared 1 TFLOP/s is the CPU's
    doc = _training_worker.worker(0, 0, 1, None, cfg, "n0", t_process_start=None)
    assert "error" not in doc, doc.get("traceback")
    measured = doc["step_times_s"][1:]
    assert doc["measured_wall_s"] >= sum(measured) + 6 * 0.2  # the sleeps are in the window, not the steps
    ctx = SuiteContext({"BENCHRUN_RUN_DIR": str(tmp_path), "BENCHRUN_SUITE": "training"})
    report(ctx, doc, cfg, 1, 1, 1.0, 10**6)
    [row] = ctx.training
    tokens = 6 * TINY["global_batch"] * TINY["seq_len"]
    assert row["tokens_per_second"] == pytest.approx(tokens / doc["measured_wall_s"])
    assert row["tokens_per_second"] < tokens / (sum(measured) + 1.2)
    assert row["time_to_train_hours"] == pytest.approx(1e6 / row["tokens_per_second"] / 3600)
    assert row["mfu_pct"] == pytest.approx(100 * row["model_flops_per_token"] * row["tokens_per_second"] / 1e12)
    # step times stay forward + backward + optimizer, the sleeps not in them
    assert row["step_time_p50_ms"] == pytest.approx(1e3 * statistics.median(measured))
    window = ctx.context["throughput_window"]
    assert window["measured_wall_s"] == doc["measured_wall_s"] and window["timed_share"] == pytest.approx(sum(measured) / doc["measured_wall_s"])


def test_cpu_threads_are_capped_at_the_cgroup_quota(tmp_path: Path, monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    from benchrun.suites import _common, _training_worker

    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "cpu.max").write_text("100000 100000\n")  # a 1-CPU pod on a bigger node
    monkeypatch.setattr(_common, "CGROUP_ROOT", str(cgroup))
    monkeypatch.setenv("OMP_NUM_THREADS", "8")  # what a launcher dividing the host's cores might set
    cfg = {**TINY, "seed": 0, "device": "cpu", "backend": "gloo", "scaling_sweep": False, "checkpoint": False,
           "timeout_s": 60.0, "local_ranks": 1}
    before = torch.get_num_threads()
    try:
        doc = _training_worker.worker(0, 0, 1, None, cfg, "n0")
    finally:
        torch.set_num_threads(before)
    assert "error" not in doc, doc.get("traceback")
    assert doc["cpu_threads"] == {"threads": 1, "usable_cpu_share": 1, "omp_num_threads": 8}


def _fstype(path: Path) -> str | None:
    from benchrun.suites.fio import filesystem_of

    fs = filesystem_of(path)
    return fs["fstype"] if fs else None


def test_checkpoint_restore_reads_a_file_dropped_from_the_page_cache(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("torch")
    import torch

    from benchrun.suites import _training_worker
    from benchrun.suites._runtime import SuiteContext
    from benchrun.suites.training import report

    ckpt_dir = tmp_path / "ckpt"
    ckpt_dir.mkdir()
    seen: list[tuple[int, int] | None] = []
    real_load = torch.load

    def load(path, *args, **kw):  # what the page cache holds of the file when the timed read starts
        fd = os.open(path, os.O_RDONLY)
        try:
            seen.append(_training_worker.page_residency(fd, os.fstat(fd).st_size))
        finally:
            os.close(fd)
        return real_load(path, *args, **kw)

    monkeypatch.setattr(torch, "load", load)
    cfg = {**TINY, "seed": 0, "device": "cpu", "backend": "gloo", "scaling_sweep": False, "checkpoint": True,
           "timeout_s": 60.0, "local_ranks": 1, "checkpoint_dir": str(ckpt_dir)}
    doc = _training_worker.worker(0, 0, 1, None, cfg, "n0")
    assert "error" not in doc, doc.get("traceback")
    read = doc["checkpoint_restore_read"]
    assert read["eviction"] == "posix_fadvise(POSIX_FADV_DONTNEED) requested"
    assert read["directory"].startswith(str(ckpt_dir)) and list(ckpt_dir.iterdir()) == []
    assert read["pages"] > 0 and seen == [(read["resident_pages"], read["pages"])]
    if _fstype(ckpt_dir) not in ("tmpfs", "ramfs"):
        assert read["resident_pages"] == 0 and read["cold"] is True
    ctx = SuiteContext({"BENCHRUN_RUN_DIR": str(tmp_path / "run"), "BENCHRUN_SUITE": "training"})
    report(ctx, doc, cfg, 1, 1, None, None)
    assert ctx.training[0]["checkpoint_restore_cold"] is read["cold"]
    assert ctx.context["checkpoint_restore_read"] == read


@pytest.mark.skipif(_fstype(Path("/dev/shm")) != "tmpfs", reason="needs a tmpfs at /dev/shm")
def test_a_restore_on_tmpfs_is_said_to_be_warm() -> None:
    pytest.importorskip("torch")
    from benchrun.suites._training_worker import evict_from_page_cache

    path = Path("/dev/shm") / f"benchrun-test-{os.getpid()}"
    path.write_bytes(b"x" * 65536)
    try:
        read = evict_from_page_cache(path)
    finally:
        path.unlink()
    assert read["cold"] is False and read["resident_pages"] == read["pages"] == 65536 // os.sysconf("SC_PAGE_SIZE")


def test_checkpoint_dir_must_be_a_path() -> None:
    from benchrun.spec.builtin_suites import check_parameters
    from benchrun.suites._common import ParamError

    with pytest.raises(ParamError, match="parameter checkpoint_dir"):
        check_parameters("training", {"checkpoint_dir": 5})
    check_parameters("training", {"checkpoint_dir": "/mnt/ckpt"})


@pytest.mark.parametrize(("name", "peak"), [
    ("NVIDIA H100 80GB HBM3", 989.4), ("NVIDIA H100 PCIe", 756.0), ("NVIDIA H200", 989.4),
    ("NVIDIA A100-SXM4-80GB", 312.0), ("NVIDIA A100-PCIE-40GB", 312.0), ("NVIDIA B200", 2250.0),
    # boards and models a substring would have taken for another: no peak, rather than a guess
    ("NVIDIA H100 NVL", None), ("NVIDIA H200 NVL", None), ("NVIDIA GH200 480GB", None),
    ("NVIDIA GeForce RTX 4090", None),
])
def test_known_peaks_match_model_and_board_exactly(name: str, peak: float | None) -> None:
    assert known_peak_tflops(name) == peak


def test_an_unknown_gpu_gets_no_mfu_and_the_reason(tmp_path: Path) -> None:
    from benchrun.suites._runtime import SuiteContext
    from benchrun.suites.training import report

    cfg = {**TINY, "device": "cuda", "backend": "nccl", "scaling_sweep": False, "seed": 0}
    ranks = [{"rank_id": 0, "node_name": "n0", "step_times_s": [0.01] * 7, "measured_wall_s": 0.07,
              "time_to_first_step_s": 1.0, "peak_memory_bytes": 1}]
    doc = {"gpu_name": "NVIDIA H100 NVL", "losses": [3.0, 2.9, 2.8, 2.0, 1.9, 1.8, 1.7], "ranks": ranks,
           "steps_done": 7, "steps_planned": 7, "diverged": None}
    ctx = SuiteContext({"BENCHRUN_RUN_DIR": str(tmp_path), "BENCHRUN_SUITE": "training"})
    report(ctx, doc, cfg, 1, 1, None, None)
    [row] = ctx.training
    assert row["mfu_pct"] is None and row["peak_tflops_used"] is None
    assert "NVIDIA H100 NVL" in row["mfu_reason"] and "board NVL" in row["mfu_reason"]
    assert not [m for m in ctx.metrics if m["name"] == "mfu_pct"]


def test_a_run_that_fell_back_to_the_cpu_gets_no_mfu_against_the_declared_gpu_peak(tmp_path: Path) -> None:
    """Found in review: backend auto with fewer GPUs than ranks trained on the CPU, and its MFU was computed
    against the declared GPU peak (0.005 % of 989.4 TFLOP/s, "declared"), a primary metric. So did a run on a
    machine with no CUDA at all; only a peak declared as the CPU's (peak_device: cpu) gives a CPU run its MFU."""
    pytest.importorskip("torch")
    from benchrun.suites._runtime import SuiteContext
    from benchrun.suites._training_worker import worker
    from benchrun.suites.training import report

    cfg = {**TINY, "vocab": 32, "seed": 0, "device": "cpu", "backend": "gloo", "scaling_sweep": False,
           "checkpoint": False, "timeout_s": 60.0, "local_ranks": 1, "lr": 1e-3}
    doc = worker(0, 0, 1, None, cfg, "n0")
    for fell_back, peak_device, expect_mfu in ((True, "cuda", False), (False, "cuda", False),
                                               (True, "cpu", True), (False, "cpu", True)):
        ctx = SuiteContext({"BENCHRUN_RUN_DIR": str(tmp_path), "BENCHRUN_SUITE": "training"})
        report(ctx, doc, {**cfg, "fell_back_to_cpu": fell_back, "peak_device": peak_device}, 1, 1, 989.4, None)
        [row] = ctx.training
        assert (row["mfu_pct"] is not None) is expect_mfu, row
        if not expect_mfu:
            assert ("fell back to the CPU" in row["mfu_reason"]) is fell_back and row["peak_tflops_used"] is None
            assert "cuda peak" in row["mfu_reason"]


def test_the_measured_window_is_the_measured_steps(tmp_path: Path, monkeypatch) -> None:
    """Found in review (2026-12-07): training never recorded a measured window, so its telemetry summaries
    covered the whole process (imports, model build, warm-up at 0 % GPU beside the steps at 95 % read
    as a starved GPU, labelled as the measured window by the playbook). Now its result's measured_window
    is the wall-clock window of the measured steps, warm-up left out."""
    pytest.importorskip("torch")
    import time

    from benchrun.suites import _training_worker, training
    from benchrun.suites._runtime import SuiteContext

    real = _training_worker.synthetic_batch

    def slow_batch(*args, **kw):  # each step, warm-up included, takes at least 0.2 s
        time.sleep(0.2)
        return real(*args, **kw)

    monkeypatch.setattr(_training_worker, "synthetic_batch", slow_batch)
    monkeypatch.delenv("BENCHRUN_NODES", raising=False)  # one node
    params = {**TINY, "checkpoint": False, "warmup_steps": 2}
    ctx = SuiteContext({"BENCHRUN_RUN_DIR": str(tmp_path), "BENCHRUN_RUN_ID": "tr-20260101000000-abcdef12",
                        "BENCHRUN_SUITE": "training", "BENCHRUN_REPLICATE": "1", "BENCHRUN_PARAMS": json.dumps(params)})
    began = time.time()
    training.run(ctx)
    doc = json.loads(ctx.finish("ok").read_text())
    window = doc["measured_window"]
    [row] = doc["training"]
    assert window["start_unix"] >= began + 2 * 0.2  # after the two warm-up steps
    assert window["end_unix"] - window["start_unix"] == pytest.approx(row["measured_wall_s"], abs=0.01)
    assert row["measured_wall_s"] >= 6 * 0.2 and window["end_unix"] <= time.time()
