"""Planning: replicates, interleaving, placeholders per argument, explicit environment."""

import json
import re
import sys

import pytest

from benchrun.errors import BenchrunError
from benchrun.plan import build_argv, case_id, plan_run
from benchrun.spec import load_spec
from helpers import tiny_spec

RUN_ID = "p-20260101000000-00000000"


@pytest.fixture
def spec_path(canary_doc, write_spec):
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc,
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


def test_a_substituted_env_name_that_benchrun_sets_is_refused_at_launch_too():
    """Admission refuses a placeholder in a leading env's NAME; the argv is checked again after
    substitution, so a value can never name BENCHRUN_PARAMS and run with parameters not recorded."""
    command = "env '${SUITE}={\"sizes\": [32]}' python -m benchrun.suites.gemm"
    with pytest.raises(BenchrunError, match=re.escape("x: `env BENCHRUN_PARAMS=...` in the command: BENCHRUN_PARAMS "
                                                      "is set by benchrun for every suite")):
        build_argv(command, {"SUITE": "BENCHRUN_PARAMS"}, where="x")
    with pytest.raises(BenchrunError, match="is not a variable name"):
        build_argv(command, {"SUITE": "A B"}, where="x")
    assert build_argv(command, {"SUITE": "MY_PARAMS"}, where="x")[1] == 'MY_PARAMS={"sizes": [32]}'


def test_unparseable_command_is_a_clear_error():
    with pytest.raises(BenchrunError, match="cannot parse the command"):
        build_argv("echo 'unterminated", {}, where="x")


def test_multi_node_suite_keeps_gang_placeholders_until_a_node_resolves_them(canary_doc, write_spec, tmp_path):
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc,
        [{"name": "t", "nodes": 2, "gpusPerNode": 4,
          "repoCommand": "torchrun --nnodes ${NNODES} --node-rank ${NODE_RANK} --rdzv-endpoint ${MASTER_ADDR}:29500 "
                         "--hosts=${HOSTS} train.py"},
         {"name": "one", "repoCommand": "/bin/echo ${NODE_RANK} ${MASTER_ADDR}:${MASTER_PORT} ${NNODES}"}],
    )
    micro = plan_run(load_spec(write_spec(canary_doc)).run, RUN_ID, tmp_path / "run")[0]
    t1 = next(i for i in micro.invocations if i.suite == "t")
    assert (t1.nodes, t1.ranks_per_node, t1.world_size, t1.is_gang) == (2, 4, 8, True)
    assert t1.to_json()["argv"][1:] == ["--nnodes", "${NNODES}", "--node-rank", "${NODE_RANK}", "--rdzv-endpoint",
                                        "${MASTER_ADDR}:29500", "--hosts=${HOSTS}", "train.py"]
    assert t1.node_argv(1, master_addr="t-0.svc", master_port=1234, hosts="a,b")[1:] == (
        "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "t-0.svc:29500", "--hosts=a,b", "train.py")
    env = t1.node_env(1, master_addr="t-0.svc", master_port=1234)
    assert env["WORLD_SIZE"] == "8" and env["LOCAL_WORLD_SIZE"] == "4" and env["NODE_RANK"] == "1"
    assert "RANK" not in env  # four ranks per node: the node's launcher (torchrun) assigns them
    one = next(i for i in micro.invocations if i.suite == "one")
    assert one.argv == ("/bin/echo", "0", "localhost:29500", "1") and not one.is_gang


def test_suite_env_and_env_command_forms_reach_the_suite_with_the_projects_python(canary_doc, write_spec, tmp_path):
    """Issue 28 item 8: `env OMP_NUM_THREADS=1 python -m ...` ran the `python` on PATH (only a
    leading `python` was resolved); a spec's `env:` is passed as data; both are recorded."""
    from benchrun.launch.local import LocalLauncher

    probe = "import os, sys; print(sys.executable, os.environ['OMP_NUM_THREADS'], os.environ['GREETING'])"
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [
        {"name": "pinned", "repoCommand": f"env OMP_NUM_THREADS=1 python -c \"{probe}\"",
         "env": {"GREETING": "hello; rm -rf / $(id)"}}])
    run_dir = tmp_path / "runs" / RUN_ID
    for sub in ("raw", "structured"):
        (run_dir / sub).mkdir(parents=True)
    inv = plan_run(load_spec(write_spec(canary_doc)).run, RUN_ID, run_dir)[0].invocations[0]
    assert inv.argv[:3] == ("env", "OMP_NUM_THREADS=1", sys.executable)
    assert inv.env["GREETING"] == "hello; rm -rf / $(id)"
    assert inv.to_json()["suite_env"] == {"GREETING": "hello; rm -rf / $(id)", "OMP_NUM_THREADS": "1"}
    LocalLauncher().launch(inv, run_dir)
    assert (run_dir / inv.log_relpath()).read_text().split("\n")[0] == f"{sys.executable} 1 hello; rm -rf / $(id)"


