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
over ``DataLoader`` workers, batches as tensors). Metrics per case:

* ``samples_per_s`` / ``mb_per_s`` (decoded array bytes, MB = 1e6): the steady rate, the rows
  (bytes) of every batch after the first over the time from the first batch's arrival to the
  last's. Start-up (``iter(loader)``: a DataLoader starts its workers there; the first file
  open) is left out of it: at 20,000 rows in batches of 1024 the first batch took 60 % of
  the read, and the whole-read rate said 74k samples/s against ~195k steady;
* ``wall_samples_per_s``: every row over the whole read, start-up included;
* ``first_batch_latency_ms``: from before ``iter(loader)`` to the first batch, so worker
  start-up and file open are in it;
* ``p99_batch_latency_ms``: the gap between successive batches reaching the loop, the
  first batch excluded.

A read of one batch has no steady part: ``samples_per_s``, ``mb_per_s`` and
``p99_batch_latency_ms`` are then absent (never a number of the first batch in their
place) and ``context.metrics_left_out[<case>]`` says which and why. Every batch gap, and
each read's time, is kept in ``raw/<run_id>_dataloader_r<k>_batches.json``. The measured
window (the telemetry summaries') is the reads alone: the torch import and the loader's
construction come before the first read.
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
# the metrics the suite may report (`benchrun validate` checks a primary names one; reporting another fails)
METRICS = ("samples_per_s", "mb_per_s", "p99_batch_latency_ms", "wall_samples_per_s", "first_batch_latency_ms")


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


def _consume(batches: Iterator[Any], to_numpy: bool, start: float | None = None) -> dict[str, Any]:
    """Drain ``batches``; returns gaps between arrivals in s (the first from ``start``, default:
    now), rows, decoded bytes, the sum of ids, and the rows and bytes of the first batch."""
    gaps: list[float] = []
    rows = nbytes = id_sum = first_rows = first_bytes = 0
    last = time.perf_counter() if start is None else start
    for batch in batches:
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
        arrays = {k: (v.numpy() if to_numpy else v) for k, v in batch.items()}
        rows += len(arrays["id"])
        nbytes += sum(a.nbytes for a in arrays.values())
        id_sum += int(arrays["id"].sum())
        if len(gaps) == 1:
            first_rows, first_bytes = rows, nbytes
    return {"gaps": gaps, "rows": rows, "bytes": nbytes, "id_sum": id_sum, "first_rows": first_rows,
            "first_bytes": first_bytes}


def time_loader(loader: Any, to_numpy: bool) -> dict[str, Any]:
    """Read all of ``loader`` (any iterable of batches) on one clock started before ``iter(loader)``,
    so the first batch's latency and the wall time include what iter() does: a DataLoader
    starts its worker processes there."""
    t0 = time.perf_counter()
    r = _consume(iter(loader), to_numpy=to_numpy, start=t0)
    r["wall_s"] = time.perf_counter() - t0
    return r


STEADY = ("samples_per_s", "mb_per_s", "p99_batch_latency_ms")


def case_metrics(r: dict[str, Any]) -> tuple[list[tuple[str, float, str, str, dict[str, Any]]], str | None]:
    """The metrics of one read (:func:`time_loader`'s result) as (name, value, unit, direction,
    keys), and why the steady ones (:data:`STEADY`) are left out, or None when they are not."""
    gaps = r["gaps"]
    out: list[tuple[str, float, str, str, dict[str, Any]]] = [
        ("wall_samples_per_s", r["rows"] / r["wall_s"], "samples/s", "higher", {}),
        ("first_batch_latency_ms", gaps[0] * 1e3, "ms", "lower", {}),
    ]
    steady_s = sum(gaps[1:])
    if len(gaps) < 2 or steady_s <= 0:
        why = (f"{len(gaps)} batch: no batch after the first, so no steady rate or gap between batches"
               if len(gaps) < 2 else "the batches after the first arrived in no measurable time")
        return out, f"{why}; wall_samples_per_s and first_batch_latency_ms cover the whole read"
    steady = gaps[1:]
    out[:0] = [
        ("samples_per_s", (r["rows"] - r["first_rows"]) / steady_s, "samples/s", "higher", {}),
        ("mb_per_s", (r["bytes"] - r["first_bytes"]) / steady_s / 1e6, "MB/s", "higher", {}),
        ("p99_batch_latency_ms", percentile(steady, 99) * 1e3, "ms", "lower", {"samples": len(steady)}),
    ]
    return out, None


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

        loader = None
        if has_torch:  # imported and built before the reads: not inside the measured window
            import torch

            ctx.context["torch_version"] = torch.__version__
            check_socket_dir(workers)
            loader = _torch_loader(paths, batch_size, feature_dim, workers)
        else:
            ctx.context["torch_version"] = None
            ctx.context["torch_case"] = "skipped: torch not installed"
        # the telemetry summaries' window: each read alone (generation, imports, construction left out)
        with ctx.measuring():
            results["pyarrow"] = time_loader(read_batches(paths, batch_size, feature_dim), to_numpy=False)
        if loader is not None:
            with ctx.measuring():
                results[f"torch_workers={workers}"] = time_loader(loader, to_numpy=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)

    left_out: dict[str, dict[str, Any]] = {}
    for case, r in results.items():
        if r["rows"] != rows or r["id_sum"] != expected_ids:
            raise RuntimeError(f"dataloader {case}: read {r['rows']} rows (id sum {r['id_sum']}), wrote {rows}")
        found, why = case_metrics(r)
        for name, value, unit, direction, keys in found:
            ctx.add_metric(name, value, unit, direction, case=case, **keys)
        if why is not None:
            left_out[case] = {"metrics": list(STEADY), "reason": why}
        by = {m[0]: m[1] for m in found}
        steady = (f"{by['samples_per_s']:.0f} samples/s, {by['mb_per_s']:.1f} MB/s steady" if why is None
                  else f"no steady rate ({why})")
        ctx.log(f"dataloader {case}: {steady}, {by['wall_samples_per_s']:.0f} samples/s over the whole read, "
                f"first batch {by['first_batch_latency_ms']:.1f} ms, {len(r['gaps'])} batches")
    if left_out:
        ctx.context["metrics_left_out"] = left_out
    path = atomic_write_json(ctx.raw_file("batches", "json"),
                             {"unit": "s", "batch_gaps": {c: r["gaps"] for c, r in results.items()},
                              "read_s": {c: r["wall_s"] for c, r in results.items()}})
    ctx.samples["batches"] = str(path.relative_to(ctx.run_dir))


if __name__ == "__main__":
    main(run)
