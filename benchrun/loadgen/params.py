"""The parameters every serving suite takes (the load generator's), apart from ``loadgen.suite`` so a
suite module and ``benchrun validate`` read them without importing the load generator."""

from typing import Any, Mapping

COMMON_PARAMS = (
    "endpoint", "api", "model", "mix", "warmup", "seed", "workers", "request_timeout_s", "arrival",
    "ignore_eos", "server_kind", "refserver", "verdict", "tokenizer", "session_turns", "think_time_s", "shared_prefix",
    "server_metrics", "server_metrics_interval_s", "load_pods", "prompt_salt",
)
# the metrics a serving suite may report: each point's headline (benchrun.loadgen.metrics.HEADLINE, in its
# order) and a sweep's capacity_at_slo (`benchrun validate` checks a primary names one; reporting another fails)
HEADLINE_METRICS = ("ttft_ms", "p50_latency_ms", "p99_latency_ms", "decode_ms_per_token", "tokens_per_second",
                    "request_throughput_rps", "jitter_ms", "request_goodput", "slo_attainment", "cost_per_request_usd",
                    "cost_per_token_usd")
SERVING_METRICS = HEADLINE_METRICS + ("capacity_at_slo",)


def workload_conflicts(params: Mapping[str, Any], workload: Mapping[str, Any]) -> list[str]:
    """Common parameters that would replace the frozen workload (CONTRACT: ``model`` and the mix are
    workload keys, pinned in the workload digest): a ``model`` other than ``workload.model`` was sent
    in every request with the digest unchanged, and a ``mix`` beside ``workload.sequenceLengthMix``
    was dropped unseen (review 2026-12-07). One message each, for the suites' ``conflicts``."""
    out = []
    said, frozen = params.get("model"), (workload or {}).get("model")
    if said is not None and frozen is not None and str(said).strip() != str(frozen).strip():
        out.append(f"parameter model {str(said)!r} is not workload.model {str(frozen)!r}: the workload is frozen (its "
                   "digest names workload.model); leave the parameter out, or change workload.model (and "
                   "comparison.controls.fixed.model)")
    if params.get("mix") is not None and (workload or {}).get("sequenceLengthMix"):
        out.append("parameter mix would be ignored: workload.sequenceLengthMix is the mix (frozen); leave the "
                   "parameter out, or change workload.sequenceLengthMix")
    return out
