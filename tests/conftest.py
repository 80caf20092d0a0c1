"""Shared fixtures: a private $BENCHRUN_HOME per test and spec documents to modify."""

from __future__ import annotations

import copy
import signal
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def _plain_signals() -> None:
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


_plain_signals()  # a worker's module- and session-scoped fixtures (servers started once) start plain too


@pytest.fixture(autouse=True)
def _plain_signal_dispositions():
    """Each test starts with SIGINT, SIGTERM and SIGHUP as a plain Python process has them. pytest-xdist's
    workers ignore SIGINT, and Dagster's in-process execution maps SIGTERM to the SIGINT handler and
    leaves it there (dagster._utils.interrupts): every child a later test started in that worker then
    ignored both signals, so the tests that interrupt a child (cancel, query, warm start) failed or
    passed by which tests happened to run before them in the worker. Restored after each test too:
    the next module's fixtures (a server started once for the module) start children as well.
    SIGHUP too: under ``nohup`` every child ignored the hangup the warm server sends a command whose
    client went away."""
    _plain_signals()
    yield
    _plain_signals()


@pytest.fixture(autouse=True)
def _default_warehouse(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test starts on the default warehouse (the Iceberg tables), whatever the shell sets."""
    monkeypatch.delenv("BENCHRUN_WAREHOUSE_FORMAT", raising=False)


@pytest.fixture(autouse=True)
def _no_contention_verdicts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests run two at a time on a small machine: the other worker's CPU would mark most replicates
    contended and launch them again (``trials.contendedReruns`` defaults to 1). Nothing is contended
    here unless a test lowers ``BENCHRUN_CONTENTION_PCT`` itself (the contention tests do)."""
    monkeypatch.setenv("BENCHRUN_CONTENTION_PCT", "100")


@pytest.fixture(autouse=True, scope="session")
def _worker_machine_lock(tmp_path_factory: pytest.TempPathFactory):
    """The machine-wide benchmark lock (``BENCHRUN_MACHINE_LOCK``) of this worker's session, for what
    module- and session-scoped fixtures run before :func:`_private_machine_lock` applies."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BENCHRUN_MACHINE_LOCK", str(tmp_path_factory.mktemp("machine-lock") / "benchmark.lock"))
        yield


@pytest.fixture(autouse=True)
def _private_machine_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own machine-wide benchmark lock: tests in the other xdist workers run benchmarks in
    their own homes at the same time, and would otherwise wait on each other at /tmp's lock. A test of
    that lock sets one path for its homes itself."""
    monkeypatch.setenv("BENCHRUN_MACHINE_LOCK", str(tmp_path / "machine-benchmark.lock"))


@pytest.fixture
def parquet_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-run parquet layout of earlier releases (``BENCHRUN_WAREHOUSE_FORMAT=parquet``), for the
    tests of that layout and of the migration from it."""
    monkeypatch.setenv("BENCHRUN_WAREHOUSE_FORMAT", "parquet")


@pytest.fixture
def bench_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh $BENCHRUN_HOME (and DAGSTER_HOME under it) for one test."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("BENCHRUN_HOME", str(home))
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster_home"))
    return home


@pytest.fixture
def canary_doc() -> dict[str, Any]:
    """specs/local/canary.yaml as a dict (a deep copy: modify freely)."""
    return copy.deepcopy(yaml.safe_load((ROOT / "specs/local/canary.yaml").read_text()))


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[[dict[str, Any], str], Path]:
    def _write(doc: dict[str, Any], name: str = "spec.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    return _write



# The Kubernetes cluster harness (tests/kharness): `kcluster` and `kcluster_factory`.
from kharness.fixtures import kcluster, kcluster_factory  # noqa: E402,F401
