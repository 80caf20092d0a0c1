"""Issue 28 item 5 on a real full disk, not a patched write: the home on a small tmpfs filled to
20, 300 and 1,500 KB free (the attack's sizes). Each `benchrun run` ends with benchrun's one-line
reason (a raw ENOSPC traceback came out at 20 KB), and once space is back every run the home
holds is in a final phase whose outcome agrees with it: none left Pending for ever (at 20 KB the
run never wrote its liveness claim) and no Failed run with outcome "succeeded" (at 150-1500 KB).

Needs root and mount(2) (tmpfs); skipped with the reason where the test cannot mount one.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from helpers import tiny_spec

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def small_fs():
    mnt = Path(tempfile.mkdtemp(prefix="benchrun-fulldisk-"))
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("unavailable: mounting a tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"unavailable: cannot mount a tmpfs here ({r.stderr.strip()})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        shutil.rmtree(mnt, ignore_errors=True)


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "BENCHRUN_HOME": str(home), "BENCHRUN_WARM": "0", "PYTHONPATH": str(REPO), "COLUMNS": "200"}
    env.pop("DAGSTER_HOME", None)
    return subprocess.run([sys.executable, "-m", "benchrun.cli", *args], env=env, cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def _fill_to(mnt: Path, free_kb: int) -> Path:
    st = os.statvfs(mnt)
    avail = st.f_bavail * st.f_frsize
    fill = mnt / "fill"
    with open(fill, "wb") as fh:
        fh.truncate(0)
        left = max(0, avail - free_kb * 1024)
        block = b"\0" * (1 << 20)
        while left > 0:
            n = min(left, len(block))
            try:
                fh.write(block[:n])
            except OSError:
                break
            left -= n
    return fill


@pytest.mark.parametrize("free_kb", [20, 300, 1500])
def test_a_full_disk_ends_every_run_in_a_final_phase_with_one_line(small_fs, canary_doc, tmp_path, free_kb):
    home = small_fs / f"home-{free_kb}"
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [{"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm",
                                                 "parameters": {"sizes": [64], "iterations": 2}}])
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(canary_doc, sort_keys=False))
    fill = _fill_to(small_fs, free_kb)
    try:
        run = _cli(home, "run", str(spec))
    finally:
        fill.unlink()
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    if run.returncode != 0:
        assert "error: " in run.stderr and ("disk is full" in run.stderr or "No space left" in run.stderr), \
            run.stderr[-2000:]
    # space is back; a run left unfinished without a claim is reaped a minute after its creation
    for status in (home / "runs").glob("*/status.json"):
        st = json.loads(status.read_text())
        old = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)
        st["created_utc"] = old.isoformat().replace("+00:00", "Z")
        status.write_text(json.dumps(st))
    listing = _cli(home, "runs")
    assert listing.returncode == 0, listing.stderr[-2000:]
    phases = {}
    for status in (home / "runs").glob("*/status.json"):
        st = json.loads(status.read_text())
        phases[st["run_id"]] = (st["phase"], st.get("outcome"))
    assert phases or run.returncode != 0
    for run_id, (phase, outcome) in phases.items():
        assert phase in ("Succeeded", "Failed"), (free_kb, run_id, phase, run.stderr[-1500:])
        assert (phase == "Failed") == (outcome == "failed"), (free_kb, run_id, phase, outcome)
