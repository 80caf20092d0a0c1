"""The local launcher: success, failure, timeout, signals, and argv that never meets a shell."""

import json
import sys
import time
from pathlib import Path

import pytest

from benchrun.launch.local import LocalLauncher
from benchrun.plan import Invocation, base_env, build_argv
from benchrun.rundir import RunDir

RUN_ID = "t-20260101000000-abcdef12"


def _inv(argv, *, suite="s", replicate=1, timeout=30.0, env=None):
    return Invocation(RUN_ID, "micro", suite, replicate, "bc-x", tuple(argv),
                      {**base_env(), **(env or {})}, timeout)


@pytest.fixture
def run_dir(tmp_path):
    return RunDir(tmp_path, RUN_ID).create().path


def _suite_env(run_dir, suite, rep=1):
    return {"BENCHRUN_RUN_ID": RUN_ID, "BENCHRUN_RUN_DIR": str(run_dir), "BENCHRUN_SUITE": suite,
            "BENCHRUN_REPLICATE": str(rep)}


OK_SUITE = (
    "from benchrun.suites._runtime import main\n"
    "def run(ctx):\n"
    "    print('hello from the suite')\n"
    "    ctx.add_metric('answer', 42.0, 'units', 'higher', case='c1')\n"
    "main(run)\n"
)


def test_ok_suite_reports_metrics_and_keeps_log(run_dir):
    res = LocalLauncher().launch(_inv([sys.executable, "-c", OK_SUITE], env=_suite_env(run_dir, "s")), run_dir)
    assert res.status == "ok", res.reason
    assert res.exit_code == 0
    assert res.metrics[0]["name"] == "answer" and res.metrics[0]["value"] == 42.0
    assert "hello from the suite" in (run_dir / res.log).read_text()
    assert res.result == f"structured/{RUN_ID}_s_r1.json"
    assert res.wall_s > 0


def test_nonzero_exit_is_a_failed_replicate_with_logs(run_dir):
    code = "import sys; print('about to fail'); sys.exit(3)"
    res = LocalLauncher().launch(_inv([sys.executable, "-c", code]), run_dir)
    assert res.status == "failed"
    assert res.exit_code == 3
    assert "exited with code 3" in res.reason
    assert "about to fail" in (run_dir / res.log).read_text()


def test_exception_in_suite_records_failed_result_with_reason(run_dir):
    code = ("from benchrun.suites._runtime import main\n"
            "def run(ctx):\n    raise RuntimeError('disk on fire')\nmain(run)\n")
    res = LocalLauncher().launch(_inv([sys.executable, "-c", code], env=_suite_env(run_dir, "s")), run_dir)
    assert res.status == "failed"
    assert "disk on fire" in res.reason
    doc = json.loads((run_dir / "structured" / f"{RUN_ID}_s_r1.json").read_text())
    assert doc["status"] == "failed"


def test_timeout_kills_the_whole_process_group(run_dir, tmp_path):
    marker = tmp_path / "child.pid"
    # The suite forks a grandchild that would outlive it, then hangs.
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(marker)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n"
    )
    t0 = time.monotonic()
    res = LocalLauncher().launch(_inv([sys.executable, "-c", code], timeout=4), run_dir)  # the marker is written first
    assert time.monotonic() - t0 < 15
    assert res.status == "failed"
    assert "timed out after 4s" in res.reason
    child = int(marker.read_text())
    assert not _alive(child)


def _alive(pid: int) -> bool:
    # A killed orphan may linger as a zombie until init reaps it; that is not alive.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return False
        if state in ("Z", "X"):
            return False
        time.sleep(0.05)
    return True


def test_killed_by_signal(run_dir):
    code = "import os, signal; print('bye', flush=True); os.kill(os.getpid(), signal.SIGKILL)"
    res = LocalLauncher().launch(_inv([sys.executable, "-c", code]), run_dir)
    assert res.status == "failed"
    assert res.reason == "killed by SIGKILL"
    assert "bye" in (run_dir / res.log).read_text()


def test_exit_zero_without_result_document_is_failed(run_dir):
    res = LocalLauncher().launch(_inv([sys.executable, "-c", "pass"]), run_dir)
    assert res.status == "failed"
    assert "no result document" in res.reason


def test_missing_program_is_failed_not_a_crash(run_dir):
    res = LocalLauncher().launch(_inv(["/nonexistent/benchmark-binary"]), run_dir)
    assert res.status == "failed"
    assert "cannot start" in res.reason


def test_shell_metacharacters_stay_literal_arguments(run_dir, tmp_path, monkeypatch):
    pwned = tmp_path / "pwned"
    monkeypatch.chdir(tmp_path)
    command = (
        "python -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "
        f"'; touch {pwned}' '$(touch {pwned})' '`touch {pwned}`' --user ${{SSH_USER}}"
    )
    values = {"SSH_USER": f"x; touch {pwned}"}
    argv = build_argv(command, values, where="test")
    assert argv[0] == sys.executable
    res = LocalLauncher().launch(_inv(list(argv)), run_dir)
    printed = json.loads((run_dir / res.log).read_text().strip().splitlines()[0])
    assert printed == [f"; touch {pwned}", f"$(touch {pwned})", f"`touch {pwned}`", "--user", f"x; touch {pwned}"]
    assert not pwned.exists()


