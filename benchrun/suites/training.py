"""The ``training`` suite: a real torch training loop, measured per rank, one or many nodes.

A small decoder-only transformer (sizes from the parameters), seeded synthetic tokens,
AdamW, bf16 autocast on CUDA and fp32 on CPU, DistributedDataParallel over gloo on CPU and
NCCL on GPUs. In a multi-node gang (``nodes > 1`` in the spec) every node runs this module
with the launcher's rendezvous variables and forks ``LOCAL_WORLD_SIZE`` ranks (one rank
runs in-process); on one node, ``world_size`` local ranks meet on a loopback port.

Parameters (defaults in brackets):
    layers [2], hidden [64], heads [4], seq_len [64], vocab [256], global_batch [8]
        (split evenly over ranks), steps [20] measured after warmup_steps [3],
    lr [0.003], seed [0], world_size [1] (single node only), backend auto|gloo|nccl,
    scaling_sweep [false]: also time rank 0 alone for the weak-scaling efficiency,
    checkpoint [true]: save and restore model + optimizer state, timed; the file is dropped
        from the page cache before the restore (posix_fadvise DONTNEED), and
        ``context.checkpoint_restore_read`` says whether the read was cold (mincore: no page
        resident; tmpfs keeps files in memory, so a restore there is warm and says so),
    checkpoint_dir: where the checkpoint file goes (a temporary directory inside it; default
        the system's temporary directory): put it on the storage a real job would restore from,
    peak_tflops_per_device: the declared dense peak for MFU (else a known GPU's, else none),
    peak_device cuda|cpu [cuda]: the device the declared peak is of. MFU is only of a run on that
        device: a run that trains on the CPU (no CUDA, or backend auto with fewer GPUs than ranks)
        gets no MFU against a GPU peak (``mfu_reason`` says why); declare a CPU's peak with
        ``peak_device: cpu``,
    target_tokens: tokens a full training run needs, for time_to_train_hours,
    timeout_s [300]: the process group's deadline.

On CPU each rank runs torch with the usable CPUs (affinity and cgroup CPU quota) divided
among this node's ranks, OMP_NUM_THREADS (set by the launcher) capped at that share:
``context.cpu_threads`` gives the count.

The result's ``measured_window`` (what the replicate's telemetry summaries are taken over) spans
this node's ranks' measured steps, warm-up excluded.

Per replicate (warm-up steps excluded; a step's time is the slowest rank's):
step_time_p50_ms / p99 (forward, backward and optimizer step), tokens_per_second (global)
and per device over the wall-clock window of the measured steps (the longest rank's: each
step's batch, host-to-device copy, loss all_reduce and ``.item()`` included, so it, MFU and
time_to_train_hours are of the time the steps took, not of their timed regions alone;
``context.throughput_window`` gives the window and the timed share), model FLOPs per token
(:func:`model_flops_per_token`, its formula in the result), ``mfu_pct`` against the
declared peak (absent, with the reason, when no peak is known), scaling efficiency when a
sweep is asked, time to first step (process start → first optimizer step done, rendezvous
included; the start is the kernel's stamp of the process, before the interpreter and its imports,
``context.process_start_from`` says so or names the fallback), checkpoint save / restore time and size, peak memory of the largest rank (CUDA allocator
peak on a GPU, peak RSS on CPU), per-rank step-time medians with their node. The loss must be finite and fall (mean of the last three steps below the first
three); otherwise the replicate fails with the reason.

``training_reliability_pct`` is 100 × steps done / steps planned (warm-up included), the gang's
steps being the fewest any rank finished. On an ok replicate it is always 100: a run that stops
short (a non-finite loss, which stops every rank at that step; a rank's exception) fails the
replicate. A failed replicate still carries ``training_steps_done`` and ``training_reliability_pct``
in its result's metrics, with ``context.training_progress`` (planned, done, ranks that reported,
why it stopped) and ``status: failed`` with the reason: the warehouse's measurement_fact keeps those
rows with their status. No step count is there when no rank reached its first step (rendezvous or
model build failed) or none left a document (killed at the deadline); the count is then absent,
never guessed. The comparison (``benchrun.stats``) reads values of ok replicates only, and counts
a failed replicate as a failure of the suite, not as its reliability: the gate never sees a
reliability under 100 from this metric; a stopped run reaches it as a failed replicate.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import socket
import tempfile
import time
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from benchrun.suites._common import (
    ParamError,
    Params,
    bool_param,
    check_known,
    choice_param,
    cuda_available,
    float_param,
    int_param,
    percentile,
    torch_present,
    world_size_param,
)
from benchrun.suites._gang import Gang, gang_from_env, node_name
from benchrun.suites._runtime import SuiteContext, Unavailable, main

FLOPS_FORMULA = ("6*N + 12*n_layers*d_model*seq_len, N = 12*n_layers*d_model^2 + d_model*vocab "
                 "(matmul weights: attention QKV+output, MLP 4x, LM head; embeddings, biases and norms excluded; "
                 "attention term without a causal discount, as in PaLM's MFU)")

# Dense BF16 tensor-core peaks from NVIDIA's datasheets (TFLOP/s per GPU), by (model, board):
# the board is "NVL" or "PCIe" when the device name says so, else "SXM". A name is matched on
# its model and board exactly (never by substring: "H100 NVL" is not an H100 SXM, "GH200" not
# an H200); a pair not listed gets no MFU unless the spec declares peak_tflops_per_device.
# H100 NVL and H200 NVL are left out: their per-GPU figure is not one we could source.
KNOWN_PEAK_TFLOPS_BF16 = {
    ("H100", "SXM"): 989.4,
    ("H100", "PCIe"): 756.0,
    ("H200", "SXM"): 989.4,
    ("B200", "SXM"): 2250.0,
    ("A100", "SXM"): 312.0,
    ("A100", "PCIe"): 312.0,
}
_MODEL = re.compile(r"^[A-Z]{1,3}\d{2,4}[A-Z]?$")


def gpu_model_board(device_name: str) -> tuple[str | None, str]:
    """(model, board) of a CUDA device name: "NVIDIA H100 80GB HBM3" → (H100, SXM),
    "NVIDIA H100 PCIe" → (H100, PCIe), "NVIDIA H200 NVL" → (H200, NVL), "NVIDIA A100-SXM4-80GB"
    → (A100, SXM), "NVIDIA GH200 480GB" → (GH200, SXM)."""
    tokens = re.split(r"[\s\-_]+", device_name.upper().strip())
    tokens = [t for t in tokens if t and t not in ("NVIDIA", "TESLA")]
    model = next((t for t in tokens if _MODEL.match(t)), None)
    board = "NVL" if "NVL" in tokens else "PCIe" if any(t.startswith("PCIE") for t in tokens) else "SXM"
    return model, board


def peak_lookup(device_name: str | None) -> tuple[float | None, str | None]:
    """(dense BF16 peak, None) for a listed (model, board), else (None, why not)."""
    if not device_name:
        return None, "no GPU name"
    model, board = gpu_model_board(device_name)
    peak = KNOWN_PEAK_TFLOPS_BF16.get((model, board)) if model else None
    if peak is None:
        return None, f"{device_name!r} (model {model or 'unrecognised'}, board {board}) is not in the known-peak table"
    return peak, None


PARAMETERS = ("layers", "hidden", "heads", "seq_len", "vocab", "global_batch", "steps", "warmup_steps", "lr", "seed",
          "world_size", "backend", "scaling_sweep", "checkpoint", "peak_tflops_per_device", "target_tokens",
          "timeout_s", "checkpoint_dir", "peak_device")
# the metrics the suite may report (`benchrun validate` checks a primary names one; reporting another fails)
METRICS = ("training_steps_done", "training_reliability_pct", "step_time_p50_ms", "step_time_p99_ms", "tokens_per_second",
           "tokens_per_second_per_device", "model_flops_per_token", "mfu_pct", "scaling_efficiency_pct",
           "time_to_first_step_s", "time_to_train_hours", "checkpoint_save_s", "checkpoint_restore_s",
           "checkpoint_bytes", "peak_memory_bytes", "rank_step_time_p50_ms")


def model_params_matmul(layers: int, hidden: int, vocab: int) -> int:
    """N: weights that take part in a matmul per token (see FLOPS_FORMULA)."""
    return 12 * layers * hidden * hidden + hidden * vocab


def model_flops_per_token(layers: int, hidden: int, seq_len: int, vocab: int) -> int:
    """Training FLOPs per token: 6·N (forward 2N, backward 4N) + 12·L·d·T for attention scores."""
    return 6 * model_params_matmul(layers, hidden, vocab) + 12 * layers * hidden * seq_len


def known_peak_tflops(device_name: str | None) -> float | None:
    """The dense BF16 peak of a known GPU (:func:`peak_lookup`), else None."""
    return peak_lookup(device_name)[0]


def loss_verdict(losses: list[float], window: int = 3) -> str | None:
    """None when the loss is finite and falls; else why not."""
    if not losses:
        return "no loss recorded"
    bad = next((i for i, v in enumerate(losses) if not np.isfinite(v)), None)
    if bad is not None:
        return f"loss diverged: {losses[bad]} at step {bad}"
    k = max(1, min(window, len(losses) // 2))
    first, last = float(np.mean(losses[:k])), float(np.mean(losses[-k:]))
    if not last < first:
        return f"loss did not fall: mean of the first {k} steps {first:.4f}, of the last {k} {last:.4f}"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_local_ranks(ranks: list[tuple[int, int]], world_size: int, init_method: str, cfg: dict[str, Any],
                     node: str, t_start: float, timeout_s: float) -> list[dict[str, Any]]:
    """Fork one process per (global rank, local rank); the first failure stops them all."""
    from benchrun.suites._training_worker import worker

    out_dir = Path(tempfile.mkdtemp(prefix="benchrun-training-"))
    method = "spawn" if cfg["device"] == "cuda" else "fork"
    if method == "fork":
        import torch.distributed  # noqa: F401 - imported once before forking, the ranks inherit it
    mp = multiprocessing.get_context(method)
    procs = [mp.Process(target=worker, name=f"rank{g}",
                        args=(g, l, world_size, init_method, cfg, node, str(out_dir / f"rank{g}.json"), t_start))
             for g, l in ranks]
    try:
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s + 60
        pending = list(procs)
        while pending and time.monotonic() < deadline:
            wait([p.sentinel for p in pending], timeout=max(0.0, deadline - time.monotonic()))
            pending = [p for p in pending if p.exitcode is None]
            if any(p.exitcode not in (None, 0) for p in procs):
                break
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join(5)
        docs = []
        for (g, _), p in zip(ranks, procs):
            f = out_dir / f"rank{g}.json"
            docs.append(json.loads(f.read_text(encoding="utf-8")) if f.exists()
                        else {"rank_id": g, "error": f"exit code {p.exitcode}, no document (killed or timed out)"})
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    return docs


class Settings(NamedTuple):
    """The suite's parameters, parsed (``world_size`` None: a gang's, not known before it starts)."""

    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    global_batch: int
    steps: int
    warmup: int
    lr: float
    seed: int
    requested: str
    sweep: bool
    checkpoint: bool
    timeout_s: float
    peak_declared: float | None
    target_tokens: int | None
    world_size: int | None
    checkpoint_dir: str | None = None
    peak_device: str = "cuda"


def settings(ctx: Params, gang: Gang | None = None) -> Settings:
    """The parameters, checked (ParamError): the suite's first step, and ``benchrun validate``'s."""
    check_known(ctx, PARAMETERS)
    layers = int_param(ctx, "layers", 2, maximum=512)
    hidden = int_param(ctx, "hidden", 64, maximum=65536)
    heads = int_param(ctx, "heads", 4, maximum=1024)
    seq_len = int_param(ctx, "seq_len", 64, maximum=1 << 20)
    vocab = int_param(ctx, "vocab", 256, minimum=16, maximum=1 << 20)
    global_batch = int_param(ctx, "global_batch", 8)
    steps = int_param(ctx, "steps", 20, minimum=2, maximum=1_000_000)
    warmup = int_param(ctx, "warmup_steps", 3, minimum=0, maximum=1_000_000)
    lr = float_param(ctx, "lr", 3e-3)
    seed = int_param(ctx, "seed", 0, minimum=0)
    requested = choice_param(ctx, "backend", "auto", ("auto", "gloo", "nccl"))
    sweep = bool_param(ctx, "scaling_sweep", False)
    checkpoint = bool_param(ctx, "checkpoint", True)
    timeout_s = float_param(ctx, "timeout_s", 300.0)
    peak_param = ctx.param("peak_tflops_per_device", None)
    peak_declared = float_param(ctx, "peak_tflops_per_device", 1.0) if peak_param is not None else None
    target = ctx.param("target_tokens", None)
    target_tokens = int_param(ctx, "target_tokens", 1) if target is not None else None
    if hidden % heads:
        raise ParamError(f"parameter hidden={hidden} must be a multiple of heads={heads}")
    world_size = world_size_param(ctx, gang, 1)
    if world_size is not None and global_batch % world_size:
        raise ParamError(f"parameter global_batch={global_batch} must be a multiple of the world size {world_size}")
    checkpoint_dir = ctx.param("checkpoint_dir", None)
    if checkpoint_dir is not None and (not isinstance(checkpoint_dir, str) or not checkpoint_dir):
        raise ParamError(f"parameter checkpoint_dir={checkpoint_dir!r} must be a directory path")
    peak_device = choice_param(ctx, "peak_device", "cuda", ("cuda", "cpu"))
    if ctx.param("peak_device", None) is not None and peak_declared is None:
        raise ParamError(f"parameter peak_device={peak_device!r} says whose peak peak_tflops_per_device is; "
                         "set peak_tflops_per_device too, or leave peak_device out")
    return Settings(layers, hidden, heads, seq_len, vocab, global_batch, steps, warmup, lr, seed, requested, sweep,
                    checkpoint, timeout_s, peak_declared, target_tokens, world_size, checkpoint_dir, peak_device)


def run(ctx: SuiteContext) -> None:
    """Train, then (on global rank 0's node) report step times, throughput, MFU and checkpoints."""
    gang = gang_from_env()
    (layers, hidden, heads, seq_len, vocab, global_batch, steps, warmup, lr, seed, requested, sweep, checkpoint,
     timeout_s, peak_declared, target_tokens, world_size, checkpoint_dir, peak_device) = settings(ctx, gang)
    if checkpoint_dir is not None:  # where the suite runs: validate cannot see this host's directories
        where = Path(checkpoint_dir).expanduser()
        if not where.is_dir() or not os.access(where, os.W_OK | os.X_OK):
            raise ParamError(f"parameter checkpoint_dir={checkpoint_dir!r} is not a writable directory here; "
                             "create it or omit checkpoint_dir")
        checkpoint_dir = str(where)
    if gang is not None:
        local, node_rank = gang.local_world_size, gang.node_rank  # world_size: the gang's (world_size_param)
        init_method = gang.init_method
    else:
        assert world_size is not None  # a single node's is its parameter
        local, node_rank = world_size, 0
        init_method = f"tcp://127.0.0.1:{_free_port()}"
    if not torch_present():
        raise Unavailable("torch not installed")
    cuda = cuda_available()
    fell_back = False  # GPUs, but too few for the ranks: the CPU instead (backend auto)
    if requested == "nccl" and not cuda:
        raise Unavailable("no CUDA device (backend nccl)")
    if cuda:
        import torch

        if torch.cuda.device_count() < local:
            if requested == "nccl":
                raise Unavailable(f"no CUDA device for every local rank: {local} needed, "
                                  f"{torch.cuda.device_count()} found")
            cuda = False
            fell_back = True
    device = "cuda" if cuda else "cpu"
    backend = "nccl" if cuda and requested != "gloo" else "gloo"
    cfg = {"layers": layers, "hidden": hidden, "heads": heads, "seq_len": seq_len, "vocab": vocab,
           "global_batch": global_batch, "steps": steps, "warmup_steps": warmup, "lr": lr, "seed": seed,
           "device": device, "backend": backend, "scaling_sweep": sweep, "checkpoint": checkpoint,
           "timeout_s": timeout_s, "local_ranks": local, "checkpoint_dir": checkpoint_dir,
           "fell_back_to_cpu": fell_back, "peak_device": peak_device}
    me = node_name()
    ranks = [(node_rank * local + l, l) for l in range(local)]
    ctx.log(f"training: {world_size} ranks ({local} on this node, node {node_rank}), {device}, backend {backend}, "
            f"L={layers} d={hidden} h={heads} T={seq_len} V={vocab} B={global_batch}")
    if local == 1:
        from benchrun.suites._training_worker import worker

        docs = [worker(ranks[0][0], 0, world_size, init_method if world_size > 1 else None, cfg, me,
                       t_process_start=ctx.t_process_start)]
    else:
        docs = _run_local_ranks(ranks, world_size, init_method, cfg, me, ctx.t_process_start, timeout_s)
    errors = [f"rank {d['rank_id']}: {d['error']}" for d in docs if "error" in d]
    if errors:
        why = "; ".join(errors)
        record_progress(ctx, docs, cfg, run_case(cfg, world_size, gang.nodes if gang else 1), why)
        raise RuntimeError(why)
    # The measured window (the result's measured_window, which the replicate's telemetry summaries are
    # taken over): this node's ranks' measured steps on the wall clock, warm-up, model build, imports
    # and the checkpoint left out. Without it the summaries covered the whole process: 12 s of start-up
    # at 0 % GPU beside 8 s of steps at 95 % read 38 % (found in review).
    for d in docs:
        window = d.get("measured_window_unix")
        if window:
            ctx.measured_spans.append((float(window[0]), float(window[1])))
    ctx.context.update({"device": device, "backend": backend, "world_size": world_size, "nodes": gang.nodes if gang else 1,
                        "ranks_per_node": local, "torch_version": docs[0].get("torch_version"),
                        "gpu_name": docs[0].get("gpu_name"), "dtype": "bfloat16 autocast" if cuda else "float32",
                        "node_name": me, "cpu_threads": docs[0].get("cpu_threads"),
                        "process_start_from": ctx.t_process_start_source})
    if node_rank != 0:
        return  # node 0 reports the replicate; this node's ranks are in rank 0's gathered samples
    report(ctx, docs[0], cfg, world_size, gang.nodes if gang else 1, peak_declared, target_tokens)


def run_case(cfg: dict[str, Any], world_size: int, nodes: int) -> str:
    """The replicate's case: the shapes, the gang, and the device and backend (a gloo run on the CPU
    is not a replicate of an NCCL run on GPUs)."""
    return (f"L{cfg['layers']}-d{cfg['hidden']}-T{cfg['seq_len']}-B{cfg['global_batch']}-"
            f"n{nodes}x{world_size // nodes},{cfg['device']},{cfg['backend']}")


def record_progress(ctx: SuiteContext, rank_docs: list[dict[str, Any]], cfg: dict[str, Any], case: str,
                    why: str) -> None:
    """A replicate that stops short (it then fails): how far it got, as ``context.training_progress``
    and, where a rank counted its steps, the metrics ``training_steps_done`` and
    ``training_reliability_pct`` in the failed replicate's result. The gang's steps are the fewest any
    reporting rank finished (a synchronous step needs every rank); a rank without a document (killed)
    is not counted, so the figure is at most what the gang did."""
    planned = int(cfg["warmup_steps"]) + int(cfg["steps"])
    done = [int(d["steps_done"]) for d in rank_docs
            if isinstance(d, dict) and isinstance(d.get("steps_done"), int) and not isinstance(d.get("steps_done"), bool)]
    steps = min(done) if done else None
    ctx.context["training_progress"] = {
        "steps_planned": planned, "steps_done": steps, "ranks_reporting": len(done), "ranks": len(rank_docs),
        "stopped": why, "basis": "the fewest steps any reporting rank finished, warm-up included"
                                 + ("" if done else "; no rank reached its first step or left a count")}
    if steps is None:
        return
    ctx.add_metric("training_steps_done", float(steps), "steps", "higher", case=case)
    ctx.add_metric("training_reliability_pct", 100.0 * steps / planned, "%", "higher", case=case)


def report(ctx: SuiteContext, doc: dict[str, Any], cfg: dict[str, Any], world_size: int, nodes: int,
           peak_declared: float | None, target_tokens: int | None) -> None:
    """Metrics and the training row from global rank 0's document (every rank's samples)."""
    warmup = cfg["warmup_steps"]
    verdict = doc.get("diverged") or loss_verdict(doc["losses"])
    ranks = doc["ranks"]
    path = ctx.raw_file("ranks", "json")
    from benchrun.fsio import atomic_write_json

    atomic_write_json(path, {"unit": "s", "warmup_steps": warmup, "ranks": ranks})
    ctx.samples["ranks"] = str(path.relative_to(ctx.run_dir))
    case = run_case(cfg, world_size, nodes)
    if verdict:
        ctx.context["losses"] = doc["losses"]
        if doc.get("diverged"):  # stopped short; a loss that did not fall ran every step (re-review)
            record_progress(ctx, ranks, cfg, case, verdict)
        raise RuntimeError(verdict)
    per_rank = np.array([r["step_times_s"][warmup:] for r in ranks])  # rank x measured step
    step = per_rank.max(axis=0)  # a synchronous step ends when its slowest rank does
    tokens_per_step = cfg["global_batch"] * cfg["seq_len"]
    # Throughput over the wall-clock window of the measured steps (the longest rank's: the
    # steps are synchronous, so the gang's tokens took that long), not the sum of the timed
    # regions, which leaves out each step's batch, copy, loss all_reduce and .item().
    wall = max(float(r["measured_wall_s"]) for r in ranks)
    tps = tokens_per_step * len(step) / wall
    flops_tok = model_flops_per_token(cfg["layers"], cfg["hidden"], cfg["seq_len"], cfg["vocab"])
    gpu = doc.get("gpu_name")
    known, unknown_why = peak_lookup(gpu) if gpu else (None, None)
    # A declared peak is of the device peak_device names (a GPU's unless it says cpu): a run on another device
    # gets no MFU against it (found in review: a CPU run, no CUDA at all or backend auto with fewer GPUs than
    # ranks, reported 0.002 % "of" 989.4 TFLOP/s, labelled declared, in a primary metric).
    peak_device = cfg.get("peak_device", "cuda")
    mismatch = peak_declared is not None and cfg["device"] != peak_device
    peak = None if mismatch else (peak_declared if peak_declared is not None else known)
    peak_source = (f"declared ({peak_device})" if peak and peak_declared is not None
                   else (f"known peak of {gpu}" if peak else None))
    mfu = 100.0 * flops_tok * tps / (peak * 1e12 * world_size) if peak else None
    why_cpu = ("fell back to the CPU (backend auto with fewer GPUs than ranks)" if cfg.get("fell_back_to_cpu")
               else f"ran on {cfg['device']}")
    mfu_reason = None if peak else (
        f"unavailable: the run {why_cpu}; the declared peak is a {peak_device} peak (parameter peak_device; "
        f"set peak_device: {cfg['device']} when peak_tflops_per_device is this device's)" if mismatch else
        f"unavailable: no declared peak for {gpu or cfg['device']} " + (f"and {unknown_why} " if unknown_why else "")
        + "(set parameter peak_tflops_per_device)")
    scaling = None
    scaling_reason = "not asked (parameter scaling_sweep)" if not cfg["scaling_sweep"] else None
    single = doc.get("single_rank")
    if cfg["scaling_sweep"] and world_size == 1:
        scaling_reason = "world size 1: nothing to scale"
    elif single:
        t1 = np.array(single["step_times_s"][warmup:])
        tps1 = (cfg["global_batch"] // world_size) * cfg["seq_len"] * len(t1) / float(single["measured_wall_s"])
        scaling = 100.0 * tps / (world_size * tps1)
    ttfs = max(r["time_to_first_step_s"] for r in ranks if r.get("time_to_first_step_s") is not None) \
        if any(r.get("time_to_first_step_s") is not None for r in ranks) else None
    time_to_train_h = target_tokens / tps / 3600.0 if target_tokens else None
    reliability = 100.0 * doc["steps_done"] / doc["steps_planned"]  # 100 here: a run that stops short failed above
    p50, p99 = percentile(step.tolist(), 50), percentile(step.tolist(), 99)

    ctx.add_metric("step_time_p50_ms", p50 * 1e3, "ms", "lower", case=case)
    ctx.add_metric("step_time_p99_ms", p99 * 1e3, "ms", "lower", case=case, samples=int(step.size))
    ctx.add_metric("tokens_per_second", tps, "tokens/s", "higher", case=case)
    ctx.add_metric("tokens_per_second_per_device", tps / world_size, "tokens/s", "higher", case=case)
    ctx.add_metric("model_flops_per_token", float(flops_tok), "FLOP", "lower", case=case)
    if mfu is not None:
        ctx.add_metric("mfu_pct", mfu, "%", "higher", case=case)
    if scaling is not None:
        ctx.add_metric("scaling_efficiency_pct", scaling, "%", "higher", case=case)
    if ttfs is not None:
        ctx.add_metric("time_to_first_step_s", ttfs, "s", "lower", case=case)
    if time_to_train_h is not None:
        ctx.add_metric("time_to_train_hours", time_to_train_h, "h", "lower", case=case)
    ctx.add_metric("training_reliability_pct", reliability, "%", "higher", case=case)
    if "checkpoint_save_s" in doc:
        ctx.add_metric("checkpoint_save_s", doc["checkpoint_save_s"], "s", "lower", case=case)
        ctx.add_metric("checkpoint_restore_s", doc["checkpoint_restore_s"], "s", "lower", case=case)
        ctx.add_metric("checkpoint_bytes", float(doc["checkpoint_bytes"]), "bytes", "lower", case=case)
    peaks = [r["peak_memory_bytes"] for r in ranks if r.get("peak_memory_bytes")]
    peak_mem = max(peaks) if peaks else None
    if peak_mem is not None:
        ctx.add_metric("peak_memory_bytes", float(peak_mem), "bytes", "lower", case=case)
    for r, times in zip(ranks, per_rank):
        ctx.add_metric("rank_step_time_p50_ms", float(np.median(times)) * 1e3, "ms", "lower", case=case,
                       rank_id=r["rank_id"], node_name=r.get("node_name"))
    slowest = int(np.argmax(np.median(per_rank, axis=1)))
    losses = doc["losses"]
    ctx.training.append({
        "case": case, "world_size": world_size, "nodes": nodes, "ranks_per_node": world_size // nodes,
        "device": cfg["device"], "dtype": "bfloat16" if cfg["device"] == "cuda" else "float32",
        "backend": cfg["backend"], "layers": cfg["layers"], "hidden": cfg["hidden"], "heads": cfg["heads"],
        "seq_len": cfg["seq_len"], "vocab": cfg["vocab"], "global_batch": cfg["global_batch"],
        "measured_steps": int(len(step)), "warmup_steps": warmup,
        "step_time_p50_ms": p50 * 1e3, "step_time_p99_ms": p99 * 1e3,
        "tokens_per_second": tps, "tokens_per_second_per_device": tps / world_size, "measured_wall_s": wall,
        "model_params_matmul": model_params_matmul(cfg["layers"], cfg["hidden"], cfg["vocab"]),
        "model_flops_per_token": flops_tok, "flops_formula": FLOPS_FORMULA,
        "mfu_pct": mfu, "mfu_reason": mfu_reason, "peak_tflops_used": peak, "peak_source": peak_source,
        "scaling_efficiency_pct": scaling, "scaling_reason": scaling_reason,
        "time_to_first_step_s": ttfs, "time_to_train_hours": time_to_train_h, "target_tokens": target_tokens,
        "training_reliability_pct": reliability,
        "checkpoint_save_s": doc.get("checkpoint_save_s"), "checkpoint_restore_s": doc.get("checkpoint_restore_s"),
        "checkpoint_bytes": doc.get("checkpoint_bytes"),
        "checkpoint_restore_cold": (doc.get("checkpoint_restore_read") or {}).get("cold"),
        "peak_memory_bytes": peak_mem, "peak_memory_kind": doc.get("peak_memory_kind"),
        "loss_first": float(np.mean(losses[:3])), "loss_last": float(np.mean(losses[-3:])),
        "slowest_rank": int(ranks[slowest]["rank_id"]), "slowest_rank_node": ranks[slowest].get("node_name"),
    })
    if "checkpoint_restore_read" in doc:
        ctx.context["checkpoint_restore_read"] = doc["checkpoint_restore_read"]
    ctx.context["throughput_window"] = {
        "basis": "wall-clock window of the measured steps, the longest rank's (batch, host-to-device copy, "
                 "loss all_reduce and .item() included); step_time_* are forward+backward+optimizer only",
        "measured_wall_s": wall, "measured_steps": int(len(step)), "timed_s": float(step.sum()),
        "timed_share": float(step.sum()) / wall if wall > 0 else None}
    ctx.context.update({"flops_formula": FLOPS_FORMULA, "losses": losses, "mfu": mfu_reason or f"peak {peak} TFLOP/s ({peak_source})"})
    ctx.log(f"training {case}: step p50 {p50 * 1e3:.1f} ms, {tps:.0f} tokens/s, loss {losses[0]:.3f} -> {losses[-1]:.3f}"
            + (f", MFU {mfu:.2f}%" if mfu is not None else f", MFU {mfu_reason}")
            + (f", scaling {scaling:.1f}%" if scaling is not None else ""))


if __name__ == "__main__":
    main(run)
