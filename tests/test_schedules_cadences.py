"""The nightly and pre-release schedules, ticked through build_schedule_context on a real instance."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from benchrun.automation.settings import DEFAULT_NIGHTLY_CRON, ENV_NIGHTLY_CRON, cron_from_env
from benchrun.errors import BenchrunError
from schedules.cadences import nightly_schedule, pre_release_schedule
from test_automation_fixtures import ROOT, definitions, invalid_spec_bytes, spec_bytes
from test_store_helpers import s3_env  # noqa: F401  (fixture)

TICK = dt.datetime(2026, 9, 21, 3, 15, tzinfo=dt.timezone.utc)


@pytest.fixture
def instance(bench_home: Path) -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def specs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "specs"
    folder.mkdir()
    monkeypatch.setenv("BENCHRUN_SPECS_DIR", str(folder))
    return folder


def tick(schedule: dg.ScheduleDefinition, instance: dg.DagsterInstance, when: dt.datetime = TICK):
    repo_def = definitions().get_repository_def()
    context = dg.build_schedule_context(instance=instance, scheduled_execution_time=when, repository_def=repo_def)
    return schedule.evaluate_tick(context)


def test_nightly_tick_requests_one_run_per_nightly_spec(instance, specs_dir: Path, bench_home: Path) -> None:
    (specs_dir / "a.yaml").write_bytes(spec_bytes("nightly-a", "nightly"))
    (specs_dir / "sub").mkdir()
    (specs_dir / "sub" / "b.yaml").write_bytes(spec_bytes("nightly-b", "nightly"))
    (specs_dir / "canary.yaml").write_bytes(spec_bytes("canary-a", "canary"))
    (specs_dir / "off.yaml").write_bytes(spec_bytes("nightly-off", "nightly", nightly=False))
    (specs_dir / "broken.yaml").write_bytes(invalid_spec_bytes("broken"))

    data = tick(nightly_schedule, instance)
    requests = data.run_requests
    assert data.skip_message is None
    assert sorted(r.tags["benchrun/spec_path"] for r in requests) == ["a.yaml", "sub/b.yaml"]
    run_ids = sorted(r.partition_key for r in requests)
    assert [rid.rsplit("-", 2)[0] for rid in run_ids] == ["nightly-a", "nightly-b"]
    assert all(rid.split("-")[-2] == "20260921031500" for rid in run_ids)
    # the same submission path as the CLI: partitions registered, run directories Pending
    assert sorted(instance.get_dynamic_partitions("benchmark_run")) == run_ids
    for rid in run_ids:
        status = json.loads((bench_home / "runs" / rid / "status.json").read_text())
        assert status["phase"] == "Pending" and status["cadence"] == "nightly"
    for r in requests:
        digest = r.tags["benchrun/spec_digest"]
        assert r.run_key == f"nightly:{digest}:20260921T031500Z"
        assert r.tags["dagster/partition"] == r.partition_key


def test_retried_tick_gives_the_same_run_keys_and_runs(instance, specs_dir: Path, bench_home: Path) -> None:
    (specs_dir / "a.yaml").write_bytes(spec_bytes("nightly-a", "nightly"))
    first = tick(nightly_schedule, instance)
    again = tick(nightly_schedule, instance)
    assert [r.run_key for r in again.run_requests] == [r.run_key for r in first.run_requests]
    assert [r.partition_key for r in again.run_requests] == [r.partition_key for r in first.run_requests]
    assert len(instance.get_dynamic_partitions("benchmark_run")) == 1
    assert len(list((bench_home / "runs").iterdir())) == 1
    # the next night is a new run of the same spec
    later = tick(nightly_schedule, instance, TICK + dt.timedelta(days=1))
    assert later.run_requests[0].run_key != first.run_requests[0].run_key
    assert len(instance.get_dynamic_partitions("benchmark_run")) == 2


def test_tick_without_matching_specs_says_why(instance, specs_dir: Path) -> None:
    (specs_dir / "a.yaml").write_bytes(spec_bytes("nightly-a", "nightly"))
    (specs_dir / "broken.yaml").write_bytes(invalid_spec_bytes("broken"))
    data = tick(pre_release_schedule, instance)
    assert data.run_requests == []
    assert "no pre_release specs" in data.skip_message
    assert "broken.yaml" in data.skip_message and "spec.trials.minReplicates" in data.skip_message
    assert instance.get_dynamic_partitions("benchmark_run") == []


def test_a_storage_failure_fails_the_tick_instead_of_calling_the_spec_invalid(
        instance, specs_dir: Path, s3_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # a shared-state push failure (NoSuchBucket) was reported as "invalid spec skipped"
    import uuid

    import boto3

    bucket = f"missing-{uuid.uuid4().hex[:10]}"  # moto's buckets outlive its server in this process
    monkeypatch.setenv("BENCHRUN_SHARED_STATE", f"s3://{bucket}/benchrun")
    (specs_dir / "a.yaml").write_bytes(spec_bytes("nightly-a", "nightly"))
    with pytest.raises(dg.DagsterUserCodeExecutionError) as failed:  # the tick fails, with benchrun's error
        tick(nightly_schedule, instance)
    assert isinstance(failed.value.__cause__, BenchrunError)
    text = str(failed.value.__cause__)
    assert "not submitted: a.yaml is valid but could not be registered" in text and "NoSuchBucket" in text
    assert "invalid spec" not in text and "benchrun cadence run nightly" in text
    assert instance.get_dynamic_partitions("benchmark_run") == []
    boto3.client("s3", endpoint_url=s3_env).create_bucket(Bucket=bucket)
    assert [r.tags["benchrun/spec_path"] for r in tick(nightly_schedule, instance).run_requests] == ["a.yaml"]


def test_a_tick_where_only_some_specs_registered_says_how_to_submit_the_others_alone(
        instance, specs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dagster review: the docs said such a tick fails and advised `benchrun cadence run`, which mints new run
    ids and would run the launched specs a second time; the tick launched the others with one ERROR line."""
    import schedules.cadences as cad

    (specs_dir / "a.yaml").write_bytes(spec_bytes("nightly-a", "nightly"))
    (specs_dir / "b.yaml").write_bytes(spec_bytes("nightly-b", "nightly"))
    real = cad.submit_register

    def flaky(home, inst):
        register = real(home, inst)

        def pin(raw, source, now, loaded):
            if str(source).endswith("b.yaml"):
                raise BenchrunError("shared state s3://x/benchrun: upload failed (EndpointConnectionError)")
            return register(raw, source, now, loaded)
        return pin

    monkeypatch.setattr(cad, "submit_register", flaky)
    lines: list[str] = []
    context = dg.build_schedule_context(instance=instance, scheduled_execution_time=TICK,
                                        repository_def=definitions().get_repository_def())
    monkeypatch.setattr(type(context.log), "error", lambda self, msg, *a, **k: lines.append(str(msg)))
    data = nightly_schedule.evaluate_tick(context)
    assert [r.tags["benchrun/spec_path"] for r in data.run_requests] == ["a.yaml"]
    assert any("b.yaml is valid but could not be registered" in line for line in lines)
    assert any("submit each alone: `benchrun submit PATH`" in line and "a second time" in line for line in lines)


