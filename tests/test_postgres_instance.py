"""A Dagster instance on a real PostgreSQL server (dagster-postgres), with deploy/instance/dagster.yaml:
a canary through it, two concurrent submissions, sensor ticks stored, the UI's GraphQL answering.

One server per test session (``initdb`` in a temporary directory as the unprivileged
``postgres`` user when running as root, on a free loopback port, durability settings off
because the data is thrown away); each test module gets its own database.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from helpers import stop_process, tiny_spec

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "deploy/instance/dagster.yaml"
PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"
GEMM = {"name": "gemm", "repoCommand": "python -m benchrun.suites.gemm", "parameters": {"sizes": [32], "iterations": 2}}

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class PgServer:
    host: str
    port: int
    user: str
    bin_dir: Path

    def env(self, db: str) -> dict[str, str]:
        """The DAGSTER_PG_* settings deploy/instance/dagster.yaml reads."""
        return {"DAGSTER_PG_HOST": self.host, "DAGSTER_PG_PORT": str(self.port), "DAGSTER_PG_USERNAME": self.user,
                "DAGSTER_PG_PASSWORD": "unused-trust-auth", "DAGSTER_PG_DB": db}

    def connect(self, db: str = "postgres") -> Any:
        import psycopg2

        conn = psycopg2.connect(host=self.host, port=self.port, user=self.user, dbname=db, connect_timeout=5)
        conn.autocommit = True
        return conn

    def sql(self, db: str, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one statement with a plain client; its rows (empty for statements without)."""
        conn = self.connect(db)
        try:
            with conn.cursor() as cur:
                cur.execute(query, params)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()


def _pg_bin() -> Path | None:
    found = sorted(Path("/").glob(PG_BIN_GLOB.lstrip("/")), key=lambda p: p.parent.name)
    return found[-1] if found and (found[-1] / "initdb").exists() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_unprivileged() -> dict[str, Any]:
    """subprocess arguments that drop root (PostgreSQL refuses to run as root)."""
    if os.geteuid() != 0:
        return {}
    try:
        entry = pwd.getpwnam("postgres")
    except KeyError:
        entry = pwd.getpwnam("nobody")
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


@contextlib.contextmanager
def running_pg_server() -> Iterator[PgServer]:
    """A throwaway PostgreSQL server on loopback (initdb in a temporary directory, as the
    unprivileged postgres user when running as root); stopped and removed on exit. Also used
    by benchmarks/controller_scale.py --postgres."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL server binaries not found (Debian package postgresql; make installs it)")
    drop = _as_unprivileged()
    root = Path(tempfile.mkdtemp(prefix="benchrun-pg-"))
    data, sockets = root / "data", root / "sock"
    sockets.mkdir()
    if drop:
        for path in (root, sockets):
            os.chown(path, drop["user"], drop["group"])
    user = "benchrun"
    subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-U", user, "--auth=trust", "-E", "UTF8",
                    "--no-sync"], check=True, capture_output=True, timeout=120, **drop)
    log = (root / "postgres.log").open("wb")
    server = None
    for _attempt in range(3):  # a free port can be taken between the probe and the bind
        port = _free_port()
        server = subprocess.Popen(
            [str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sockets),
             "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
             "-c", "full_page_writes=off", "-c", "max_connections=100"],
            stdout=log, stderr=subprocess.STDOUT, **drop)
        pg = PgServer("127.0.0.1", port, user, bin_dir)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.poll() is None:
            try:
                pg.sql("postgres", "SELECT 1")
                break
            except Exception:  # noqa: BLE001 - not accepting connections yet
                time.sleep(0.2)
        if server.poll() is None:
            break
    if server is None or server.poll() is not None:
        raise RuntimeError(f"PostgreSQL did not start: {(root / 'postgres.log').read_text()[-2000:]}")
    try:
        yield pg
    finally:
        stop_process(server, 30)
        log.close()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    if _pg_bin() is None:
        pytest.skip("PostgreSQL server binaries not found (Debian package postgresql; make installs it)")
    with running_pg_server() as pg:
        yield pg


@pytest.fixture(scope="module")
def pg_home(pg_server: PgServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A $BENCHRUN_HOME whose Dagster instance is deploy/instance/dagster.yaml on a fresh database."""
    db = f"dagster_{os.getpid()}"
    pg_server.sql("postgres", f'CREATE DATABASE "{db}"')  # the name is ours, not data
    home = tmp_path_factory.mktemp("pghome")
    (home / "dagster_home").mkdir()
    shutil.copyfile(TEMPLATE, home / "dagster_home" / "dagster.yaml")
    saved = {k: os.environ.get(k) for k in ["BENCHRUN_HOME", "DAGSTER_HOME", *pg_server.env(db)]}
    os.environ.update({"BENCHRUN_HOME": str(home), "DAGSTER_HOME": str(home / "dagster_home"), **pg_server.env(db)})
    try:
        yield home
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def pg_instance(pg_home: Path) -> Iterator[dg.DagsterInstance]:
    from benchrun.submit import get_instance

    instance = get_instance(pg_home)
    try:
        yield instance
    finally:
        instance.dispose()


