"""The body shared by the ``serving_sweep`` and ``serving_workflow`` suites.

Inputs come from the :class:`~benchrun.suites._runtime.SuiteContext`: suite parameters
(``ctx.params``) and the frozen workload (``ctx.workload``: model, sequenceLengthMix,
concurrencyModel, ``slo``, ``pricing``). Without an ``endpoint`` parameter the suite starts
the reference server as a child process on a free loopback port, stops it afterwards and
marks the result ``synthetic``.

Common parameters (:data:`benchrun.loadgen.params.COMMON_PARAMS`): ``endpoint`` (URL), ``api`` (completions |
chat), ``model`` and ``mix`` (compact form) only for a workload without them (beside
workload.model or workload.sequenceLengthMix, the frozen workload's, they are refused), ``warmup``, ``seed``, ``workers``,
``request_timeout_s``, ``arrival`` (poisson | constant, open loop), ``ignore_eos`` (default:
as the server kind says), ``server_kind`` (auto | vllm | sglang | tgi | openai; auto probes once),
``refserver`` (overrides of the reference server's performance model), ``verdict``
(overrides of the verdict thresholds), ``tokenizer`` (a local tokenizer.json or model folder),
``session_turns`` and ``think_time_s`` (multi-turn sessions), ``shared_prefix`` (``N,M,P``:
N prefixes of P tokens with M suffixes each), ``server_metrics`` (the server's Prometheus URL, or
``true`` for the endpoint's own ``/metrics``), ``server_metrics_interval_s`` and ``load_pods`` (N > 1:
the Kubernetes launcher runs the suite as one Indexed Job of N pods that share every point's load,
meet at a start barrier and merge their rows in the artifact store, :mod:`benchrun.loadgen.loadpods`;
needs ``endpoint``; ``workers`` is then per pod) and ``prompt_salt`` (:func:`prompt_salt_of`). ``workload.dataset``
(pinned, sha256 checked) gives the prompts. A parameter the suite does not take is refused
(a typo would otherwise fall back to a default silently). The common parameters are parsed by
one function, :func:`common_settings`, when the suite starts and by ``benchrun validate``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from benchrun.errors import BenchrunError
from benchrun.loadgen.endpoint import Endpoint, EndpointError
from benchrun.loadgen.metrics import HEADLINE, SLO, Pricing, VerdictPolicy
from benchrun.loadgen.output import plot_latency_throughput, write_requests_parquet
from benchrun.loadgen.content import ContentConfig, content_from_options, locate_dataset
from benchrun.loadgen.refserver import Dialect, PerfModel, ServerProcess
from benchrun.loadgen.config import SERVER_KINDS
from benchrun.loadgen.runner import LoadPoint, SweepConfig, SweepResult, run_sweep
from benchrun.loadgen.workload import MixBucket, format_mix, mix_from_workload, parse_mix
from benchrun.suites._common import bool_param, choice_param, float_param, int_param
from benchrun.urlsafe import has_credentials, redact

# Fast synthetic engine for the suites' self-started server: a replicate of the canary
# (c=1 and c=4, 24 requests each, the seed's 512/128 + 1024/256 mix) takes about 2 s.
SUITE_REFSERVER_MODEL = {
    "prefill_ms_per_token": 0.002,
    "decode_base_ms": 0.3,
    "decode_ms_per_seq": 0.01,
    "max_batch": 64,
    "max_batched_tokens": 8192,
}
DEFAULT_MIX = "128/32"
# the self-started reference server keeps a prefix cache, so a session or shared-prefix workload
# reports the hit rate a real server's would; blocks of 4 words, not vLLM's 16 tokens, because the
# shipped conversations' turns are 5-20 words (with 16 no turn would fill a block)
SUITE_REFSERVER_PREFIX_BLOCK = 4
MAX_LOAD_PODS = 64  # pods of one load Job (Indexed Job completions); each may run ``workers`` processes


def content_options(ctx: Any) -> tuple[int | None, float, str | None]:
    """The parameters session_turns, think_time_s and shared_prefix, checked (no file is read)."""
    turns = ctx.params.get("session_turns")
    if turns is not None:
        turns = int_param(ctx, "session_turns", 1, minimum=1, maximum=1000)
    think = 0.0 if ctx.params.get("think_time_s") in (None, 0) else float_param(ctx, "think_time_s", 0.0)
    sp = ctx.params.get("shared_prefix")
    return turns, think, str(sp) if sp is not None else None


def _content_error(ctx: Any, exc: BenchrunError) -> BenchrunError:
    """The content options' error, naming the suite's parameters rather than the CLI's options."""
    return BenchrunError(f"suite {ctx.suite}: {exc}".replace("--session-turns", "session_turns")
                         .replace("--think-time", "think_time_s").replace("--shared-prefix", "shared_prefix"))


