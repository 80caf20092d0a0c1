"""The local launcher: each invocation is a subprocess in its own process group.

stdout and stderr go to ``raw/<run_id>_<suite>_r<k>.log`` (what an earlier launch of the replicate
left is set aside first: ``benchrun.launch.rerun.set_aside_earlier``); a hang past the timeout, or an
interrupt, kills the whole process group (suites fork workers: allreduce ranks, load-generator
workers, the reference server), first politely, then — after one grace period, whatever interrupts
it — with SIGKILL. A group is signalled only while its leader is unreaped (its pid cannot have been
reused), and what a leader leaves in its group when it exits is killed then. The SIGKILLed leaders
are waited for at most ``REAP_S`` with interrupts held: one in uninterruptible sleep (a GPU driver
hung after an Xid, a dead NFS mount) is logged, named in the replicate's reason and left to a later
call to reap, and benchrun stays interruptible.

A multi-node suite (``nodes > 1``) is one gang: N process groups, one per "node", started
together and meeting through a real torch.distributed rendezvous on a free loopback port
(``MASTER_ADDR=127.0.0.1``, ``MASTER_PORT``, ``NODE_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``). The replicate is one observation: node 0 writes its result document;
the first node to fail (non-zero exit or signal) fails the gang at once, naming the node,
its ranks and its reason, and every other group is killed, so no rank outlives the gang.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

from benchrun.launch.base import LaunchResult, prepare_outputs
from benchrun.launch.rerun import set_aside_earlier
from benchrun.plan import Invocation
from benchrun.suites.result import read_result
from benchrun.telemetry import replicate_telemetry

log = logging.getLogger(__name__)

GRACE_S = 3.0
# How long the reaping waits, interrupts held, for the leaders it SIGKILLed: a leader in
# uninterruptible sleep does not die until the kernel lets it, and an unbounded wait with SIGINT
# and SIGTERM blocked left benchrun killable by SIGKILL only.
REAP_S = 5.0
# Leaders SIGKILLed that had not exited REAP_S later: reaped, best effort, by a later call.
_LEFT: list[subprocess.Popen[bytes]] = []


def _ended(code: int) -> str:
    """How a process with a non-zero exit status ended."""
    return f"killed by {_signal_name(-code)}" if code < 0 else f"exited with code {code}"


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether the process has ended, without reaping it: an exited leader stays a zombie that holds
    its pid, and so its process group's id, until :func:`_reap` signals the group and reaps it."""
    if proc.returncode is not None:
        return True
    if not hasattr(os, "waitid"):  # macOS before Python 3.13
        return _exited_without_waitid(proc)
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped elsewhere: nothing of it is left to wait for
        return True


def _exited_without_waitid(proc: subprocess.Popen[bytes]) -> bool:
    """:func:`_exited` where ``os.waitid`` is missing. ``poll()`` would reap the leader, and
    :func:`_reap` then skipped the ``killpg`` (the pid may be reused once reaped): what the suite
    left in its group survived. psutil reads the leader's state instead, without reaping it, so an
    exited leader stays a zombie holding its group's id until :func:`_reap` has signalled the group.
    Only where psutil cannot read the process does ``poll()`` decide (and reap)."""
    import psutil

    try:
        return psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # reaped elsewhere: nothing of it is left to wait for
        return True
    except Exception:  # psutil cannot read it here (access denied, an unsupported platform)
        return proc.poll() is not None


