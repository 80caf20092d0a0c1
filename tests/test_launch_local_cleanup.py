"""The local launcher's clean-up: an interrupt during the SIGTERM grace period still kills every
process group, no process group is signalled after its leader was reaped, a gang's telemetry is
stopped however the gang ends, an earlier launch's files (its contended attempts included) are set
aside, not reused, the reaping of a leader SIGKILL does not end is bounded and leaves benchrun
interruptible, and without os.waitid what a leader left in its group is still killed."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from benchrun.launch.local import LocalLauncher
from benchrun.plan import Invocation, base_env, build_argv, env_assignments, gang_mark
from benchrun.rundir import RunDir

RUN_ID = "t-20260101000000-abcdef12"
GANG = ("NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NNODES", "HOSTS")
PY = shlex.quote(sys.executable)


def _gang_argv(command: str) -> tuple[str, ...]:
    return build_argv(command, {n: gang_mark(n) for n in GANG}, where="test")


def _sampling(suite: str) -> list[threading.Thread]:
    """This replicate's telemetry sampler threads still running."""
    return [t for t in threading.enumerate() if t.name == f"telemetry:{RUN_ID}_{suite}_r1_telemetry.parquet"]


@pytest.fixture
def run_dir(tmp_path):
    return RunDir(tmp_path, RUN_ID).create().path


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")  # a zombie no longer runs


def _gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


# A suite that ignores SIGTERM, as does the child it leaves in its group (SIG_IGN survives exec).
STUBBORN = (
    "import os, signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "child = subprocess.Popen(['sleep', '120'])\n"
    "open(os.path.join(sys.argv[1], f'pids{sys.argv[2]}'), 'w').write(f'{os.getpid()} {child.pid}')\n"
    "time.sleep(120)\n"
)


def _interrupt_twice(pid_dir: Path, n: int, pids: list[int]) -> threading.Thread:
    """Once ``n`` suites wrote their pids: SIGINT this process, and again 1 s later — inside the
    launcher's 3 s SIGTERM grace period."""
    def go() -> None:
        deadline = time.monotonic() + 30
        while len(list(pid_dir.glob("pids*"))) < n or any(not p.read_text() for p in pid_dir.glob("pids*")):
            if time.monotonic() > deadline:
                return
            time.sleep(0.05)
        for p in pid_dir.glob("pids*"):
            pids.extend(int(x) for x in p.read_text().split())
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def _stop(pids: list[int]) -> None:
    """Test hygiene: whatever a failing launcher left behind, by pid."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.slow  # waits out part of the 3 s grace period on purpose
@pytest.mark.parametrize("nodes", [1, 3])
def test_a_second_ctrl_c_during_the_grace_period_still_kills_every_group(run_dir, tmp_path, monkeypatch, nodes):
    """Review: a second KeyboardInterrupt while the launcher waited out the SIGTERM grace period skipped
    the SIGKILL (a suite ignoring SIGTERM outlived the run, whose liveness claim was then dropped, so no
    later clean-up found it), and a gang's nodes after the one being waited for were never signalled."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    if nodes == 1:
        argv = (sys.executable, "-c", STUBBORN, str(pid_dir), "0")
    else:
        argv = _gang_argv(f"{PY} -c {shlex.quote(STUBBORN)} {pid_dir} ${{NODE_RANK}}")
    inv = Invocation(RUN_ID, "micro", "s", 1, "bc-x", tuple(argv), base_env(), 60.0, nodes=nodes)
    pids: list[int] = []
    try:
        t = _interrupt_twice(pid_dir, nodes, pids)
        with pytest.raises(KeyboardInterrupt):
            LocalLauncher().launch(inv, run_dir)
        t.join(5)
        assert len(pids) == 2 * nodes
        left = [pid for pid in pids if not _gone(pid)]
        assert not left, f"{left} outlived the interrupted launch"
    finally:
        signal.signal(signal.SIGINT, previous)
        _stop(pids)