def content_inputs(ctx: Any) -> ContentConfig | None:
    """The request content from ``workload.dataset`` and the tokenizer, session_turns,
    think_time_s and shared_prefix (``N,M,P``) parameters."""
    wl = ctx.workload or {}
    ds = wl.get("dataset") or None
    if ds is not None and not (isinstance(ds, dict) and isinstance(ds.get("path"), str)):
        raise BenchrunError("BENCHRUN_WORKLOAD: dataset must be a mapping with path (and format, sha256)")
    turns, think, sp = content_options(ctx)
    tok = ctx.params.get("tokenizer")
    if sp is not None and ds is not None:
        # the shared prefixes are the prompts: the workload's dataset is not read by this suite
        ctx.context["dataset_not_used"] = "shared_prefix builds this suite's prompts; workload.dataset is not read"
        ds = None
    try:
        content = content_from_options(Path(ds["path"]) if ds else None, str(ds.get("format") or "auto") if ds else "auto",
                                       Path(str(tok)) if tok is not None else None, turns, think, sp)
    except BenchrunError as exc:
        raise _content_error(ctx, exc) from None
    if content is not None and ds and ds.get("sha256"):
        sha = str(ds["sha256"])
        content = dataclasses.replace(content, dataset=locate_dataset(str(ds["path"]), sha), dataset_sha256=sha)
    if content is not None:
        content.check()
    return content


def workload_inputs(ctx: Any) -> tuple[str, list[MixBucket], str, SLO | None, Pricing | None, dict[str, Any]]:
    """(model, mix, load model, slo, pricing, notes) from the workload and parameters."""
    wl = ctx.workload or {}
    notes: dict[str, Any] = {}
    try:
        if wl.get("sequenceLengthMix"):
            mix = mix_from_workload(wl["sequenceLengthMix"])
        elif ctx.params.get("mix"):
            mix = parse_mix(str(ctx.params["mix"]))
        else:
            mix = parse_mix(DEFAULT_MIX)
            notes["mix"] = f"no workload.sequenceLengthMix given; default {DEFAULT_MIX}"
        slo = SLO.from_dict(wl.get("slo"))
        pricing = Pricing.from_dict(wl.get("pricing"))
    except ValueError as exc:
        raise BenchrunError(f"BENCHRUN_WORKLOAD: {exc}") from None
    model = str(ctx.params.get("model") or wl.get("model") or "benchrun-synthetic")
    load_model = str(wl.get("concurrencyModel") or "").strip()
    if load_model and load_model not in ("closed_loop", "open_loop"):
        raise BenchrunError(f"workload.concurrencyModel {load_model!r} is not closed_loop or open_loop")
    return model, mix, load_model, slo, pricing, notes


@dataclasses.dataclass(frozen=True)
class CommonSettings:
    """The common parameters of a serving suite, parsed and checked (:func:`common_settings`)."""

    endpoint: str | None  # None: the suite starts the reference server
    perf: PerfModel | None  # that server's performance model (SUITE_REFSERVER_MODEL + refserver); None with an endpoint
    api: str | None  # None: as the endpoint's path says, else completions
    warmup: int | None  # None: one request per stream (loadgen.config.warmup_for)
    seed: int
    workers: int
    request_timeout_s: float
    ignore_eos: bool | None  # None: as the server kind says
    server_kind: str
    policy: VerdictPolicy
    load_pods: int
    server_metrics: str | bool | None  # a URL, True (the endpoint's own /metrics) or None
    server_metrics_interval_s: float


