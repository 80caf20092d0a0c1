"""Built-in benchmark suites, each a module run as ``python -m benchrun.suites.<name>``.

Every suite reads its invocation from the environment (see :mod:`benchrun.suites._runtime`),
reports metrics over Dagster Pipes when launched by it, and writes one result document per
replicate (:mod:`benchrun.suites.result`). This package imports only the standard library,
numpy, dagster-pipes and, lazily, torch and pyarrow: the same image runs it in a pod.

Micro and component suites kept here:

=============  ==========================================================================
gemm           dense matrix-multiply TFLOP/s and call-time percentiles (BLAS / CUDA)
membw          STREAM copy/scale/add/triad GB/s
fio            storage bandwidth, IOPS and p99 latency by the real fio
allreduce      torch.distributed all-reduce latency, algbw/busbw, per-rank times
dataloader     parquet batch reading (pyarrow; torch DataLoader workers) samples/s, MB/s
job_startup    launch → process start → first Pipes message → first measurement
=============  ==========================================================================
"""

from __future__ import annotations

# name -> module run with ``python -m`` (the planner maps a suite name to its argv with this).
MICRO_COMPONENT_SUITES: dict[str, str] = {
    name: f"benchrun.suites.{name}"
    for name in ("gemm", "membw", "fio", "allreduce", "dataloader", "job_startup")
}
