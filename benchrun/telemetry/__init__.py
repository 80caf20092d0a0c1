"""Telemetry while suites run: a sampler beside every replicate (psutil, NVML), Prometheus range
queries on clusters, per-replicate summaries, and the rows the warehouse curates from them.

The raw evidence of one replicate is ``raw/<run_id>_<suite>_r<k>_telemetry.parquet``: one row per
(sample time, source, metric, device) in the long form of :data:`benchrun.telemetry.samples.SAMPLE_SCHEMA`.
"""

from benchrun.telemetry.hook import finish_telemetry, flush_prometheus, replicate_telemetry, sample_rate_hz, start_telemetry
from benchrun.telemetry.sampler import Sampler

__all__ = ["Sampler", "finish_telemetry", "flush_prometheus", "replicate_telemetry", "sample_rate_hz", "start_telemetry"]
