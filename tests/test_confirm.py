"""The confirmation round re-runs suites of both arms, interleaved, outside the sealed runs."""

import pytest

from benchrun import submit as sub
from benchrun.confirm import confirmation_hook, confirmation_invocations
from benchrun.rundir import RunDir
from helpers import tiny_layers

GEMM = {"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "parameters": {"sizes": [32], "iterations": 2}}
ECHO = {"name": "other", "repoCommand": "/bin/true"}


def _run(doc, write_spec, name, now_s):
    import datetime as dt

    doc = {**doc, "metadata": {**doc["metadata"], "name": name}}
    p = sub.prepare(write_spec(doc, f"{name}.yaml"), now=dt.datetime(2026, 1, 1, 0, 0, now_s, tzinfo=dt.timezone.utc))
    return p.run_id


@pytest.mark.slow
def test_confirmation_round_interleaves_and_leaves_sealed_runs_alone(bench_home, canary_doc, write_spec):
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    canary_doc["spec"]["layers"] = tiny_layers([GEMM, ECHO])
    base = _run(canary_doc, write_spec, "base", 1)
    cand = _run(canary_doc, write_spec, "cand", 2)
    order, dirs = confirmation_invocations(bench_home, base, cand, {"gemm"})
    assert [(arm, inv.replicate) for arm, inv in order] == [
        ("baseline", 1), ("candidate", 1), ("baseline", 2), ("candidate", 2), ("baseline", 3), ("candidate", 3)]
    assert all(inv.suite == "gemm" for _, inv in order)
    hook = confirmation_hook(bench_home, base, cand)
    b, c = hook([("gemm", "n=32", "tflops")])
    assert sorted(b["replicate"].unique()) == [1, 2, 3] and sorted(c["replicate"].unique()) == [1, 2, 3]
    assert (b["value"] > 0).all()
    # Nothing was written into the sealed run directories.
    assert not list((RunDir.for_run(cand).path / "structured").glob("*_gemm_r*.json"))
    assert dirs["candidate"] == bench_home / "confirmations" / cand / "candidate" / cand
