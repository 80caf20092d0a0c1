"""The ``allreduce`` suite: torch.distributed all-reduce over N local processes, per rank.

Parameters:
    world_size  processes (ranks), at least 1 (default 2). A world of 1 (one GPU) proves the
                path (group, NCCL communicator, a reduction on the device) but measures no
                fabric: its busbw is not reported (2(n-1)/n is 0 for n = 1)
    sizes       message sizes in bytes, float32 tensors, rounded down to a multiple of 4
                (default [1024, 65536, 1048576, 16777216])
    iterations  timed all_reduces per size, after ``warmup`` untimed ones (default 20, 2)
    backend     auto | gloo | nccl (default auto: nccl when CUDA has a device for every
                rank, else gloo on CPU tensors)
    timeout_s   the whole group's deadline, seconds (default 300)
    slow_rank, slow_ms   inject a straggler: that rank sleeps slow_ms before every timed
                call (default none); for drills and the straggler tests

Across nodes (``nodes > 1`` in the spec): every node runs this module with the launcher's
rendezvous variables, forks its ``LOCAL_WORLD_SIZE`` ranks with global ranks
``NODE_RANK × LOCAL_WORLD_SIZE + local``, and all of them meet at ``MASTER_ADDR:MASTER_PORT``;
rank 0 gathers every rank's samples over the group and node 0 reports. ``world_size`` is
then nodes × gpusPerNode (the parameter is refused). Per-rank metrics carry ``node_name``,
and per size a rank whose arrival lag is a robust outlier among the ranks (|MAD z| ≥ 3.5,
at least 3 ranks) is recorded as that replicate's straggler with its node
(``straggler_rank_lag_us``, ``context.stragglers``); the run-level verdict (repeated across
replicates) is the ``distributed_straggler`` playbook's, which names ``stragglerNodes``.
Cross-node arrival lags compare wall clocks, so they are only as good as the nodes' clock
sync (NTP/PTP); on one host they share one clock.

Ranks are processes (``multiprocessing`` fork for gloo, spawn for nccl) meeting on a free
loopback TCP port.
Each records, per iteration, its wall-clock start (``time.time()``, shared by processes
on one host) and its time inside ``all_reduce``. From those, per size
(``case`` = ``bytes=<n>,<device>,<backend>``: ``bytes=1024,cuda,nccl``, ``bytes=1024,cpu,gloo``; a gloo
run on CPU tensors, backend auto's fallback included, is not a replicate of an NCCL run on GPUs):

* ``p50_latency_us`` / ``p99_latency_us`` — per iteration, last completion minus last
  arrival over ranks (the collective's time once every rank has joined), percentiles over
  iterations;
* ``algbw_gb_per_s`` = bytes / p50 latency (GB = 1e9 bytes): the median of single calls,
  each timed on its own between host synchronisations (every rank syncs its device before
  and after the call; the tensor is refilled between calls, untimed). nccl-tests instead
  divides by the average time of back-to-back calls timed together, so per-call launch and
  sync costs weigh more here and small sizes read lower than nccl-tests' algbw;
  ``busbw_gb_per_s`` = algbw × 2(n−1)/n (nccl-tests' all-reduce bus factor);
* ``rank_p50_time_us`` with ``rank_id`` — each rank's own median time in the call
  (waiting for late ranks included): rank-level visibility;
* ``slowest_rank_arrival_lag_us`` with ``rank_id`` — the rank that arrives last (largest
  median lag behind the first arrival) and that lag. A straggler spends *less* time in
  the call than the ranks waiting for it, so it is found by arrival, not by duration.

Every rank × iteration sample is kept in ``raw/<run_id>_allreduce_r<k>_ranks.json``. The
measured window (the telemetry summaries') runs from the first timed call's start to the last
one's end over this node's ranks: interpreter start-up, group set-up and warm-up are left out.
A rank that fails leaves its traceback in the log and in
``raw/<run_id>_allreduce_r<k>_rank<r>_traceback.txt`` (``context.rank_tracebacks``); ranks
the suite then stops are named ``stopped after rank N failed`` in the reason.
No torch → ``unavailable: torch not installed``; nccl asked without enough CUDA devices
→ ``unavailable: no CUDA device ...``.
"""

from __future__ import annotations

import json
import multiprocessing
from multiprocessing.connection import wait
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from benchrun.suites._common import (
    check_known,
    ParamError,
    Params,
    choice_param,
    cuda_device_nodes,
    float_param,
    int_list_param,
    int_param,
    percentile,
    torch_present,
    world_size_param,
)
from benchrun.suites._gang import Gang, gang_from_env, node_name
from benchrun.suites._runtime import SuiteContext, Unavailable, main
from benchrun.fsio import atomic_write_bytes, atomic_write_json

