"""Review fixes of the serving suites' parameters: what would be dropped unseen is refused, and
``benchrun validate`` parses the common options with the function the suite runs
(:func:`benchrun.loadgen.suite.common_settings`), so a value every replicate would refuse is
refused before the run, with the suite's own line, and without starting or reaching a server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchrun.errors import BenchrunError
from benchrun.spec.builtin_suites import check_parameters
from benchrun.suites import serving_sweep, serving_workflow
from benchrun.suites._common import ParamError, StaticParams

SUITES = {"serving_workflow": serving_workflow, "serving_sweep": serving_sweep}


def _ctx(tmp_path: Path, suite: str, params: dict[str, Any], **workload: Any):
    from benchrun.suites._runtime import SuiteContext

    return SuiteContext({"BENCHRUN_RUN_ID": "r1", "BENCHRUN_RUN_DIR": str(tmp_path), "BENCHRUN_SUITE": suite,
                         "BENCHRUN_REPLICATE": "1", "BENCHRUN_CASE_ID": "case-1", "BENCHRUN_PARAMS": json.dumps(params),
                         "BENCHRUN_WORKLOAD": json.dumps({"model": "m", **workload})})


def _validate(canary_doc, write_spec, suite: str, params: dict[str, Any], **workload: Any):
    """(the parameters' path, every finding at or under it) of the canary with ``suite``'s
    parameters and ``spec.workload`` changed as given (None removes a key)."""
    from benchrun.spec.validation import validate_path

    [at] = [(i, j) for i, layer in enumerate(canary_doc["spec"]["layers"])
            for j, s in enumerate(layer["suites"]) if s["name"] == suite]
    canary_doc["spec"]["layers"][at[0]]["suites"][at[1]]["parameters"] = params
    wl = canary_doc["spec"]["workload"]
    for k, v in workload.items():
        wl.pop(k) if v is None else wl.__setitem__(k, v)
    (res,) = validate_path(write_spec(canary_doc))
    where = f"spec.layers[{at[0]}].suites[{at[1]}].parameters"
    return where, [(e.path, e.message) for e in res.errors if e.path.startswith(where)]


@pytest.fixture
def no_server(monkeypatch):
    """Fail the test if anything starts the reference server."""
    import benchrun.loadgen.suite as suite_mod

    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("a server was started")

    monkeypatch.setattr(suite_mod, "ServerProcess", refuse)


# -- 1. a rate on serving_workflow's closed loop, requests beside duration_s --------------------


def test_serving_workflow_refuses_a_rate_under_a_closed_loop(tmp_path, canary_doc, write_spec):
    """It ran closed loop at the default c=4, the rate dropped unseen; validate called it valid."""
    msg = ("serving_workflow: workload.concurrencyModel is closed_loop but only 'rate' was given; give "
           "'concurrency', or set workload.concurrencyModel: open_loop")
    with pytest.raises(BenchrunError) as refused:
        serving_workflow.run(_ctx(tmp_path, "serving_workflow", {"rate": 4.0}, concurrencyModel="closed_loop"))
    assert str(refused.value) == msg
    where, found = _validate(canary_doc, write_spec, "serving_workflow", {"rate": 4.0}, concurrencyModel="closed_loop")
    assert found == [(where, msg)]
    # as serving_sweep refuses its own: the load model and the parameter given disagree
    assert serving_sweep.conflicts({"rates": [4]}, {"concurrencyModel": "closed_loop"})


@pytest.mark.parametrize("suite", ["serving_workflow", "serving_sweep"])
def test_a_model_or_mix_parameter_cannot_replace_the_frozen_workload(tmp_path, canary_doc, write_spec, suite):
    """Review 2026-12-07: a `model` parameter was sent in every request in place of workload.model, the
    workload digest unchanged; a `mix` beside workload.sequenceLengthMix was dropped unseen."""
    frozen = canary_doc["spec"]["workload"]["model"]
    where, found = _validate(canary_doc, write_spec, suite, {"model": "meta-llama/Llama-3.1-70B-Instruct"})
    assert found == [(where, f"{suite}: parameter model 'meta-llama/Llama-3.1-70B-Instruct' is not workload.model "
                             f"{frozen!r}: the workload is frozen (its digest names workload.model); leave the parameter "
                             "out, or change workload.model (and comparison.controls.fixed.model)")]
    where, found = _validate(canary_doc, write_spec, suite, {"mix": "4096/1024"})
    assert [m for _, m in found] == [f"{suite}: parameter mix would be ignored: workload.sequenceLengthMix is the mix "
                                     "(frozen); leave the parameter out, or change workload.sequenceLengthMix"]
    assert _validate(canary_doc, write_spec, suite, {"model": frozen})[1] == []  # the same model: said twice, no conflict
    with pytest.raises(BenchrunError, match="parameter model 'x' is not workload.model 'm'"):
        SUITES[suite].run(_ctx(tmp_path, suite, {"model": "x"}))


def test_serving_workflow_refuses_a_concurrency_under_an_open_loop(tmp_path):
    with pytest.raises(BenchrunError, match="open_loop; give 'rate'"):
        serving_workflow.run(_ctx(tmp_path, "serving_workflow", {"concurrency": 4}, concurrencyModel="open_loop"))


def test_a_rate_without_a_declared_load_model_is_still_an_open_loop():
    point, requests, duration = serving_workflow.settings(StaticParams("serving_workflow", {"rate": 4.0}))
    assert (point.load_model, point.offered_load, requests, duration) == ("open_loop", 4.0, 32, None)


@pytest.mark.parametrize("suite, count, trace", [("serving_workflow", "requests", False),
                                                 ("serving_sweep", "requests_per_point", False),
                                                 ("serving_sweep", "requests_per_point", True)])
def test_a_request_count_beside_duration_s_is_refused(tmp_path, canary_doc, write_spec, suite, count, trace):
    """The count was dropped unseen (duration_s won); a trace replay failed every replicate instead."""
    params = {count: 40, "duration_s": 5, **({"trace": "t.csv"} if trace else {})}
    msg = (f"{suite}: parameters {count} and duration_s each set how long "
           f"{'the point' if suite == 'serving_workflow' else 'a point'} runs; give one of {count} (a request count), "
           "duration_s (seconds)")
    with pytest.raises(BenchrunError) as refused:
        SUITES[suite].run(_ctx(tmp_path, suite, params))
    assert str(refused.value) == msg
    where, found = _validate(canary_doc, write_spec, suite, params, concurrencyModel=None)
    assert found == [(where, msg)]


def test_serving_workflow_documents_the_warmup_it_runs():
    """The docstring said ``warmup (default 2)``; a point warms up one request per stream."""
    from benchrun.loadgen.config import LoadPoint, SweepConfig, warmup_for

    doc = " ".join(serving_workflow.__doc__.split())
    assert "default 2" not in doc
    assert "``warmup`` (default: one request per stream, ``loadgen.config.warmup_for``)" in doc
    cfg = SweepConfig(url="http://h", model="m", mix=(), points=())
    assert warmup_for(cfg, LoadPoint("closed_loop", 4)) == 4


# -- 2. validate parses the common options as the suite does -------------------------------


BAD_COMMON = [
    ({"workers": 0}, "workers", "parameter workers=0 must be an integer between 1 and 1024"),
    ({"api": "grpc"}, "api", "parameter api='grpc' must be one of completions, chat"),
    ({"warmup": 2.5}, "warmup", "parameter warmup=2.5 must be an integer >= 0"),
    ({"request_timeout_s": -1}, "request_timeout_s", "parameter request_timeout_s=-1 must be a number > 0.0"),
    ({"verdict": {"nope": 1}}, "verdict", "parameter verdict: unknown verdict policy key(s) ['nope']"),
    ({"verdict": "strict"}, "verdict", "parameter verdict: "),
    ({"server_kind": "x"}, "server_kind", "parameter server_kind='x' must be one of auto, vllm, sglang, tgi, openai"),
    ({"refserver": {"max_batch": 0}}, "refserver", "parameter refserver: max_batch, max_batched_tokens and max_queue must be >= 1"),
    ({"load_pods": 0}, "load_pods", "parameter load_pods=0 must be an integer between 1 and 64"),
    ({"load_pods": 2}, "load_pods", "parameter load_pods=2 needs endpoint"),
    ({"seed": -1}, "seed", "parameter seed=-1 must be an integer >= 0"),
    ({"ignore_eos": "maybe"}, "ignore_eos", "parameter ignore_eos='maybe' must be true or false"),
    ({"prompt_salt": [1]}, "prompt_salt", "parameter prompt_salt must be a string (or none)"),
    ({"endpoint": "ftp://server"}, "endpoint", "parameter endpoint: URL 'ftp://server' is not http(s)://host"),
    ({"endpoint": "http://s:8000/v1/chat/completions", "api": "completions"}, "endpoint", "parameter endpoint: --api completions conflicts"),
    ({"server_metrics": "ftp://x"}, "server_metrics", "parameter server_metrics 'ftp://x' is not an http(s) URL; give e.g."),
    ({"server_metrics": "http://u:p@h/metrics"}, "server_metrics", "parameter server_metrics 'http://"),
    ({"server_metrics": True, "server_metrics_interval_s": 0}, "server_metrics_interval_s",
     "parameter server_metrics_interval_s=0 must be a number > 0.0"),
    ({"session_turns": 0}, "session_turns", "parameter session_turns=0 must be an integer between 1 and 1000"),
    ({"think_time_s": 2}, None, "think_time_s needs session_turns"),
    ({"shared_prefix": "4,8"}, None, "shared_prefix '4,8' is not N,M,P"),
]
LOAD = {"serving_workflow": {"concurrency": 2, "requests": 8}, "serving_sweep": {"concurrency": [2], "requests_per_point": 8}}


@pytest.mark.parametrize("suite", sorted(SUITES))
@pytest.mark.parametrize("params, named, said", BAD_COMMON)
def test_validate_refuses_a_common_option_with_the_suites_own_line(tmp_path, no_server, suite, params, named, said):
    """Each passed validate and failed every replicate when the suite started (after starting
    the reference server, for most)."""
    params = {**LOAD[suite], **params}
    with pytest.raises((BenchrunError, ParamError)) as at_run:
        SUITES[suite].run(_ctx(tmp_path, suite, params))
    with pytest.raises(ParamError) as at_validate:
        check_parameters(suite, params, workload={"model": "m"})
    assert said in str(at_run.value)
    # the same line; the suite's own "suite <name>: " is the finding's "<name>: " in validate
    assert str(at_validate.value) == str(at_run.value).removeprefix(f"suite {suite}: ")
    assert at_validate.value.parameter == named


@pytest.mark.parametrize("suite", sorted(SUITES))
@pytest.mark.parametrize("params", [{"workers": 0}, {"api": "grpc"}, {"warmup": 2.5}, {"request_timeout_s": -1},
                                    {"server_kind": "x"}, {"load_pods": 0}, {"seed": -1}, {"verdict": "strict"}])
def test_benchrun_validate_reports_them_at_the_parameter(canary_doc, write_spec, no_server, suite, params):
    spec_params = {**LOAD[suite], **params}
    where, found = _validate(canary_doc, write_spec, suite, spec_params)
    [name] = params
    assert [p for p, _ in found] == [f"{where}.{name}"], found
    assert found[0][1].startswith(f"{suite}: parameter {name}")


def test_a_trace_replay_checks_the_common_options_too(no_server):
    with pytest.raises(ParamError, match="parameter workers=0"):
        check_parameters("serving_sweep", {"trace": "t.csv", "workers": 0}, workload={"model": "m"})


def test_validate_passes_good_common_options_and_starts_nothing(no_server, monkeypatch):
    """Nothing is started or reached: no server, no connection, no load Job."""
    import socket

    def no_network(*_a: Any, **_k: Any) -> None:
        raise AssertionError("validation touched the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    good = {"endpoint": "http://server:8000", "api": "chat", "warmup": 0, "seed": 7, "workers": 2,
            "request_timeout_s": 30, "ignore_eos": "true", "server_kind": "vllm", "load_pods": 4,
            "server_metrics": True, "server_metrics_interval_s": 0.5, "prompt_salt": "none",
            "session_turns": 2, "think_time_s": 0.5, "verdict": {"max_error_rate": 0.05}}
    for suite in SUITES:
        check_parameters(suite, {**LOAD[suite], **good}, workload={"model": "m"})

    from benchrun.loadgen.suite import common_settings

    got = common_settings(StaticParams("serving_sweep", good))
    assert (got.endpoint, got.api, got.warmup, got.seed, got.workers, got.request_timeout_s, got.ignore_eos,
            got.server_kind, got.load_pods, got.server_metrics, got.server_metrics_interval_s, got.perf) == (
        "http://server:8000", "chat", 0, 7, 2, 30.0, True, "vllm", 4, True, 0.5, None)
    assert got.policy.max_error_rate == 0.05
    bare = common_settings(StaticParams("serving_sweep", {"refserver": {"max_batch": 8}}))
    assert bare.endpoint is None and bare.perf is not None and bare.perf.max_batch == 8
    assert (bare.warmup, bare.workers, bare.server_kind, bare.load_pods, bare.server_metrics) == (None, 1, "auto", 1, None)


def test_the_suite_runs_on_what_common_settings_parsed(tmp_path, monkeypatch):
    """One parser: run_serving_suite takes its options from common_settings."""
    import benchrun.loadgen.suite as suite_mod

    seen: list[str] = []

    def parsed(ctx: Any) -> Any:
        seen.append(ctx.suite)
        raise BenchrunError("parsed by common_settings")

    monkeypatch.setattr(suite_mod, "common_settings", parsed)
    with pytest.raises(BenchrunError, match="parsed by common_settings"):
        serving_sweep.run(_ctx(tmp_path, "serving_sweep", LOAD["serving_sweep"]))
    assert seen == ["serving_sweep"]