@pytest.mark.parametrize("nodes", [1, 2])
def test_no_process_group_is_signalled_after_its_leader_was_reaped(run_dir, monkeypatch, nodes):
    """Review: a gang node that exited early was reaped by poll(), and the clean-up killpg'd its pid
    later, when that pid may name an unrelated process group by then (the single launch did the same
    right after the wait). Every killpg must find its leader still ours, unreaped (running or a zombie)."""
    import benchrun.launch.local as local

    real = os.killpg
    stale: list[tuple[int, int]] = []

    def killpg(pid: int, sig: int) -> None:
        try:
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # no unreaped child of ours by that pid: reaped already
            stale.append((pid, sig))
        real(pid, sig)

    monkeypatch.setattr(local.os, "killpg", killpg)
    # node 1 ends well at once, node 0 fails a little later: the gang's loop reaps node 1 while node 0 runs
    code = "import sys, time; time.sleep(0.5 if sys.argv[1] == '0' else 0); sys.exit(3 if sys.argv[1] == '0' else 0)"
    argv = ((sys.executable, "-c", code, "0") if nodes == 1 else
            _gang_argv(f"{PY} -c {shlex.quote(code)} ${{NODE_RANK}}"))
    inv = Invocation(RUN_ID, "micro", "s", 1, "bc-x", tuple(argv), base_env(), 30.0, nodes=nodes)
    res = LocalLauncher().launch(inv, run_dir)
    assert res.status == "failed" and res.exit_code == 3, res.reason
    assert not stale, f"killpg after the leader was reaped: {stale}"


def test_a_gang_whose_command_sets_omp_num_threads_runs_with_it(run_dir):
    """Review: a multi-node suite whose command is `env OMP_NUM_THREADS=2 python ...` (plan.py puts those
    words in suite_env, not env) raised KeyError out of the launcher and left its telemetry sampling."""
    code = "import os, sys; print('omp', os.environ['OMP_NUM_THREADS'], flush=True); sys.exit(0)"
    argv = _gang_argv(f"env OMP_NUM_THREADS=2 {PY} -c {shlex.quote(code)} ${{NODE_RANK}}")
    inv = Invocation(RUN_ID, "end_to_end", "training", 1, "bc-t", argv, base_env(), 30.0, nodes=2,
                     suite_env=env_assignments(argv))  # as plan.py builds it
    assert inv.suite_env == {"OMP_NUM_THREADS": "2"} and "OMP_NUM_THREADS" not in inv.env
    res = LocalLauncher().launch(inv, run_dir)
    assert res.status == "failed" and "wrote no result document" in res.reason, res.reason  # it wrote none
    for n in range(2):
        assert "omp 2" in (run_dir / inv.node_log_relpath(n)).read_text()
    assert not _sampling("training")


def test_a_gang_launcher_error_still_stops_its_telemetry_and_its_nodes(run_dir, monkeypatch):
    """The gang's sampler was started before its try and stopped only after it: any error out of the
    launcher left it sampling for the rest of the process."""
    import subprocess

    import benchrun.launch.local as local

    started: list[int] = []
    real = subprocess.Popen

    class SecondFails(real):
        def __init__(self, *a, **kw):
            if started:
                raise RuntimeError("a launcher bug at node 1")
            super().__init__(*a, **kw)
            started.append(self.pid)

    monkeypatch.setattr(local.subprocess, "Popen", SecondFails)
    argv = _gang_argv(f"{PY} -c 'import time; time.sleep(60)' ${{NODE_RANK}}")
    inv = Invocation(RUN_ID, "micro", "g", 1, "bc-g", argv, base_env(), 60.0, nodes=2)
    try:
        with pytest.raises(RuntimeError, match="launcher bug"):
            LocalLauncher().launch(inv, run_dir)
        assert not _sampling("g")
        assert started and _gone(started[0])
    finally:
        _stop(started)