# the parameters the suite takes (checked when it starts, and by `benchrun validate`)
PARAMETERS = ("world_size", "sizes", "iterations", "warmup", "backend", "timeout_s", "slow_rank", "slow_ms")
# the metrics the suite may report (`benchrun validate` checks a primary names one; reporting another fails)
METRICS = ("p50_latency_us", "p99_latency_us", "algbw_gb_per_s", "busbw_gb_per_s", "rank_p50_time_us",
           "slowest_rank_arrival_lag_us", "straggler_rank_lag_us")


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cuda_device_count() -> int:
    if not cuda_device_nodes():
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_backend(requested: str, world_size: int) -> str:
    """gloo or nccl for ``requested`` (auto|gloo|nccl); Unavailable when nccl cannot run."""
    if requested == "gloo":
        return "gloo"
    devices = _cuda_device_count()
    if requested == "nccl":
        if devices == 0:
            raise Unavailable("no CUDA device (backend nccl)")
        if devices < world_size:
            raise Unavailable(f"no CUDA device for every rank: nccl needs {world_size}, found {devices}")
        return "nccl"
    return "nccl" if devices >= world_size else "gloo"


Z_MIN = 3.5
MIN_RANKS_FOR_Z = 3


def mad_outlier(values: list[float], min_excess: float = 0.0) -> tuple[int, float] | None:
    """The index of the largest value when it is a robust outlier above the others, with its z.

    z = (x − median) / (1.4826 · MAD) ≥ Z_MIN and x − median ≥ ``min_excess``; None below
    MIN_RANKS_FOR_Z values. When MAD is 0 any larger value has z = inf.
    """
    if len(values) < MIN_RANKS_FOR_Z:
        return None
    arr = np.asarray(values, dtype=float)
    med = float(np.median(arr))
    mad = 1.4826 * float(np.median(np.abs(arr - med)))
    top = int(np.argmax(arr))
    excess = float(arr[top]) - med
    if excess <= 0 or excess < min_excess:
        return None
    z = excess / mad if mad > 0 else float("inf")
    return (top, z) if z >= Z_MIN else None


