"""The ``dataloader`` suite: reading a generated parquet dataset in batches (pyarrow; torch DataLoader).

Parameters:
    rows         rows in the generated dataset (default 200,000)
    batch_size   rows per batch (default 1024)
    workers      torch DataLoader worker processes (default 2; 0 loads in the main process)
    files        parquet files the dataset is split into (default max(workers, 1) * 2)
    feature_dim  float32 features per row (default 64)

The dataset (``id`` int64, ``label`` int32, ``features`` fixed-size list of float32) is
written with pyarrow to a temporary directory, read, then removed. The files were just
written, so they are read from the page cache: this measures decoding, batching and
hand-off to the training loop, not the disk (the ``fio`` suite measures the disk).

Cases: ``pyarrow`` (``ParquetFile.iter_batches`` in this process, columns to numpy) and,
when torch is installed, ``torch_workers=<n>`` (an ``IterableDataset`` sharding the files
over ``DataLoader`` workers, batches as tensors). Metrics per case: ``samples_per_s``,
``mb_per_s`` (decoded array bytes, MB = 1e6), ``p99_batch_latency_ms`` (gap between
successive batches reaching the loop, the first excluded) and ``first_batch_latency_ms``
(from before ``iter(loader)``, so worker start-up and file open are included, as they are
in the wall time samples_per_s is of). Every batch gap is kept in
``raw/<run_id>_dataloader_r<k>_batches.json``.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, NamedTuple

import numpy as np

from benchrun.suites._common import (
    Params,
    check_known,
    int_param,
    percentile,
    torch_present,
    usable_cpus,
)
from benchrun.suites._runtime import SuiteContext, Unavailable, main
from benchrun.fsio import atomic_write_json

# the parameters the suite takes (checked when it starts, and by `benchrun validate`)
PARAMETERS = ("rows", "batch_size", "workers", "files", "feature_dim")


def write_dataset(directory: Path, rows: int, files: int, feature_dim: int, row_group: int) -> list[Path]:
    """Write ``rows`` rows over ``files`` parquet files; returns their paths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(rows)
    paths = []
    bounds = np.linspace(0, rows, files + 1).astype(np.int64)
    for i in range(files):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        n = hi - lo
        feats = rng.standard_normal(n * feature_dim, dtype=np.float32)
        table = pa.table({
            "id": pa.array(np.arange(lo, hi, dtype=np.int64)),
            "label": pa.array(rng.integers(0, 1000, n, dtype=np.int32)),
            "features": pa.FixedSizeListArray.from_arrays(pa.array(feats), feature_dim),
        })
        path = directory / f"part-{i:05d}.parquet"
        pq.write_table(table, path, row_group_size=max(1, row_group))
        paths.append(path)
    return paths


def read_batches(paths: list[Path], batch_size: int, feature_dim: int) -> Iterator[dict[str, np.ndarray]]:
    """Batches of numpy arrays (id, label, features[n, dim]) from the files, in order."""
    import pyarrow.parquet as pq

    for path in paths:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=batch_size):
            feats = batch.column("features").values.to_numpy(zero_copy_only=False).reshape(-1, feature_dim)
            yield {
                "id": batch.column("id").to_numpy(),
                "label": batch.column("label").to_numpy(),
                "features": feats,
            }


def _consume(batches: Iterator[Any], to_numpy: bool, start: float | None = None) -> tuple[list[float], int, int, int]:
    """Drain ``batches``; returns (gaps between arrivals in s, rows, decoded bytes, sum of ids).
    The first gap runs from ``start`` (default: now)."""
    gaps: list[float] = []
    rows = nbytes = id_sum = 0
    last = time.perf_counter() if start is None else start
    for batch in batches:
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
        arrays = {k: (v.numpy() if to_numpy else v) for k, v in batch.items()}
        rows += len(arrays["id"])
        nbytes += sum(a.nbytes for a in arrays.values())
        id_sum += int(arrays["id"].sum())
    return gaps, rows, nbytes, id_sum


def time_loader(loader: Any, to_numpy: bool) -> dict[str, Any]:
    """Read all of ``loader`` (any iterable of batches) on one clock started before ``iter(loader)``,
    so the first batch's latency and the wall time include what iter() does: a DataLoader
    starts its worker processes there."""
    t0 = time.perf_counter()
    gaps, rows, nbytes, id_sum = _consume(iter(loader), to_numpy=to_numpy, start=t0)
    return {"wall_s": time.perf_counter() - t0, "gaps": gaps, "rows": rows, "bytes": nbytes, "id_sum": id_sum}


BATCH_TIMEOUT_S = 60.0  # the longest wait for one batch from a DataLoader worker
# A unix socket's path holds at most 107 bytes (Linux sun_path); DataLoader workers hand tensors
# over one that multiprocessing makes under the temp directory (pymp-XXXXXXXX/listener-XXXXXXXX,
# 33 bytes more). A longer TMPDIR makes every batch fail in the workers ("AF_UNIX path too long").
SOCKET_PATH_MAX = 107
SOCKET_SUFFIX = len("/pymp-xxxxxxxx/listener-xxxxxxxx")


