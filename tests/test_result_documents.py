"""A suite result document that is malformed or holds no measurement is an error naming the file
and the field — never a traceback, and never a value the comparison would read (a review found
``Infinity`` accepted as a throughput and a ``"replicate": "two"`` ending in a ValueError)."""

from __future__ import annotations

import json
import math

import pytest

from benchrun.errors import BenchrunError
from benchrun.stats.load import replicate_table
from benchrun.stats.synthetic import make_run
from benchrun.suites.result import metric, read_result


def _doc(**over):
    doc = {"schema": "benchrun.suite-result/v1", "suite": "serve", "replicate": 1, "status": "ok",
           "metrics": [{"name": "tps", "value": 100.0, "unit": "tok/s", "direction": "higher", "case": ""}]}
    doc.update(over)
    return doc


@pytest.mark.parametrize("over, says", [
    ({"metrics": [{"name": "tps", "value": math.inf, "unit": "tok/s", "direction": "higher"}]},
     "metric 'tps' has the value inf, not a finite number"),
    ({"metrics": [{"name": "tps", "value": math.nan, "unit": "tok/s", "direction": "higher"}]},
     "metric 'tps' has the value nan, not a finite number"),
    ({"metrics": [{"name": "tps", "value": True, "unit": "", "direction": "higher"}]},
     "metric 'tps' lacks a numeric value or direction"),
    ({"metrics": [{"value": 1.0, "unit": "", "direction": "higher"}]}, "metrics[0] is not a metric object with a name"),
    ({"metrics": ["tps"]}, "metrics[0] is not a metric object with a name"),
    ({"metrics": {"name": "tps"}}, "metrics must be a list of metric objects, not a dict"),
    ({"replicate": "two"}, "replicate must be an integer, not 'two'"),
    # before: a rank_id the warehouse could not key (int64) crashed warehouse_tables with a traceback
    ({"metrics": [{"name": "tps", "value": 1.0, "unit": "", "direction": "higher", "rank_id": "rank-0"}]},
     "metric 'tps' has rank_id 'rank-0': give the rank as a non-negative integer"),
    ({"metrics": [{"name": "tps", "value": 1.0, "unit": "", "direction": "higher", "rank_id": 1.5}]},
     "metric 'tps' has rank_id 1.5"),
])
def test_a_malformed_result_document_is_refused_naming_the_file_and_field(tmp_path, over, says):
    from benchrun.suites.result import SCHEMA

    p = tmp_path / "x_serve_r1.json"
    p.write_text(json.dumps({**_doc(**over), "schema": SCHEMA}))  # json writes inf/nan as Infinity/NaN
    with pytest.raises(ValueError) as exc:
        read_result(p)
    assert str(p) in str(exc.value) and says in str(exc.value)


def test_a_comparison_refuses_a_run_with_such_a_document_instead_of_a_traceback(tmp_path):
    rd = make_run(tmp_path, "cand", {("serve", "", "tps"): ([100.0, 101.0, 99.0], "tok/s", "higher")}, manifest=False)
    p = rd / "structured" / "cand_serve_r2.json"
    doc = json.loads(p.read_text())
    doc["metrics"][0]["value"] = math.inf
    p.write_text(json.dumps(doc))
    with pytest.raises(BenchrunError, match=r"cand_serve_r2.json: metric 'tps' has the value inf.*fix or remove"):
        replicate_table(rd)


def test_a_suite_cannot_record_a_value_that_is_not_finite():
    with pytest.raises(ValueError, match="metric 'p99_ms': value nan is not a finite number"):
        metric("p99_ms", math.nan, "ms", "lower")


def test_validate_refuses_an_unknown_builtin_suite_and_a_parameter_it_does_not_take(tmp_path, canary_doc):
    """Both were "valid"; the run then failed every replicate with the reason only in its logs."""
    import yaml

    from benchrun.spec.validation import validate_path

    gemm = canary_doc["spec"]["layers"][0]["suites"][0]
    assert gemm["name"] == "gemm"
    gemm["parameters"]["sizez"] = gemm["parameters"].pop("sizes")
    canary_doc["spec"]["layers"][0]["suites"][1]["repoCommand"] = "env OMP_NUM_THREADS=1 python -m benchrun.suites.membwx"
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(canary_doc, sort_keys=False))
    (res,) = validate_path(p)
    said = {e.path: e.message for e in res.errors}
    assert not res.valid and len(said) == 2, said
    assert said["spec.layers[0].suites[0].parameters.sizez"].startswith(
        "'sizez' is not a parameter of gemm (did you mean 'sizes'?); it takes device, dtype, iterations, sizes")
    assert said["spec.layers[0].suites[1].repoCommand"].startswith(
        "benchrun.suites.membwx is not one of benchrun's suites (did you mean 'membw'?); they are allreduce, ")
    assert "result" not in said["spec.layers[0].suites[1].repoCommand"].split("they are ")[1].split(", ")
    # a module below a suite module (gemm is no package): refused the same way, not a traceback
    canary_doc["spec"]["layers"][0]["suites"][1]["repoCommand"] = "python -m benchrun.suites.gemm.main"
    p.write_text(yaml.safe_dump(canary_doc, sort_keys=False))
    (res,) = validate_path(p)
    said = {e.path: e.message for e in res.errors}
    assert said["spec.layers[0].suites[1].repoCommand"].startswith("benchrun.suites.gemm.main is not one of")