def test_the_environment_a_suite_ran_with_is_in_its_result(canary_doc, write_spec, tmp_path):
    """Issue 28 item 8: the spec's env: and a command's `env NAME=value` reach the suite's result
    document (declared and as the process saw them), not only the plan."""
    import json

    from benchrun.launch.local import LocalLauncher
    from benchrun.suites.result import result_path

    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [
        {"name": "gemm", "repoCommand": "env OMP_NUM_THREADS=1 python -m benchrun.suites.gemm",
         "env": {"OPENBLAS_NUM_THREADS": "1"}, "parameters": {"sizes": [32], "iterations": 2}}])
    run_dir = tmp_path / "runs" / RUN_ID
    for sub in ("raw", "structured"):
        (run_dir / sub).mkdir(parents=True)
    inv = plan_run(load_spec(write_spec(canary_doc)).run, RUN_ID, run_dir)[0].invocations[0]
    res = LocalLauncher().launch(inv, run_dir)
    assert res.status == "ok", res.reason
    doc = json.loads(result_path(run_dir, RUN_ID, "gemm", 1).read_text())
    want = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    assert doc["context"]["suite_env"] == {"declared": want, "seen": want}


@pytest.mark.parametrize("command,match", [
    ("env -i python -m benchrun.suites.gemm", "`env -i` would drop variables benchrun passes"),
    ("env -u BENCHRUN_RUN_ID python -m benchrun.suites.gemm", "`env -u` would drop"),
    ("env BENCHRUN_RUN_ID=x python -m benchrun.suites.gemm", "`env BENCHRUN_RUN_ID=...`: BENCHRUN_RUN_ID is set by benchrun"),
    ("env MASTER_PORT=1 python -m benchrun.suites.gemm", "MASTER_PORT is set by benchrun"),
    ("env --weird python -m benchrun.suites.gemm", "uses an option benchrun does not read"),
    # a placeholder names the variable only at launch: a suite named BENCHRUN_PARAMS made ${SUITE} it
    ("env '${SUITE}={\"sizes\": [32]}' python -m benchrun.suites.gemm",
     "`env ${SUITE}=...`: a variable's name is written out as letters, digits and _ (placeholders are "
     "substituted in values only)"),
])
def test_an_env_command_cannot_clear_or_take_what_benchrun_sets(canary_doc, write_spec, command, match):
    tiny_spec(canary_doc, [{"name": "s", "repoCommand": command}])
    with pytest.raises(BenchrunError, match=re.escape(match)):
        load_spec(write_spec(canary_doc))


@pytest.mark.parametrize("name", ["BENCHRUN_RUN_ID", "DAGSTER_PIPES_CONTEXT", "MASTER_PORT", "1BAD", "A-B"])
def test_a_suite_env_that_benchrun_sets_itself_or_no_variable_name_is_refused(canary_doc, write_spec, name):
    tiny_spec(canary_doc, [{"name": "s", "repoCommand": "python -c pass", "env": {name: "x"}}])
    with pytest.raises(BenchrunError, match="env"):
        load_spec(write_spec(canary_doc))
