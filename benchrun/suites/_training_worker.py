"""One rank of the ``training`` suite: a small decoder-only transformer trained on seeded tokens.

Runs in the suite's own process (one rank per node) or in a process it forks (several local
ranks). Imports torch lazily; the suite module stays importable without it. Returns (or
writes, for a forked rank) a JSON-able document; global rank 0's holds every rank's samples.
"""

from __future__ import annotations

import ctypes
import datetime as _dt
import json
import math
import mmap
import os
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from benchrun.fsio import atomic_write_bytes
from benchrun.suites._common import usable_cpus

# what each rank contributes to global rank 0's document (gathered, or its own alone)
RANK_KEYS = ("rank_id", "node_name", "pid", "step_times_s", "losses", "time_to_first_step_s", "rendezvous_s",
             "steps_done", "peak_memory_bytes", "measured_wall_s")


def build_model(layers: int, hidden: int, heads: int, seq_len: int, vocab: int) -> Any:
    """The decoder: token + position embeddings, ``layers`` pre-LN blocks, an untied LM head.

    Each block: LayerNorm → fused QKV (hidden → 3·hidden) → causal scaled-dot-product
    attention → output projection (hidden → hidden); LayerNorm → MLP hidden → 4·hidden →
    hidden with GELU. Matmul weights per block: 12·hidden²; the head: hidden·vocab.
    """
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(hidden)
            self.qkv = nn.Linear(hidden, 3 * hidden)
            self.proj = nn.Linear(hidden, hidden)
            self.ln2 = nn.LayerNorm(hidden)
            self.fc1 = nn.Linear(hidden, 4 * hidden)
            self.fc2 = nn.Linear(4 * hidden, hidden)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(a)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class Decoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, hidden)
            self.pos = nn.Embedding(seq_len, hidden)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(hidden)
            self.head = nn.Linear(hidden, vocab, bias=False)

        def forward(self, idx: torch.Tensor) -> torch.Tensor:
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    return Decoder()


def synthetic_batch(gen: Any, batch: int, seq_len: int, vocab: int, device: Any) -> tuple[Any, Any]:
    """Seeded tokens with structure to learn: x[t+1] = (5·x[t] + 7 + noise) mod vocab, noise ∈ {0, 1}.

    Uniform random tokens would give a loss that cannot fall below ln(vocab); this chain
    has entropy ln 2 per token, so a model that learns shows a falling loss.

    Vectorised (it runs inside each measured step's wall time): x[t+1] = 5^(t+1)·x[0] + B[t]
    mod vocab with B[t] = Σ_{s≤t} 5^(t-s)·(7 + noise[s]), both prefix scans done by doubling
    (log2(seq_len) whole-tensor operations, not a Python loop over positions); the tokens are
    the ones the step-by-step recurrence gives.
    """
    import torch

    x0 = torch.randint(0, vocab, (batch,), generator=gen)
    b = torch.randint(0, 2, (batch, seq_len), generator=gen) + 7  # 7 + noise: each step's increment
    powers = torch.full((seq_len,), 5 % vocab, dtype=torch.long)  # becomes 5^(t+1) mod vocab
    d = 1
    while d < seq_len:
        # inclusive scans: b[t] += 5^d·b[t-d] (the affine steps composed), powers[t] *= powers[t-d]
        b[:, d:] = (b[:, d:] + pow(5, d, vocab) * b[:, :-d]) % vocab
        powers[d:] = (powers[d:] * powers[:-d]) % vocab
        d *= 2
    x = torch.empty(batch, seq_len + 1, dtype=torch.long)
    x[:, 0] = x0
    x[:, 1:] = (powers * x0[:, None] + b) % vocab
    x = x.to(device)
    return x[:, :-1], x[:, 1:]


