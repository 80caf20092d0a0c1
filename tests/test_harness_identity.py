"""Which benchrun measured: the environment capture records the harness's own code, and the
one-variable gate notes a comparison across two harnesses without refusing it."""

from __future__ import annotations

import subprocess

import pytest

from benchrun import harness
from benchrun.stats.synthetic import make_run


def test_the_source_digest_follows_the_code_not_where_it_lies(tmp_path):
    a, b = tmp_path / "a" / "pkg", tmp_path / "b" / "pkg"
    for root in (a, b):
        (root / "sub").mkdir(parents=True)
        (root / "__init__.py").write_text("x = 1\n")
        (root / "sub" / "timer.py").write_text("def now(): ...\n")
        (root / "__pycache__").mkdir()
        (root / "__pycache__" / "junk.py").write_text(str(root))  # caches are left out
    assert harness.source_digest(a) == harness.source_digest(b) and harness.source_digest(a)[1] == 2
    (b / "sub" / "timer.py").write_text("def now(): return 0\n")  # a changed timer is another harness
    assert harness.source_digest(a)[0] != harness.source_digest(b)[0]
    before = harness.source_digest(a)[0]
    (a / "sub" / "timer.py").rename(a / "timer.py")  # a moved file too
    assert harness.source_digest(a)[0] != before


def test_git_state_names_the_commit_and_whether_the_package_differs(tmp_path):
    if subprocess.run(["git", "--version"], capture_output=True).returncode != 0:
        pytest.skip("unavailable: no git")
    pkg = tmp_path / "repo" / "pkg"
    pkg.mkdir(parents=True)
    assert harness.git_state(pkg) is None  # not a checkout: an image or a wheel
    (pkg / "m.py").write_text("a = 1\n")
    run = lambda *a: subprocess.run(["git", "-C", str(pkg.parent), *a], check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    run("add", ".")
    run("-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "one")
    state = harness.git_state(pkg)
    assert len(state["commit"]) == 40 and state["dirty"] is False
    (pkg / "m.py").write_text("a = 2\n")
    assert harness.git_state(pkg)["dirty"] is True
    (pkg / "m.py").write_text("a = 1\n")
    assert harness.git_state(pkg)["dirty"] is False
    (pkg / "notes.txt").write_text("")  # not code: the digest does not count it either
    assert harness.git_state(pkg)["dirty"] is False
    (pkg / "new.py").write_text("")  # an untracked module is code the digest counts: dirty
    assert harness.git_state(pkg)["dirty"] is True


def test_the_capture_records_the_harness():
    from benchrun.envcapture import capture_environment

    doc = capture_environment(load_interval_s=0.05)
    h = doc["harness"]
    assert h == harness.harness_identity() and len(h["source_sha256"]) == 64 and h["source_files"] > 100
    assert "harness" not in doc["key_inputs"]["software"]  # the system's keys are not the harness's


def test_the_gate_notes_two_harnesses_and_does_not_refuse_them(tmp_path):
    # before: no capture said which benchrun code measured; two runs measured by different load
    # generators compared as if one had
    from benchrun.stats.gate import HARNESS_DIFFERS, check_gate
    from benchrun.stats.load import load_run

    metrics = {("s", "", "x"): ([1.0, 2.0, 3.0, 4.0, 5.0], "u", "higher")}
    env = {"cpu": {"model": "EPYC"}, "harness": {"version": "0.1.0", "source_sha256": "a" * 64, "source_files": 240,
                                                  "git": {"commit": "1" * 40, "dirty": False}}}
    other = {**env, "harness": {**env["harness"], "source_sha256": "b" * 64, "git": {"commit": "2" * 40, "dirty": True}}}
    base = load_run(make_run(tmp_path, "base", metrics, environment=env))
    same = load_run(make_run(tmp_path, "same", metrics, environment=env))
    cand = load_run(make_run(tmp_path, "cand", metrics, environment=other))
    assert HARNESS_DIFFERS not in check_gate(base, same, variable="runtime_version").message()
    gate = check_gate(base, cand, variable="runtime_version")
    assert gate.passed and "changed: nothing" in gate.message()
    assert f"note: {HARNESS_DIFFERS}" in gate.message() and "environment.harness.source_sha256" in gate.message()
    # a run captured before the harness was recorded: noted the same way, not refused
    older = load_run(make_run(tmp_path, "older", metrics, environment={"cpu": {"model": "EPYC"}}))
    assert check_gate(older, cand, variable="runtime_version").passed
