"""Review fixes in the gemm, membw and training suites and the launcher's GPU request:
a training replicate that stops short carries how far it got (``training_reliability_pct`` under
100 on the failed replicate), a gemm with a GPU-only dtype asks for a GPU, and a repeated gemm size
is measured once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchrun.launch.placement import wants_gpu
from benchrun.plan import Invocation
from helpers import run_builtin_suite

TINY = {"layers": 1, "hidden": 16, "heads": 2, "seq_len": 8, "vocab": 32, "global_batch": 4, "steps": 6,
        "warmup_steps": 1, "lr": 0.01}


# -- 1. training_reliability_pct can be under 100: on the failed replicate ------------------------------

def _ctx(tmp_path: Path, params: dict[str, Any] | None = None) -> Any:
    import json

    from benchrun.suites._runtime import SuiteContext

    env = {"BENCHRUN_RUN_DIR": str(tmp_path), "BENCHRUN_SUITE": "training"}
    if params is not None:
        env["BENCHRUN_PARAMS"] = json.dumps(params)
    return SuiteContext(env)


def test_a_diverged_run_fails_carrying_the_steps_it_did(tmp_path: Path) -> None:
    from benchrun.suites.training import report

    cfg = {**TINY, "seed": 0, "device": "cpu", "backend": "gloo", "scaling_sweep": False}
    # two ranks stopped by the all-reduced loss at step 3 of 7 (warm-up included)
    ranks = [{"rank_id": r, "node_name": f"n{r}", "step_times_s": [0.01] * 3, "measured_wall_s": 0.02,
              "steps_done": 3} for r in (0, 1)]
    doc = {"losses": [3.0, 2.9, float("nan")], "ranks": ranks, "steps_done": 3, "steps_planned": 7,
           "diverged": "loss diverged: nan at step 2"}
    ctx = _ctx(tmp_path)
    with pytest.raises(RuntimeError, match="^loss diverged: nan at step 2"):
        report(ctx, doc, cfg, 2, 2, None, None)
    by = {m["name"]: m for m in ctx.metrics}
    assert by["training_reliability_pct"]["value"] == pytest.approx(100 * 3 / 7)
    assert by["training_steps_done"]["value"] == 3.0
    assert by["training_reliability_pct"]["case"] == "L1-d16-T8-B4-n2x1,cpu,gloo"
    assert "tokens_per_second" not in by and ctx.training == []  # nothing measured of a failed run
    progress = ctx.context["training_progress"]
    assert (progress["steps_planned"], progress["steps_done"], progress["ranks_reporting"]) == (7, 3, 2)
    assert progress["stopped"].startswith("loss diverged")


def test_a_loss_that_did_not_fall_ran_every_step_and_claims_no_progress(tmp_path: Path) -> None:
    """Found in the re-review: a loss that did not fall (every step run) failed carrying
    training_reliability_pct 100 and a "stopped" reason, though the run did not stop."""
    from benchrun.suites.training import report

    cfg = {**TINY, "seed": 0, "device": "cpu", "backend": "gloo", "scaling_sweep": False}
    ranks = [{"rank_id": 0, "node_name": "n0", "step_times_s": [0.01] * 7, "measured_wall_s": 0.06, "steps_done": 7}]
    doc = {"losses": [3.0] * 7, "ranks": ranks, "steps_done": 7, "steps_planned": 7}
    ctx = _ctx(tmp_path)
    with pytest.raises(RuntimeError):
        report(ctx, doc, cfg, 1, 1, None, None)
    assert "training_progress" not in ctx.context  # was: {"stopped": "loss did not fall ...", ...}
    assert "training_reliability_pct" not in {m["name"] for m in ctx.metrics}


def test_a_rank_that_raises_mid_run_fails_the_replicate_with_its_progress(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("torch")
    from benchrun.suites import _training_worker
    from benchrun.suites.training import run

    real = _training_worker.synthetic_batch
    calls = {"n": 0}

    def failing_batch(*args: Any, **kw: Any) -> Any:  # the input pipeline dies at the 5th step
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError("input shard unreadable")
        return real(*args, **kw)

    monkeypatch.setattr(_training_worker, "synthetic_batch", failing_batch)
    ctx = _ctx(tmp_path, {**TINY, "checkpoint": False, "backend": "gloo"})
    with pytest.raises(RuntimeError, match="rank 0: OSError: input shard unreadable"):
        run(ctx)
    by = {m["name"]: m["value"] for m in ctx.metrics}
    assert by["training_steps_done"] == 4.0
    assert by["training_reliability_pct"] == pytest.approx(100 * 4 / 7)
    assert ctx.context["training_progress"]["steps_done"] == 4
    # the failed result document carries them, with its status and reason
    path = ctx.finish("failed", "RuntimeError: rank 0: OSError: input shard unreadable")
    from benchrun.suites.result import read_result

    written = read_result(path)
    assert written["status"] == "failed"
    assert {m["name"] for m in written["metrics"]} == {"training_steps_done", "training_reliability_pct"}


# -- 2. a gemm with a GPU-only dtype asks for a GPU --------------------------------------------------

def _inv(suite: str, module: str, **params: Any) -> Invocation:
    return Invocation("r-1", "micro", suite, 1, "bc", ("python", "-m", f"benchrun.suites.{module}"), {}, 60.0,
                      params)


def test_a_gpu_only_gemm_dtype_asks_for_a_gpu() -> None:
    from benchrun.launch.podspec import Placement, _resources

    bf16 = _inv("gemm", "gemm", sizes=[4096, 8192], iterations=50, dtype="bfloat16")  # the h100 example's
    assert wants_gpu(bf16)
    assert _resources(bf16, Placement(queue_name="q"))[0] == 1  # the pod gets nvidia.com/gpu: 1
    assert wants_gpu(_inv("gemm-fp8", "gemm", dtype="float8_e4m3fn"))  # the module decides, not the spec name
    assert not wants_gpu(_inv("gemm", "gemm", dtype="float32"))
    assert not wants_gpu(_inv("gemm", "gemm", dtype="auto"))
    assert not wants_gpu(_inv("gemm", "gemm", dtype="bfloat16", device="cpu"))  # unavailable there, by request
    assert not wants_gpu(_inv("membw", "membw", dtype="float32"))  # another suite's dtype is its own
    assert wants_gpu(_inv("membw", "membw", device="cuda"))


# -- 3. numpy's triad moves the 3 arrays STREAM credits ---------------------------------------------

def test_gemm_measures_a_repeated_size_once_in_order(tmp_path: Path) -> None:
    import json

    from benchrun.suites._common import StaticParams
    from benchrun.suites.gemm import settings

    assert settings(StaticParams("gemm", {"sizes": [128, 64, 128, 64, 32]})).sizes == [128, 64, 32]
    proc, doc = run_builtin_suite("gemm", "t-gemm-fix", tmp_path, {"sizes": [64, 64, 32], "iterations": 2,
                                                                    "device": "cpu"})
    assert proc.returncode == 0, proc.stderr
    rows = [(m["name"], m["case"]) for m in doc["metrics"]]
    assert len(rows) == len(set(rows)) == 6  # 2 sizes x (tflops, p50, p99), no case twice
    assert [m["case"] for m in doc["metrics"] if m["name"] == "tflops"] == ["n=64,float32,cpu", "n=32,float32,cpu"]
    calls = json.loads((tmp_path / doc["samples"]["calls"]).read_text())["calls"]
    assert [len(v) for v in calls.values()] == [2, 2]
