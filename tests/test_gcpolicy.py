"""benchrun.gcpolicy: the benchrun command keeps the collector off the objects start-up made
(their walk was 0.9 s of a run's exit and 0.5 s of its collections); other programs that run
benchrun code keep their collector as it was."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

from benchrun import gcpolicy

ROOT = Path(__file__).resolve().parent.parent

# Registered before benchrun's own exit handler, so it runs after it: what the interpreter's
# last collection will see.
PROBE = """
import atexit, gc, sys
atexit.register(lambda: print("frozen at exit", gc.get_freeze_count(), flush=True))
sys.argv = ["benchrun", *sys.argv[1:]]
from benchrun.cli import main
main()
"""


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "BENCHRUN_HOME": str(home), "PYTHONPATH": str(ROOT), "BENCHRUN_WARM": "0"}
    return subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)


def test_the_command_leaves_nothing_for_the_last_collection_to_walk(tmp_path):
    r = _cli("validate", "specs/local/canary.yaml", home=tmp_path)
    assert r.returncode == 0, r.stderr
    frozen = int(r.stdout.rsplit("frozen at exit", 1)[1].split()[0])
    assert frozen > 10_000, r.stdout  # everything the command imported and made


def test_code_run_inside_another_program_leaves_its_collector_alone():
    before = gc.get_freeze_count()
    assert not gcpolicy.in_command
    gcpolicy.freeze_long_lived(collect=True)  # what `benchrun run` does after start-up
    assert gc.get_freeze_count() == before