def check_socket_dir(workers: int) -> None:
    """Refuse, before measuring, a temp directory whose path is too long for the workers' socket."""
    tmp = tempfile.gettempdir()
    if workers and len(tmp.encode()) + SOCKET_SUFFIX > SOCKET_PATH_MAX:
        raise RuntimeError(
            f"dataloader: the temp directory {tmp!r} is {len(tmp.encode())} bytes long; torch DataLoader workers "
            f"pass tensors over a unix socket under it, whose path may hold {SOCKET_PATH_MAX} bytes: set TMPDIR "
            f"to a path of at most {SOCKET_PATH_MAX - SOCKET_SUFFIX} bytes (or workers: 0)")


def _torch_loader(paths: list[Path], batch_size: int, feature_dim: int, workers: int) -> Any:
    import torch
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    class ParquetBatches(IterableDataset):  # type: ignore[type-arg]
        def __iter__(self) -> Iterator[dict[str, Any]]:
            info = get_worker_info()
            mine = paths if info is None else paths[info.id :: info.num_workers]
            for batch in read_batches(mine, batch_size, feature_dim):
                # np.require copies only arrays arrow left read-only; torch wants writable memory
                yield {k: torch.from_numpy(np.require(v, requirements="W")) for k, v in batch.items()}

    # a worker that lost a batch (torch's fd-passing can fail under load: seen once, a traceback in
    # the worker's queue feeder and the loader waiting forever) is an error after BATCH_TIMEOUT_S,
    # not a suite killed at its timeout with nothing said
    return DataLoader(ParquetBatches(), batch_size=None, num_workers=workers,
                      timeout=BATCH_TIMEOUT_S if workers else 0)


class Settings(NamedTuple):
    """The suite's parameters, parsed."""

    rows: int
    batch_size: int
    workers: int
    files: int
    feature_dim: int


def settings(ctx: Params) -> Settings:
    """The parameters, checked (ParamError): the suite's first step, and ``benchrun validate``'s."""
    check_known(ctx, PARAMETERS)
    rows = int_param(ctx, "rows", 200_000, minimum=1, maximum=2_000_000_000)
    batch_size = int_param(ctx, "batch_size", 1024, minimum=1, maximum=10_000_000)
    workers = int_param(ctx, "workers", 2, minimum=0, maximum=256)
    files = int_param(ctx, "files", max(workers, 1) * 2, minimum=1, maximum=100_000)
    return Settings(rows, batch_size, workers, files, int_param(ctx, "feature_dim", 64, minimum=1, maximum=65_536))


def run(ctx: SuiteContext) -> None:
    """Generate the dataset, read it with each loader, report throughput and batch latency."""
    rows, batch_size, workers, files, feature_dim = settings(ctx)
    try:
        import pyarrow
    except ImportError:
        raise Unavailable("pyarrow not installed") from None
    has_torch = torch_present()

    directory = Path(tempfile.mkdtemp(prefix="benchrun-dataloader-"))
    results: dict[str, dict[str, Any]] = {}
    try:
        t0 = time.perf_counter()
        paths = write_dataset(directory, rows, files, feature_dim, row_group=batch_size)
        on_disk = sum(p.stat().st_size for p in paths)
        ctx.context.update({"pyarrow_version": pyarrow.__version__, "rows": rows, "files": files,
                            "feature_dim": feature_dim, "dataset_bytes_on_disk": on_disk,
                            "generate_s": time.perf_counter() - t0, "usable_cpus": usable_cpus(),
                            "page_cache": "warm (dataset just written)"})
        expected_ids = rows * (rows - 1) // 2

        with ctx.measuring():  # the telemetry summaries' window (the dataset's generation left out)
            results["pyarrow"] = time_loader(read_batches(paths, batch_size, feature_dim), to_numpy=False)
        if has_torch:
            import torch

            ctx.context["torch_version"] = torch.__version__
            check_socket_dir(workers)
            loader = _torch_loader(paths, batch_size, feature_dim, workers)
            with ctx.measuring():
                results[f"torch_workers={workers}"] = time_loader(loader, to_numpy=True)
        else:
            ctx.context["torch_version"] = None
            ctx.context["torch_case"] = "skipped: torch not installed"
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    for case, r in results.items():
        if r["rows"] != rows or r["id_sum"] != expected_ids:
            raise RuntimeError(f"dataloader {case}: read {r['rows']} rows (id sum {r['id_sum']}), wrote {rows}")
        steady = r["gaps"][1:] or r["gaps"]
        ctx.add_metric("samples_per_s", rows / r["wall_s"], "samples/s", "higher", case=case)
        ctx.add_metric("mb_per_s", r["bytes"] / r["wall_s"] / 1e6, "MB/s", "higher", case=case)
        ctx.add_metric("p99_batch_latency_ms", percentile(steady, 99) * 1e3, "ms", "lower", case=case,
                       samples=len(steady))
        ctx.add_metric("first_batch_latency_ms", r["gaps"][0] * 1e3, "ms", "lower", case=case)
        ctx.log(f"dataloader {case}: {rows / r['wall_s']:.0f} samples/s, {r['bytes'] / r['wall_s'] / 1e6:.1f} MB/s, "
                f"{len(r['gaps'])} batches")
    path = atomic_write_json(ctx.raw_file("batches", "json"),
                             {"unit": "s", "batch_gaps": {c: r["gaps"] for c, r in results.items()}})
    ctx.samples["batches"] = str(path.relative_to(ctx.run_dir))


if __name__ == "__main__":
    main(run)