def test_an_earlier_launchs_files_are_set_aside_not_reused(run_dir):
    """Review: a relaunch in the same run directory removed only the result document; the earlier
    attempt's requests parquet stayed, was read and sealed as this attempt's, and its log was truncated."""
    from benchrun.rundir import contention_reruns
    from benchrun.stats.load import requests_tables
    from benchrun.telemetry.facts import sample_files

    pd = pytest.importorskip("pandas")
    raw, figures = run_dir / "raw", run_dir / "figures"
    pre = f"{RUN_ID}_s_r1"
    pd.DataFrame({"latency_ms": [1.0]}).to_parquet(raw / f"{pre}_requests.parquet")
    (raw / f"{pre}_telemetry.parquet").write_bytes(b"earlier samples")
    (raw / f"{pre}.log").write_bytes(b"the earlier attempt's traceback\n")
    (run_dir / "structured" / f"{pre}.json").write_text(json.dumps({"status": "ok", "suite": "s"}))
    (figures / f"{pre}_latency.png").write_bytes(b"png")
    other = raw / f"{RUN_ID}_s_r1_x_r1_requests.parquet"  # suite `s_r1_x`'s: not this replicate's
    pd.DataFrame({"latency_ms": [2.0]}).to_parquet(other)
    other_bytes = other.read_bytes()
    inv = Invocation(RUN_ID, "micro", "s", 1, "bc-x", ("false",), base_env(), 30.0)

    res = LocalLauncher().launch(inv, run_dir)
    assert res.status == "failed"
    assert not (raw / f"{pre}_requests.parquet").exists()
    assert (raw / f"{pre}_earlier1.log").read_bytes() == b"the earlier attempt's traceback\n"
    assert json.loads((raw / f"{pre}_earlier1.json").read_text())["status"] == "ok"
    assert (raw / f"{pre}_earlier1_requests.parquet").is_file()
    assert (raw / f"{pre}_earlier1_telemetry.parquet").read_bytes() == b"earlier samples"
    assert (figures / f"{pre}_earlier1_latency.png").is_file()
    assert other.read_bytes() == other_bytes
    assert not (run_dir / "structured" / f"{pre}.json").exists()
    # none of it is read as this run's: requests, telemetry samples, contention reruns
    assert set(requests_tables(run_dir)["raw_file"]) == {f"raw/{other.name}"}
    assert all("earlier" not in rel for rel, *_ in sample_files(run_dir, RUN_ID))
    assert contention_reruns(run_dir, RUN_ID) == {}

    LocalLauncher().launch(inv, run_dir)  # once more: the second earlier launch is earlier2
    assert (raw / f"{pre}_earlier2.log").is_file() and (raw / f"{pre}_earlier1.log").is_file()
    assert (raw / f"{pre}_earlier1_requests.parquet").is_file()
    assert not (raw / f"{pre}_earlier2_earlier1_requests.parquet").exists()