def test_schedule_defaults_are_deliberate() -> None:
    assert nightly_schedule.cron_schedule == DEFAULT_NIGHTLY_CRON == "15 3 * * *"
    assert nightly_schedule.execution_timezone == "UTC"
    assert nightly_schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert pre_release_schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    maintenance = definitions().get_schedule_def("warehouse_maintenance_schedule")
    assert maintenance.default_status == dg.DefaultScheduleStatus.STOPPED
    # found in review: nothing ran history_job or retention_job, so change points never reached the
    # warehouse unless materialized by hand and retention was never applied
    history = definitions().get_schedule_def("history_schedule")
    assert (history.job_name, history.default_status) == ("history_job", dg.DefaultScheduleStatus.RUNNING)
    retention = definitions().get_schedule_def("retention_schedule")
    assert (retention.job_name, retention.default_status) == ("retention_job", dg.DefaultScheduleStatus.STOPPED)
    [req] = retention.evaluate_tick(dg.build_schedule_context()).run_requests  # turned on, it applies
    job = definitions().get_job_def("retention_job")
    assert dg.validate_run_config(job, req.run_config)["ops"]["warehouse_retention"]["config"] == {"apply": True}


def test_all_turns_on_every_schedule_but_the_one_that_deletes(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchrun.automation.settings import starts_on

    monkeypatch.setenv("BENCHRUN_AUTOMATION_ON", "all")
    assert starts_on("nightly_schedule", False) and not starts_on("retention_schedule", False)
    monkeypatch.setenv("BENCHRUN_AUTOMATION_ON", "all,retention_schedule")
    assert starts_on("retention_schedule", False)
    assert {s.job_name for s in (nightly_schedule, pre_release_schedule)} == {"benchmark_run_job"}


def test_cron_comes_from_the_environment_and_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_NIGHTLY_CRON, "0 1 * * 1-5")
    assert cron_from_env(ENV_NIGHTLY_CRON, DEFAULT_NIGHTLY_CRON) == "0 1 * * 1-5"
    monkeypatch.setenv(ENV_NIGHTLY_CRON, "at three")
    with pytest.raises(BenchrunError, match="BENCHRUN_NIGHTLY_CRON='at three' is not a valid cron"):
        cron_from_env(ENV_NIGHTLY_CRON, DEFAULT_NIGHTLY_CRON)


def test_definitions_load_with_the_schedules_and_sensors() -> None:
    repo = definitions().get_repository_def()
    assert {s.name for s in repo.schedule_defs} >= {"nightly_schedule", "pre_release_schedule"}
    assert {s.name for s in repo.sensor_defs} >= {
        "spec_commit_sensor", "canary_sensor", "run_failure_sensor", "run_canceled_sensor"}


