"""What a sweep is asked to do and what it returns: load points, the sweep's configuration, its result."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.loadgen import client as http
from benchrun.loadgen.content import ContentConfig
from benchrun.loadgen.metrics import SLO, Pricing, VerdictPolicy
from benchrun.loadgen.workload import MixBucket

LOAD_MODELS = ("closed_loop", "open_loop")
ARRIVALS = ("poisson", "constant")
SERVER_KINDS = ("auto", "vllm", "sglang", "tgi", "openai")


@dataclass(frozen=True)
class LoadPoint:
    """One point of a sweep: a concurrency (closed loop) or a rate in req/s (open loop)."""

    load_model: str
    offered_load: float
    arrival: str = "poisson"

    def __post_init__(self) -> None:
        if self.load_model not in LOAD_MODELS:
            raise ValueError(f"load model {self.load_model!r} is not one of {LOAD_MODELS}")
        if self.arrival not in ARRIVALS:
            raise ValueError(f"arrival {self.arrival!r} is not one of {ARRIVALS}")
        if not self.offered_load > 0:
            raise ValueError(f"offered load {self.offered_load!r} must be positive")
        if self.load_model == "closed_loop" and int(self.offered_load) != self.offered_load:
            raise ValueError(f"concurrency {self.offered_load!r} must be an integer")

    @property
    def label(self) -> str:
        """``c=8`` or ``rate=4`` (the ``point`` value of rows and summaries)."""
        if self.load_model == "closed_loop":
            return f"c={int(self.offered_load)}"
        return f"rate={self.offered_load:g}"


@dataclass(frozen=True)
class SweepConfig:
    """Everything a sweep needs; picklable so worker processes receive it whole."""

    url: str
    model: str
    mix: tuple[MixBucket, ...]
    points: tuple[LoadPoint, ...]
    requests_per_point: int | None = None
    duration_s: float | None = None
    warmup: int | None = None  # None: one request per stream (see warmup_for)
    seed: int = 0
    workers: int = 1
    api: str = "completions"
    request_timeout_s: float = 60.0
    ignore_eos: bool | None = None  # None: as the server kind says (auto: as the probe found)
    include_usage: bool = True
    slo: SLO | None = None
    pricing: Pricing | None = None
    policy: VerdictPolicy = field(default_factory=VerdictPolicy)
    synthetic: bool = False
    server_kind: str = "auto"
    prompt_token_overhead: int = 0  # the server's prompt tokens for an empty prompt (set by the probe)
    preconnect: bool = True  # open every stream's connection before the measured phase's go time
    content: ContentConfig | None = None  # a dataset, a tokenizer, shared prefixes, sessions (loadgen.content)

    def check(self) -> None:
        """Raise BenchrunError naming the bad field."""
        if not self.points:
            raise BenchrunError("give at least one load point (--concurrency or --rate)")
        if (self.requests_per_point is None) == (self.duration_s is None):
            raise BenchrunError("give exactly one of requests per point (--requests) or duration (--duration)")
        if self.requests_per_point is not None and self.requests_per_point < 1:
            raise BenchrunError("requests per point must be >= 1")
        if self.duration_s is not None and not self.duration_s > 0:
            raise BenchrunError("duration must be > 0 seconds")
        if self.server_kind not in SERVER_KINDS:
            raise BenchrunError(f"server kind {self.server_kind!r} is not one of {', '.join(SERVER_KINDS)} (--server-kind)")
        if self.warmup is not None and self.warmup < 0:
            raise BenchrunError("warmup must be >= 0")
        if self.workers < 1:
            raise BenchrunError("workers must be >= 1")
        if not self.request_timeout_s > 0:
            raise BenchrunError("request timeout must be > 0 seconds")
        if not self.model:
            raise BenchrunError("model is empty; give the served model name (--model)")
        try:
            http.Endpoint.from_url(self.url, self.api)
        except http.EndpointError as exc:
            raise BenchrunError(str(exc)) from None
        if self.content is not None:
            self.content.check()


@dataclass
class SweepResult:
    """Measured request rows, per point x bucket summaries, capacity and context."""

    rows: list[dict[str, Any]]
    summaries: list[dict[str, Any]]
    capacity_at_slo: float | None
    context: dict[str, Any]


def warmup_for(cfg: SweepConfig, point: LoadPoint) -> int:
    """Warm-up requests of a point: as given, else one per stream (closed loop: the concurrency;
    open loop: one second of arrivals, at least one and at most 64)."""
    if cfg.warmup is not None:
        return cfg.warmup
    if point.load_model == "closed_loop":
        return int(point.offered_load)
    return max(1, min(64, math.ceil(point.offered_load)))