def test_an_earlier_launch_is_set_aside_apart_from_this_launchs_contended_attempts(run_dir):
    """The two asides do not mix: what an earlier materialization left goes to earlier1 before attempt 1,
    attempt 1 (contended) goes to contended1, and attempt 2's launch leaves contended1 where it is."""
    from benchrun.launch.rerun import launch_with_reruns

    raw = run_dir / "raw"
    pre = f"{RUN_ID}_s_r1"
    (raw / f"{pre}_calls.json").write_text('"stale"')
    (raw / f"{pre}.log").write_text("stale log\n")
    code = ("import json, os\nfrom benchrun.suites._runtime import main\n"
            "def run(ctx):\n"
            "    attempt = os.environ.get('BENCHRUN_ATTEMPT', '1')\n"
            "    print('attempt', attempt)\n"
            f"    open(os.path.join(os.environ['BENCHRUN_RUN_DIR'], 'raw', '{pre}_calls.json'), 'w').write(attempt)\n"
            "    ctx.add_metric('v', 1.0, 'u', 'higher')\n"
            "main(run)\n")
    env = {**base_env(), "BENCHRUN_RUN_ID": RUN_ID, "BENCHRUN_RUN_DIR": str(run_dir), "BENCHRUN_SUITE": "s",
           "BENCHRUN_REPLICATE": "1"}
    inv = Invocation(RUN_ID, "micro", "s", 1, "bc-x", (sys.executable, "-c", code), env, 60.0)
    attempts: list[str] = []

    def once(attempt: Invocation):
        res = LocalLauncher().launch(attempt, run_dir)
        attempts.append(res.status)
        if len(attempts) == 1:  # the first attempt's telemetry saw a busy machine
            path = run_dir / inv.result_relpath()
            doc = json.loads(path.read_text())
            doc["telemetry"] = {"contended": True, "contention_reason": "background CPU 70 %"}
            path.write_text(json.dumps(doc))
        return res

    res = launch_with_reruns(once, run_dir, inv, 1)
    assert attempts == ["ok", "ok"] and res.status == "ok"
    assert (raw / f"{pre}_earlier1_calls.json").read_text() == '"stale"'
    assert (raw / f"{pre}_earlier1.log").read_text() == "stale log\n"
    assert (raw / f"{pre}_contended1_calls.json").read_text() == "1"
    assert "attempt 1" in (raw / f"{pre}_contended1.log").read_text()
    assert (raw / f"{pre}_calls.json").read_text() == "2" and "attempt 2" in (raw / f"{pre}.log").read_text()
    names = {p.name[len(pre):] for p in raw.glob(f"{pre}*")} - {"_telemetry.parquet", "_contended1_telemetry.parquet"}
    assert names == {".log", "_calls.json", "_contended1.json", "_contended1.log", "_contended1_calls.json",
                     "_earlier1.log", "_earlier1_calls.json"}, names
    doc = json.loads((run_dir / inv.result_relpath()).read_text())
    assert all("earlier" not in rel for rel in doc["contention_rerun"]["earlier"])


def test_a_resumed_run_keeps_the_earlier_materializations_contended_attempts_with_its_document(run_dir):
    """Review: launch_with_reruns deleted the contended attempts an earlier materialization had set aside
    before the launch set that materialization's final document aside as earlier<i>: its
    contention_rerun.earlier named deleted files. They go aside with it, as earlier<i>_contended<j>."""
    from benchrun.launch.rerun import launch_with_reruns
    from benchrun.rundir import contention_reruns
    from benchrun.stats.load import requests_tables
    from benchrun.telemetry.facts import sample_files

    raw = run_dir / "raw"
    pre = f"{RUN_ID}_s_r1"
    code = ("import os\nfrom benchrun.suites._runtime import main\n"
            "def run(ctx):\n"
            "    attempt = os.environ.get('BENCHRUN_ATTEMPT', '1')\n"
            f"    path = os.path.join(os.environ['BENCHRUN_RUN_DIR'], 'raw', '{pre}_calls.json')\n"
            "    open(path, 'w').write(attempt)\n"
            "    ctx.add_metric('v', 1.0, 'u', 'higher')\n"
            f"    ctx.samples['calls'] = 'raw/{pre}_calls.json'\n"
            "main(run)\n")
    env = {**base_env(), "BENCHRUN_RUN_ID": RUN_ID, "BENCHRUN_RUN_DIR": str(run_dir), "BENCHRUN_SUITE": "s",
           "BENCHRUN_REPLICATE": "1"}
    inv = Invocation(RUN_ID, "micro", "s", 1, "bc-x", (sys.executable, "-c", code), env, 60.0)
    busy = [True]

    def once(attempt: Invocation):
        res = LocalLauncher().launch(attempt, run_dir)
        if busy[0]:  # the first materialization's first attempt saw a busy machine
            busy[0] = False
            path = run_dir / inv.result_relpath()
            doc = json.loads(path.read_text())
            doc["telemetry"] = {"contended": True, "contention_reason": "background CPU 70 %"}
            path.write_text(json.dumps(doc))
        return res

    assert launch_with_reruns(once, run_dir, inv, 1).status == "ok"
    first = json.loads((run_dir / inv.result_relpath()).read_text())["contention_rerun"]["earlier"]
    assert f"raw/{pre}_contended1.json" in first and contention_reruns(run_dir, RUN_ID) == {("s", 1): "quiet"}
    pd = pytest.importorskip("pandas")  # the contended attempt's per-request rows, as a serving suite writes them
    pd.DataFrame({"latency_ms": [1.0]}).to_parquet(raw / f"{pre}_contended1_requests.parquet")
    assert launch_with_reruns(once, run_dir, inv, 1).status == "ok"  # materialized again: quiet
    earlier = json.loads((raw / f"{pre}_earlier1.json").read_text())
    named = earlier["contention_rerun"]["earlier"]
    assert named == [rel.replace(f"{pre}_contended1", f"{pre}_earlier1_contended1") for rel in first], named
    assert all((run_dir / rel).is_file() for rel in named), named
    assert (raw / f"{pre}_earlier1_calls.json").read_text() == "2"
    assert (raw / f"{pre}_earlier1_contended1_calls.json").read_text() == "1"
    samples = json.loads((raw / f"{pre}_earlier1_contended1.json").read_text())["samples"]
    assert samples["calls"] == f"raw/{pre}_earlier1_contended1_calls.json", samples
    assert all("_earlier1_contended1_" in rel and (run_dir / rel).is_file() for rel in samples.values()), samples
    assert not list(raw.glob(f"{pre}_contended*")) and not list(raw.glob(f"{pre}_earlier2*"))
    assert (raw / f"{pre}_earlier1_contended1_requests.parquet").is_file()
    # not this materialization's reruns, nor its requests or telemetry samples
    assert contention_reruns(run_dir, RUN_ID) == {}
    assert requests_tables(run_dir).empty
    assert [rel for rel, *_ in sample_files(run_dir, RUN_ID)] == [f"raw/{pre}_telemetry.parquet"]
    assert "contention_rerun" not in json.loads((run_dir / inv.result_relpath()).read_text())


