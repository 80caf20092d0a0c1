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
from benchrun.urlsafe import has_credentials, redact

LOAD_MODELS = ("closed_loop", "open_loop", "trace")
ARRIVALS = ("poisson", "constant", "gamma")
SERVER_KINDS = ("auto", "vllm", "sglang", "tgi", "openai")


@dataclass(frozen=True)
class LoadPoint:
    """One point of a sweep: a concurrency (closed loop) or a rate in req/s (open loop)."""

    load_model: str
    offered_load: float
    arrival: str = "poisson"
    # gamma arrivals: shape = burstiness, mean gap 1/rate (as vllm bench serve); 1 is Poisson,
    # below 1 burstier, above 1 more regular
    burstiness: float = 1.0
    speedup: float = 1.0  # trace replay: the trace's times divided by this

    def __post_init__(self) -> None:
        if self.load_model not in LOAD_MODELS:
            raise ValueError(f"load model {self.load_model!r} is not one of {LOAD_MODELS}")
        if self.arrival not in ARRIVALS:
            raise ValueError(f"arrival {self.arrival!r} is not one of {ARRIVALS}")
        if not self.offered_load > 0:
            raise ValueError(f"offered load {self.offered_load!r} must be positive")
        if self.load_model == "closed_loop" and int(self.offered_load) != self.offered_load:
            raise ValueError(f"concurrency {self.offered_load!r} must be an integer")
        if not (0 < self.burstiness < float("inf")):
            raise ValueError(f"burstiness {self.burstiness!r} must be a positive number (1 = Poisson)")
        if self.burstiness != 1.0 and self.arrival != "gamma":
            raise ValueError(f"burstiness {self.burstiness:g} needs gamma arrivals (arrival 'gamma')")
        if not (0 < self.speedup < float("inf")):
            raise ValueError(f"speedup {self.speedup!r} must be a positive number (2 = twice as fast)")

    @property
    def label(self) -> str:
        """``c=8`` or ``rate=4`` (the ``point`` value of rows and summaries)."""
        if self.load_model == "closed_loop":
            return f"c={int(self.offered_load)}"
        if self.load_model == "trace":
            return "trace" if self.speedup == 1.0 else f"trace x{self.speedup:g}"
        if self.arrival == "gamma":
            return f"rate={self.offered_load:g},burstiness={self.burstiness:g}"
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
    # renames the words of synthetic prompts (workload.salt_permutation): the seed fixes what is
    # drawn, the salt what is sent, so replicates that differ in it share no prompt a server's
    # prefix cache could hit; None sends the seed's words (the CLI and the suites set one per run)
    prompt_salt: str | None = None
    workers: int = 1
    api: str | None = None  # completions | chat; None: as the URL's path says, else completions
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
    # trace replay (load model "trace"): the entries, replayed at their own times (benchrun.loadgen.trace)
    trace: tuple[Any, ...] | None = None
    # load stages: stop the sweep at the first point whose goodput (request_goodput with an SLO,
    # else completed req/s) falls more than ``goodput_drop`` below the best point before it
    stop_when_goodput_falls: bool = False
    goodput_drop: float = 0.1
    # the server's own Prometheus endpoint, scraped every interval during each point
    server_metrics_url: str | None = None
    server_metrics_interval_s: float = 1.0

    def __post_init__(self) -> None:
        # a dataset's prompts and a trace's are sent as written: a salt given for them renames
        # nothing, and the config (recorded in the result) says what was sent, so it holds none
        if self.prompt_salt is not None and (self.trace or (self.content is not None and self.content.dataset)):
            object.__setattr__(self, "prompt_salt", None)

    def check(self) -> None:
        """Raise BenchrunError naming the bad field."""
        if not self.points:
            raise BenchrunError("give at least one load point (--concurrency or --rate)")
        is_trace = any(p.load_model == "trace" for p in self.points)
        if is_trace and not self.trace:
            raise BenchrunError("a trace point needs a trace (--trace FILE)")
        if is_trace and self.content is not None:
            # the replay sends the trace's own prompts (benchrun.loadgen.trace); content would be
            # reported as used (a dataset bucket, a tokenizer's counts) while none of it was sent
            raise BenchrunError("a trace replay sends the trace's own prompts: a dataset, tokenizer, sessions or shared "
                                "prefixes (--dataset, --tokenizer, --session-turns, --shared-prefix) cannot apply to it")
        if is_trace and self.requests_per_point is not None and self.duration_s is not None:
            raise BenchrunError("a trace replay takes at most one of --requests (its first N) or --duration (its first S seconds)")
        if not is_trace and (self.requests_per_point is None) == (self.duration_s is None):
            raise BenchrunError("give exactly one of requests per point (--requests) or duration (--duration)")
        if not 0 < self.goodput_drop < 1:
            raise BenchrunError("goodput drop must lie in (0, 1) (e.g. 0.1: stop when goodput falls 10 % below the best)")
        if self.server_metrics_url is not None and has_credentials(self.server_metrics_url):
            # the scraper sends none, and the URL is kept in the summary's context and the samples' file
            raise BenchrunError(f"--server-metrics {redact(self.server_metrics_url)!r} carries credentials "
                                "(user:password@, or an '@' that may be part of them); remove them")
        if self.server_metrics_url is not None and not self.server_metrics_url.startswith(("http://", "https://")):
            raise BenchrunError(f"--server-metrics {self.server_metrics_url!r} is not an http(s) URL (e.g. http://127.0.0.1:8000/metrics)")
        if not self.server_metrics_interval_s > 0:
            raise BenchrunError("server metrics interval must be > 0 seconds (--server-metrics-interval)")
        if self.requests_per_point is not None and self.requests_per_point < 1:
            raise BenchrunError("requests per point must be >= 1 (--requests; a spec: requests_per_point)")
        if self.duration_s is not None and not self.duration_s > 0:
            raise BenchrunError("duration must be > 0 seconds (--duration; a spec: duration_s)")
        if self.server_kind not in SERVER_KINDS:
            raise BenchrunError(f"server kind {self.server_kind!r} is not one of {', '.join(SERVER_KINDS)} (--server-kind)")
        if self.warmup is not None and self.warmup < 0:
            raise BenchrunError("warmup must be >= 0 (--warmup)")
        if self.workers < 1:
            raise BenchrunError("workers must be >= 1 (--workers)")
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
    # the server's own metrics scraped during each point (benchrun.loadgen.servermetrics.sample_rows)
    server_samples: list[dict[str, Any]] = field(default_factory=list)


def warmup_for(cfg: SweepConfig, point: LoadPoint) -> int:
    """Warm-up requests of a point: as given, else one per stream (closed loop: the concurrency;
    open loop: one second of arrivals, at least one and at most 64)."""
    if cfg.warmup is not None:
        return cfg.warmup
    if point.load_model == "trace":
        return 0  # a trace is replayed as recorded; connections are still opened before the go time
    if point.load_model == "closed_loop":
        return int(point.offered_load)
    return max(1, min(64, math.ceil(point.offered_load)))