def _train(model: Any, opt: Any, cfg: dict[str, Any], device: Any, rank: int, micro_batch: int, *,
           dist_loss: bool, t_process_start: float | None, progress: dict[str, Any] | None = None) -> dict[str, Any]:
    """warmup + steps optimizer steps; per step its time (warm-up flagged) and the loss.

    ``progress`` (the rank's document), when given, holds ``steps_planned`` and ``steps_done``
    as the steps go, so a rank that stops on an exception still says how far it got.

    ``step_times_s`` times forward, backward and the optimizer step; ``measured_wall_s`` is
    the wall-clock window of the measured (post-warm-up) steps, everything each step does
    included (its batch, the host-to-device copy, the loss all_reduce and ``.item()``): the
    throughput figures are of this window."""
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(int(cfg["seed"]) * 1000003 + rank)
    cuda = device.type == "cuda"
    autocast = torch.autocast(device_type="cuda", dtype=torch.bfloat16) if cuda else None
    vocab = cfg["vocab"]
    times, losses = [], []
    first_step_s = None
    diverged = None
    total = cfg["warmup_steps"] + cfg["steps"]
    if progress is not None:
        progress.update(steps_planned=total, steps_done=0)
    window_start = None
    window_start_unix = None
    for step in range(total):
        if step == cfg["warmup_steps"]:
            window_start = time.perf_counter()  # the previous step ended in .item(): nothing in flight
            window_start_unix = time.time()
        x, y = synthetic_batch(gen, micro_batch, cfg["seq_len"], vocab, device)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        if autocast is not None:
            with autocast:
                logits = model(x)
        else:
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        if progress is not None:
            progress["steps_done"] = len(times)
        if step == 0 and t_process_start is not None:
            first_step_s = time.time() - t_process_start
        # Outside the timed region: the mean loss over ranks (and so one verdict for all of
        # them: a rank that stopped alone would leave the others waiting in DDP).
        value = loss.detach().float().reshape(1)
        if dist_loss:
            import torch.distributed as dist

            dist.all_reduce(value)
            value /= dist.get_world_size()
        v = float(value.item())
        losses.append(v)
        if not math.isfinite(v):
            diverged = f"loss diverged: {v} at step {step}"
            break
    wall = time.perf_counter() - window_start if window_start is not None else None
    # the same window on the wall clock: the suite's measured window (ctx.measured_spans), which the
    # replicate's telemetry summaries are taken over (warm-up, model build and imports left out)
    window = [window_start_unix, window_start_unix + wall] if window_start_unix is not None and wall is not None else None
    return {"step_times_s": times, "losses": losses, "time_to_first_step_s": first_step_s, "diverged": diverged,
            "steps_done": len(times), "steps_planned": total, "measured_wall_s": wall,
            "measured_steps_in_window": max(0, len(times) - cfg["warmup_steps"]), "measured_window_unix": window}


def page_residency(fd: int, size: int) -> tuple[int, int] | None:
    """(pages of the file in the page cache, pages of the file), by mincore(2) on a read-only
    mapping that touches none of them; None where that cannot be asked."""
    if size <= 0:
        return (0, 0)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            return None
        try:
            pages = -(-size // mmap.PAGESIZE)
            vec = (ctypes.c_ubyte * pages)()
            if libc.mincore(addr, size, vec) != 0:
                return None
            return sum(b & 1 for b in bytes(vec)), pages
        finally:
            libc.munmap(addr, size)
    except (OSError, AttributeError):
        return None


def evict_from_page_cache(path: Path) -> dict[str, Any]:
    """Ask the kernel to drop ``path``'s pages from the page cache (posix_fadvise DONTNEED; the
    file is fsync'd first, so none is dirty) and say how much of it is still resident, so a
    timed read of it is from the device, or is said not to be (tmpfs keeps files in memory)."""
    out: dict[str, Any] = {"eviction": None, "resident_pages": None, "pages": None, "cold": None}
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            out["eviction"] = "posix_fadvise(POSIX_FADV_DONTNEED) requested"
        except (AttributeError, OSError) as exc:
            out["eviction"] = f"not requested: posix_fadvise unavailable ({type(exc).__name__}: {exc})"
        residency = page_residency(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)
    if residency is not None:
        out["resident_pages"], out["pages"] = residency
        out["cold"] = residency[0] == 0
    return out


def _checkpoint(model: Any, opt: Any, cfg: dict[str, Any], build: Any, device: Any) -> dict[str, Any]:
    """Save model + optimizer state to a local file (fsync'd), restore it into fresh objects, compare.

    Before the restore the file's pages are dropped from the page cache
    (:func:`evict_from_page_cache`): a restore just after a save would otherwise read memory.
    ``checkpoint_restore_read`` says whether the read was cold (mincore found none resident).
    The file goes in ``cfg["checkpoint_dir"]`` (a temporary directory inside it), else the
    system's temporary directory."""
    import torch

    module = getattr(model, "module", model)
    with tempfile.TemporaryDirectory(prefix="benchrun-ckpt-", dir=cfg.get("checkpoint_dir")) as tmp:
        path = Path(tmp) / "checkpoint.pt"
        t0 = time.perf_counter()
        with path.open("wb") as f:
            torch.save({"model": module.state_dict(), "optimizer": opt.state_dict()}, f)
            f.flush()
            os.fsync(f.fileno())
        save_s = time.perf_counter() - t0
        size = path.stat().st_size
        fresh = build().to(device)
        fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=cfg["lr"])
        read = evict_from_page_cache(path)
        read["directory"] = tmp
        t0 = time.perf_counter()
        state = torch.load(path, map_location=device, weights_only=True)
        fresh.load_state_dict(state["model"])
        fresh_opt.load_state_dict(state["optimizer"])
        restore_s = time.perf_counter() - t0
    same = all(torch.equal(a, b) for a, b in zip(module.state_dict().values(), fresh.state_dict().values()))
    if not same:
        raise RuntimeError("checkpoint restore: restored parameters differ from the saved ones")
    return {"checkpoint_save_s": save_s, "checkpoint_restore_s": restore_s, "checkpoint_bytes": size,
            "checkpoint_restore_read": read}