def test_validate_refuses_parameter_values_every_replicate_would_refuse(tmp_path, canary_doc):
    """Names and conflicts were checked, values not: gemm iterations: 0 was "valid" and then every
    replicate failed with ParamError. Each suite's check_parameters runs the suite's own parsing."""
    import yaml

    from benchrun.spec.validation import validate_path

    layer = canary_doc["spec"]["layers"][0]["suites"]
    gemm, membw = layer[0], layer[1]
    assert (gemm["name"], membw["name"]) == ("gemm", "membw")
    cases = [
        (gemm, "iterations", 0, "gemm: parameter iterations=0 must be an integer between 1 and 100000"),
        (gemm, "iterations", 10.5, "gemm: parameter iterations=10.5 must be an integer >= 1"),
        (gemm, "sizes", [-5], "gemm: parameter sizes: -5 must be >= 1"),
        (gemm, "dtype", "int4x", "gemm: parameter dtype='int4x' must be one of auto, float32, float64, bfloat16, "
                                 "float16, float8_e4m3fn"),
        (gemm, "device", "tpu", "gemm: parameter device='tpu' must be one of auto, cpu, cuda"),
        (membw, "elements", "lots", "membw: parameter elements='lots' must be an integer >= 1024"),
    ]
    p = tmp_path / "bad.yaml"
    for suite, key, value, message in cases:
        before = suite["parameters"].get(key)
        suite["parameters"][key] = value
        p.write_text(yaml.safe_dump(canary_doc, sort_keys=False))
        (res,) = validate_path(p)
        i = layer.index(suite)
        assert [(e.path, e.message) for e in res.errors] == [(f"spec.layers[0].suites[{i}].parameters.{key}", message)]
        if before is None:
            del suite["parameters"][key]
        else:
            suite["parameters"][key] = before
    p.write_text(yaml.safe_dump(canary_doc, sort_keys=False))
    assert validate_path(p)[0].valid


def test_the_non_serving_suites_check_their_values_with_the_parsing_they_start_with():
    from functools import partial

    from benchrun.spec.builtin_suites import check_parameters
    from benchrun.suites._common import ParamError

    bad = {"gemm": {"warmup": -1}, "membw": {"dtype": "float16"}, "fio": {"ioengine": "psync", "iodepth": 8},
           "allreduce": {"sizes": [2**35]}, "dataloader": {"workers": 1000}, "job_startup": {"launches": 0},
           "training": {"hidden": 65, "heads": 4}}
    for name, params in bad.items():
        check = partial(check_parameters, name)
        check({})  # the defaults are valid
        with pytest.raises(ParamError) as caught:
            check(params)
        assert caught.value.parameter in params, (name, str(caught.value))
    # a gang's world size is nodes x gpusPerNode: world_size is refused for nodes > 1, as at start-up
    check_parameters("training", {"world_size": 2})
    with pytest.raises(ParamError, match="parameter world_size: a multi-node suite's world size"):
        check_parameters("training", {"world_size": 2}, nodes=2)


def test_the_serving_suites_check_their_load_points_and_counts(tmp_path, canary_doc):
    """serving_sweep concurrency: ["a"] and serving_workflow requests: 0 were "valid"; every replicate
    then failed. Their check_parameters runs the load-point parsing they start with."""
    import yaml

    from functools import partial

    from benchrun.spec.builtin_suites import check_parameters
    from benchrun.spec.validation import validate_path
    from benchrun.suites._common import ParamError

    sweep, workflow = partial(check_parameters, "serving_sweep"), partial(check_parameters, "serving_workflow")
    for check in (sweep, workflow):
        check({})  # the defaults are valid
    for params, named in (({"concurrency": ["a"]}, "concurrency"), ({"requests_per_point": 0}, "requests_per_point"),
                          ({"rates": [0]}, None), ({"stages": "nonsense"}, None), ({"duration_s": -1}, "duration_s"),
                          ({"trace": "t.csv", "speedup": 0}, "speedup"), ({"goodput_drop": "x"}, "goodput_drop")):
        with pytest.raises(ParamError) as caught:
            sweep(params)
        assert named is None or caught.value.parameter == named, (params, str(caught.value))
    sweep({"trace": "/nowhere/t.csv"})  # the file is read where the suite runs
    for params, named in (({"requests": 0}, "requests"), ({"concurrency": 0}, "concurrency"),
                          ({"rate": "fast"}, "rate")):
        with pytest.raises(ParamError) as caught:
            workflow(params, workload={"concurrencyModel": "open_loop"} if "rate" in params else None)
        assert caught.value.parameter == named, (params, str(caught.value))

    layers = canary_doc["spec"]["layers"]
    [(li, si)] = [(i, j) for i, layer in enumerate(layers) for j, s in enumerate(layer["suites"])
                  if s["name"] == "serving_workflow"]
    layers[li]["suites"][si].setdefault("parameters", {})["requests"] = 0
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(canary_doc, sort_keys=False))
    (res,) = validate_path(p)
    assert [(e.path, e.message) for e in res.errors] == [
        (f"spec.layers[{li}].suites[{si}].parameters.requests",
         "serving_workflow: parameter requests=0 must be an integer >= 1")]


def test_every_builtin_suite_declares_the_parameters_it_checks():
    import importlib

    from benchrun.spec.builtin_suites import PACKAGE, builtin_suites

    names = builtin_suites()
    assert {"gemm", "membw", "fio", "allreduce", "dataloader", "job_startup", "serving_sweep", "serving_workflow",
            "training"} <= set(names)
    for name in names:
        params = getattr(importlib.import_module(f"{PACKAGE}.{name}"), "PARAMETERS", None)
        assert isinstance(params, tuple) and params and all(isinstance(p, str) for p in params), name
