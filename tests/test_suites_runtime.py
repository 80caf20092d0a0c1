"""The suite runtime's process start: the kernel's stamp, before the interpreter's imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_process_start_precedes_the_imports(tmp_path: Path) -> None:
    # the child notes the time first thing, sleeps as a slow import would, then imports the runtime
    code = ("import time; t_first = time.time(); time.sleep(0.4)\n"
            "from benchrun.suites._runtime import SuiteContext\n"
            "ctx = SuiteContext({'BENCHRUN_RUN_DIR': %r, 'BENCHRUN_SUITE': 't'})\n"
            "import json; print(json.dumps([t_first, time.time(), ctx.t_process_start, getattr(ctx, 't_process_start_source', None)]))"
            % str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=True)
    t_first, t_created, start, source = json.loads(out.stdout)
    # before the first line of Python ran (one clock tick of rounding allowed), not at the context
    assert start <= t_first + 0.02, "the start is stamped after the interpreter's first line"
    assert source.startswith("/proc/self/stat starttime")
    assert t_created - start >= 0.4
    assert t_first - start < 30  # and this process's start, not some other's


def test_unreadable_stat_falls_back_to_now_and_says_so(tmp_path: Path) -> None:
    import time

    from benchrun.suites._runtime import process_start_time

    t0 = time.time()
    start, source = process_start_time(str(tmp_path / "missing"))
    assert t0 <= start <= time.time()
    assert source.startswith("the suite context's creation") and "unreadable" in source
    (tmp_path / "stat").write_text("123 (a) b) R 1 2")  # too few fields
    assert "unreadable" in process_start_time(str(tmp_path / "stat"))[1]
