"""Planning: replicates, interleaving, placeholders per argument, explicit environment."""

import json
import sys

import pytest

from benchrun.errors import BenchrunError
from benchrun.plan import build_argv, case_id, plan_run
from benchrun.spec import load_spec
from helpers import tiny_layers

RUN_ID = "p-20260101000000-00000000"


@pytest.fixture
def spec_path(canary_doc, write_spec):
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    canary_doc["spec"]["layers"] = tiny_layers(
        [{"name": "a", "repoCommand": "python -m benchrun.suites.gemm --run ${RUN_ID} --rep ${REPLICATE}",
          "parameters": {"sizes": [64]}},
         {"name": "b", "repoCommand": "/bin/echo ${RUN_DIR} ${HOSTS}", "replicates": 4, "timeoutSeconds": 7}],
        [],
    )
    return write_spec(canary_doc)


def test_layers_replicates_and_interleaving(spec_path, tmp_path):
    plans = plan_run(load_spec(spec_path).run, RUN_ID, tmp_path / "run")
    assert [p.name for p in plans] == ["micro", "component", "end_to_end"]
    micro = plans[0]
    order = [(i.suite, i.replicate) for i in micro.invocations]
    assert order == [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3), ("b", 3), ("b", 4)]
    assert not plans[1].enabled and plans[1].skip_reason


def test_argv_substitution_env_and_timeouts(spec_path, tmp_path):
    micro = plan_run(load_spec(spec_path).run, RUN_ID, tmp_path / "run")[0]
    a2 = next(i for i in micro.invocations if i.suite == "a" and i.replicate == 2)
    assert a2.argv == (sys.executable, "-m", "benchrun.suites.gemm", "--run", RUN_ID, "--rep", "2")
    assert json.loads(a2.env["BENCHRUN_PARAMS"]) == {"sizes": [64]}
    workload = json.loads(a2.env["BENCHRUN_WORKLOAD"])
    assert workload["sequenceLengthMix"] and "slo" in workload
    assert a2.timeout_s == 600.0
    b1 = next(i for i in micro.invocations if i.suite == "b")
    assert b1.argv == ("/bin/echo", str(tmp_path / "run"), "localhost")
    assert b1.timeout_s == 7.0


def test_case_id_is_stable_and_sensitive():
    assert case_id("r", "micro", "gemm", {"n": 1}) == case_id("r", "micro", "gemm", {"n": 1})
    assert case_id("r", "micro", "gemm", {"n": 1}) != case_id("r", "micro", "gemm", {"n": 2})


def test_site_placeholder_without_value_is_a_clear_error():
    with pytest.raises(BenchrunError, match=r"\$\{SSH_KEY\} has no value: set BENCHRUN_VAR_SSH_KEY"):
        build_argv("ssh -i ${SSH_KEY} host", {}, where="spec.layers[micro].suites[0]")


def test_unparseable_command_is_a_clear_error():
    with pytest.raises(BenchrunError, match="cannot parse the command"):
        build_argv("echo 'unterminated", {}, where="x")
