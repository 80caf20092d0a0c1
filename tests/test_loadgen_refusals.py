"""Options the load generator cannot honour are refused with one line naming them, never
accepted and ignored (while the summary claims they were used)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchrun.errors import BenchrunError
from benchrun.loadgen.config import LoadPoint, SweepConfig
from benchrun.loadgen.content import ContentConfig, SessionShape
from benchrun.loadgen.workload import parse_mix
from helpers import cli_in_process

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "specs/datasets/benchrun-conversations.jsonl"
URL = "http://127.0.0.1:9"  # never reached: every refusal comes before the first request


def _cli(args, monkeypatch, capsys):
    return cli_in_process(args, monkeypatch, capsys)


def _trace(tmp_path: Path) -> Path:
    p = tmp_path / "t.csv"
    p.write_text("timestamp_s,input_tokens,output_tokens\n" + "".join(f"{i * 0.01},100,4\n" for i in range(10)))
    return p


def _refused(args, monkeypatch, capsys, *names):
    code, _, err = _cli(["loadgen", "--model", "m", *args], monkeypatch, capsys)
    assert code == 1, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for n in names:
        assert n in err, (n, err)
    return err


# -- 1. a trace replay sends the trace's own prompts --------------------------------------------


@pytest.mark.parametrize("extra, names", [
    (["--dataset", str(SHIPPED)], ["--dataset"]),
    (["--tokenizer", "tok.json"], ["--tokenizer"]),
    (["--session-turns", "2"], ["--session-turns"]),
    (["--shared-prefix", "2,2,8"], ["--shared-prefix"]),
    (["--dataset", str(SHIPPED), "--session-turns", "2"], ["--dataset", "--session-turns"]),
])
def test_trace_with_content_options_is_refused(tmp_path, monkeypatch, capsys, extra, names):
    _refused(["--url", URL, "--out", str(tmp_path / "o"), "--trace", str(_trace(tmp_path)), *extra],
             monkeypatch, capsys, "--trace", *names)
    assert not (tmp_path / "o").exists()  # nothing measured, nothing written


def test_a_trace_sweep_config_with_content_is_refused():
    from benchrun.loadgen import trace

    entries = (trace.TraceEntry(0.0, 8, 2), trace.TraceEntry(0.1, 8, 2))
    cfg = SweepConfig(url=URL, model="m", mix=tuple(parse_mix("8/2")), points=(trace.trace_point(entries),), trace=entries,
                      content=ContentConfig(sessions=SessionShape(2)))
    with pytest.raises(BenchrunError, match="trace replay sends the trace's own prompts"):
        cfg.check()


def _suite(tmp_path: Path, params: dict, **workload):
    from benchrun.suites import serving_sweep
    from benchrun.suites._runtime import SuiteContext

    env = {"BENCHRUN_RUN_ID": "r1", "BENCHRUN_RUN_DIR": str(tmp_path), "BENCHRUN_SUITE": "serving_sweep",
           "BENCHRUN_REPLICATE": "1", "BENCHRUN_CASE_ID": "case-1", "BENCHRUN_PARAMS": json.dumps(params),
           "BENCHRUN_WORKLOAD": json.dumps({"model": "m", "concurrencyModel": "open_loop", **workload})}
    serving_sweep.run(SuiteContext(env))


def test_serving_sweep_trace_with_a_dataset_or_sessions_is_refused(tmp_path):
    tr = str(_trace(tmp_path))
    with pytest.raises(BenchrunError, match="parameter trace .*workload.dataset"):
        _suite(tmp_path / "a", {"trace": tr}, dataset={"path": str(SHIPPED)})
    with pytest.raises(BenchrunError, match="parameter trace .*parameter session_turns"):
        _suite(tmp_path / "b", {"trace": tr, "session_turns": 2})
    with pytest.raises(BenchrunError, match="parameter trace .*parameter tokenizer, parameter shared_prefix"):
        _suite(tmp_path / "c", {"trace": tr, "tokenizer": "t.json", "shared_prefix": "2,2,8"})


# -- 3. an arrival shape on a closed loop, replay options without a trace -----------------------


@pytest.mark.parametrize("args, names", [
    (["--concurrency", "2", "--burstiness", "0.5"], ["--burstiness", "--concurrency"]),
    (["--concurrency", "2", "--arrival", "gamma"], ["--arrival", "--concurrency"]),
    (["--concurrency", "saturate:1:2:8", "--arrival", "constant", "--burstiness", "2"], ["--arrival and --burstiness"]),
    (["--concurrency", "2", "--speedup", "2"], ["--speedup", "--trace"]),
    (["--rate", "2", "--trace-format", "csv"], ["--trace-format", "--trace"]),
])
def test_options_of_another_load_model_are_refused(tmp_path, monkeypatch, capsys, args, names):
    _refused(["--url", URL, "--out", str(tmp_path / "o"), "--requests", "4", *args], monkeypatch, capsys, *names)


def test_an_arrival_shape_beside_a_trace_is_refused(tmp_path, monkeypatch, capsys):
    _refused(["--url", URL, "--out", str(tmp_path / "o"), "--trace", str(_trace(tmp_path)), "--arrival", "constant"],
             monkeypatch, capsys, "--arrival", "--trace")


def test_closed_loop_stages_take_no_arrival_shape():
    from benchrun.loadgen.schedule import parse_stages

    with pytest.raises(ValueError, match="closed loop .*burstiness 0.5"):
        parse_stages("1,2", "closed_loop", arrival="gamma", burstiness=0.5)
    assert [p.offered_load for p in parse_stages("1,2", "closed_loop")[0]] == [1, 2]


def _ctx(tmp_path: Path, suite: str, params: dict, **workload):
    from benchrun.suites._runtime import SuiteContext

    return SuiteContext({"BENCHRUN_RUN_ID": "r1", "BENCHRUN_RUN_DIR": str(tmp_path), "BENCHRUN_SUITE": suite,
                         "BENCHRUN_REPLICATE": "1", "BENCHRUN_CASE_ID": "case-1", "BENCHRUN_PARAMS": json.dumps(params),
                         "BENCHRUN_WORKLOAD": json.dumps({"model": "m", **workload})})


SWEEP_REFUSALS = [
    ({"stages": "ramp:1:4:2", "burstiness": 0.5}, {}, "parameter burstiness shapes open-loop arrivals.*closed loop"),
    ({"concurrency": [2], "arrival": "gamma"}, {"concurrencyModel": "closed_loop"}, "parameter arrival shapes"),
    ({"concurrency": [2], "speedup": 2}, {}, "parameter speedup applies to a trace replay only"),
    ({"rates": [2], "trace_format": "csv", "speedup": 2}, {}, "parameters speedup and trace_format apply"),
    ({"trace": "t.csv", "stages": "ramp:1:4:2", "burstiness": 0.5}, {"concurrencyModel": "open_loop"},
     "parameter trace replays .* stages, burstiness cannot apply"),
    # one of them was used and the others dropped unseen
    ({"concurrency": [2], "rates": [4]}, {}, r"parameters concurrency and rates each set .* give one of concurrency, rates, stages"),
    ({"rates": [4], "stages": "ramp:1:4:2"}, {"concurrencyModel": "open_loop"}, "parameters rates and stages each set"),
    ({"concurrency": [2], "rates": [4], "stages": "1,2"}, {"concurrencyModel": "closed_loop"},
     "parameters concurrency and rates and stages each set"),
]


@pytest.mark.parametrize("params, workload, match", SWEEP_REFUSALS)
def test_serving_sweep_refuses_parameters_it_would_drop(tmp_path, params, workload, match):
    from benchrun.suites import serving_sweep

    with pytest.raises(BenchrunError, match=match):
        serving_sweep.run(_ctx(tmp_path, "serving_sweep", params, **workload))


def _validated(canary_doc, write_spec, suite_name, params, workload):
    """The findings ``benchrun validate`` gives the canary with ``suite_name``'s parameters and
    ``spec.workload`` changed as given (a workload key set to None is removed)."""
    from benchrun.spec.validation import validate_path

    [at] = [(i, j) for i, layer in enumerate(canary_doc["spec"]["layers"])
            for j, s in enumerate(layer["suites"]) if s["name"] == suite_name]
    canary_doc["spec"]["layers"][at[0]]["suites"][at[1]]["parameters"] = params
    wl = canary_doc["spec"]["workload"]
    for k, v in workload.items():
        wl.pop(k) if v is None else wl.__setitem__(k, v)
    (res,) = validate_path(write_spec(canary_doc))
    return f"spec.layers[{at[0]}].suites[{at[1]}].parameters", res


@pytest.mark.parametrize("params, workload, match", SWEEP_REFUSALS + [
    ({"concurrency": [2], "arrival": "constant"}, {"concurrencyModel": None}, "parameter arrival shapes"),
    ({"trace": "t.csv"}, {"dataset": {"path": "specs/datasets/benchrun-conversations.jsonl"}},
     "trace replays the trace's own prompts.*workload.dataset cannot apply"),
    ({"rates": [2, 4]}, {"concurrencyModel": "closed_loop"}, "closed_loop but only 'rates' was given"),
])
def test_validate_reports_what_serving_sweep_would_refuse_when_it_starts(canary_doc, write_spec, tmp_path, params,
                                                                          workload, match):
    """Each was "valid", and the run then failed every replicate with that line in its logs."""
    import re

    from benchrun.suites import serving_sweep

    workload = {"concurrencyModel": None, **workload}
    where, res = _validated(canary_doc, write_spec, "serving_sweep", params, workload)
    said = [e.message for e in res.errors if e.path == where]
    assert not res.valid and any(re.search(match, m) for m in said), res.errors
    assert all(m.startswith("serving_sweep: ") for m in said)
    # and the suite refuses the same spec with the first of them when it starts
    wl = {k: v for k, v in canary_doc["spec"]["workload"].items() if k in ("concurrencyModel", "dataset")}
    with pytest.raises(BenchrunError) as refused:
        serving_sweep.run(_ctx(tmp_path, "serving_sweep", params, **wl))
    assert str(refused.value) == said[0]


def test_validate_reports_an_arrival_on_serving_workflows_closed_loop(canary_doc, write_spec):
    where, res = _validated(canary_doc, write_spec, "serving_workflow", {"concurrency": 4, "arrival": "poisson"}, {})
    assert [e.message for e in res.errors if e.path == where] == [
        "serving_workflow: parameter arrival shapes open-loop arrivals, but this point is closed loop: set "
        "workload.concurrencyModel: open_loop and give 'rate', or leave it out"], res.errors


def test_validate_passes_the_shipped_serving_parameters(canary_doc, write_spec):
    where, res = _validated(canary_doc, write_spec, "serving_sweep",
                            canary_doc["spec"]["layers"][1]["suites"][0]["parameters"], {})
    assert res.valid, res.errors


def test_serving_workflow_refuses_an_arrival_on_a_closed_loop(tmp_path):
    from benchrun.suites import serving_workflow

    with pytest.raises(BenchrunError, match="parameter arrival shapes open-loop arrivals"):
        serving_workflow.run(_ctx(tmp_path, "serving_workflow", {"concurrency": 2, "arrival": "constant"}))


@pytest.mark.parametrize("workload", [{}, {"concurrencyModel": "open_loop"}, {"concurrencyModel": "closed_loop"}])
def test_serving_workflow_refuses_both_a_concurrency_and_a_rate(tmp_path, canary_doc, write_spec, workload):
    """The load model picked one and the other was dropped unseen; validate called it valid."""
    from benchrun.suites import serving_workflow

    msg = "serving_workflow: parameters concurrency and rate each set the point's load; give one of concurrency (closed loop), rate (open loop)"
    with pytest.raises(BenchrunError) as refused:
        serving_workflow.run(_ctx(tmp_path, "serving_workflow", {"concurrency": 2, "rate": 4.0}, **workload))
    assert str(refused.value) == msg
    where, res = _validated(canary_doc, write_spec, "serving_workflow", {"concurrency": 2, "rate": 4.0},
                            {"concurrencyModel": workload.get("concurrencyModel")})
    assert [e.message for e in res.errors if e.path == where] == [msg], res.errors


def test_the_docs_spec_example_is_an_open_loop_gamma_sweep(tmp_path):
    import re

    import yaml

    from benchrun.suites import serving_sweep

    text = (ROOT / "docs/serving-load.md").read_text(encoding="utf-8").split("## In a spec", 1)[1]
    doc = yaml.safe_load(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))["spec"]
    [suite] = doc["layers"][0]["suites"]
    params, model = suite["parameters"], doc["workload"]["concurrencyModel"]
    serving_sweep.check_known(_ctx(tmp_path, "serving_sweep", params), serving_sweep.PARAMETERS)
    points = serving_sweep.sweep_points(_ctx(tmp_path, "serving_sweep", params, concurrencyModel=model), model)
    assert [p.label for p in points] == [f"rate={r},burstiness=0.5" for r in (2, 4, 8, 16, 32, 64)]
    with pytest.raises(BenchrunError, match="burstiness"):  # without the workload's open_loop: refused
        serving_sweep.sweep_points(_ctx(tmp_path, "serving_sweep", params), "")


# -- 4. a trace's speedup is checked before the trace's times are divided by it -----------------


@pytest.mark.parametrize("speedup", ["0", "-1", "inf"])
@pytest.mark.parametrize("cut", [[], ["--duration", "1"]])
def test_a_speedup_that_is_not_positive_and_finite_is_one_line(tmp_path, monkeypatch, capsys, speedup, cut):
    _refused(["--url", URL, "--out", str(tmp_path / "o"), "--trace", str(_trace(tmp_path)), "--speedup", speedup, *cut],
             monkeypatch, capsys, "--speedup", "positive")


def test_trace_point_and_select_check_the_speedup_first():
    from benchrun.loadgen import trace

    entries = (trace.TraceEntry(0.0, 8, 2), trace.TraceEntry(0.5, 8, 2))
    for bad in (0, 0.0, -2.0, float("inf"), float("nan")):
        with pytest.raises(trace.TraceError, match="speedup"):
            trace.trace_point(entries, bad)
        with pytest.raises(trace.TraceError, match="speedup"):
            trace.select(entries, None, 1.0, bad)
    assert trace.trace_point(entries, 2.0).offered_load == pytest.approx(4.0)


# -- 6. --api and a --url whose path names the other API -----------------------------------------


@pytest.mark.parametrize("path, api", [("/v1/completions", "chat"), ("/v1/chat/completions", "completions")])
def test_an_api_the_url_contradicts_is_refused(tmp_path, monkeypatch, capsys, path, api):
    err = _refused(["--url", URL + path, "--api", api, "--out", str(tmp_path / "o"), "--concurrency", "1",
                    "--requests", "2"], monkeypatch, capsys, "--api", "--url")
    assert "cannot reach" not in err  # refused before any request


def test_the_url_still_decides_when_no_api_is_given():
    from benchrun.loadgen.endpoint import Endpoint, EndpointError

    assert Endpoint.from_url(URL + "/v1/chat/completions").api == "chat"
    assert Endpoint.from_url(URL + "/v1/chat/completions", "chat").api == "chat"
    assert Endpoint.from_url(URL + "/v1/completions").api == "completions"
    assert Endpoint.from_url(URL, "chat").path == "/v1/chat/completions" and Endpoint.from_url(URL).api == "completions"
    with pytest.raises(EndpointError, match="--api chat conflicts with --url"):
        Endpoint.from_url(URL + "/v1/completions", "chat")
    cfg = SweepConfig(url=URL + "/v1/chat/completions", model="m", mix=tuple(parse_mix("8/2")),
                      points=(LoadPoint("closed_loop", 1),), requests_per_point=1)
    cfg.check()  # no api given: the URL's
    with pytest.raises(BenchrunError, match="conflicts"):
        SweepConfig(**{**cfg.__dict__, "api": "completions"}).check()


def test_dataset_format_without_a_dataset_is_refused(tmp_path, monkeypatch, capsys):
    """`--trace T --dataset-format sharegpt` ran the replay and ignored the option (docs review)."""
    _refused(["--url", URL, "--out", str(tmp_path / "o"), "--trace", str(_trace(tmp_path)), "--dataset-format",
              "sharegpt"], monkeypatch, capsys, "--dataset-format")


def test_a_spec_trace_is_a_trace_file_never_another_file_of_the_machine(tmp_path, monkeypatch):
    # security review: trace: /proc/self/environ was admitted, and at run time the CSV header error copied
    # the pod's environment (its S3 keys, envFrom a Secret) into the signed result's reason
    from benchrun.loadgen.trace import TraceError
    from benchrun.suites._common import ParamError
    from benchrun.suites.serving_sweep import check_parameters

    for bad, said in (("/proc/self/environ", "is not a trace file"), ("../up/t.csv", "'..' is not allowed"),
                      (7, "must be the path of a trace file"), ("notes.txt", "is not a trace file")):
        with pytest.raises(ParamError, match=said) as caught:
            check_parameters({"trace": bad})
        assert caught.value.parameter == "trace"
    check_parameters({"trace": "/data/traces/azure.csv"})  # a volume where the suite runs: read there
    # a link named like a trace that leads to another file is refused where the suite reads it
    secret = tmp_path / "credentials"
    secret.write_text("aws_secret_access_key=wJalrXUtnFEMI-DEMO\n")
    (tmp_path / "t.csv").symlink_to(secret)
    with pytest.raises(TraceError, match="leads to .*credentials, which is not a trace file") as caught:
        _suite(tmp_path / "a", {"trace": str(tmp_path / "t.csv")})
    assert "wJalrXUtnFEMI" not in str(caught.value)
    # a file named .csv that is not a trace: its header is not copied into the error
    fake = tmp_path / "fake.csv"
    fake.write_text("PATH=/usr/bin\x00AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI-DEMO\x00\n1,2,3\n")
    with pytest.raises(TraceError, match="CSV header of 1 field") as caught:
        _suite(tmp_path / "b", {"trace": str(fake)})
    assert "wJalrXUtnFEMI" not in str(caught.value)
    plain = tmp_path / "plain.csv"  # a header of column names is still shown, to say what is wrong with it
    plain.write_text("time,prompt,reply\n0,8,2\n")
    with pytest.raises(TraceError, match=r"CSV header \['time', 'prompt', 'reply'\]"):
        _suite(tmp_path / "c", {"trace": str(plain)})


def test_a_replayed_trace_records_the_digest_of_its_bytes(tmp_path):
    import hashlib

    from benchrun.loadgen import trace

    tr = _trace(tmp_path)
    entries = trace.load_trace(tr)
    assert trace.describe(entries, str(tr), 1.0)["sha256"] == hashlib.sha256(tr.read_bytes()).hexdigest()