@pytest.mark.parametrize("target", ["process", "main thread"])
def test_reaping_a_leader_that_does_not_die_is_bounded_and_the_interrupt_still_lands(monkeypatch, target):
    """Review: the reaping waited for the SIGKILLed leaders unbounded with SIGINT and SIGTERM blocked: a
    leader in uninterruptible sleep (a GPU driver hung after an Xid, a dead NFS mount) left benchrun
    killable by SIGKILL only. The wait is bounded; the leader is logged and left; the interrupt lands."""
    import subprocess

    import benchrun.launch.local as local

    monkeypatch.setattr(local.os, "killpg", lambda pid, sig: None)  # SIGKILL that does not take (D state)
    monkeypatch.setattr(local, "REAP_S", 0.5, raising=False)
    monkeypatch.setattr(local, "_LEFT", [], raising=False)  # what other tests left is not this one's
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    proc = subprocess.Popen(["sleep", "4"], start_new_session=True)
    main = threading.get_ident()

    def interrupt() -> None:
        time.sleep(0.1)
        if target == "process":
            os.kill(os.getpid(), signal.SIGINT)
        else:
            signal.pthread_kill(main, signal.SIGINT)

    try:
        threading.Thread(target=interrupt, daemon=True).start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            local._reap_all([proc])
            time.sleep(5)  # a held interrupt that was never delivered
        assert time.monotonic() - t0 < 2.0, "the reaping waited for a leader SIGKILL did not end"
        assert proc.returncode is None and proc in local._LEFT
    finally:
        signal.signal(signal.SIGINT, previous)
        proc.kill()
    # once it has exited, a later call reaps it: no zombie stays
    deadline = time.monotonic() + 5
    while proc in local._LEFT and time.monotonic() < deadline:
        local._reap_left()
        time.sleep(0.05)
    assert proc not in local._LEFT and proc.returncode is not None