def common_settings(ctx: Any) -> CommonSettings:
    """The common parameters (:data:`benchrun.loadgen.params.COMMON_PARAMS`) parsed and checked, each
    error naming the parameter: what a serving suite does when it starts (:func:`run_serving_suite`),
    and ``benchrun validate`` (the suites' ``settings`` / ``check_parameters``) on a spec's values, so
    a value every replicate would refuse is refused before the run. Starts nothing and reaches no
    server; a dataset, tokenizer or trace file is read where the suite runs, the load pods' Job is
    the launcher's (``LoadPods.from_env``)."""
    endpoint = ctx.params.get("endpoint") or None
    api = choice_param(ctx, "api", None, ("completions", "chat"))  # type: ignore[arg-type]
    if endpoint is not None:
        try:
            Endpoint.from_url(str(endpoint), api)
        except EndpointError as exc:
            raise BenchrunError(f"suite {ctx.suite}: parameter endpoint: {exc}") from None
    try:
        policy = VerdictPolicy.from_dict(ctx.params.get("verdict"))
    except (TypeError, ValueError) as exc:
        raise BenchrunError(f"suite {ctx.suite}: parameter verdict: {exc}") from None
    perf = None
    if endpoint is None:
        try:
            perf = PerfModel.from_dict({**SUITE_REFSERVER_MODEL, **(ctx.params.get("refserver") or {})})
        except (TypeError, ValueError) as exc:
            raise BenchrunError(f"suite {ctx.suite}: parameter refserver: {exc}") from None
    load_pods = load_pods_count(ctx, endpoint)
    if ctx.params.get("prompt_salt") is not None:
        prompt_salt_of(ctx)  # its type (a salt given reads nothing of the run)
    turns, think, sp = content_options(ctx)
    try:  # the options' own rules; the dataset and tokenizer are read where the suite runs (content_inputs)
        content = content_from_options(None, "auto", None, turns, think, sp)
        if content is not None:
            content.check()
    except BenchrunError as exc:
        raise _content_error(ctx, exc) from None
    return CommonSettings(
        endpoint=str(endpoint) if endpoint is not None else None,
        perf=perf,
        api=api,
        # strict checks (2.5 is refused, not truncated to 2), each error naming the parameter
        warmup=int_param(ctx, "warmup", None, minimum=0),  # type: ignore[arg-type]
        seed=int_param(ctx, "seed", 0, minimum=0),
        workers=int_param(ctx, "workers", 1, minimum=1, maximum=1024),
        request_timeout_s=float_param(ctx, "request_timeout_s", 60.0),
        ignore_eos=bool_param(ctx, "ignore_eos", None),  # type: ignore[arg-type]
        server_kind=choice_param(ctx, "server_kind", "auto", SERVER_KINDS),
        policy=policy,
        load_pods=load_pods,
        server_metrics=server_metrics_of(ctx),
        server_metrics_interval_s=float_param(ctx, "server_metrics_interval_s", 1.0),
    )


def server_metrics_of(ctx: Any) -> str | bool | None:
    """The parameter server_metrics: an http(s) URL without credentials, True (``true``: the
    endpoint's own ``/metrics``) or None (not given, or false)."""
    given = ctx.params.get("server_metrics")
    if given is True or given == "true":
        return True
    if not given:
        return None
    url = str(given)
    if has_credentials(url):  # the scraper sends none, and the URL is kept in the result
        raise BenchrunError(f"suite {ctx.suite}: parameter server_metrics {redact(url)!r} carries credentials "
                            "(user:password@, or an '@' that may be part of them); remove them")
    if not url.startswith(("http://", "https://")):
        raise BenchrunError(f"suite {ctx.suite}: parameter server_metrics {url!r} is not an http(s) URL; give e.g. "
                            "http://127.0.0.1:8000/metrics, or true for the endpoint's own /metrics")
    return url