def test_environment_is_explicit_not_inherited(run_dir, monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    code = "import os, json; print(json.dumps(sorted(os.environ)))"
    res = LocalLauncher().launch(_inv([sys.executable, "-c", code]), run_dir)
    names = json.loads((run_dir / res.log).read_text().splitlines()[0])
    assert "SECRET_TOKEN" not in names
    assert "PATH" in names


@pytest.mark.slow  # waits out the 3 s SIGTERM grace period on purpose
def test_a_suite_ignoring_sigterm_is_killed_after_the_grace_period(run_dir):
    code = ("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('ignoring SIGTERM', flush=True)\ntime.sleep(60)\n")
    t0 = time.monotonic()
    res = LocalLauncher().launch(_inv([sys.executable, "-c", code], timeout=3.0), run_dir)  # SIG_IGN is set first
    assert res.status == "failed" and "timed out" in res.reason
    assert time.monotonic() - t0 < 12
    assert "ignoring SIGTERM" in (run_dir / res.log).read_text()


def test_suite_prints_its_result_line_for_pods(run_dir):
    """In a pod the run directory dies with the container; the result travels on stdout."""
    from benchrun.launch.kubernetes import RESULT_KEY

    # telemetry off: its summaries are added to the file after the suite printed its line
    env = {**_suite_env(run_dir, "s"), "BENCHRUN_RESULT_STDOUT": "1", "BENCHRUN_TELEMETRY_HZ": "0"}
    res = LocalLauncher().launch(_inv([sys.executable, "-c", OK_SUITE], env=env), run_dir)
    assert res.status == "ok"
    lines = [ln for ln in (run_dir / res.log).read_text().splitlines() if ln.startswith('{"' + RESULT_KEY)]
    assert len(lines) == 1
    doc = json.loads(lines[0])[RESULT_KEY]
    assert doc == json.loads((run_dir / res.result).read_text())
    assert doc["metrics"][0]["value"] == 42.0


def test_the_wait_ends_when_the_suite_exits_not_on_a_poll_tick():
    """A suite's wall ends at its exit: Popen.wait(timeout) would notice it up to 50 ms late."""
    import statistics
    import subprocess

    from benchrun.launch.local import wait_exit

    late = []
    for d in (0.29, 0.33, 0.37, 0.41, 0.45):  # exits between Popen.wait's 50 ms polls
        code = f"import os, time; time.sleep({d}); os.write(1, repr(time.time()).encode()); os._exit(0)"
        proc = subprocess.Popen([sys.executable, "-S", "-c", code], stdout=subprocess.PIPE)
        assert wait_exit(proc, 30.0) == 0
        returned = time.time()
        late.append(returned - float(proc.stdout.read()))
        proc.stdout.close()
    assert statistics.median(late) < 0.012, late  # Popen.wait's polls: ~25 ms


def test_the_wait_times_out():
    import subprocess

    from benchrun.launch.local import wait_exit

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            wait_exit(proc, 0.3)
    finally:
        proc.kill()
        proc.wait()


def test_waiting_on_a_process_already_gone_leaks_no_pidfd():
    """wait_any returned early when a later process was gone and left the earlier pidfds open."""
    import os
    import subprocess

    from benchrun.launch.local import wait_any

    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # reaped: its pid no longer names a process
    try:
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(5):
            assert wait_any([live, gone], 5.0) is True
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        live.kill()
        live.wait()


def test_a_ctrl_c_during_the_spawn_still_kills_the_suite(run_dir, monkeypatch):
    """An interrupt that landed inside Popen, after the fork, raised out of Popen before it returned
    the process: the suite (in its own session) kept running after the run ended (seen in the full
    suite as a membw left running after `benchrun run` was Ctrl-C'd)."""
    import os
    import signal
    import subprocess

    import psutil

    import benchrun.launch.local as local

    spawned = []
    real = subprocess.Popen

    class InterruptedAtSpawn(real):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            spawned.append(self.pid)
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while Popen is still returning
            time.sleep(0.2)  # the handler runs here, inside Popen

    monkeypatch.setattr(local.subprocess, "Popen", InterruptedAtSpawn)
    inv = _inv([sys.executable, "-c", "import time; time.sleep(60)"], env=_suite_env(run_dir, "s"))
    with pytest.raises(KeyboardInterrupt):
        LocalLauncher().launch(inv, run_dir)
    [pid] = spawned
    deadline = time.monotonic() + 5
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"the suite {pid} outlived the interrupted launch"
        time.sleep(0.05)
