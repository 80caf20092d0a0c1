"""The ``benchrun loadgen`` and ``benchrun refserver`` commands."""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from benchrun.errors import BenchrunError, check_range
from benchrun.console import console


def _floats(text: str, what: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BenchrunError(f"{what} {text!r} is not a comma-separated list of numbers (e.g. 1,8,32)") from None
    if not vals or any(not 0 < v < float("inf") for v in vals):
        raise BenchrunError(f"{what} {text!r} needs positive, finite values")
    return vals


def parse_slo(text: str | None) -> Any:
    """``ttft_ms=200,decode_ms_per_token=50`` → SLO (None when not given)."""
    from benchrun.loadgen.metrics import SLO

    if not text:
        return None
    d: dict[str, float] = {}
    for part in text.split(","):
        k, sep, v = part.partition("=")
        if not sep:
            raise BenchrunError(f"--slo item {part!r} is not KEY=MS (keys: ttft_ms, decode_ms_per_token, e2e_ms)")
        try:
            d[k.strip()] = float(v)
        except ValueError:
            raise BenchrunError(f"--slo {k.strip()}={v!r}: the value must be a number of milliseconds") from None
    try:
        return SLO.from_dict(d)
    except ValueError as exc:
        raise BenchrunError(f"--slo: {exc}") from None


def _fmt(v: Any, nd: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _pct(s: dict[str, Any], base: str, name: str, nd: int = 2) -> str:
    """Percentile ``name`` of ``base``, marked "≥" where the summary says failures censor it (the
    value is then the largest known, a lower bound: ``percentiles_censored``)."""
    v = s.get(f"{base}_{name}")
    censored = v is not None and name in ((s.get("percentiles_censored") or {}).get(base) or ())
    return ("≥" if censored else "") + _fmt(v, nd)


def _print_table(summaries: list[dict[str, Any]], capacity: float | None, has_slo: bool,
                 capacity_why: str | None = None) -> None:
    from rich.markup import escape
    from rich.table import Table

    t = Table(title="benchrun loadgen (bucket rows in the JSON summary)")
    cols = ["point", "bucket", "ok", "err", "ttft p50", "ttft p99", "e2e p50", "e2e p99", "decode p50", "jitter", "tok/s", "req/s"]
    if has_slo:
        cols += ["goodput", "attain"]
    cols += ["verdict"]
    for c in cols:
        t.add_column(c, justify="right" if c not in ("point", "bucket", "verdict") else "left")
    for s in summaries:
        row = [
            s["point"],
            s["bucket"],
            str(s["n_requests"]),
            str(s["n_errors"]),
            _pct(s, "ttft_ms", "p50"),
            _pct(s, "ttft_ms", "p99"),
            _pct(s, "e2e_ms", "p50", 1),
            _pct(s, "e2e_ms", "p99", 1),
            _pct(s, "decode_ms_per_token", "p50", 3),
            _fmt(s["jitter_ms"], 3),
            _fmt(s["tokens_per_second"], 0),
            _fmt(s["request_throughput_rps"], 2),
        ]
        if has_slo:
            row += [_fmt(s["request_goodput"]), _fmt(s["slo_attainment"], 3)]
        row.append(s["verdict"])
        t.add_row(*[escape(str(v)) for v in row])  # labels are data, not markup
    con = console()
    con.print(t)
    for s in summaries:
        if s["bucket"] == "all" and s["verdict_reasons"]:
            con.print(f"[bold]{escape(str(s['point']))}[/bold] invalid: " + escape("; ".join(s["verdict_reasons"])))
        if s["bucket"] == "all" and s.get("output_tokens_note"):
            con.print(f"[bold]{escape(str(s['point']))}[/bold] note: " + escape(s["output_tokens_note"]))
    if has_slo:
        none = f"none ({capacity_why or 'no point met the SLO at p99'})"
        con.print(f"capacity_at_slo: {_fmt(capacity, 3) if capacity is not None else escape(none)}")


EXIT_INVALID = 3


def register(app: typer.Typer) -> None:
    """Add ``loadgen`` and ``refserver`` to the benchrun CLI."""

    @app.command("loadgen")
    def loadgen(
        url: str = typer.Option(..., "--url", help="server base URL, e.g. http://127.0.0.1:8000 (or a full /v1/... path)"),
        model: str = typer.Option(..., "--model", help="served model name"),
        out: Path = typer.Option(..., "--out", help="output directory (raw/, structured/, figures/)"),
        mix: str = typer.Option("512/128", "--mix", help="joint (input/output) pairs with weights, e.g. 512/128@0.7,1024/256@0.3"),
        concurrency: Optional[str] = typer.Option(None, "--concurrency", help="closed-loop stages: 1,8,32 | ramp:1:32:4 | saturate:1:2:256"),
        rate: Optional[str] = typer.Option(None, "--rate", help="open-loop stages in req/s: 2,4,8 | ramp:2:20:5 | saturate:1:2:64"),
        arrival: Optional[str] = typer.Option(None, "--arrival", help="open-loop (--rate) arrivals: poisson (default) | "
                                              "constant | gamma"),
        burstiness: Optional[float] = typer.Option(None, "--burstiness", help="open-loop (--rate) gamma arrivals' shape "
                                                   "(1 = Poisson, < 1 burstier); implies --arrival gamma"),
        duration: Optional[float] = typer.Option(None, "--duration", help="seconds per point"),
        requests: Optional[int] = typer.Option(None, "--requests", help="measured requests per point"),
        warmup: Optional[int] = typer.Option(None, "--warmup", help="warm-up requests per point (excluded; default one per stream)"),
        seed: int = typer.Option(0, "--seed"),
        prompt_salt: Optional[str] = typer.Option(None, "--prompt-salt", help="renames the words of synthetic prompts "
                                                  "(the seed's draws kept), so no other run's prompts share a prefix "
                                                  "with them; default: this run's id; none: the seed's own words"),
        slo: Optional[str] = typer.Option(None, "--slo", help="per-request SLO, e.g. ttft_ms=200,decode_ms_per_token=50"),
        price_per_node_hour: Optional[float] = typer.Option(None, "--price-per-node-hour", help="USD per node-hour (enables cost metrics)"),
        nodes: int = typer.Option(1, "--nodes", help="nodes serving the endpoint (for cost)"),
        workers: int = typer.Option(1, "--workers", help="client worker processes"),
        api: Optional[str] = typer.Option(None, "--api", help="completions | chat (default: as a --url ending in "
                                          "/v1/completions or /v1/chat/completions says, else completions)"),
        timeout: float = typer.Option(60.0, "--timeout", help="per-request timeout in seconds"),
        ignore_eos: Optional[bool] = typer.Option(None, "--ignore-eos/--no-ignore-eos",
                                                  help="send vLLM-style ignore_eos (default: as --server-kind says)"),
        server_kind: str = typer.Option("auto", "--server-kind",
                                        help="vllm|sglang|tgi|openai|auto: what the server accepts (auto probes once, "
                                             "before measuring, and records what it found)"),
        include_usage: bool = typer.Option(True, "--include-usage/--no-include-usage",
                                           help="ask for usage in the stream (stream_options)"),
        preconnect: bool = typer.Option(True, "--preconnect/--no-preconnect",
                                        help="open every stream's connection before the measured phase"),
        dataset: Optional[Path] = typer.Option(None, "--dataset", help="prompts from a dataset: ShareGPT JSON/JSONL, "
                                               "JSONL {prompt, output_tokens} or parquet (docs/loadgen-workloads.md)"),
        dataset_format: Optional[str] = typer.Option(None, "--dataset-format", help="with --dataset: auto (default) | "
                                                     "sharegpt | jsonl | parquet"),
        tokenizer: Optional[Path] = typer.Option(None, "--tokenizer", help="a local tokenizer.json (or a model folder "
                                                 "holding one): exact prompt lengths and counts in its tokens"),
        session_turns: Optional[int] = typer.Option(None, "--session-turns", help="multi-turn sessions of N turns "
                                                    "(history carried; --concurrency counts sessions)"),
        think_time: float = typer.Option(0.0, "--think-time", help="seconds between a reply and the session's next turn"),
        shared_prefix: Optional[str] = typer.Option(None, "--shared-prefix", help="N,M,P: N prefixes of P tokens, each "
                                                    "with M suffixes of the mix's input length"),
        verdict_percentile: str = typer.Option("p99", "--verdict-percentile", help="percentile whose sample count the verdict requires"),
        trace_file: Optional[Path] = typer.Option(None, "--trace", help="replay a trace (Mooncake JSONL, Azure CSV, plain CSV/JSONL) at its own times"),
        trace_format: Optional[str] = typer.Option(None, "--trace-format", help="with --trace: auto (default) | "
                                                   "mooncake | azure | csv | jsonl"),
        speedup: Optional[float] = typer.Option(None, "--speedup", help="with --trace: divide the trace's times by this "
                                                "(default 1)"),
        server_metrics: Optional[str] = typer.Option(None, "--server-metrics", help="the server's Prometheus URL (e.g. http://127.0.0.1:8000/metrics), scraped during each point"),
        server_metrics_interval: float = typer.Option(1.0, "--server-metrics-interval", help="seconds between scrapes"),
        goodput_drop: float = typer.Option(0.1, "--goodput-drop", help="saturate stages: stop when goodput falls this fraction below the best"),
        json_out: bool = typer.Option(False, "--json", help="print the JSON summary instead of the table"),
        allow_invalid: bool = typer.Option(False, "--allow-invalid",
                                           help=f"exit 0 even when a point's validity verdict is invalid "
                                                f"(default: exit {EXIT_INVALID})"),
    ) -> None:
        """Measure an OpenAI-compatible streaming endpoint over a load sweep (like `vllm bench serve`).

        Exit 0 when every point is valid, 3 when a point's verdict is invalid (too few samples,
        too many errors, the offered load not achieved, the client saturated), 1 on an error,
        130 when interrupted; the outputs are written in every case.
        """
        from benchrun.loadgen.metrics import Pricing, VerdictPolicy, capacity_reason
        from benchrun.loadgen.output import plot_latency_throughput, write_requests_parquet
        from benchrun.loadgen.runner import LoadPoint, SweepConfig, run_sweep
        from benchrun.loadgen.workload import MixError, parse_mix
        from benchrun.fsio import atomic_write_json

        if trace_file is not None and (concurrency is not None or rate is not None):
            raise BenchrunError("--trace replays the trace's own times: leave out --concurrency and --rate")
        if trace_file is None and (concurrency is None) == (rate is None):
            raise BenchrunError("give exactly one of --concurrency LIST, --rate LIST or --trace FILE")
        if trace_file is None and (duration is None) == (requests is None):
            raise BenchrunError("give exactly one of --duration S or --requests N")
        if duration is not None:  # 1e308 ended the sweep early with an OverflowError
            check_range(duration, "--duration", 0, 7 * 86400)
        if trace_file is not None:
            # a replay sends the trace's own prompts (its lengths, its prefix blocks, one word per
            # token): content options would be recorded as used while nothing of them was sent
            given = [name for name, v in (("--dataset", dataset), ("--tokenizer", tokenizer),
                                          ("--session-turns", session_turns), ("--shared-prefix", shared_prefix),
                                          ("--prompt-salt", prompt_salt))
                     if v is not None]
            if given:
                raise BenchrunError(f"--trace replays the trace's own prompts (its lengths and prefix blocks, one word "
                                    f"per token); {', '.join(given)} cannot apply to it: leave "
                                    f"{'it' if len(given) == 1 else 'them'} out")
        # options that shape what another load model does are refused, not accepted and ignored
        shape = [name for name, v in (("--arrival", arrival), ("--burstiness", burstiness)) if v is not None]
        if shape and rate is None:
            why = ("--trace replays the trace's own times" if trace_file is not None
                   else "--concurrency is a closed loop (each stream sends when its previous request returns)")
            raise BenchrunError(f"{' and '.join(shape)} shape{'s' if len(shape) == 1 else ''} open-loop arrivals (--rate); "
                                f"{why}: leave {'it' if len(shape) == 1 else 'them'} out")
        replay = [name for name, v in (("--speedup", speedup), ("--trace-format", trace_format)) if v is not None]
        if replay and trace_file is None:
            raise BenchrunError(f"{' and '.join(replay)} appl{'ies' if len(replay) == 1 else 'y'} to a trace replay only: "
                                f"give --trace FILE, or leave {'it' if len(replay) == 1 else 'them'} out")
        arrival = arrival if arrival is not None else "poisson"
        burstiness = burstiness if burstiness is not None else 1.0
        speedup = speedup if speedup is not None else 1.0
        trace_format = trace_format if trace_format is not None else "auto"
        try:
            buckets = parse_mix(mix)
        except MixError as exc:
            raise BenchrunError(f"--mix: {exc}") from None
        if burstiness != 1.0 and arrival == "poisson":
            arrival = "gamma"
        if arrival not in ("poisson", "constant", "gamma"):
            raise BenchrunError("--arrival must be poisson, constant or gamma")
        if api is not None and api not in ("completions", "chat"):
            raise BenchrunError("--api must be completions or chat")
        from benchrun.loadgen.schedule import parse_stages
        from benchrun.loadgen import trace as tracing

        saturate, entries = False, None
        try:
            if trace_file is not None:
                entries = tracing.load_trace(trace_file, trace_format)
                points = [tracing.trace_point(tracing.select(entries, requests, duration, speedup), speedup)]
            elif concurrency is not None:
                points, saturate = parse_stages(concurrency, "closed_loop")
            else:
                points, saturate = parse_stages(rate or "", "open_loop", arrival=arrival, burstiness=burstiness)
            policy = VerdictPolicy.from_dict({"percentile": verdict_percentile})
        except ValueError as exc:
            raise BenchrunError(str(exc)) from None
        pricing = None
        if price_per_node_hour is not None:
            if not (math.isfinite(price_per_node_hour) and price_per_node_hour >= 0) or nodes < 1:  # NaN: JSON NaN
                raise BenchrunError("--price-per-node-hour must be a finite number >= 0 and --nodes >= 1")
            pricing = Pricing(price_per_node_hour, nodes)
        from benchrun.loadgen.content import content_from_options

        if dataset_format is not None and dataset is None:
            raise BenchrunError("--dataset-format applies to --dataset only: give --dataset FILE, or leave it out")
        content = content_from_options(dataset, dataset_format or "auto", tokenizer, session_turns, think_time,
                                       shared_prefix)
        # a random suffix: two runs into one --out within a second must not overwrite each other
        run_id = "loadgen-" + _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d%H%M%S") + "-" + os.urandom(2).hex()
        # each run its own prompt words: a server's prefix cache keeps an earlier run's prompts
        salt = run_id if prompt_salt is None else (None if prompt_salt.strip().lower() in ("", "none") else prompt_salt)
        cfg = SweepConfig(
            url=url,
            model=model,
            mix=tuple(buckets),
            points=tuple(points),
            requests_per_point=requests,
            duration_s=duration,
            warmup=warmup,
            seed=seed,
            prompt_salt=salt if entries is None else None,
            workers=workers,
            api=api,
            request_timeout_s=timeout,
            ignore_eos=ignore_eos,
            include_usage=include_usage,
            server_kind=server_kind,
            preconnect=preconnect,
            trace=entries,
            stop_when_goodput_falls=saturate,
            goodput_drop=goodput_drop,
            server_metrics_url=server_metrics,
            server_metrics_interval_s=server_metrics_interval,
            slo=parse_slo(slo),
            pricing=pricing,
            policy=policy,
            content=content,
        )
        # the output folders before the sweep: a --out that cannot hold them lost every measurement after it
        for sub in ("raw", "structured", "figures"):
            try:
                (out / sub).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise BenchrunError(f"--out {out}: cannot make {sub}/ there ({exc.strerror or exc}); give a writable "
                                    "directory") from None
        started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")

        def progress(s: dict[str, Any]) -> None:
            print(
                f"{s['point']}: {s['n_requests']} ok, {s['n_errors']} errors, "
                f"ttft p50 {_pct(s, 'ttft_ms', 'p50')} ms, e2e p99 {_pct(s, 'e2e_ms', 'p99', 1)} ms, {s['verdict']}",
                file=sys.stderr,
            )

        import signal

        # SIGTERM (a cancelled suite, a timeout) ends the sweep like Ctrl-C: what was measured is written.
        def _terminate(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt(f"signal {signum}")

        previous = signal.signal(signal.SIGTERM, _terminate)
        incomplete: str | None = None
        failure: BaseException | None = None
        try:
            result = run_sweep(cfg, progress=progress)
        except BenchrunError:
            raise
        except BaseException as exc:  # the partial measurements are written, then the error stands
            result = getattr(exc, "partial_result", None)
            if result is None:
                raise
            incomplete = f"sweep ended early ({type(exc).__name__}: {exc}); the points measured before are kept"
            failure = exc
        finally:
            signal.signal(signal.SIGTERM, previous)
        synthetic = any("synthetic" in str(o) for o in result.context.get("server", {}).get("owned_by", []))
        for s in result.summaries:
            s["synthetic"] = synthetic
        for r in result.rows:
            r["synthetic"] = synthetic
        raw = out / "raw" / f"{run_id}_loadgen_requests.parquet"
        write_requests_parquet(result.rows, raw, {"run_id": run_id})
        server_file = None
        if result.server_samples:
            from benchrun.loadgen.servermetrics import write_samples

            server_file = write_samples(out / "raw" / f"{run_id}_loadgen_servermetrics.parquet", result.server_samples,
                                        {"server_metrics_url": server_metrics or ""})
        if entries is not None:
            result.context["trace"] = tracing.describe(entries, str(trace_file), speedup)
        figs, why = plot_latency_throughput(result.summaries, out / "figures", f"{run_id}_loadgen", synthetic=synthetic)
        capacity_why = capacity_reason([x for x in result.summaries if x.get("bucket") == "all"], cfg.slo,
                                       cfg.policy.confidence, more="--requests, or a longer --duration")
        summary = {
            "schema": "benchrun.loadgen_summary/v1",
            "run_id": run_id,
            "started_utc": started,
            "finished_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "synthetic": synthetic,
            "capacity_at_slo": result.capacity_at_slo,
            "capacity_at_slo_note": capacity_why,
            "points": result.summaries,
            "context": result.context,
            "files": {
                "requests": str(raw.relative_to(out)),
                "figures": [str(p.relative_to(out)) for p in figs],
                **({"server_metrics": str(server_file.relative_to(out))} if server_file else {}),
            },
        }
        if incomplete:
            summary["incomplete"] = incomplete
        if why:
            summary["files"]["figures_skipped"] = why
        sp = atomic_write_json(out / "structured" / f"{run_id}_loadgen_summary.json", summary)
        if failure is not None:
            raise BenchrunError(f"loadgen: {incomplete}; written: {sp}", exit_code=130 if isinstance(
                failure, KeyboardInterrupt) else 1) from failure
        if json_out:
            print(json.dumps(summary, indent=2, sort_keys=True, default=str))
        else:
            _print_table(result.summaries, result.capacity_at_slo, cfg.slo is not None, capacity_why)
            print(f"requests: {raw}\nsummary: {sp}\nfigures: {', '.join(map(str, figs)) or why}")
        invalid = [x for x in result.summaries if x.get("bucket") == "all" and x.get("verdict") == "invalid"]
        if invalid and not allow_invalid:
            reasons = "; ".join(f"{x['point']}: {', '.join(x.get('verdict_reasons') or [])}" for x in invalid)
            raise BenchrunError(f"loadgen: verdict invalid at {len(invalid)} of "
                                f"{sum(1 for x in result.summaries if x.get('bucket') == 'all')} point(s) ({reasons}); "
                                f"the measurements are written ({sp}); --allow-invalid exits 0 anyway",
                                exit_code=EXIT_INVALID)

    @app.command("refserver")
    def refserver(
        port: int = typer.Option(8000, "--port", min=0, max=65535, help="port (0 = any free port; printed)"),
        host: str = typer.Option("127.0.0.1", "--host", help="address to bind"),
        model: str = typer.Option("benchrun-synthetic", "--model", help="model id listed by /v1/models"),
        prefill_ms_per_token: float = typer.Option(0.01, "--prefill-ms-per-token"),
        decode_base_ms: float = typer.Option(2.0, "--decode-base-ms"),
        decode_ms_per_seq: float = typer.Option(0.05, "--decode-ms-per-seq"),
        max_batch: int = typer.Option(64, "--max-batch"),
        max_batched_tokens: int = typer.Option(8192, "--max-batched-tokens"),
        max_queue: int = typer.Option(4096, "--max-queue"),
        fault: str = typer.Option("none", "--fault", help="none|refuse|http500|http429|close_midstream|malformed_sse|no_done|stall"),
        fault_every: int = typer.Option(1, "--fault-every", help="apply --fault to every N-th completion request"),
        record: Optional[Path] = typer.Option(None, "--record", help="append ground-truth JSONL records here"),
        stream_end: str = typer.Option("done", "--stream-end", help="done ([DONE], vLLM) | finish (finish_reason chunk, "
                                       "then the body ends) | close (the same, close-delimited)"),
        usage_in_last_chunk: bool = typer.Option(False, "--usage-in-last-chunk", help="usage on the finish_reason chunk, always"),
        reject_unknown_fields: bool = typer.Option(False, "--reject-unknown-fields",
                                                   help="422 naming a field outside the OpenAI API (e.g. ignore_eos)"),
        chat_template_tokens: int = typer.Option(0, "--chat-template-tokens", help="prompt tokens a chat template adds"),
        max_tokens_limit: int = typer.Option(65536, "--max-tokens-limit", help="max_tokens above this is a 400"),
        prefix_cache_block: int = typer.Option(0, "--prefix-cache-block",
                                               help="a prefix cache of N-word blocks, reported as cached_tokens (0: none)"),
        record_bodies: bool = typer.Option(False, "--record-bodies", help="keep each request's prompt or messages in its record"),
        stream_interval: int = typer.Option(1, "--stream-interval", help="tokens a content chunk carries (the first alone, as vLLM's)"),
    ) -> None:
        """Run the synthetic OpenAI-compatible reference server (a continuously batched engine model)."""
        import asyncio

        from benchrun.loadgen.refserver import FAULTS, Dialect, PerfModel, serve

        if fault not in FAULTS:
            raise BenchrunError(f"--fault {fault!r} is not one of {', '.join(FAULTS)}")
        if fault_every < 1:
            raise BenchrunError("--fault-every must be >= 1")
        try:
            perf = PerfModel.from_dict(
                {
                    "prefill_ms_per_token": prefill_ms_per_token,
                    "decode_base_ms": decode_base_ms,
                    "decode_ms_per_seq": decode_ms_per_seq,
                    "max_batch": max_batch,
                    "max_batched_tokens": max_batched_tokens,
                    "max_queue": max_queue,
                }
            )
            dialect = Dialect(stream_end, usage_in_last_chunk, reject_unknown_fields, chat_template_tokens, prefix_cache_block,
                              stream_interval)
        except ValueError as exc:
            raise BenchrunError(f"refserver: {exc}") from None
        if max_tokens_limit < 1:
            raise BenchrunError("refserver: --max-tokens-limit must be >= 1")

        def announce(info: dict[str, Any]) -> None:
            print(json.dumps(info), flush=True)
            print(f"synthetic reference server listening on {info['listening']} (Ctrl-C stops it)", file=sys.stderr, flush=True)

        try:
            asyncio.run(
                serve(
                    host,
                    port,
                    model_name=model,
                    perf=perf,
                    fault=fault,
                    fault_every=fault_every,
                    record_path=str(record) if record else None,
                    announce=announce,
                    dialect=dialect,
                    max_tokens_limit=max_tokens_limit,
                    record_bodies=record_bodies,
                )
            )
        except OSError as exc:
            if record and exc.filename and Path(str(exc.filename)).resolve() == Path(str(record)).resolve():
                raise BenchrunError(f"refserver: cannot write --record {record} ({exc.strerror or exc}); give a file in "
                                    "an existing, writable folder") from None
            raise BenchrunError(f"refserver: cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port") from None
        except KeyboardInterrupt:
            pass