def _killpg(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group of an unreaped leader (running, or a zombie holding the pid)."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # children the leader left in its group are not ours to keep
        except (ProcessLookupError, PermissionError):
            pass


def _reap(proc: subprocess.Popen[bytes]) -> int:
    """SIGKILL the process group, then reap its leader; its exit status. The group is signalled
    only while the leader is not reaped (running, or a zombie holding the pid): once reaped, the pid
    may be reused and ``killpg`` could reach an unrelated process group. Only for a leader known to
    have exited (the wait is not bounded): see :func:`_kill_and_reap` for the others."""
    _killpg(proc)
    return proc.wait()


def _reap_left() -> None:
    """Reap, best effort, the leaders an earlier clean-up left unreaped that have exited since (no
    zombie stays behind), their groups SIGKILLed once more first (they are still unreaped)."""
    for p in list(_LEFT):
        if _exited(p):
            _reap(p)
            _LEFT.remove(p)


def _kill_and_reap(procs: list[subprocess.Popen[bytes]], within_s: float) -> list[subprocess.Popen[bytes]]:
    """SIGKILL every group of ``procs``, then reap every leader that exits within ``within_s`` (one
    bound shared by all); those that do not (uninterruptible sleep) are logged, kept in ``_LEFT``
    for a later call to reap, and returned."""
    _reap_left()
    for p in procs:
        _killpg(p)
    deadline = time.monotonic() + within_s
    stuck = []
    for p in procs:
        if p.returncode is None and not _exited(p) and not wait_any([p], deadline - time.monotonic()):
            stuck.append(p)
        else:
            p.wait()  # exited (or reaped already): at once
    if stuck:
        _LEFT.extend(stuck)
        log.error("%s: not exited %gs after SIGKILL (uninterruptible sleep: a hung GPU driver or filesystem?); "
                  "left unreaped, reaped by a later clean-up once it exits", _pids(stuck), within_s)
    return stuck


def _pids(procs: list[subprocess.Popen[bytes]]) -> str:
    return ("pid " if len(procs) == 1 else "pids ") + ", ".join(str(p.pid) for p in procs)


def _stuck_note(stuck: list[subprocess.Popen[bytes]]) -> str:
    """What a replicate's reason adds for the leaders :func:`_kill_and_reap` left."""
    return (f"; {_pids(stuck)} not exited {REAP_S:g}s after SIGKILL (uninterruptible sleep: a hung "
            "GPU driver or filesystem?), left unreaped" if stuck else "")


_INTERRUPTS = {signal.SIGINT, signal.SIGTERM}


def _reap_all(procs: list[subprocess.Popen[bytes]]) -> list[subprocess.Popen[bytes]]:
    """:func:`_kill_and_reap` every process without an interrupt cutting it short: SIGINT and
    SIGTERM are blocked for this (the main) thread and their Python handlers held (one another
    thread of the process took still trips its handler here) until the last is reaped or
    ``REAP_S`` has passed, then delivered, raising as they would have. The leaders not reaped."""
    main = threading.current_thread() is threading.main_thread()
    interrupted: BaseException | None = None
    previous = None
    try:
        if main:
            previous = signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPTS)
    except BaseException as exc:  # a handler pending from before ran inside the call (blocked by now)
        interrupted = exc
    try:
        with _signals_held() as held:
            stuck = _kill_and_reap(procs, REAP_S)
    finally:
        # a signal that arrived meanwhile runs its own handler here, raising as it would have
        if previous is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        elif main:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _INTERRUPTS)
    if interrupted is not None:
        raise interrupted
    _deliver(held)
    return stuck


def _kill_groups(procs: list[subprocess.Popen[bytes]]) -> list[subprocess.Popen[bytes]]:
    """Stop the process groups of ``procs``: SIGTERM to every group first, one grace period shared by
    all for their leaders to exit, then SIGKILL to every group and every leader reaped.

    The SIGKILL and the reaping run in a ``finally`` with interrupts blocked (:func:`_reap_all`): a
    second Ctrl-C during the grace period ends the wait, not the clean-up. It used to skip the SIGKILL
    (a suite ignoring SIGTERM outlived the run, which stopped claiming it, so no later clean-up found
    it), and a gang's nodes after the one being waited for were never signalled. The leaders
    not reaped ``REAP_S`` after SIGKILL (:func:`_kill_and_reap`)."""
    live = [p for p in procs if p.returncode is None]
    stuck: list[subprocess.Popen[bytes]] = []
    try:
        for p in live:  # an exited (unreaped) leader's group may still hold its children: them too
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + GRACE_S
        while (waiting := [p for p in live if not _exited(p)]) and (left := deadline - time.monotonic()) > 0:
            wait_any(waiting, left)
    finally:
        stuck = _reap_all(live)
    return stuck