def _spec(tmp: Path, name: str) -> Path:
    doc = yaml.safe_load((ROOT / "specs/local/canary.yaml").read_text())
    doc["metadata"]["name"] = name
    tiny_spec(doc, [GEMM])
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def canary_run(pg_instance: dg.DagsterInstance, pg_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from benchrun import submit as sub

    prepared = sub.submit(_spec(tmp_path_factory.mktemp("specs"), "pg-canary"), instance=pg_instance)
    result = sub.execute(prepared, instance=pg_instance)
    return prepared, result


def test_the_instance_is_postgres(pg_instance: dg.DagsterInstance) -> None:
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

    assert isinstance(pg_instance.run_storage, PostgresRunStorage)
    assert isinstance(pg_instance.event_log_storage, PostgresEventLogStorage)
    assert isinstance(pg_instance.schedule_storage, PostgresScheduleStorage)


def test_canary_runs_through_the_postgres_instance(canary_run: Any, pg_instance: dg.DagsterInstance,
                                                   pg_server: PgServer) -> None:
    from benchrun.rundir import RunDir

    prepared, result = canary_run
    assert result.success
    st = RunDir.for_run(prepared.run_id).read_status()
    assert st["phase"] == "Succeeded" and st["outcome"] == "succeeded"
    # the record is in PostgreSQL, read with a plain SQL client
    db = os.environ["DAGSTER_PG_DB"]
    assert pg_server.sql(db, "SELECT status FROM runs WHERE run_id = %s", (result.run_id,)) == [("SUCCESS",)]
    [(materialized,)] = pg_server.sql(
        db, "SELECT count(*) FROM event_logs WHERE run_id = %s AND dagster_event_type = 'ASSET_MATERIALIZATION'",
        (result.run_id,))
    assert materialized >= 5
    assert pg_instance.has_dynamic_partition("benchmark_run", prepared.run_id)


def test_two_concurrent_submissions(pg_home: Path, pg_instance: dg.DagsterInstance, tmp_path: Path) -> None:
    specs = [_spec(tmp_path, "pg-left"), _spec(tmp_path, "pg-right")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-m", "benchrun.cli", "submit", str(s)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for s in specs]
    outs = [p.communicate(timeout=300) for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-2000:]
    run_ids = [out.strip().splitlines()[-1] for out, _ in outs]
    assert run_ids[0].startswith("pg-left-") and run_ids[1].startswith("pg-right-")
    partitions = pg_instance.get_dynamic_partitions("benchmark_run")
    assert set(run_ids) <= set(partitions)


def _workspace(instance: dg.DagsterInstance) -> Any:
    from dagster._core.remote_origin import InProcessCodeLocationOrigin
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget

    origin = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(executable_path=sys.executable, module_name="bench_assets.definitions",
                             attribute="defs", working_directory=str(ROOT)),
        location_name="benchrun",
    )
    return WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget([origin]))


def test_sensor_ticks_are_stored_in_postgres(pg_instance: dg.DagsterInstance, pg_server: PgServer) -> None:
    from dagster._daemon.sensor import execute_sensor_iteration

    with _workspace(pg_instance) as context:
        list(execute_sensor_iteration(context, logging.getLogger("test"), None, None))
    states = {s.name: s for s in pg_instance.all_instigator_state()}
    # on by default: the run failure/cancel sensors tick with nothing to do
    ticks = pg_instance.get_ticks(states["run_failure_sensor"].instigator_origin_id,
                                  states["run_failure_sensor"].selector_id)
    assert ticks and ticks[0].status.value in {"SKIPPED", "SUCCESS"}
    [(stored,)] = pg_server.sql(os.environ["DAGSTER_PG_DB"], "SELECT count(*) FROM job_ticks")
    assert stored >= 1


def test_ui_graphql_answers_from_postgres(canary_run: Any, pg_instance: dg.DagsterInstance) -> None:
    from dagster_graphql.test.utils import execute_dagster_graphql

    _prepared, result = canary_run
    query = """
    query Runs {
      runsOrError(filter: {pipelineName: "benchmark_run_job"}) {
        __typename
        ... on Runs { results { runId status tags { key value } } }
      }
      sensorsOrError(repositorySelector: {repositoryName: "__repository__", repositoryLocationName: "benchrun"}) {
        __typename
        ... on Sensors { results { name } }
      }
    }"""
    with _workspace(pg_instance) as process_context:
        answer = execute_dagster_graphql(process_context.create_request_context(), query)
    assert not answer.errors, answer.errors
    runs = {r["runId"]: r for r in answer.data["runsOrError"]["results"]}
    assert runs[result.run_id]["status"] == "SUCCESS"
    tags = {t["key"]: t["value"] for t in runs[result.run_id]["tags"]}
    assert tags["dagster/partition"] == canary_run[0].run_id
    sensors = {s["name"] for s in answer.data["sensorsOrError"]["results"]}
    assert "benchmarkrun_resource_sensor" in sensors
