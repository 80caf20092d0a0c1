"""What a first experiment meets (issue 26, item 7): messages, the baseline hint, Ctrl-C,
cancel and delete."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _cli(*args: str, home: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "BENCHRUN_HOME": str(home), "PYTHONPATH": str(ROOT)}
    env.pop("DAGSTER_HOME", None)
    return subprocess.run([sys.executable, "-m", "benchrun.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout)


def test_error_messages_say_it_once_and_name_what_is_missing(tmp_path):
    r = _cli("runz", home=tmp_path)
    assert r.returncode == 2 and r.stderr.count("Did you mean") == 1, r.stderr
    assert "'run', 'runs'" in r.stderr
    r = _cli("rebuild-warehouse", "nosuch", home=tmp_path)
    assert r.returncode != 0 and "${RUN_ID}" not in r.stderr, r.stderr
    assert f"{tmp_path}/objects/nosuch/" in r.stderr
    r = _cli("lineage", "nosuch", "tflops", home=tmp_path)
    assert r.returncode != 0 and "no such run 'nosuch'" in r.stderr and "no rows of metric" not in r.stderr, r.stderr


def test_the_baseline_hint_names_the_alias_only_while_it_is_unset(tmp_path):
    from benchrun.commands import baseline_hint
    from benchrun.stats.load import promote
    from benchrun.stats.synthetic import make_run

    rd = make_run(tmp_path, "first-20261202000000-aaaaaaaa", {("gemm", "", "tflops"): ([1.0, 1.1, 1.0], "TFLOP/s",
                                                                                        "higher")},
                  spec={"spec": {"comparison": {"baseline": {"artifactRef": "local/published/canary"}}}})
    hint = baseline_hint(rd, rd.name, {"phase": "Succeeded"})
    assert hint and "local/published/canary" in hint and f"benchrun promote {rd.name} --alias canary" in hint
    assert baseline_hint(rd, rd.name, {"phase": "Failed"}) is None  # a failed run is no baseline
    promote(rd.name, tmp_path, alias="canary")
    assert baseline_hint(rd, rd.name, {"phase": "Succeeded"}) is None