def test_packages_export_the_lists_definitions_use() -> None:
    # run from the checkout, as `dagster dev` does, so the packages' __init__ modules are used
    code = ("from sensors import all_sensors; from schedules import all_schedules; "
            "print(' '.join(sorted(f'{d.name}={d.default_status.value}' for d in all_sensors + all_schedules)))")
    env = {**os.environ, "BENCHRUN_AUTOMATION_ON": "nightly_schedule, spec_commit_sensor",
           "BENCHRUN_AUTOMATION_OFF": "run_canceled_sensor"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, env=env)
    assert out.stdout.split() == [
        "benchmarkrun_resource_sensor=STOPPED", "canary_sensor=STOPPED", "nightly_schedule=RUNNING",
        "pre_release_schedule=STOPPED", "run_canceled_sensor=STOPPED", "run_failure_sensor=RUNNING",
        "run_liveness_sensor=RUNNING", "spec_commit_sensor=RUNNING"]


def test_automation_switches_reject_unknown_names(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchrun.automation.settings import starts_on

    assert starts_on("run_failure_sensor", True) and not starts_on("canary_sensor", False)
    # every sensor and schedule the definitions carry can be switched by name
    from benchrun.automation.settings import AUTOMATION_NAMES

    repo = definitions().get_repository_def()
    assert {d.name for d in [*repo.schedule_defs, *repo.sensor_defs]} == set(AUTOMATION_NAMES)
    monkeypatch.setenv("BENCHRUN_AUTOMATION_ON", "all")
    assert starts_on("canary_sensor", False)
    monkeypatch.setenv("BENCHRUN_AUTOMATION_OFF", "canary_sensor")
    assert not starts_on("canary_sensor", False)
    monkeypatch.setenv("BENCHRUN_AUTOMATION_ON", "nightly")
    with pytest.raises(BenchrunError, match="BENCHRUN_AUTOMATION_ON names unknown schedules or sensors"):
        starts_on("nightly_schedule", False)


@pytest.mark.parametrize("on", ["warehouse_maintenance_schedule", "all"])
def test_the_maintenance_schedule_is_switched_like_the_others(on: str) -> None:
    # naming it made the code location fail to load ("names unknown schedules or sensors"), and
    # `all` left it stopped
    code = ("from bench_assets.definitions import defs; "
            "print(defs.get_schedule_def('warehouse_maintenance_schedule').default_status.value)")
    env = {**os.environ, "BENCHRUN_AUTOMATION_ON": on}
    env.pop("BENCHRUN_AUTOMATION_OFF", None)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["RUNNING"]


def _cadence_run(instance: dg.DagsterInstance, status: dg.DagsterRunStatus, trigger: str = "nightly",
                 run_key: str = "nightly:abc:20260920T031500Z") -> str:
    """A benchmark_run_job run as a schedule's tick creates it (a queued one needs a code location origin)."""
    from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
    from dagster._core.test_utils import create_run_for_test

    origin = RemoteJobOrigin(repository_origin=RemoteRepositoryOrigin(
        code_location_origin=RegisteredCodeLocationOrigin("bench"), repository_name="__repository__"),
        job_name="benchmark_run_job")
    run = create_run_for_test(instance, job_name="benchmark_run_job", status=status, remote_job_origin=origin,
                              tags={"benchrun/trigger": trigger, "dagster/partition": "nightly-a-x",
                                    "dagster/run_key": run_key})
    return run.run_id


@pytest.mark.parametrize("status", [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED])
def test_a_cadence_does_not_pile_up_behind_its_own_waiting_run(instance, specs_dir: Path, status) -> None:
    # found in review: nothing checked the previous run of the cadence, so a stuck queue (or a nightly
    # longer than a day) got a whole batch more every night
    (specs_dir / "a.yaml").write_bytes(spec_bytes("nightly-a", "nightly"))
    (specs_dir / "p.yaml").write_bytes(spec_bytes("pre-a", "pre_release"))
    waiting = _cadence_run(instance, status)
    data = tick(nightly_schedule, instance)
    assert data.run_requests == []
    assert f"nightly run nightly-a-x (Dagster run {waiting}) is still {status.value}" in data.skip_message
    assert instance.get_dynamic_partitions("benchmark_run") == []  # nothing pinned behind it
    # another cadence's waiting run does not hold this one
    assert [r.tags["benchrun/spec_path"] for r in tick(pre_release_schedule, instance).run_requests] == ["p.yaml"]


def test_a_started_run_or_this_ticks_own_does_not_hold_the_cadence(instance, specs_dir: Path) -> None:
    (specs_dir / "a.yaml").write_bytes(spec_bytes("nightly-a", "nightly"))
    _cadence_run(instance, dg.DagsterRunStatus.STARTED)  # in progress: the next queues behind it
    _cadence_run(instance, dg.DagsterRunStatus.QUEUED, trigger="pre_release")
    _cadence_run(instance, dg.DagsterRunStatus.QUEUED, run_key="nightly:def:20260921T031500Z")  # a retried tick's
    data = tick(nightly_schedule, instance)
    assert [r.tags["benchrun/spec_path"] for r in data.run_requests] == ["a.yaml"]