@contextlib.contextmanager
def _signals_held() -> Iterator[list[tuple[int, Any]]]:
    """SIGINT and SIGTERM held while a suite is spawned, delivered by :func:`_deliver` once the
    launcher holds the process. An interrupt that lands inside ``Popen`` after the fork leaves the
    child running with no ``Popen`` returned to kill it — in its own session, the terminal's Ctrl-C
    never reaches it, so it outlived the run. Main thread only (only it runs signal handlers);
    only Python handlers are held (a default action is the process's own end)."""
    held: list[tuple[int, Any]] = []
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(sig)
            if callable(handler):
                previous[sig] = handler
                signal.signal(sig, lambda num, frame: held.append((num, frame)))
    try:
        yield held
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _deliver(held: list[tuple[int, Any]]) -> None:
    """Run the handlers of the signals :func:`_signals_held` held (raising as they would have)."""
    for num, frame in held:
        handler = signal.getsignal(num)
        if callable(handler):
            handler(num, frame)


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def local_node_name(node_rank: int) -> str:
    """The node label of one local gang member: this host's name and the node's rank."""
    return f"{socket.gethostname()}-node{node_rank}"


def _node_reason(run_dir: Path, inv: Invocation, node_rank: int) -> str | None:
    """The reason a node's own result document gives, when it wrote one."""
    path = run_dir / inv.node_result_relpath(node_rank)
    if not path.is_file():
        return None
    try:
        return read_result(path).get("reason")
    except ValueError:
        return None


def wait_any(procs: list[subprocess.Popen], timeout_s: float) -> bool:
    """Block until one of ``procs`` exits (True) or ``timeout_s`` passes (False).

    ``Popen.wait`` with a timeout polls with sleeps that grow to 50 ms, so a suite's measured
    wall would end up to 50 ms after the suite did (25 ms on average, on every replicate). A
    pidfd (Linux >= 5.3) wakes at the exit itself; elsewhere this polls every 5 ms. Reaps nothing.
    """
    if not procs:
        return True
    deadline = time.monotonic() + max(timeout_s, 0.0)
    fds: list[int] = []
    try:
        try:
            for p in procs:
                fds.append(os.pidfd_open(p.pid))
        except ProcessLookupError:
            return True  # gone already
        except (AttributeError, OSError):  # not Linux, or an old kernel
            while not any(_exited(p) for p in procs):
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.005)
            return True
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        remaining_ms = max(0.0, deadline - time.monotonic()) * 1000.0
        return bool(poller.poll(min(remaining_ms, 2**31 - 1)))
    finally:
        for fd in fds:  # every pidfd opened, whichever way out
            os.close(fd)


def wait_exit(proc: subprocess.Popen, timeout_s: float) -> int:
    """``proc.wait(timeout_s)`` that returns as soon as the process exits (see ``wait_any``); the
    rest of its process group is killed before the leader is reaped (:func:`_reap`)."""
    if not wait_any([proc], timeout_s):
        raise subprocess.TimeoutExpired(proc.args, timeout_s)
    return _reap(proc)