@pytest.mark.parametrize("nodes", [1, 2])
def test_a_leader_left_unreaped_is_named_in_the_replicates_reason(run_dir, monkeypatch, nodes):
    """The timeout path waited for the killed leader again, unbounded (``proc.wait()``): it returns, and
    the replicate's reason says which leader outlived its SIGKILL."""
    import benchrun.launch.local as local

    monkeypatch.setattr(local.os, "killpg", lambda pid, sig: None)  # neither SIGTERM nor SIGKILL takes
    monkeypatch.setattr(local, "GRACE_S", 0.2)
    monkeypatch.setattr(local, "REAP_S", 0.3, raising=False)
    monkeypatch.setattr(local, "_LEFT", [], raising=False)
    code = "import time; time.sleep(4)"
    argv = ((sys.executable, "-c", code) if nodes == 1 else _gang_argv(f"{PY} -c {shlex.quote(code)} ${{NODE_RANK}}"))
    inv = Invocation(RUN_ID, "micro", "s", 1, "bc-x", tuple(argv), base_env(), 0.5, nodes=nodes)
    t0 = time.monotonic()
    try:
        res = LocalLauncher().launch(inv, run_dir)
        assert time.monotonic() - t0 < 3.0
        assert res.status == "failed" and "timed out" in res.reason, res.reason
        left = list(local._LEFT)
        assert len(left) == nodes and all(f"{p.pid}" in res.reason for p in left), res.reason
        assert "not exited 0.3s after SIGKILL" in res.reason and "left unreaped" in res.reason, res.reason
    finally:
        _stop([p.pid for p in getattr(local, "_LEFT", [])])
    deadline = time.monotonic() + 5
    while local._LEFT and time.monotonic() < deadline:
        local._reap_left()
        time.sleep(0.05)
    assert not local._LEFT


# A suite that leaves a child in its group that ignores SIGTERM (SIG_IGN survives exec), and ends on it itself.
LEAVES_A_CHILD = (
    "import os, signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "child = subprocess.Popen(['sleep', '120'])\n"
    "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
    "open(os.path.join(sys.argv[1], f'pids{sys.argv[2]}'), 'w').write(f'{child.pid}')\n"
    "time.sleep(float(sys.argv[3]) if sys.argv[2] == '0' else 0)\n"
)


@pytest.mark.parametrize("how", ["gang node ends", "timeout"])
def test_without_waitid_what_a_leader_left_in_its_group_is_still_killed(run_dir, tmp_path, monkeypatch, how):
    """Review: where os.waitid is missing (macOS before Python 3.13), _exited fell back to poll(), which
    reaped the leader; _reap then skipped the killpg (returncode set), and what the suite left in its
    group survived: a gang node's children after it ended, a timed-out suite's children ignoring SIGTERM."""
    import benchrun.launch.local as local

    monkeypatch.delattr(local.os, "waitid")
    monkeypatch.setattr(local, "GRACE_S", 1.0)
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    if how == "timeout":  # the leader ends on SIGTERM inside the grace period, its child does not
        argv, nodes, timeout = (sys.executable, "-c", LEAVES_A_CHILD, str(pid_dir), "0", "60"), 1, 1.0
    else:  # node 1 ends at once, node 0 a second later
        argv = _gang_argv(f"{PY} -c {shlex.quote(LEAVES_A_CHILD)} {pid_dir} ${{NODE_RANK}} 1")
        nodes, timeout = 2, 30.0
    inv = Invocation(RUN_ID, "micro", "s", 1, "bc-x", tuple(argv), base_env(), timeout, nodes=nodes)
    children: list[int] = []
    try:
        res = LocalLauncher().launch(inv, run_dir)
        assert res.status == "failed", res.reason
        children = [int(p.read_text()) for p in pid_dir.glob("pids*")]
        assert len(children) == nodes
        left = [pid for pid in children if not _gone(pid, 2.0)]
        assert not left, f"{left} outlived their leader's group"
    finally:
        _stop(children)