def run_serving_suite(
    ctx: Any, points: list[LoadPoint], requests_per_point: int | None, duration_s: float | None, *, sweep: bool = True,
    extra: dict[str, Any] | None = None,
) -> SweepResult:
    """Run ``points`` against the endpoint (or a self-started reference server) and report;
    ``sweep`` adds ``capacity_at_slo`` across the points."""
    if extra and extra.get("trace") and ctx.params.get("prompt_salt") is not None:
        # as the CLI refuses --prompt-salt beside --trace: a replay sends the trace's own prompts
        raise BenchrunError(f"suite {ctx.suite}: parameter trace replays the trace's own prompts; parameter "
                            "prompt_salt cannot apply to it: leave it out")
    model, mix, _, slo, pricing, notes = workload_inputs(ctx)
    common = common_settings(ctx)
    content = content_inputs(ctx)
    endpoint = common.endpoint
    pods = load_pods_of(common.load_pods)
    server: ServerProcess | None = None
    if endpoint is None:
        assert common.perf is not None  # common_settings: the self-started server's model without an endpoint
        server = ServerProcess(common.perf, model_name=model, dialect=Dialect(prefix_cache_block=SUITE_REFSERVER_PREFIX_BLOCK))
        endpoint = server.url
        ctx.synthetic = True
        ctx.context["reference_server"] = {"synthetic": True, **server.info}
        ctx.log(f"no endpoint given: started the synthetic reference server at {endpoint}")
    try:
        cfg = SweepConfig(
            url=str(endpoint),
            model=model,
            mix=tuple(mix),
            points=tuple(points),
            requests_per_point=requests_per_point,
            duration_s=duration_s,
            warmup=common.warmup,
            seed=common.seed,
            prompt_salt=prompt_salt_of(ctx, shared=pods is not None),  # none kept for a trace or a dataset (SweepConfig: sent as written)
            workers=common.workers,
            api=common.api,
            request_timeout_s=common.request_timeout_s,
            ignore_eos=common.ignore_eos,
            server_kind=common.server_kind,
            slo=slo,
            pricing=pricing,
            policy=common.policy,
            synthetic=server is not None,
            content=content,
        )
        if extra:  # fields of SweepConfig a suite sets beyond the common ones (trace, stages)
            from dataclasses import replace as _replace

            cfg = _replace(cfg, **extra)
        metrics_url = common.server_metrics
        if metrics_url is True:  # the endpoint's own /metrics (vLLM, SGLang, the reference server)
            metrics_url = str(endpoint).rstrip("/").split("/v1/")[0] + "/metrics"
        if metrics_url:
            cfg = dataclasses.replace(cfg, server_metrics_url=str(metrics_url),
                                      server_metrics_interval_s=common.server_metrics_interval_s)
        if pods is not None and pods.index:
            # only pod 0 watches the server's metrics (one scrape, on the clock the rows are merged onto)
            cfg = dataclasses.replace(cfg, server_metrics_url=None)
        with ctx.measuring():  # the telemetry summaries' window: the sweep (the server's start left out)
            result = run_sweep(cfg, progress=lambda s: ctx.message({"kind": "serving_point", "point": s["point"],
                                                                    "verdict": s["verdict"]}), pods=pods)
    finally:
        if server is not None:
            server.stop()
    if pods is not None:
        ctx.context["load_pods"] = pods.info()
        if pods.index:  # pod 0 reports the merged points; this pod's rows went to it
            ctx.context["loadgen"] = result.context
            ctx.log(f"load pod {pods.index} of {pods.count}: {len(result.rows)} requests handed to pod 0")
            return result
    report(ctx, result, mix, notes, sweep=sweep)
    return result


def prompt_salt_of(ctx: Any, shared: bool = False) -> str | None:
    """The salt of this replicate's synthetic prompts: the parameter ``prompt_salt`` (``none`` or
    false: the seed's own words, the same in every run), else ``<run id>/r<replicate>``, so a
    replicate never resends an earlier one's prompts for a server's prefix cache to hit. A launch
    that sends the replicate again adds what sets it apart: the confirmation round's scope
    (``/confirmation``: its replicates reuse the run's id and numbers), a contended rerun's attempt
    (``/a2``, ...) and, on Kubernetes, the pod's uid (``/pod-<uid>``: a pod the Job controller put
    in place of an evicted one). ``shared``: the replicate's load pods share the salt (they run one
    replicate; a lost load pod fails its Job, so none is replaced), so no pod's uid is added."""
    given = ctx.params.get("prompt_salt")
    if given is None:
        parts = [f"{ctx.run_id}/r{ctx.replicate}"]
        scope = getattr(ctx, "launch_scope", None)
        parts += [scope] if scope else []
        attempt = int(getattr(ctx, "attempt", 1) or 1)
        parts += [f"a{attempt}"] if attempt > 1 else []
        uid = getattr(ctx, "pod_uid", None)
        parts += [f"pod-{uid}"] if uid and not shared else []
        return "/".join(parts)
    if given is False or str(given).strip().lower() in ("", "none"):
        return None
    if not isinstance(given, (str, int)) or isinstance(given, bool):
        raise BenchrunError(f"suite {ctx.suite}: parameter prompt_salt must be a string (or none), not {given!r}")
    return str(given)


