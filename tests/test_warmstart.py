"""The warm orchestrator (benchrun serve, benchrun.warmstart): a command handed to it behaves
as the same command run in its own process — output, exit status, environment, working
directory, umask, terminal, signals — and the fallbacks and refusals say why."""

from __future__ import annotations

import importlib
import json
import os
import re
import signal
import subprocess
import sys
import struct
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from benchrun import warmstart
from helpers import tiny_spec

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow  # the server imports Dagster and the analysis stack once (~5 s)


def _env(sockdir: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DAGSTER_HOME", "BENCHRUN_WARM", "BENCHRUN_WARM_DIR", "COLUMNS", "LINES")}
    return {**env, "PYTHONPATH": str(ROOT), "BENCHRUN_WARM_DIR": sockdir, **extra}


def _cli(env: dict[str, str], *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchrun.entry", *args], env=env, capture_output=True, text=True,
                          timeout=kw.pop("timeout", 120), **{"cwd": ROOT, **kw})


@pytest.fixture(scope="module")
def server():
    """A server in the foreground of a subprocess, in a short private socket directory."""
    sockdir = tempfile.mkdtemp(prefix="bw-", dir="/tmp")
    os.chmod(sockdir, 0o700)
    env = _env(sockdir)
    log = Path(sockdir) / "server.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "benchrun.entry", "serve", "--idle-timeout", "600"], env=env,
                                cwd="/", stdout=fh, stderr=fh, start_new_session=True)
    path = warmstart.socket_path(env)
    deadline = time.monotonic() + 120
    while warmstart.request(path, "ping") is None:
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    yield {"sockdir": sockdir, "env": env, "proc": proc, "log": log, "path": path}
    stop = _cli(env, "serve", "--stop")
    assert stop.returncode == 0 and "stopping" in stop.stdout, stop.stderr
    assert proc.wait(timeout=30) == 0, log.read_text()
    assert not path.exists()  # the server removes its own socket


def _served(server, command: str) -> list[str]:
    """The server's log lines about children running ``command``."""
    return [ln for ln in server["log"].read_text().splitlines() if f"] {command}: child" in ln]


def test_a_served_command_prints_and_exits_as_in_its_own_process(server, tmp_path):
    before = len(_served(server, "validate"))
    served = _cli({**server["env"], "BENCHRUN_WARM": "require"}, "validate", "specs/local/canary.yaml")
    cold = _cli({**server["env"], "BENCHRUN_WARM": "0"}, "validate", "specs/local/canary.yaml")
    assert len(_served(server, "validate")) == before + 2  # started and exited: the served one only
    assert served.returncode == cold.returncode == 0
    assert served.stdout == cold.stdout and "1 valid" in served.stdout
    assert any("exited 0" in ln for ln in _served(server, "validate"))
    # A user error: the same message and the same exit status (validate: 1, a spec with errors).
    bad = tmp_path / "bad.yaml"
    doc = yaml.safe_load((ROOT / "specs/local/canary.yaml").read_text())
    doc["spec"]["trials"]["minReplicates"] = "many"
    bad.write_text(yaml.safe_dump(doc))
    served = _cli({**server["env"], "BENCHRUN_WARM": "require"}, "validate", str(bad))
    cold = _cli({**server["env"], "BENCHRUN_WARM": "0"}, "validate", str(bad))
    assert served.returncode == cold.returncode == 1
    assert served.stdout == cold.stdout and "minReplicates" in served.stdout


