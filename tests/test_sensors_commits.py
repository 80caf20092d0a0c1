"""spec_commit_sensor and canary_sensor ticked on a real git repository made with the git CLI."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.test_utils import create_run_for_test

from benchrun.errors import BenchrunError
from sensors.canary import canary_sensor
from sensors.spec_commit import spec_commit_sensor
from test_automation_fixtures import GitRepo, definitions, invalid_spec_bytes, spec_bytes, spec_doc
from test_store_helpers import s3_env  # noqa: F401  (fixture)


@pytest.fixture(scope="module")
def defs() -> dg.Definitions:
    return definitions()


@pytest.fixture
def instance(bench_home: Path) -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> GitRepo:
    r = GitRepo(tmp_path / "repo")
    monkeypatch.setenv("BENCHRUN_SPEC_REPO", str(r.path))
    monkeypatch.setenv("BENCHRUN_SPEC_BRANCH", "main")
    monkeypatch.delenv("BENCHRUN_SPEC_REPO_SPECS", raising=False)
    r.commit("root", {"README.md": "project\n"})
    return r


def tick(sensor: dg.SensorDefinition, instance: dg.DagsterInstance, defs: dg.Definitions, cursor: str | None):
    context = dg.build_sensor_context(
        instance=instance, cursor=cursor, definitions=defs, instance_ref=instance.get_ref()
    )
    return sensor.evaluate_tick(context)


def started(sensor: dg.SensorDefinition, instance: dg.DagsterInstance, defs: dg.Definitions, repo: GitRepo) -> str:
    """The first tick: the sensor starts at the head and submits nothing for old history."""
    first = tick(sensor, instance, defs, None)
    assert first.run_requests in (None, []) and "first tick" in first.skip_message
    assert first.cursor == repo.head()
    return first.cursor


def partition_adds(data) -> list[str]:
    return [key for req in data.dynamic_partitions_requests or [] for key in req.partition_keys]


def digest_of(data: bytes) -> str:
    from benchrun.spec import load_spec_bytes

    return load_spec_bytes(data, "test").spec_digest


def test_new_spec_commit_requests_one_run_per_changed_spec(repo, instance, defs, bench_home) -> None:
    cursor = started(spec_commit_sensor, instance, defs, repo)
    a, b = spec_bytes("spec-a", "nightly"), spec_bytes("spec-b", "canary")
    sha = repo.commit("add two specs", {"specs/local/a.yaml": a, "specs/examples/b.yml": b, "README.md": "more\n"})
    data = tick(spec_commit_sensor, instance, defs, cursor)

    assert data.skip_message is None and data.cursor == sha
    keys = sorted(r.run_key for r in data.run_requests)
    assert keys == sorted([f"spec-commit:{sha}:specs/examples/b.yml:{digest_of(b)}",
                           f"spec-commit:{sha}:specs/local/a.yaml:{digest_of(a)}"])
    run_ids = sorted(r.partition_key for r in data.run_requests)
    assert sorted(partition_adds(data)) == run_ids
    assert all(r.tags["benchrun/commit"] == sha for r in data.run_requests)
    for rid in run_ids:  # pinned through the submission path, with the commit's time
        status = json.loads((bench_home / "runs" / rid / "status.json").read_text())
        assert status["phase"] == "Pending" and f"@{sha[:12]}:" in status["source"]
    # run id = <name>-<commit time>-<digest8>: a retried tick mints the same one
    assert run_ids == sorted([f"spec-a-{_utc_stamp(repo.clock)}-{digest_of(a)[:8]}",
                              f"spec-b-{_utc_stamp(repo.clock)}-{digest_of(b)[:8]}"])

    # the next commit changes only a: one request, for a
    a2 = spec_bytes("spec-a", "nightly", note="edited")
    sha2 = repo.commit("edit a", {"specs/local/a.yaml": a2})
    data2 = tick(spec_commit_sensor, instance, defs, data.cursor)
    assert [r.run_key for r in data2.run_requests] == [f"spec-commit:{sha2}:specs/local/a.yaml:{digest_of(a2)}"]


def _utc_stamp(epoch: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(epoch, dt.timezone.utc).strftime("%Y%m%d%H%M%S")


def test_the_same_tick_twice_requests_nothing_twice(repo, instance, defs, bench_home) -> None:
    cursor = started(spec_commit_sensor, instance, defs, repo)
    repo.commit("add a", {"specs/a.yaml": spec_bytes("spec-a")})
    first = tick(spec_commit_sensor, instance, defs, cursor)
    assert len(first.run_requests) == 1
    # the next tick, from the stored cursor: nothing new
    after = tick(spec_commit_sensor, instance, defs, first.cursor)
    assert after.run_requests in (None, []) and "no new commits" in after.skip_message
    # a retried tick (cursor not stored): the same run key and run id, no second run directory
    retried = tick(spec_commit_sensor, instance, defs, cursor)
    assert [(r.run_key, r.partition_key) for r in retried.run_requests] == [
        (r.run_key, r.partition_key) for r in first.run_requests]
    assert len(list((bench_home / "runs").iterdir())) == 1
    # once a Dagster run exists for that partition, a retried tick does not request it again
    rid = first.run_requests[0].partition_key
    instance.add_dynamic_partitions("benchmark_run", [rid])
    create_run_for_test(instance, job_name="benchmark_run_job", tags={"dagster/partition": rid})
    again = tick(spec_commit_sensor, instance, defs, cursor)
    assert again.run_requests in (None, []) and "already has a Dagster run" in again.skip_message


def _a_submitted(repo, instance, defs):
    """(the commit before, spec a's bytes, the tick that submitted a): the start of every
    force-push test."""
    base = repo.head()
    cursor = started(spec_commit_sensor, instance, defs, repo)
    a = spec_bytes("spec-a")
    repo.commit("add a", {"specs/a.yaml": a})
    first = tick(spec_commit_sensor, instance, defs, cursor)
    assert [r.tags["benchrun/spec_path"] for r in first.run_requests] == ["specs/a.yaml"]
    return base, a, first


def test_force_push_neither_duplicates_nor_loses(repo, instance, defs) -> None:
    base, a, first = _a_submitted(repo, instance, defs)

    # rewrite history: the same a (already submitted) plus a new c, and an edited d
    repo.git("reset", "-q", "--hard", base)
    c, d = spec_bytes("spec-c"), spec_bytes("spec-d")
    repo.commit("add a and c again", {"specs/a.yaml": a, "specs/c.yaml": c})
    new_head = repo.commit("add d", {"specs/d.yaml": d})
    data = tick(spec_commit_sensor, instance, defs, first.cursor)

    assert sorted(r.tags["benchrun/spec_path"] for r in data.run_requests) == ["specs/c.yaml", "specs/d.yaml"]
    assert data.cursor == new_head
    assert "specs/a.yaml" not in [r.tags["benchrun/spec_path"] for r in data.run_requests]
    assert tick(spec_commit_sensor, instance, defs, data.cursor).run_requests in (None, [])


def test_force_push_with_changed_content_submits_it(repo, instance, defs) -> None:
    base = repo.head()
    cursor = started(spec_commit_sensor, instance, defs, repo)
    repo.commit("add a", {"specs/a.yaml": spec_bytes("spec-a")})
    first = tick(spec_commit_sensor, instance, defs, cursor)
    repo.git("reset", "-q", "--hard", base)
    a2 = spec_bytes("spec-a", note="amended")
    sha = repo.commit("add a (amended)", {"specs/a.yaml": a2})
    data = tick(spec_commit_sensor, instance, defs, first.cursor)
    assert [r.run_key for r in data.run_requests] == [f"spec-commit:{sha}:specs/a.yaml:{digest_of(a2)}"]


def test_commit_with_an_invalid_spec_is_skipped_with_its_errors(repo, instance, defs, bench_home) -> None:
    cursor = started(spec_commit_sensor, instance, defs, repo)
    sha = repo.commit("broken spec", {"specs/broken.yaml": invalid_spec_bytes("broken")})
    data = tick(spec_commit_sensor, instance, defs, cursor)
    assert data.run_requests in (None, [])
    assert f"invalid spec skipped: specs/broken.yaml@{sha[:12]}" in data.skip_message
    assert "spec.trials.minReplicates (line" in data.skip_message
    assert "spec.intent.cadence (line" in data.skip_message
    assert data.cursor == sha  # not retried forever: a fix is a new commit
    assert not (bench_home / "runs").exists() or not any((bench_home / "runs").iterdir())

    # valid and invalid in one commit: the valid one runs, the invalid one never does
    repo.commit("one good, one bad", {"specs/good.yaml": spec_bytes("good"),
                                      "specs/broken.yaml": invalid_spec_bytes("broken-2")})
    mixed = tick(spec_commit_sensor, instance, defs, data.cursor)
    assert [r.tags["benchrun/spec_path"] for r in mixed.run_requests] == ["specs/good.yaml"]


def _shared_state_down(monkeypatch, endpoint: str) -> Callable[[], None]:
    """Point BENCHRUN_SHARED_STATE at a bucket that does not exist yet; returns what brings it up."""
    import uuid

    import boto3

    bucket = f"missing-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("BENCHRUN_SHARED_STATE", f"s3://{bucket}/benchrun")
    return lambda: boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=bucket)


def test_a_storage_failure_keeps_the_commit_for_the_next_tick(repo, instance, defs, s3_env, monkeypatch) -> None:
    # the shared state's push failed (NoSuchBucket): the valid spec was reported "invalid", the
    # cursor moved past its commit, and it was never submitted
    storage_back = _shared_state_down(monkeypatch, s3_env)
    cursor = started(spec_commit_sensor, instance, defs, repo)
    a, b = spec_bytes("spec-a"), spec_bytes("spec-b")
    sha1 = repo.commit("add a", {"specs/a.yaml": a})
    sha2 = repo.commit("add b", {"specs/b.yaml": b})
    down = tick(spec_commit_sensor, instance, defs, cursor)
    assert down.run_requests in (None, []) and down.cursor == cursor
    assert "invalid spec" not in down.skip_message
    assert f"not submitted: specs/a.yaml@{sha1[:12]} is valid but could not be registered" in down.skip_message
    assert "NoSuchBucket" in down.skip_message
    assert f"commit {sha1[:12]} and the 1 after it left for the next tick" in down.skip_message

    storage_back()
    up = tick(spec_commit_sensor, instance, defs, down.cursor)
    assert [r.run_key for r in up.run_requests] == [f"spec-commit:{sha1}:specs/a.yaml:{digest_of(a)}",
                                                    f"spec-commit:{sha2}:specs/b.yaml:{digest_of(b)}"]
    assert up.cursor == sha2


def test_a_storage_failure_mid_window_keeps_what_came_before(repo, instance, defs, s3_env, monkeypatch) -> None:
    cursor = started(spec_commit_sensor, instance, defs, repo)
    sha1 = repo.commit("add a", {"specs/a.yaml": spec_bytes("spec-a")})
    first = tick(spec_commit_sensor, instance, defs, cursor)
    storage_back = _shared_state_down(monkeypatch, s3_env)
    sha2 = repo.commit("docs", {"README.md": "more\n"})
    sha3 = repo.commit("add b", {"specs/b.yaml": spec_bytes("spec-b")})
    down = tick(spec_commit_sensor, instance, defs, first.cursor)
    assert down.run_requests in (None, []) and down.cursor == sha2  # the commit before the one that failed
    storage_back()
    up = tick(spec_commit_sensor, instance, defs, down.cursor)
    assert [r.tags["benchrun/spec_path"] for r in up.run_requests] == ["specs/b.yaml"] and up.cursor == sha3
    assert first.cursor == sha1


def test_a_storage_failure_keeps_the_canary_commit(repo, instance, defs, s3_env, monkeypatch) -> None:
    repo.commit("specs", {"specs/canary.yaml": spec_bytes("canary-a", "canary")})
    cursor = started(canary_sensor, instance, defs, repo)
    storage_back = _shared_state_down(monkeypatch, s3_env)
    sha = repo.commit("merge", {"src.py": "1\n"})
    down = tick(canary_sensor, instance, defs, cursor)
    assert down.run_requests in (None, []) and down.cursor == cursor
    assert f"not submitted: specs/canary.yaml@{sha[:12]} is valid" in down.skip_message
    storage_back()
    up = tick(canary_sensor, instance, defs, down.cursor)
    assert [r.run_key for r in up.run_requests] == [
        f"canary:{sha}:specs/canary.yaml:{digest_of(spec_bytes('canary-a', 'canary'))}"]
    assert up.cursor == sha


def test_a_spec_pinning_rejects_is_still_skipped(repo, instance, defs, tmp_path) -> None:
    # invalid for what prepare checks beyond the schema (its store outside the home): skipped, not retried
    doc = spec_doc("elsewhere", "nightly", nightly=True)
    doc["spec"]["sinks"]["rawArtifacts"]["pathTemplate"] = f"file://{tmp_path}/outside/${{RUN_ID}}/"
    cursor = started(spec_commit_sensor, instance, defs, repo)
    sha = repo.commit("store outside", {"specs/x.yaml": yaml.safe_dump(doc, sort_keys=False).encode()})
    data = tick(spec_commit_sensor, instance, defs, cursor)
    assert data.run_requests in (None, []) and data.cursor == sha
    assert f"invalid spec skipped: specs/x.yaml@{sha[:12]}" in data.skip_message
    assert "sinks.rawArtifacts.pathTemplate" in data.skip_message


def test_commit_touching_no_spec_says_so(repo, instance, defs) -> None:
    cursor = started(spec_commit_sensor, instance, defs, repo)
    sha = repo.commit("docs and the CRD only", {"README.md": "changed\n", "specs/crd/brun.yaml": "kind: x\n"})
    data = tick(spec_commit_sensor, instance, defs, cursor)
    assert data.run_requests in (None, [])
    assert f"commit {sha[:12]} touches no spec under specs/" in data.skip_message
    assert data.cursor == sha


def test_specs_folder_and_branch_are_configurable(repo, instance, defs, monkeypatch) -> None:
    monkeypatch.setenv("BENCHRUN_SPEC_REPO_SPECS", "bench/specs")
    repo.git("checkout", "-q", "-b", "release")
    monkeypatch.setenv("BENCHRUN_SPEC_BRANCH", "release")
    cursor = started(spec_commit_sensor, instance, defs, repo)
    repo.commit("both folders", {"bench/specs/x.yaml": spec_bytes("spec-x"), "specs/y.yaml": spec_bytes("spec-y")})
    data = tick(spec_commit_sensor, instance, defs, cursor)
    assert [r.tags["benchrun/spec_path"] for r in data.run_requests] == ["bench/specs/x.yaml"]


@pytest.mark.parametrize("folder", ["./specs", "specs/", "."])
def test_a_dotted_specs_folder_still_finds_the_specs(repo, instance, defs, monkeypatch, folder) -> None:
    # found in review: `./specs` became the prefix `./specs/`, which no git path starts with, so
    # every commit "touched no spec" and nothing ran, silently
    monkeypatch.setenv("BENCHRUN_SPEC_REPO_SPECS", folder)
    cursor = started(spec_commit_sensor, instance, defs, repo)
    repo.commit("add a", {"specs/a.yaml": spec_bytes("spec-a")})
    data = tick(spec_commit_sensor, instance, defs, cursor)
    assert [r.tags["benchrun/spec_path"] for r in data.run_requests] == ["specs/a.yaml"]


@pytest.mark.parametrize("folder", ["../specs", "specs/../../x", "/specs"])
def test_a_specs_folder_outside_the_repository_is_refused(monkeypatch, folder) -> None:
    from benchrun.automation.settings import RepoWatch

    monkeypatch.setenv("BENCHRUN_SPEC_REPO_SPECS", folder)
    with pytest.raises(BenchrunError, match="must be a folder inside the repository"):
        RepoWatch.from_env()


def test_not_a_repository_is_a_clear_error(instance, defs, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("BENCHRUN_SPEC_REPO", str(tmp_path))
    with pytest.raises(BenchrunError, match="BENCHRUN_SPEC_REPO"):
        spec_commit_sensor(dg.build_sensor_context(instance=instance, definitions=defs,
                                                   instance_ref=instance.get_ref()))


def test_canary_runs_once_per_new_commit(repo, instance, defs) -> None:
    repo.commit("specs", {"specs/canary.yaml": spec_bytes("canary-a", "canary"),
                          "specs/nightly.yaml": spec_bytes("nightly-a", "nightly"),
                          "specs/canary-off.yaml": spec_bytes("canary-off", "canary", canary=False)})
    cursor = started(canary_sensor, instance, defs, repo)
    c1 = repo.commit("merge 1", {"src.py": "1\n"})
    c2 = repo.commit("merge 2", {"src.py": "2\n"})
    data = tick(canary_sensor, instance, defs, cursor)
    digest = digest_of(spec_bytes("canary-a", "canary"))
    assert [r.run_key for r in data.run_requests] == [
        f"canary:{c1}:specs/canary.yaml:{digest}", f"canary:{c2}:specs/canary.yaml:{digest}"]
    assert len(set(partition_adds(data))) == 2 and data.cursor == c2
    assert tick(canary_sensor, instance, defs, data.cursor).run_requests in (None, [])


def test_canary_without_canary_specs_says_so(repo, instance, defs) -> None:
    cursor = started(canary_sensor, instance, defs, repo)
    sha = repo.commit("no specs", {"src.py": "1\n"})
    data = tick(canary_sensor, instance, defs, cursor)
    assert data.run_requests in (None, []) and f"commit {sha[:12]}: no canary specs" in data.skip_message


def test_canary_and_spec_commit_on_one_commit_make_one_run(repo, instance, defs) -> None:
    commit_cursor = started(spec_commit_sensor, instance, defs, repo)
    canary_cursor = started(canary_sensor, instance, defs, repo)
    repo.commit("add canary", {"specs/canary.yaml": spec_bytes("canary-a", "canary")})
    by_commit = tick(spec_commit_sensor, instance, defs, commit_cursor)
    rid = by_commit.run_requests[0].partition_key
    instance.add_dynamic_partitions("benchmark_run", [rid])
    create_run_for_test(instance, job_name="benchmark_run_job", tags={"dagster/partition": rid})
    by_canary = tick(canary_sensor, instance, defs, canary_cursor)
    assert by_canary.run_requests in (None, []) and f"run {rid} already has a Dagster run" in by_canary.skip_message


def test_canary_and_spec_commit_evaluated_at_once_request_one_run(repo, instance, defs) -> None:
    """Found in review: evaluated at once on sensor threads, neither found the other's Dagster run yet, so
    both requested the run; the second failed in pinned_spec, a red run and a failed partition in the UI for
    a benchmark that succeeded. The first to claim the run id requests it; the other skips, naming it; the
    same sensor ticking again (a tick that died after claiming) still may."""
    commit_cursor = started(spec_commit_sensor, instance, defs, repo)
    canary_cursor = started(canary_sensor, instance, defs, repo)
    repo.commit("add canary", {"specs/canary.yaml": spec_bytes("canary-a", "canary")})
    by_commit = tick(spec_commit_sensor, instance, defs, commit_cursor)  # no Dagster run made yet
    [request] = by_commit.run_requests
    by_canary = tick(canary_sensor, instance, defs, canary_cursor)
    assert by_canary.run_requests in (None, [])  # was: a second request for the same run
    assert f"run {request.partition_key} is requested by spec_commit_sensor" in by_canary.skip_message
    again = tick(spec_commit_sensor, instance, defs, commit_cursor)  # the same tick again: its own claim
    assert [r.partition_key for r in again.run_requests] == [request.partition_key]
    assert again.run_requests[0].run_key == request.run_key  # Dagster requests it once by its run key
    # a claim no Dagster run followed for 10 minutes (its sensor stopped after claiming) is taken over
    import os
    import time

    from benchrun.paths import benchrun_home

    claim = benchrun_home() / "locks" / "requested" / request.partition_key
    os.utime(claim, (time.time() - 3600, time.time() - 3600))
    late = tick(canary_sensor, instance, defs, canary_cursor)
    assert [r.partition_key for r in late.run_requests] == [request.partition_key]
    assert claim.read_text() == "canary_sensor"


def test_at_most_max_commits_per_tick_and_the_rest_next_tick(repo, instance, defs, monkeypatch) -> None:
    monkeypatch.setenv("BENCHRUN_SENSOR_MAX_COMMITS", "1")
    cursor = started(spec_commit_sensor, instance, defs, repo)
    first = repo.commit("add a", {"specs/a.yaml": spec_bytes("spec-a")})
    repo.commit("add b", {"specs/b.yaml": spec_bytes("spec-b")})
    data = tick(spec_commit_sensor, instance, defs, cursor)
    assert [r.tags["benchrun/spec_path"] for r in data.run_requests] == ["specs/a.yaml"]
    assert data.cursor == first
    rest = tick(spec_commit_sensor, instance, defs, data.cursor)
    assert [r.tags["benchrun/spec_path"] for r in rest.run_requests] == ["specs/b.yaml"]
    assert rest.cursor == repo.head()


def test_force_push_beyond_max_commits_still_does_not_duplicate(repo, instance, defs, monkeypatch) -> None:
    # What the abandoned commits submitted is kept in the cursor, so the cap holds after a
    # rewrite too and a later tick still does not submit it again.
    monkeypatch.setenv("BENCHRUN_SENSOR_MAX_COMMITS", "1")
    base, a, first = _a_submitted(repo, instance, defs)

    repo.git("reset", "-q", "--hard", base)
    c = repo.commit("add c", {"specs/c.yaml": spec_bytes("spec-c")})
    new_head = repo.commit("add a again", {"specs/a.yaml": a})
    data = tick(spec_commit_sensor, instance, defs, first.cursor)
    assert [r.tags["benchrun/spec_path"] for r in data.run_requests] == ["specs/c.yaml"]
    [[key, until]] = json.loads(data.cursor)["pending"]
    assert json.loads(data.cursor)["commit"] == c and key == f"spec:specs/a.yaml:{digest_of(a)}"
    assert until == repo.clock + 2 * 86400  # the rewrite was seen at the new head's commit time
    rest = tick(spec_commit_sensor, instance, defs, data.cursor)
    assert rest.run_requests in (None, []) and "submitted before the history rewrite" in rest.skip_message
    assert rest.cursor == new_head  # consumed: back to the plain form
    assert tick(spec_commit_sensor, instance, defs, rest.cursor).run_requests in (None, [])


def test_reset_tick_and_repush_does_not_resubmit_and_a_later_recommit_runs(repo, instance, defs) -> None:
    # reset, a tick sees the rewrite, then the fix is pushed: the abandoned spec was forgotten
    # after the tick that saw the rewrite, and the same spec ran twice
    base, a, first = _a_submitted(repo, instance, defs)
    repo.git("reset", "-q", "--hard", base)
    seen = tick(spec_commit_sensor, instance, defs, first.cursor)
    assert seen.run_requests in (None, []) and "rewritten" in seen.skip_message
    repo.commit("add a, fixed message", {"specs/a.yaml": a})
    again = tick(spec_commit_sensor, instance, defs, seen.cursor)
    assert again.run_requests in (None, []) and "submitted before the history rewrite" in again.skip_message
    # deleted and committed again later, on purpose: it runs
    repo.commit("drop a", remove=("specs/a.yaml",))
    repo.commit("add a back", {"specs/a.yaml": a})
    later = tick(spec_commit_sensor, instance, defs, again.cursor)
    assert [r.tags["benchrun/spec_path"] for r in later.run_requests] == ["specs/a.yaml"]


def test_what_a_rewrite_abandoned_is_forgotten_after_two_days(repo, instance, defs) -> None:
    # the entries never expired: a spec a force-push dropped for good and committed again weeks
    # later, on purpose, was skipped as "submitted before the history rewrite"
    base, a, first = _a_submitted(repo, instance, defs)
    repo.git("reset", "-q", "--hard", base)
    repo.commit("something else", {"README.md": "other\n"})
    seen = tick(spec_commit_sensor, instance, defs, first.cursor)
    assert json.loads(seen.cursor)["pending"]
    repo.clock += 3 * 86400
    repo.commit("add a, weeks later", {"specs/a.yaml": a})
    later = tick(spec_commit_sensor, instance, defs, seen.cursor)
    assert [r.tags["benchrun/spec_path"] for r in later.run_requests] == ["specs/a.yaml"]
    assert later.cursor == repo.head()  # the expired entry is gone: back to the plain form


def test_canary_does_not_rerun_reworded_commits(repo, instance, defs) -> None:
    repo.commit("specs", {"specs/canary.yaml": spec_bytes("canary-a", "canary")})
    base = repo.head()
    cursor = started(canary_sensor, instance, defs, repo)
    for i in range(3):
        repo.commit(f"change {i}", {"src.py": f"{i}\n"})
    first = tick(canary_sensor, instance, defs, cursor)
    assert len(first.run_requests) == 3
    # reword the three commits (same trees): nothing runs again
    repo.git("reset", "-q", "--hard", base)
    for i in range(3):
        repo.commit(f"change {i}, reworded", {"src.py": f"{i}\n"})
    data = tick(canary_sensor, instance, defs, first.cursor)
    assert data.run_requests in (None, []), [r.run_key for r in data.run_requests]  # was: 3 more canaries
    assert data.skip_message.count("the same files as a commit canaried before") == 3
    # a new commit after them runs
    repo.commit("change 3", {"src.py": "3\n"})
    assert len(tick(canary_sensor, instance, defs, data.cursor).run_requests) == 1


def test_a_pull_merge_does_not_run_again_what_the_merged_commit_submitted(repo, instance, defs) -> None:
    # found in review: X, already submitted, is merged by `git pull` into a local commit F made on
    # X's parent; main fast-forwards X -> M, and M, compared with its first parent F, seemed to
    # change the spec again (to X's bytes): a new run id from M's time, the same spec run twice
    original = spec_bytes("canary-a", "canary")
    repo.commit("specs", {"specs/canary.yaml": original})
    parent = repo.head()
    cursor = started(spec_commit_sensor, instance, defs, repo)
    edited = spec_bytes("canary-a", "canary", note="edited")
    x = repo.commit("edit canary", {"specs/canary.yaml": edited})
    first = tick(spec_commit_sensor, instance, defs, cursor)
    assert [r.run_key for r in first.run_requests] == [f"spec-commit:{x}:specs/canary.yaml:{digest_of(edited)}"]

    repo.git("checkout", "-q", "-b", "dev", parent)
    f_spec = spec_bytes("spec-f")
    f = repo.commit("add f", {"specs/f.yaml": f_spec})
    repo.clock += 1
    repo.git("merge", "-q", "--no-edit", "--no-ff", x)  # M: parents F, X
    m = repo.head()
    repo.git("checkout", "-q", "main")
    repo.git("merge", "-q", "--ff-only", m)
    data = tick(spec_commit_sensor, instance, defs, first.cursor)
    # F's own spec still runs; M brings in only what X already submitted
    assert [r.run_key for r in data.run_requests] == [f"spec-commit:{f}:specs/f.yaml:{digest_of(f_spec)}"]
    assert data.cursor == m

    # on a linear line a spec changed away and back (a revert, then a re-apply) runs each time
    y = repo.commit("revert canary", {"specs/canary.yaml": original})
    z = repo.commit("re-apply canary", {"specs/canary.yaml": edited})
    later = tick(spec_commit_sensor, instance, defs, data.cursor)
    assert [r.run_key for r in later.run_requests] == [f"spec-commit:{y}:specs/canary.yaml:{digest_of(original)}",
                                                       f"spec-commit:{z}:specs/canary.yaml:{digest_of(edited)}"]