def worker(rank: int, local_rank: int, world_size: int, init_method: str | None, cfg: dict[str, Any],
           node_name: str, out_file: str | None = None, t_process_start: float | None = None) -> dict[str, Any]:
    """Train as global ``rank`` of ``world_size``; rank 0's document gathers every rank's samples."""
    doc: dict[str, Any] = {"rank_id": rank, "local_rank": local_rank, "node_name": node_name, "pid": os.getpid()}
    try:
        import torch

        doc["torch_version"] = torch.__version__
        cuda = cfg["device"] == "cuda"
        if cuda:
            torch.cuda.set_device(local_rank)
            device = torch.device("cuda", local_rank)
            doc["gpu_name"] = torch.cuda.get_device_name(local_rank)
        else:
            device = torch.device("cpu")
            # Ranks on one host share its cores (the launcher sets OMP_NUM_THREADS for its
            # nodes, as torchrun does); oversubscribed threads would time the scheduler. The
            # share is of the usable CPUs (affinity and the cgroup CPU quota: a pod limited to
            # 4 CPUs sees the node's in its mask), and caps OMP_NUM_THREADS too.
            share = max(1, usable_cpus() // cfg["local_ranks"])
            threads = os.environ.get("OMP_NUM_THREADS")
            asked = int(threads) if threads and threads.isdigit() and int(threads) > 0 else None
            n = min(asked, share) if asked is not None else share
            torch.set_num_threads(n)
            doc["cpu_threads"] = {"threads": int(torch.get_num_threads()), "usable_cpu_share": share,
                                  "omp_num_threads": asked}
        distributed = world_size > 1
        if distributed:
            import torch.distributed as dist

            t0 = time.perf_counter()
            dist.init_process_group(cfg["backend"], init_method=init_method, rank=rank, world_size=world_size,
                                    timeout=_dt.timedelta(seconds=cfg["timeout_s"]))
            doc["rendezvous_s"] = time.perf_counter() - t0

        def build() -> Any:
            torch.manual_seed(int(cfg["seed"]))  # identical initial weights on every rank
            return build_model(cfg["layers"], cfg["hidden"], cfg["heads"], cfg["seq_len"], cfg["vocab"])

        model = build().to(device)
        if distributed:
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model, device_ids=[local_rank] if cuda else None)
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"])
        micro = cfg["global_batch"] // world_size
        run = _train(model, opt, cfg, device, rank, micro, dist_loss=distributed, t_process_start=t_process_start,
                     progress=doc)
        doc.update(run)
        # Peak memory of this rank after the measured steps: the CUDA caching allocator's peak
        # on a GPU, else the process's peak resident set (Linux reports KiB).
        if cuda:
            doc["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated(device))
            doc["peak_memory_kind"] = "cuda_max_memory_allocated"
        else:
            import resource

            doc["peak_memory_bytes"] = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024
            doc["peak_memory_kind"] = "process_max_rss"
        if run["diverged"] is None:
            if cfg["scaling_sweep"] and distributed:
                # Weak scaling: rank 0 alone, same per-device batch, no gradient exchange;
                # the other ranks wait at the barrier.
                if rank == 0:
                    single = build().to(device)
                    single_opt = torch.optim.AdamW(single.parameters(), lr=cfg["lr"])
                    doc["single_rank"] = _train(single, single_opt, cfg, device, 0, micro, dist_loss=False,
                                                t_process_start=None)
                    del single, single_opt
                dist.barrier()
            if cfg["checkpoint"] and rank == 0:
                doc.update(_checkpoint(model, opt, cfg, lambda: build(), device))
        if distributed:
            gathered: list[Any] = [None] * world_size
            mine = {k: doc.get(k) for k in RANK_KEYS}
            dist.all_gather_object(gathered, mine)
            doc["ranks"] = gathered
            dist.barrier()
            dist.destroy_process_group()
        else:
            doc["ranks"] = [{k: doc.get(k) for k in RANK_KEYS}]
    except BaseException as exc:  # noqa: BLE001 - reported to the caller through the document
        doc["error"] = f"{type(exc).__name__}: {exc}"
        doc["traceback"] = traceback.format_exc()
    if out_file is not None:
        atomic_write_bytes(Path(out_file), json.dumps(doc).encode("utf-8"))
        if "error" in doc:
            raise SystemExit(1)
    return doc