def load_pods_count(ctx: Any, endpoint: Any) -> int:
    """The parameter load_pods (1 to MAX_LOAD_PODS; more than 1 needs an endpoint), checked."""
    n = int_param(ctx, "load_pods", 1, minimum=1, maximum=MAX_LOAD_PODS)
    if n > 1 and endpoint is None:
        raise BenchrunError(f"suite {ctx.suite}: parameter load_pods={n} needs endpoint (the server all load pods "
                            "drive); without one each pod would start its own reference server")
    return n


def load_pods_of(count: int) -> Any:
    """The load pods this replicate is one of (``load_pods`` > 1, on the Kubernetes launcher), or None;
    ``count``: the parameter as :func:`common_settings` checked it (:func:`load_pods_count`)."""
    if count == 1:
        return None
    from benchrun.loadgen.loadpods import LoadPods

    return LoadPods.from_env(count)


def report(ctx: Any, result: SweepResult, mix: list[MixBucket], notes: dict[str, Any], *, sweep: bool = True) -> None:
    """Write the parquet and figures, fill ``ctx.serving``, metrics and context."""
    raw = ctx.raw_file("requests", "parquet")
    consts = {"run_id": ctx.run_id, "benchmark_case_id": ctx.case_id, "suite": ctx.suite}
    write_requests_parquet(result.rows, raw, consts)
    ctx.samples["requests"] = str(Path(raw).relative_to(ctx.run_dir))
    if result.server_samples:
        from benchrun.loadgen.servermetrics import write_samples

        # read into telemetry_slice_fact (benchrun.telemetry.facts), each row with its point
        rel = f"raw/{ctx.run_id}_{ctx.suite}_r{ctx.replicate}_servermetrics.parquet"
        write_samples(Path(ctx.run_dir) / rel, result.server_samples, {"benchmark_case_id": str(ctx.case_id or "")})
        ctx.samples["server_metrics"] = rel
    prefix = f"{ctx.run_id}_{ctx.suite}_r{ctx.replicate}"
    figs, why = plot_latency_throughput(result.summaries, Path(ctx.run_dir) / "figures", prefix, synthetic=ctx.synthetic)
    ctx.context["figures"] = [str(p.relative_to(ctx.run_dir)) for p in figs]
    if why:
        ctx.context["figures_skipped"] = why
        ctx.log(why)
    ctx.serving.extend(result.summaries)
    for s in result.summaries:
        if s["bucket"] != "all":
            continue
        for name, fld, unit, direction in HEADLINE:
            value = s.get(fld)
            if value is not None:
                ctx.add_metric(name, value, unit, direction, case=s["point"])
    if sweep and result.capacity_at_slo is not None:
        unit = "concurrency" if result.summaries and result.summaries[0]["load_model"] == "closed_loop" else "req/s"
        ctx.add_metric("capacity_at_slo", result.capacity_at_slo, unit, "higher", case="sweep")
    elif sweep and any(s.get("n_good") is not None for s in result.summaries):
        ctx.context["capacity_at_slo"] = "absent: no point of the sweep met the SLO at p99"
    ctx.context["loadgen"] = result.context
    ctx.context["mix"] = format_mix(mix)
    ctx.context["verdicts"] = {s["point"]: {"verdict": s["verdict"], "reasons": s["verdict_reasons"]} for s in result.summaries if s["bucket"] == "all"}
    if notes:
        ctx.context["notes"] = notes
    if not any(s.get("n_requests") for s in result.summaries):
        raise RuntimeError("no request of the sweep completed; see verdict reasons in the result context")
