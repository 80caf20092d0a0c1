"""Dagster's sqlite event log, with each database's connection kept open between events.

Dagster's ``SqliteEventLogStorage`` creates a SQLAlchemy engine, opens a sqlite connection,
commits and closes it again for every event it stores or reads (``NullPool``). On the
embedded default that is ~3.6 ms an event, and a canary run stores ~400 events and reads
the event log before every step and every Pipes session: about 2 s of a 75 s run
(``benchmarks/orchestration_overhead.py``). Keeping one connection per database open makes
an event ~1 ms; nothing else changes: the same files, tables and schema (the UI and other
processes read them as before), the same lock around each use, every event still its own
committed transaction (syncing: see ``_pragmas``).

No library does this, and Dagster offers no option for it, hence this subclass. It is
named in the instance template (``dagster.yaml``, ``event_log_storage``); homes made before
it keep Dagster's class. Postgres deployments (``deploy/instance``) do not use it.

What keeping connections open changes, and how it is handled:

- sqlite objects are bound to the thread that made them; Pipes readers store events from
  their own threads, so connections are made with ``check_same_thread=False`` and used only
  under the storage's lock, as Dagster's own code does.
- A long-lived process (the UI, the daemon) reads many runs: at most ``MAX_OPEN`` run
  databases stay open, least recently used closed first.
- A database file deleted while open would swallow writes: ``wipe`` closes every connection
  before it deletes files, and ``dispose`` closes them all.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from dagster import Field, StringSource
from dagster._core.storage.event_log.sqlite.sqlite_event_log import (
    INDEX_SHARD_NAME,
    SQLITE_BUSY_TIMEOUT_SECONDS,
    SqliteEventLogStorage,
)
from dagster._core.storage.sql import create_engine
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import StaticPool

MAX_OPEN = 16


def _pragmas(run_shard: bool) -> Any:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Dagster's databases are in WAL mode, where NORMAL is sqlite's advice: a commit is
        # never lost to a crash of the process, and the file is never corrupted; a power
        # loss can drop the last commits before a checkpoint (the index can be rebuilt
        # from the run databases: `dagster instance reindex`).
        dbapi_connection.execute("PRAGMA synchronous=NORMAL")
        if run_shard:
            # Another process watching a run (the UI's live log) is woken by changes to the
            # run's .db file itself, which in WAL mode happen only at a checkpoint; Dagster's
            # per-event connections checkpoint as they close. An open one checkpoints after
            # each commit instead (which also syncs: run events are as durable as before).
            dbapi_connection.execute("PRAGMA wal_autocheckpoint=1")

    return on_connect


def default_base_dir() -> str:
    """Where Dagster's default sqlite storage keeps run event logs: $DAGSTER_HOME/history/runs."""
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        raise RuntimeError("PooledSqliteEventLogStorage: set DAGSTER_HOME or give event_log_storage.config.base_dir")
    return os.path.join(home, "history", "runs", "")


class PooledSqliteEventLogStorage(SqliteEventLogStorage):
    """``SqliteEventLogStorage`` that keeps one open connection per database (see module doc)."""

    def __init__(self, base_dir: str | None = None, inst_data: Any = None):
        self._engines: OrderedDict[str, Engine] = OrderedDict()
        self._engines_lock = threading.Lock()
        super().__init__(base_dir or default_base_dir(), inst_data=inst_data)

    @classmethod
    def config_type(cls) -> dict:
        return {"base_dir": Field(StringSource, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> PooledSqliteEventLogStorage:  # type: ignore[override]
        return cls(inst_data=inst_data, **dict(config_value or {}))

    def _engine(self, shard: str) -> Engine:
        with self._engines_lock:
            engine = self._engines.pop(shard, None)
            if engine is None:
                engine = create_engine(
                    self.conn_string_for_shard(shard),
                    # One connection, kept open and shared by this process's threads (used
                    # only under self._db_lock).
                    poolclass=StaticPool,
                    connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
                )
                event.listen(engine, "connect", _pragmas(run_shard=shard != INDEX_SHARD_NAME))
            self._engines[shard] = engine  # most recently used last
            while len(self._engines) > MAX_OPEN + 1:  # + the index
                oldest = next(k for k in self._engines if k != INDEX_SHARD_NAME)
                self._engines.pop(oldest).dispose()
            return engine

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:  # type: ignore[override]
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn:
                with conn.begin():
                    yield conn

    def close_connections(self) -> None:
        with self._engines_lock:
            while self._engines:
                self._engines.popitem()[1].dispose()

    def wipe(self) -> None:
        with self._db_lock:
            self.close_connections()
        super().wipe()

    def dispose(self) -> None:
        super().dispose()
        self.close_connections()


__all__ = ["PooledSqliteEventLogStorage"]