def summarise(rank_docs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Per size: iteration latencies, per-rank median times and arrival lags (see module docstring)."""
    by_size: dict[int, dict[str, Any]] = {}
    sizes = sorted({r["size_bytes"] for d in rank_docs for r in d["records"]})
    for size in sizes:
        start = np.array([[r["start_unix"] for r in d["records"] if r["size_bytes"] == size] for d in rank_docs])
        elapsed = np.array([[r["elapsed_s"] for r in d["records"] if r["size_bytes"] == size] for d in rank_docs])
        end = start + elapsed
        latency = end.max(axis=0) - start.max(axis=0)  # per iteration
        lag = start - start.min(axis=0)  # rank x iteration
        lag_median = np.median(lag, axis=1)
        by_size[size] = {
            "latency_s": latency.tolist(),
            "rank_p50_s": np.median(elapsed, axis=1).tolist(),
            "arrival_lag_p50_s": lag_median.tolist(),
            "slowest_rank": int(np.argmax(lag_median)),
        }
    return by_size


def keep_tracebacks(ctx: SuiteContext, docs: list[dict[str, Any]]) -> None:
    """Each failed rank's traceback (from its own file, about to be removed) into the log and into
    ``raw/<run_id>_allreduce_r<k>_rank<r>_traceback.txt``, named in ``context.rank_tracebacks``."""
    kept: dict[str, str] = {}
    for d in docs:
        text = d.get("traceback")
        if not text:
            continue
        ctx.log(f"allreduce: rank {d['rank_id']} failed:\n{text.rstrip()}")
        path = ctx.raw_file(f"rank{d['rank_id']}_traceback", "txt")
        try:
            atomic_write_bytes(path, text.encode("utf-8"))
        except OSError as exc:  # the log has it; the rank's own error must still reach the reason
            ctx.log(f"allreduce: could not keep rank {d['rank_id']}'s traceback in {path.name}: {exc}")
            continue
        kept[str(d["rank_id"])] = str(path.relative_to(ctx.run_dir))
    if kept:
        ctx.context["rank_tracebacks"] = kept


def rank_problems(docs: list[dict[str, Any]], procs: list[Any], killed: set[str]) -> list[str]:
    """What stopped each rank without samples: its own error first; a rank this process ended after
    another failed is ``stopped after rank N failed``, not an exit code of its own."""
    failed = [d["rank_id"] for d, p in zip(docs, procs)
              if "error" in d or (p.name not in killed and p.exitcode not in (None, 0))]
    problems = [f"rank {d['rank_id']}: {d['error']}" for d in docs if "error" in d]
    for d, p in zip(docs, procs):
        if "records" in d or "error" in d:
            continue
        if p.name in killed and failed:
            which = ", ".join(map(str, failed))
            problems.append(f"rank {d['rank_id']}: stopped after rank{'s' if len(failed) > 1 else ''} {which} failed")
        else:
            problems.append(f"rank {d['rank_id']}: exit code {p.exitcode}, no samples")
    return problems


class Settings(NamedTuple):
    """The suite's parameters, parsed (``world_size`` None: a gang's, not known before it starts)."""

    world_size: int | None
    slow_rank: int
    slow_s: float
    sizes: list[int]
    iterations: int
    warmup: int
    requested: str
    timeout_s: float


def settings(ctx: Params, gang: Gang | None = None) -> Settings:
    """The parameters, checked (ParamError): the suite's first step, and ``benchrun validate``'s."""
    check_known(ctx, PARAMETERS)
    world_size = world_size_param(ctx, gang, 2)
    most_rank = world_size - 1 if world_size is not None else None
    slow_rank = int_param(ctx, "slow_rank", -1, minimum=0, maximum=most_rank) if "slow_rank" in ctx.params else -1
    slow_s = float_param(ctx, "slow_ms", 0.0, minimum=0.0) / 1000.0 if "slow_ms" in ctx.params else 0.0
    sizes = int_list_param(ctx, "sizes", [1024, 65536, 1048576, 16777216], minimum=4)
    sizes = sorted(dict.fromkeys(s - s % 4 for s in sizes))
    if max(sizes) > 2**34:
        raise ParamError(f"parameter sizes: {max(sizes)} bytes is more than 16 GiB")
    return Settings(world_size, slow_rank, slow_s, sizes,
                    iterations=int_param(ctx, "iterations", 20, minimum=1, maximum=1_000_000),
                    warmup=int_param(ctx, "warmup", 2, minimum=0, maximum=1_000_000),
                    requested=choice_param(ctx, "backend", "auto", ("auto", "gloo", "nccl")),
                    timeout_s=float_param(ctx, "timeout_s", 300.0))


def run(ctx: SuiteContext) -> None:
    """Spawn the ranks, collect their samples, report latency, bandwidth and the slowest rank."""
    gang = gang_from_env()
    world_size, slow_rank, slow_s, sizes, iterations, warmup, requested, timeout_s = settings(ctx, gang)
    assert world_size is not None  # with a gang the gang's, else the parameter (world_size_param)
    if not torch_present():
        raise Unavailable("torch not installed")
    local = gang.local_world_size if gang else world_size
    backend = resolve_backend(requested, local)

    from benchrun.suites._allreduce_worker import worker

    out_dir = Path(tempfile.mkdtemp(prefix="benchrun-allreduce-"))
    if gang is not None:
        init_method, node_rank, me = gang.init_method, gang.node_rank, gang.node_name
    else:
        init_method, node_rank, me = f"tcp://127.0.0.1:{free_loopback_port()}", 0, node_name()
    ranks = [node_rank * local + l for l in range(local)]
    # gloo: fork after importing torch once here (each rank would otherwise spend a second
    # of CPU importing it); nccl: spawn, since CUDA must not be initialised before a fork.
    method = "fork" if backend == "gloo" and "fork" in multiprocessing.get_all_start_methods() else "spawn"
    if method == "fork":
        import torch.distributed  # noqa: F401 - imported before forking so the ranks inherit it
    mp = multiprocessing.get_context(method)
    procs = [mp.Process(target=worker, name=f"rank{r}",
                        args=(r, world_size, init_method, backend, sizes, iterations, warmup, str(out_dir), timeout_s,
                              l, me, slow_rank, slow_s, gang is not None))
             for l, r in enumerate(ranks)]
    ctx.log(f"allreduce: {world_size} ranks ({local} on node {node_rank}), backend {backend}, {init_method}, "
            f"sizes {sizes}")
    t0 = time.monotonic()
    killed: set[str] = set()  # ranks this process ended
    try:
        for p in procs:
            p.start()
        deadline = t0 + timeout_s + 60  # the group's own timeout fires first; this catches a wedged rank
        pending = list(procs)
        while pending and time.monotonic() < deadline:
            wait([p.sentinel for p in pending], timeout=max(0.0, deadline - time.monotonic()))
            pending = [p for p in pending if p.exitcode is None]
            if any(p.exitcode not in (None, 0) for p in procs):
                break  # one rank failed: the others would only wait for it until the group timeout
        hung = [p.name for p in procs if p.is_alive() and all(q.exitcode in (None, 0) for q in procs)]
        for p in procs:
            if p.is_alive():
                killed.add(p.name)
                p.kill()
                p.join(5)
        docs = []
        for r in ranks:
            f = out_dir / f"rank{r}.json"
            docs.append(json.loads(f.read_text(encoding="utf-8")) if f.exists() else {"rank_id": r})
        keep_tracebacks(ctx, docs)  # before the folder, and the ranks' own files, go
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    wall = time.monotonic() - t0
    problems = rank_problems(docs, procs, killed)
    if hung:
        problems.insert(0, f"killed after {timeout_s + 60:.0f}s: {', '.join(hung)}")
    if problems:
        raise RuntimeError("; ".join(problems))
    # the telemetry summaries' window: the timed calls of this node's ranks, from the first start to the last end
    timed = [(r["start_unix"], r["start_unix"] + r["elapsed_s"]) for d in docs for r in d["records"]]
    if timed:
        ctx.measured_spans.append((min(a for a, _ in timed), max(b for _, b in timed)))
    if gang is not None:
        if node_rank != 0:
            ctx.context.update({"node_rank": node_rank, "ranks": ranks, "node_name": me})
            return  # node 0 reports the replicate from rank 0's gathered samples
        docs = docs[0]["all_ranks"]

    first = docs[0]
    ctx.context.update({"backend": backend, "world_size": world_size, "device": first.get("device"),
                        "torch_version": first.get("torch_version"), "nccl_version": first.get("nccl_version"),
                        "gpu_name": first.get("gpu_name"),
                        "transport": f"{init_method} (init), {gang.nodes if gang else 1} node(s)",
                        "nodes": gang.nodes if gang else 1, "injected_slow_rank": slow_rank if slow_rank >= 0 else None,
                        "dtype": "float32", "warmup": warmup, "iterations": iterations,
                        "init_s_per_rank": [d.get("init_s") for d in docs], "group_wall_s": wall,
                        "start_method": method,
                        "latency_definition": "per iteration: max over ranks of end - max over ranks of start"})
    samples = [{"rank_id": d["rank_id"], "pid": d["pid"], "hostname": d["hostname"], "node_name": d.get("node_name"), **r}
               for d in docs for r in d["records"]]
    node_of = {d["rank_id"]: d.get("node_name") for d in docs}
    path = atomic_write_json(ctx.raw_file("ranks", "json"), {"unit": "s", "samples": samples})
    ctx.samples["ranks"] = str(path.relative_to(ctx.run_dir))

    factor = 2.0 * (world_size - 1) / world_size
    device = str(first.get("device") or ("cuda" if backend == "nccl" else "cpu")).split(":")[0]
    slowest: dict[str, int] = {}
    stragglers: list[dict[str, Any]] = []
    for size, s in summarise(docs).items():
        case = f"bytes={size},{device},{backend}"
        p50 = percentile(s["latency_s"], 50)
        algbw = size / p50 / 1e9
        ctx.add_metric("p50_latency_us", p50 * 1e6, "us", "lower", case=case)
        ctx.add_metric("p99_latency_us", percentile(s["latency_s"], 99) * 1e6, "us", "lower", case=case,
                       samples=len(s["latency_s"]))
        ctx.add_metric("algbw_gb_per_s", algbw, "GB/s", "higher", case=case)
        if world_size > 1:
            ctx.add_metric("busbw_gb_per_s", algbw * factor, "GB/s", "higher", case=case)
        for rank, t in enumerate(s["rank_p50_s"]):
            ctx.add_metric("rank_p50_time_us", t * 1e6, "us", "lower", case=case, rank_id=rank,
                           node_name=node_of.get(rank))
        worst = s["slowest_rank"]
        slowest[case] = worst
        ctx.add_metric("slowest_rank_arrival_lag_us", s["arrival_lag_p50_s"][worst] * 1e6, "us", "lower",
                       case=case, rank_id=worst, node_name=node_of.get(worst))
        # Late by a robust outlier's margin *and* by at least half the collective's own p50
        # latency (the playbook's LAG_SHARE_MIN): microsecond jitter among ranks is not a straggler.
        outlier = mad_outlier(s["arrival_lag_p50_s"], min_excess=0.5 * p50)
        if outlier is not None:
            rank, z = outlier
            stragglers.append({"case": case, "rank_id": rank, "node_name": node_of.get(rank), "robust_z": z,
                               "arrival_lag_us": s["arrival_lag_p50_s"][rank] * 1e6})
            ctx.add_metric("straggler_rank_lag_us", s["arrival_lag_p50_s"][rank] * 1e6, "us", "lower", case=case,
                           rank_id=rank, node_name=node_of.get(rank))
        ctx.log(f"allreduce {case}: p50 {p50 * 1e6:.1f} us, algbw {algbw:.3f} GB/s, busbw {algbw * factor:.3f} GB/s, "
                f"slowest rank {worst}")
    ctx.context["slowest_rank_by_case"] = slowest
    ctx.context["stragglers"] = stragglers
    ctx.context["straggler_rule"] = (f"per size: the rank whose median arrival lag has robust z >= {Z_MIN} "
                                     f"(MAD over ranks, at least {MIN_RANKS_FOR_Z} ranks)")


if __name__ == "__main__":
    main(run)
