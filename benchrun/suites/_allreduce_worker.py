"""One rank of the ``allreduce`` suite: times torch.distributed all_reduce and writes its samples.

Runs in a process spawned by :mod:`benchrun.suites.allreduce`; it writes one JSON file
(``rank<r>.json``) with every iteration's wall-clock start (``time.time()``, comparable
across processes on one host) and duration, or the error that stopped it.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from benchrun.fsio import atomic_write_bytes


def _write(path: Path, doc: dict[str, Any]) -> None:
    # compact JSON (every iteration of every size); atomic, as the parent reads it
    atomic_write_bytes(path, json.dumps(doc).encode("utf-8"))


def worker(rank: int, world_size: int, init_method: str, backend: str, sizes: list[int], iterations: int,
           warmup: int, out_dir: str, timeout_s: float, local_rank: int | None = None, node_name: str | None = None,
           slow_rank: int = -1, slow_s: float = 0.0, gather: bool = False) -> None:
    """Join the group, then for each size: warm up, barrier, time ``iterations`` all_reduces.

    ``slow_rank`` sleeps ``slow_s`` before each timed call (an injected straggler, for tests
    and drills). With ``gather`` (ranks on several nodes) rank 0's file also holds every
    rank's samples, gathered over the group itself.
    """
    local_rank = rank if local_rank is None else local_rank
    out = Path(out_dir) / f"rank{rank}.json"
    doc: dict[str, Any] = {"rank_id": rank, "pid": os.getpid(), "hostname": socket.gethostname(),
                           "node_name": node_name or socket.gethostname(), "backend": backend,
                           "t_process_start": time.time()}
    try:
        import torch
        import torch.distributed as dist

        doc["torch_version"] = torch.__version__
        if backend == "nccl":
            torch.cuda.set_device(local_rank)  # before the group forms, so NCCL binds this rank to its GPU
        t0 = time.perf_counter()
        dist.init_process_group(backend, init_method=init_method, rank=rank,
                                world_size=world_size, timeout=_dt.timedelta(seconds=timeout_s))
        doc["init_s"] = time.perf_counter() - t0
        if backend == "nccl":
            device = torch.device("cuda", local_rank)
            sync = torch.cuda.synchronize
            doc["gpu_name"] = torch.cuda.get_device_name(local_rank)
            doc["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
        else:
            device = torch.device("cpu")

            def sync() -> None:
                return None

        doc["device"] = str(device)
        records = []
        for size in sizes:
            tensor = torch.ones(size // 4, dtype=torch.float32, device=device)
            for _ in range(warmup):
                dist.all_reduce(tensor)
            sync()
            dist.barrier()
            for i in range(iterations):
                tensor.fill_(1.0)  # keeps values finite and checkable; not timed
                sync()
                if rank == slow_rank:
                    time.sleep(slow_s)  # injected: this rank arrives late at every call
                start = time.time()
                p0 = time.perf_counter()
                dist.all_reduce(tensor)
                sync()
                records.append({"size_bytes": size, "iteration": i, "start_unix": start,
                                "elapsed_s": time.perf_counter() - p0})
            first, last = float(tensor[0]), float(tensor[-1])
            if first != world_size or last != world_size:
                raise RuntimeError(f"all_reduce of ones over {world_size} ranks gave {first}, {last} at {size} bytes")
        doc["records"] = records
        if gather:
            mine = {k: doc.get(k) for k in ("rank_id", "pid", "hostname", "node_name", "records", "init_s", "device",
                                            "torch_version", "nccl_version", "gpu_name")}
            gathered: list[Any] = [None] * world_size
            dist.all_gather_object(gathered, mine)
            if rank == 0:
                doc["all_ranks"] = gathered
        dist.barrier()
        dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - reported to the parent through the file
        doc["error"] = f"{type(exc).__name__}: {exc}"
        doc["traceback"] = traceback.format_exc()
        _write(out, doc)
        raise SystemExit(1) from None
    _write(out, doc)