class LocalLauncher:
    """Runs invocations as subprocesses on this machine (the embedded default)."""

    def launch(
        self, inv: Invocation, run_dir: Path, *, extra_env: Mapping[str, str] | None = None
    ) -> LaunchResult:
        _reap_left()  # a leader an earlier clean-up left unreaped, exited since
        # What an earlier launch of this replicate left here is kept aside, not truncated or taken for this one's.
        set_aside_earlier(run_dir, inv)
        if inv.is_gang:
            return self._launch_gang(inv, run_dir, extra_env=extra_env)
        log_path, result_path = prepare_outputs(inv, run_dir)
        env = {**inv.env, **(extra_env or {})}
        t_request = time.time()
        t0 = time.perf_counter()
        timed_out = False
        stuck: list[subprocess.Popen[bytes]] = []
        # The sampler runs from just before the spawn to just after the exit, and adds its
        # summaries to the result document before it is read below.
        with replicate_telemetry(inv, run_dir) as telemetry, log_path.open("wb") as logf:
            with _signals_held() as held:
                try:
                    proc = subprocess.Popen(
                        list(inv.argv),
                        env=env,
                        cwd=run_dir,
                        stdin=subprocess.DEVNULL,
                        stdout=logf,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # its own process group, killable as one
                    )
                except OSError as exc:
                    proc, spawn_error = None, exc
            if proc is None:
                _deliver(held)  # an interrupt during a failed spawn still interrupts
                wall = time.perf_counter() - t0
                logf.write(f"benchrun: cannot start {inv.argv[0]!r}: {spawn_error}\n".encode())
                return self._result(inv, "failed", f"cannot start {inv.argv[0]!r}: {spawn_error.strerror or spawn_error}",
                                    None, wall, t_request, t_request, log_path, None)
            t_spawned = time.time()
            try:
                _deliver(held)  # a Ctrl-C that landed during the spawn: now, where the suite is killed below
                # Inside the try: a Ctrl-C that lands while the sampler takes the pid still ends the suite.
                if telemetry is not None:
                    telemetry.watch(proc.pid)
                code = wait_exit(proc, inv.timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                stuck = _kill_groups([proc])
                code = proc.returncode  # None: left unreaped (_kill_and_reap), never waited for unbounded
            except BaseException:
                # Interrupted (Ctrl-C, benchrun cancel): the suite is in its own session, so the
                # terminal's signal never reached it; it must not outlive the run.
                _kill_groups([proc])
                raise
            wall = time.perf_counter() - t0  # the suite's time, not the telemetry's write-up
        doc = None
        doc_error = None
        if result_path.is_file():
            try:
                doc = read_result(result_path)
            except ValueError as exc:
                doc_error = str(exc)
        if timed_out:
            status, reason = "failed", f"timed out after {inv.timeout_s:g}s; process group killed" + _stuck_note(stuck)
        elif code < 0:
            status, reason = "failed", f"killed by {_signal_name(-code)}"
        elif code != 0:
            detail = doc.get("reason") if doc and doc.get("reason") else None
            status, reason = "failed", f"exited with code {code}" + (f": {detail}" if detail else "")
        elif doc is None:
            status = "failed"
            reason = doc_error or f"exited 0 but wrote no result document ({inv.result_relpath()})"
        else:
            status, reason = doc["status"], doc.get("reason")
        if status == "failed":
            log.warning("%s r%d failed: %s (log: %s)", inv.suite, inv.replicate, reason, log_path)
        return self._result(inv, status, reason, code, wall, t_request, t_spawned, log_path,
                            result_path if doc is not None else None,
                            doc.get("metrics", []) if doc and status == "ok" else [])

    def _launch_gang(
        self, inv: Invocation, run_dir: Path, *, extra_env: Mapping[str, str] | None = None
    ) -> LaunchResult:
        """All nodes of a gang at once; the first failure stops the others (module docstring)."""
        log_path, result_path = prepare_outputs(inv, run_dir)
        for n in range(1, inv.nodes):
            (run_dir / inv.node_result_relpath(n)).unlink(missing_ok=True)
        port = free_loopback_port()
        master = "127.0.0.1"
        hosts = ",".join(local_node_name(n) for n in range(inv.nodes))
        # The nodes share this machine's cores: divide them, as torchrun does with OMP_NUM_THREADS.
        threads = str(max(1, (os.cpu_count() or 1) // inv.world_size))
        t_request = time.time()
        t0 = time.perf_counter()
        procs: list[subprocess.Popen[bytes]] = []
        failure: tuple[int, str] | None = None
        timed_out = False
        stuck: list[subprocess.Popen[bytes]] = []
        # One sampler for the gang (its nodes share this host), stopped however the gang ends — a
        # launcher error or an interrupt included — and adding its summaries to the result read below.
        with replicate_telemetry(inv, run_dir) as telemetry, contextlib.ExitStack() as logs:
            try:
                for n in range(inv.nodes):
                    # Only node 0 speaks Dagster Pipes: one session per replicate, closed once.
                    pipes = {k: v for k, v in (extra_env or {}).items() if n == 0 or not k.startswith("DAGSTER_PIPES")}
                    # the suite's own OMP_NUM_THREADS (its spec env, or a leading `env NAME=value` of its
                    # command, both in suite_env) stays the suite's
                    own = {k: v for k, v in inv.suite_env.items() if k == "OMP_NUM_THREADS"}
                    env = {**inv.env, "OMP_NUM_THREADS": threads, **own, **pipes,
                           **inv.node_env(n, master_addr=master, master_port=port, node_name=local_node_name(n))}
                    logf = logs.enter_context((run_dir / inv.node_log_relpath(n)).open("wb"))
                    try:
                        with _signals_held() as held:  # a node spawned is a node in procs, killed below
                            procs.append(subprocess.Popen(
                                list(inv.node_argv(n, master_addr=master, master_port=port, hosts=hosts)),
                                env=env, cwd=run_dir, stdin=subprocess.DEVNULL, stdout=logf,
                                stderr=subprocess.STDOUT, start_new_session=True,
                            ))
                        _deliver(held)
                        if telemetry is not None:
                            telemetry.watch(procs[-1].pid)
                    except OSError as exc:
                        _deliver(held)
                        logf.write(f"benchrun: cannot start {inv.argv[0]!r}: {exc}\n".encode())
                        failure = (n, f"cannot start {inv.argv[0]!r}: {exc.strerror or exc}")
                        break
                t_spawned = time.time()
                deadline = time.monotonic() + inv.timeout_s
                while failure is None and any(p.returncode is None for p in procs):
                    if time.monotonic() >= deadline:
                        timed_out = True
                        break
                    wait_any([p for p in procs if p.returncode is None], max(0.0, min(deadline - time.monotonic(), 1.0)))
                    for p in procs:
                        if p.returncode is None and _exited(p):
                            _reap(p)  # its group killed while the zombie leader still holds the pid
                    failure = next(((n, _ended(p.returncode)) for n, p in enumerate(procs)
                                    if p.returncode not in (None, 0)), None)
            finally:
                stuck = _kill_groups(procs)  # every node not reaped yet: SIGTERM all, one grace period, SIGKILL all
            wall = time.perf_counter() - t0
        codes = [p.returncode for p in procs]
        if failure is None and not timed_out:
            # every node ended between two polls of the loop above: its exit code still decides
            failure = next(((n, _ended(c)) for n, c in enumerate(codes) if c not in (0, None)), None)
        doc, doc_error = None, None
        if result_path.is_file():
            try:
                doc = read_result(result_path)
            except ValueError as exc:
                doc_error = str(exc)
        L = inv.ranks_per_node
        if timed_out:
            status, reason = "failed", (f"gang of {inv.nodes} nodes timed out after {inv.timeout_s:g}s; "
                                        "every node's process group killed")
        elif failure is not None:
            n, why = failure
            ranks = f"rank {n * L}" if L == 1 else f"ranks {n * L}-{n * L + L - 1}"
            detail = _node_reason(run_dir, inv, n)
            status = "failed"
            reason = (f"node {n} ({ranks}) {why}" + (f": {detail}" if detail else "")
                      + f"; the gang of {inv.nodes} nodes was stopped (log: {inv.node_log_relpath(n)})")
        elif doc is None:
            status = "failed"
            reason = doc_error or f"gang exited 0 but node 0 wrote no result document ({inv.result_relpath()})"
        else:
            status, reason = doc["status"], doc.get("reason")
        if stuck:
            reason = (reason or "") + _stuck_note(stuck)
        if status == "failed":
            log.warning("%s r%d failed: %s", inv.suite, inv.replicate, reason)
        code = next((c for c in codes if c not in (0, None)), codes[0] if codes else None)
        return self._result(inv, status, reason, code, wall, t_request, t_spawned if procs else t_request,
                            log_path, result_path if doc is not None else None,
                            doc.get("metrics", []) if doc and status == "ok" else [])

    @staticmethod
    def _result(inv: Invocation, status: str, reason: str | None, code: int | None, wall: float,
                t_request: float, t_spawned: float, log_path: Path, result_path: Path | None,
                metrics: list | None = None) -> LaunchResult:
        run_dir = log_path.parent.parent
        return LaunchResult(
            run_id=inv.run_id,
            layer=inv.layer,
            suite=inv.suite,
            replicate=inv.replicate,
            benchmark_case_id=inv.benchmark_case_id,
            status=status,
            reason=reason,
            exit_code=code,
            wall_s=round(wall, 6),
            t_request=t_request,
            t_spawned=t_spawned,
            t_finished=time.time(),
            log=log_path.relative_to(run_dir).as_posix(),
            result=result_path.relative_to(run_dir).as_posix() if result_path else None,
            metrics=list(metrics or []),
        )