def test_the_command_gets_the_clients_environment_working_directory_and_umask(server, tmp_path):
    home = tmp_path / "somewhere"
    home.mkdir()
    env = {**server["env"], "BENCHRUN_WARM": "require"}
    env.pop("BENCHRUN_HOME", None)  # the home is then ./.benchrun of the working directory
    proc = subprocess.run(["sh", "-c", f"umask 077 && exec {sys.executable} -m benchrun.entry runs --json"],
                          env=env, cwd=home, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
    assert not (home / ".benchrun").exists()  # a listing creates no home
    proc = subprocess.run(["sh", "-c", f"umask 077 && exec {sys.executable} -m benchrun.entry verify --store"],
                          env=env, cwd=home, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "there is no benchrun home at" in proc.stderr, proc.stderr  # nothing verified
    assert not (home / ".benchrun").exists()
    proc = subprocess.run(["sh", "-c", f"umask 077 && exec {sys.executable} -m benchrun.entry retention"],
                          env=env, cwd=home, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "there is no benchrun home at" in proc.stderr, proc.stderr  # nor does retention
    assert not (home / ".benchrun").exists()
    (home / ".benchrun").mkdir()  # a home: ./.benchrun of the client's working directory is the one read
    proc = subprocess.run(["sh", "-c", f"umask 077 && exec {sys.executable} -m benchrun.entry retention"],
                          env=env, cwd=home, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "dry run" in proc.stdout, proc.stderr
    created = home / ".benchrun" / "warehouse"  # the catalog retention opens
    assert created.is_dir() and (created.stat().st_mode & 0o777) == 0o700  # the client's umask
    # An environment variable the command reads: the home override is the one used.
    other = tmp_path / "other-home"
    proc = _cli({**env, "BENCHRUN_HOME": str(other)}, "retention")
    assert proc.returncode == 1 and str(other) in proc.stderr and not other.exists(), proc.stderr
    other.mkdir()
    proc = _cli({**env, "BENCHRUN_HOME": str(other)}, "retention")
    assert proc.returncode == 0 and (other / "warehouse").is_dir(), proc.stderr


def _refserver(env: dict[str, str], server=None, **kw) -> tuple[subprocess.Popen, int | None]:
    """`benchrun refserver` (runs until a signal ends it) once it listens; with ``server``,
    the pid of the child it runs in."""
    def children() -> list[str]:
        return re.findall(r"refserver: child (\d+)", server["log"].read_text()) if server else []

    before = len(children())
    proc = subprocess.Popen([sys.executable, "-m", "benchrun.entry", "refserver", "--port", "0"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    line = proc.stdout.readline()
    assert "127.0.0.1" in line, (line, proc.stderr.read() if proc.poll() is not None else "")
    if server is None:
        return proc, None
    # The server logs the child's pid after its fork; the child may have printed first.
    deadline = time.monotonic() + 10
    while len(children()) <= before and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc, int(children()[before])


def test_a_signal_right_after_the_hand_over_reaches_the_command(server):
    """The client installed its forwarding only after handing the command over; a SIGTERM in
    between (the command had already printed that it listens, a clean-clone run under load hit
    it) killed the client (-15) instead of ending the command as it ends in its own process (0)."""
    script = (
        "import os, signal, sys\n"
        "import benchrun.warm.client as c\n"
        "r, w = os.pipe()\n"
        "os.dup2(w, 1)  # the command's stdout, which it gets from this client: read here\n"
        "real = c.send_frame\n"
        "def send(*a, **k):\n"
        "    real(*a, **k)\n"
        "    seen = b''\n"
        "    while b'127.0.0.1' not in seen:  # the command listens (its handlers are in place)\n"
        "        seen += os.read(r, 4096)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)  # the gap, made certain\n"
        "c.send_frame = send\n"
        "sys.exit(c.run_remote(['benchrun', 'refserver', '--port', '0']))\n")
    proc = subprocess.run([sys.executable, "-c", script], env={**server["env"], "BENCHRUN_WARM": "require"},
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)  # as `benchrun refserver` ends on SIGTERM


def test_signals_end_a_served_command_as_they_end_one_in_its_own_process(server):
    served_env = {**server["env"], "BENCHRUN_WARM": "require"}
    cold_env = {**server["env"], "BENCHRUN_WARM": "0"}
    for sig in (signal.SIGINT, signal.SIGTERM):  # Ctrl-C; kill
        cold, _ = _refserver(cold_env)
        cold.send_signal(sig)
        expected = cold.wait(timeout=30)
        proc, pid = _refserver(served_env, server)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == expected, sig  # the same status, a death by signal included
        _gone(pid)
    proc, pid = _refserver(served_env, server)
    os.kill(pid, signal.SIGKILL)  # the command itself killed (the OOM killer, kill -9): so is the client
    assert proc.wait(timeout=30) == -signal.SIGKILL
    proc, pid = _refserver(served_env, server)
    proc.kill()  # no word to the server: it sees the connection close
    proc.wait()
    _gone(pid)
    assert f"child {pid}: its client went away; SIGHUP" in server["log"].read_text()


def test_a_signal_the_client_ignores_is_ignored_by_its_command(server):
    """`nohup benchrun run ... &` and logging out must not end the run."""
    env = {**server["env"], "BENCHRUN_WARM": "require"}
    proc, pid = _refserver(env, server, preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    proc.send_signal(signal.SIGHUP)
    os.kill(pid, signal.SIGHUP)  # the command's own process ignores it too
    time.sleep(1.0)
    assert proc.poll() is None
    os.kill(pid, 0)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    _gone(pid)


def test_a_malformed_request_neither_ends_the_server_nor_keeps_the_clients_descriptors(server):
    import socket as so

    r, w = os.pipe()
    for doc in ([], {"op": "run", "argv": 5}, {"op": "run", "argv": ["benchrun"], "env": {"A": 1}}):
        with so.socket(so.AF_UNIX, so.SOCK_STREAM) as sock:
            sock.connect(str(server["path"]))
            assert "hello" in warmstart.FrameReader(sock).read(10)
            warmstart.send_frame(sock, doc, [w, w, w])
            answer = warmstart.FrameReader(sock).read(10)
            assert answer is None or answer.get("not_started") or "error" in answer
    os.close(w)
    os.set_blocking(r, False)
    deadline = time.monotonic() + 10
    while True:  # EOF only once no process holds the write end: the server closed its copies
        try:
            if os.read(r, 1) == b"":
                break
        except BlockingIOError:
            assert time.monotonic() < deadline, "the server kept the client's descriptors"
            time.sleep(0.05)
    os.close(r)
    assert warmstart.request(server["path"], "ping")["pid"] == server["proc"].pid


def test_silent_peers_delay_no_other_request(server):
    """Twelve connections that never send a byte, or stop halfway through a request: a ping still
    answers at once (it waited up to 5 s on each in turn, 59 s for `benchrun runs`), and the
    server closes them at its deadline."""
    import socket as so

    silent = []
    for i in range(12):
        sock = so.socket(so.AF_UNIX, so.SOCK_STREAM)
        sock.connect(str(server["path"]))
        if i % 2:  # half of them start a request and stop: a length of 1,000 bytes, then 10 of them
            sock.sendall(struct.pack(">I", 1000) + b'{"argv": [')
        silent.append(sock)
    try:
        t0 = time.monotonic()
        assert warmstart.request(server["path"], "ping")["pid"] == server["proc"].pid
        assert time.monotonic() - t0 < 1.5
        proc = _cli(server["env"], "validate", "specs/local/canary.yaml")
        assert proc.returncode == 0 and "1 valid" in proc.stdout
        for sock in silent:  # each is told, once its deadline passed, that nothing was started
            sock.settimeout(10)
            reader = warmstart.FrameReader(sock)
            assert "hello" in reader.read(10)
            answer = reader.read(10)
            assert answer is None or answer.get("not_started")
    finally:
        for sock in silent:
            sock.close()


def test_a_server_that_never_answers_is_not_waited_for(tmp_path):
    """A listener that accepts but never reads (a stopped or stuck server): the command runs in
    the client's own process after a short wait, and nothing was sent that could start it there."""
    import socket as so

    sockdir = tempfile.mkdtemp(prefix="bw-", dir="/tmp")
    os.chmod(sockdir, 0o700)
    env = _env(sockdir)
    with so.socket(so.AF_UNIX, so.SOCK_STREAM) as listener:
        listener.bind(str(warmstart.socket_path(env)))
        listener.listen(16)
        t0 = time.monotonic()
        proc = _cli(env, "validate", "specs/local/canary.yaml", timeout=60)
        assert proc.returncode == 0 and "1 valid" in proc.stdout, proc.stderr
        assert time.monotonic() - t0 < 30
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(2)
            assert conn.recv(65536) == b""  # the client sent no request before it gave up


def _gone(pid: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    raise AssertionError(f"child {pid} still running")


def test_a_run_through_the_server_shows_progress_in_a_terminal_and_succeeds(server, tmp_path, canary_doc):
    import pexpect

    canary_doc["metadata"]["name"] = "warm-run"
    canary_doc["spec"]["trials"]["minReplicates"] = 3
    tiny_spec(canary_doc, [{"name": "membw", "repoCommand": "python -m benchrun.suites.membw",
                                                 "parameters": {"elements": 2_000_000, "iterations": 20}}])
    spec = tmp_path / "warm.yaml"
    spec.write_text(yaml.safe_dump(canary_doc, sort_keys=False))
    home = tmp_path / "home"
    env = {**server["env"], "BENCHRUN_WARM": "require", "BENCHRUN_HOME": str(home)}
    pinned = len(os.sched_getaffinity(0)) > 1  # run it on one CPU: the command (and its suites) must be too
    argv = ["taskset", "-c", str(min(os.sched_getaffinity(0))), sys.executable] if pinned else [sys.executable]
    child = pexpect.spawn(argv[0], [*argv[1:], "-m", "benchrun.entry", "run", str(spec)], cwd=str(ROOT), env=env,
                          encoding="utf-8", timeout=300, dimensions=(40, 160))
    child.expect(r"in a fork of the warm orchestrator \(pid \d+\)")  # it says how it runs
    child.expect(r"micro/membw r[123]/3")  # the live bar: the command's stdout is the terminal
    child.expect(r"phase \S*Succeeded")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    [run_dir] = (home / "runs").iterdir()
    status = json.loads((run_dir / "status.json").read_text())
    assert status["phase"] == "Succeeded" and status["outcome"] == "succeeded"
    assert any("exited 0" in ln for ln in _served(server, "run"))
    environment = json.loads((run_dir / "structured" / f"{run_dir.name}_environment.json").read_text())
    if pinned:
        assert environment["cpu"]["usable_cpus"] == 1  # the client's affinity, not the server's
    from benchrun.report.worker import wait_for_workers

    wait_for_workers(home)


def test_a_second_server_for_the_same_code_is_refused(server):
    proc = _cli(server["env"], "serve", "--idle-timeout", "5")
    assert proc.returncode == 1 and "already serves this code" in proc.stderr
    status = _cli(server["env"], "serve", "--status")
    assert status.returncode == 0 and f"pid {server['proc'].pid} serving" in status.stdout


def test_without_a_server_the_command_runs_here_unless_one_is_required(tmp_path):
    sockdir = tempfile.mkdtemp(prefix="bw-", dir="/tmp")
    os.chmod(sockdir, 0o700)
    env = _env(sockdir)
    Path(warmstart.socket_path(env)).touch()  # a stale socket file: nobody listens
    proc = _cli(env, "validate", "specs/local/canary.yaml")
    assert proc.returncode == 0 and "1 valid" in proc.stdout
    proc = _cli({**env, "BENCHRUN_WARM": "require"}, "validate", "specs/local/canary.yaml")
    assert proc.returncode == 2 and "no warm orchestrator serves this code" in proc.stderr
    status = _cli(env, "serve", "--status")
    assert status.returncode == 1 and "no warm orchestrator" in status.stdout


def test_a_socket_directory_open_to_others_is_refused_and_never_used(tmp_path):
    sockdir = tmp_path / "open"
    sockdir.mkdir(mode=0o755)
    os.chmod(sockdir, 0o755)
    env = _env(str(sockdir))
    with pytest.raises(warmstart.WarmError, match=r"open to other users \(mode 755\)"):
        warmstart.socket_dir(env)
    assert warmstart.run_remote(["benchrun", "validate"], env) is None  # auto: run in-process instead
    with pytest.raises(warmstart.WarmError, match="chmod 700"):
        warmstart.run_remote(["benchrun", "validate"], {**env, "BENCHRUN_WARM": "require"})
    proc = _cli(env, "serve", "--idle-timeout", "5")
    assert proc.returncode == 1 and str(sockdir) in proc.stderr


def test_the_key_follows_the_source_and_import_time_environment(tmp_path):
    pkg = tmp_path / "benchrun"
    pkg.mkdir()
    (pkg / "mod.py").write_text("x = 1\n")
    env = {"HOME": "/root", "PYTHONHASHSEED": "0"}
    key = warmstart.code_key(env, tmp_path)
    assert warmstart.code_key({**env, "HOME": "/elsewhere", "BENCHRUN_HOME": "/x"}, tmp_path) == key
    assert warmstart.code_key({**env, "PYTHONHASHSEED": "1"}, tmp_path) != key
    assert warmstart.code_key({**env, "OMP_NUM_THREADS": "1"}, tmp_path) != key
    assert warmstart.code_key({**env, "BENCHRUN_LAUNCHER_KIND": "kubernetes"}, tmp_path) != key
    assert warmstart.code_key({**env, "BENCHRUN_WARM": "require", "BENCHRUN_WARM_DIR": "/x"}, tmp_path) == key
    st = (pkg / "mod.py").stat()
    os.utime(pkg / "mod.py", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # an edit
    assert warmstart.code_key(env, tmp_path) != key


def test_exit_status_as_the_interpreter_gives_it(capsys):
    assert warmstart.exit_status(None) == 0
    assert warmstart.exit_status(3) == 3
    assert warmstart.exit_status(256 + 2) == 2
    assert warmstart.exit_status("error: something") == 1
    assert "error: something" in capsys.readouterr().err


def test_help_is_boxed_on_the_clients_terminal_and_plain_in_its_pipe(server):
    """The CLI decides rich or plain help per command, from the command's own stdout, not
    from the server's (a log file) when it imported the CLI."""
    import pexpect

    env = {**server["env"], "BENCHRUN_WARM": "require"}
    piped = _cli(env, "validate", "--help")
    assert piped.returncode == 0 and "╭" not in piped.stdout and "--json" in piped.stdout
    child = pexpect.spawn(sys.executable, ["-m", "benchrun.entry", "validate", "--help"], cwd=str(ROOT), env=env,
                          encoding="utf-8", timeout=60, dimensions=(40, 120))
    text = child.read()
    child.close()
    assert child.exitstatus == 0 and "╭" in text


def test_the_entry_point_decides_without_importing_dagster_or_the_cli():
    probe = ("import sys, benchrun.entry, benchrun.warmstart as w; w.code_key(); "
             "heavy = [m for m in ('dagster', 'typer', 'pandas', 'benchrun.cli') if m in sys.modules]; "
             "sys.exit(f'imported {heavy}' if heavy else 0)")
    proc = subprocess.run([sys.executable, "-c", probe], env=_env("/nonexistent"), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_process_of_another_cgroup_namespace_or_group_list_is_not_served_from_here():
    mine = warmstart.process_context()
    assert warmstart.identity_mismatch(dict(mine), mine) is None
    for key, other in (("cgroup", "0::/elsewhere\n"), ("groups", [*mine["groups"], 4242]),
                       ("namespaces", {**(mine["namespaces"] or {}), "pid": 1})):
        assert key in warmstart.identity_mismatch({**mine, key: other}, mine)


def test_a_run_takes_the_launcher_settings_of_its_own_environment(bench_home, canary_doc, write_spec, monkeypatch):
    """The definitions are imported once by a warm orchestrator; the launcher must still
    follow the environment of the command that runs."""
    import dagster as dg

    importlib.import_module("bench_assets.definitions")  # imported before the variable is set
    from benchrun import submit as sub

    seen = {}

    def fake_execute(self, **kw):
        seen.update(kw)
        return None

    monkeypatch.setattr(dg.JobDefinition, "execute_in_process", fake_execute)
    monkeypatch.setenv("BENCHRUN_LAUNCHER_KIND", "kubernetes")
    sub.execute(sub.prepare(write_spec(canary_doc)))
    assert seen["resources"]["launcher"].kind == "kubernetes"


@pytest.mark.skipif(not __import__("shutil").which("ionice"), reason="unavailable: no ionice (util-linux)")
def test_a_client_with_another_io_priority_runs_its_command_itself(server):
    """What fio measures depends on the I/O priority: a fork of the server would not have the
    client's, so the command is not served (and runs, in its own process)."""
    before = len(_served(server, "validate"))
    proc = subprocess.run(["ionice", "-c", "3", sys.executable, "-m", "benchrun.entry", "validate",
                           "specs/local/canary.yaml"], env=server["env"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "1 valid" in proc.stdout, proc.stderr
    assert len(_served(server, "validate")) == before
    assert "not started: the client's ionice differs" in server["log"].read_text()


def test_a_served_commands_usage_names_benchrun_as_a_cold_one_does(server):
    """Review 2026-12-08: a server started as `python -m benchrun.entry` (what `serve --detach` runs) printed
    "Usage: python -m benchrun.benchrun runs" (click's guess from __main__'s package), and a mistyped command's
    hint named that too."""
    for how in ("require", "0"):
        env = {**server["env"], "BENCHRUN_WARM": how}
        out = _cli(env, "runs", "--help")
        assert out.returncode == 0 and out.stdout.splitlines()[0].startswith("Usage: benchrun runs"), (how, out.stdout)
        bad = _cli(env, "nosuchcmd")
        assert bad.returncode == 2 and "Try 'benchrun --help' for help." in bad.stderr, (how, bad.stderr)


def test_a_signal_the_client_ignores_still_reaches_a_command_that_handles_it(server):
    """Review 2026-12-08: a shell starts background jobs with SIGINT ignored; refserver installs its own
    handler, so cold `kill -INT` stops it, while the served one never got the signal (the client dropped
    signals it ignored) and ran on."""
    ignore_int = {"preexec_fn": lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)}
    cold, _ = _refserver({**server["env"], "BENCHRUN_WARM": "0"}, **ignore_int)
    cold.send_signal(signal.SIGINT)
    expected = cold.wait(timeout=30)
    proc, pid = _refserver({**server["env"], "BENCHRUN_WARM": "require"}, server, **ignore_int)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == expected
    _gone(pid)


def test_a_command_with_a_standard_stream_closed_runs_here(server):
    """Review 2026-12-08: with stdin (or stdout) closed the control socket took that descriptor and went to the
    command as its stdin (it kept the client's end: a kill -9 of the client never hung it up) or its stdout
    (its output went into the protocol's frames). Such a command runs in the client's process; with
    BENCHRUN_WARM=require it is refused (exit 2)."""
    before = len(_served(server, "runs"))
    for fd in (0, 1):
        close = {"preexec_fn": (lambda fd=fd: os.close(fd))}
        out = _cli({**server["env"], "BENCHRUN_WARM": "auto"}, "runs", **close)
        assert out.returncode == 0, out.stderr
        refused = _cli({**server["env"], "BENCHRUN_WARM": "require"}, "runs", **close)
        assert refused.returncode == 2 and f"file descriptor(s) {fd} (stdin/stdout/stderr) are closed" \
            in refused.stderr, refused.stderr
    assert len(_served(server, "runs")) == before  # none was handed over
