"""The instance template's event log (benchrun.dagster_storage): Dagster's sqlite event log
with connections kept open. It must behave as Dagster's own for everyone who reads it."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _entry(run_id: str, message: str):
    from dagster._core.events.log import EventLogEntry

    return EventLogEntry(error_info=None, level=logging.INFO, user_message=message, run_id=run_id, timestamp=time.time())


@pytest.fixture
def dagster_home(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def test_template_instance_uses_it_where_dagster_keeps_event_logs(dagster_home):
    import dagster as dg

    from benchrun.dagster_storage import PooledSqliteEventLogStorage

    with dg.DagsterInstance.get() as instance:
        assert isinstance(instance.event_log_storage, PooledSqliteEventLogStorage)
        instance.store_event(_entry("r1", "hello"))
        assert [e.user_message for e in instance.all_logs("r1")] == ["hello"]
    # The same files as Dagster's default sqlite storage: a home made before keeps its history.
    assert (dagster_home / "history" / "runs" / "r1.db").is_file()
    assert (dagster_home / "history" / "runs" / "index.db").is_file()


def test_other_processes_see_each_event_and_the_ui_watch_wakes(dagster_home):
    """The UI follows a run with a file watch on the run's .db; with a connection held open
    in WAL mode that file changes only at a checkpoint, so each commit must checkpoint."""
    import dagster as dg

    seen: list[str] = []
    woke = threading.Event()

    def callback(entry, _cursor):
        seen.append(entry.user_message)
        if entry.user_message == "second":
            woke.set()

    with dg.DagsterInstance.get() as writer:
        writer.store_event(_entry("r2", "first"))
        # A reader with Dagster's own class, as a UI of an older home would have.
        from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

        reader = SqliteEventLogStorage(str(dagster_home / "history" / "runs"))
        try:
            reader.watch("r2", None, callback)
            time.sleep(0.5)  # let the observer start
            writer.store_event(_entry("r2", "second"))
            stored = ["first", "second"]
            # On a loaded machine the observer's thread may add its inotify watch after that
            # write: a later commit wakes it then (and delivers "second" with it).
            for n in range(5):
                if woke.wait(2):
                    break
                stored.append(f"nudge {n}")
                writer.store_event(_entry("r2", stored[-1]))
            assert woke.is_set(), f"the watch never woke; saw {seen}"
        finally:
            reader.end_watch("r2", callback)
            reader.dispose()
        # Another process reads what this one wrote while its connection is still open.
        out = subprocess.run(
            [sys.executable, "-c", "import dagster as dg; i = dg.DagsterInstance.get(); "
             "print([e.user_message for e in i.all_logs('r2')])"],
            env={**os.environ}, capture_output=True, text=True, timeout=120, check=True,
        ).stdout
        assert str(stored) in out  # every event, in order, and nothing else


def test_threads_share_the_connection(dagster_home):
    """Pipes readers store events from their own threads."""
    import dagster as dg

    with dg.DagsterInstance.get() as instance:
        errors: list[BaseException] = []

        def write(k: int) -> None:
            try:
                for i in range(20):
                    instance.store_event(_entry("r3", f"{k}-{i}"))
            except BaseException as exc:  # noqa: BLE001 - the test reports it
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert len(instance.all_logs("r3")) == 80


def test_open_databases_are_bounded_and_wipe_closes_them(dagster_home):
    import dagster as dg

    from benchrun import dagster_storage

    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        for i in range(dagster_storage.MAX_OPEN + 5):
            instance.store_event(_entry(f"run{i}", "x"))
        assert len(storage._engines) <= dagster_storage.MAX_OPEN + 1
        # A run whose connection was closed is opened again on demand.
        assert [e.user_message for e in instance.all_logs("run0")] == ["x"]
        instance.wipe()
        assert set(storage._engines) <= {"index"}  # wipe empties the index through it again
        assert not (dagster_home / "history" / "runs" / "run1.db").exists()
        instance.store_event(_entry("run1", "after wipe"))
        assert [e.user_message for e in instance.all_logs("run1")] == ["after wipe"]
