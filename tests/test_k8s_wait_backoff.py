"""The launcher's wait loop backs off while nothing changes and looks again at once after a change."""

from __future__ import annotations

import time
from types import SimpleNamespace

from benchrun.launch.k8s_wait import Watch, wait
from benchrun.launch.k8s_watches import _newest_pod


def _pod(phase: str) -> SimpleNamespace:
    return SimpleNamespace(metadata=SimpleNamespace(uid="p-1", name="pod-1", creation_timestamp=None),
                           status=SimpleNamespace(phase=phase, conditions=[], container_statuses=[]),
                           spec=SimpleNamespace(node_name="node-a"))


def test_polls_back_off_while_nothing_changes_and_reset_on_a_change() -> None:
    # 40 reads of a running gang that never changes, one change (a new resourceVersion), 20 more,
    # then it completes
    states = ([("1", "Running")] * 40) + ([("2", "Running")] * 20) + [("3", "Succeeded")]
    reads = iter(states)
    calls: list[int] = []

    def read(_obj):
        version, phase = next(reads)
        calls.append(1)
        obj = {"metadata": {"resourceVersion": version}, "status": {"conditions": []}}
        if phase == "Succeeded":
            obj["status"]["conditions"] = [{"type": "Completed", "status": "True",
                                            "lastTransitionTime": "2026-12-01T00:00:00Z"}]
        return obj, None, {0: _pod(phase)}

    watch = Watch(kind="JobSet", name="js", read=read, nodes=1, ended_by=("Completed",), pod_end_ends=False,
                  no_pod_note=lambda _o: "none", name_the_node=True)
    slept: list[float] = []
    obj, _wl, pods, verdict = wait(watch, None, time.perf_counter(), timeout_s=3600, pending_timeout_s=3600,
                                   poll_s=2.0, sleep=slept.append)
    assert verdict is None and pods[0].status.phase == "Succeeded"
    assert len(calls) == len(states)
    # first look after poll_s; unchanged looks stretch by 1.5x up to 5 x poll_s, never beyond
    assert slept[0] == 2.0 and slept[1] == 3.0 and max(slept) == 10.0
    assert slept[38] == 10.0
    # the change (poll 41) brings poll_s back, and the backoff starts again
    assert slept[40] == 2.0 and slept[41] == 3.0
    # the same wait with a fixed 2 s poll would have read the objects over 4 times as often
    assert sum(slept) / 2.0 > 4 * len(calls)


def test_an_explicit_ceiling_and_a_fixed_poll() -> None:
    reads = iter([("1", "Running")] * 10 + [("2", "Succeeded")])

    def read(_obj):
        version, phase = next(reads)
        obj = {"metadata": {"resourceVersion": version}, "status": {"conditions": [] if phase == "Running" else [
            {"type": "Completed", "status": "True", "lastTransitionTime": "2026-12-01T00:00:00Z"}]}}
        return obj, None, {0: _pod(phase)}

    watch = Watch(kind="JobSet", name="js", read=read, nodes=1, ended_by=("Completed",), pod_end_ends=False,
                  no_pod_note=lambda _o: "none", name_the_node=True)
    slept: list[float] = []
    wait(watch, None, time.perf_counter(), timeout_s=60, pending_timeout_s=60, poll_s=1.0, sleep=slept.append,
         max_poll_s=1.0)
    assert set(slept) == {1.0}


def _job_pod(uid: str, phase: str, *, created: float, deleting: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        metadata=SimpleNamespace(uid=uid, name=f"pod-{uid}", creation_timestamp=created,
                                 deletion_timestamp=created + 1 if deleting else None),
        status=SimpleNamespace(phase=phase, conditions=[], container_statuses=[]),
        spec=SimpleNamespace(node_name="node-a"))


def test_a_preemption_first_seen_after_the_next_pod_exists_ends_the_attempt_that_was_followed() -> None:
    # Kueue preempts the Workload, admits it again and the Job makes the next pod, all between
    # two polls: the first read after it finds Evicted already False again and the new pod newest,
    # while the preempted one still terminates (it dies with 143). The preempted attempt is the
    # one followed until then, never the new pod; the replicate's verdict is the new pod's.
    old_running = _job_pod("old", "Running", created=100.0)
    old_killed = _job_pod("old", "Failed", created=100.0, deleting=True)
    new_pending, new_done = _job_pod("new", "Pending", created=100.0), _job_pod("new", "Succeeded", created=100.0)
    evicted_again = {"metadata": {"resourceVersion": "w2"}, "status": {"conditions": [
        {"type": "Evicted", "status": "False", "reason": "Preempted", "message": "by a higher priority",
         "lastTransitionTime": "2026-12-01T00:00:05Z"}]}}
    admitted = {"metadata": {"resourceVersion": "w1"}, "status": {"conditions": []}}
    job = {"metadata": {"resourceVersion": "j1"}, "status": {"conditions": []}}
    done = {"metadata": {"resourceVersion": "j2"}, "status": {"conditions": [
        {"type": "Complete", "status": "True", "lastTransitionTime": "2026-12-01T00:00:09Z"}]}}
    evicted: list[str] = []
    polls = iter([
        (job, admitted, [old_running]),
        (job, evicted_again, [new_pending, old_killed]),
        (job, evicted_again, [new_done, old_killed]),
        (done, evicted_again, [new_done]),
    ])

    def read(_obj):  # as job_watch reads: the newest pod not of an ended attempt (else any)
        obj, wl, listed = next(polls)
        client = SimpleNamespace(get_pods_in_job=lambda _n, _ns: listed)
        pod = _newest_pod(client, "ns", "job", exclude=evicted)
        return obj, wl, {0: pod}

    watch = Watch(kind="Job", name="job", read=read, nodes=1, ended_by=("Complete",), pod_end_ends=True,
                  no_pod_note=lambda _o: "none", name_the_node=False, eviction_retries=2, evicted=evicted)
    _obj, _wl, pods, verdict = wait(watch, None, time.perf_counter(), timeout_s=60, pending_timeout_s=60,
                                    poll_s=1.0, sleep=lambda _s: None)
    assert verdict is None
    assert pods[0].metadata.uid == "new" and pods[0].status.phase == "Succeeded"
    [attempt] = watch.history
    assert attempt["pod_uid"] == "old" and attempt["measured"] is True and attempt["cause"] == "kueue"
    assert evicted == ["old"]


def test_a_preemption_before_any_pod_was_seen_ends_the_pods_being_deleted() -> None:
    killed = _job_pod("old", "Failed", created=100.0, deleting=True)
    fresh = _job_pod("new", "Succeeded", created=100.0)
    wl = {"metadata": {"resourceVersion": "w2"}, "status": {"conditions": [
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "m",
         "lastTransitionTime": "2026-12-01T00:00:05Z"}]}}
    polls = iter([({"metadata": {"resourceVersion": "j1"}, "status": {"conditions": []}}, wl, {0: killed}),
                  ({"metadata": {"resourceVersion": "j2"}, "status": {"conditions": []}}, wl, {0: fresh})])
    watch = Watch(kind="Job", name="job", read=lambda _o: next(polls), nodes=1, ended_by=("Complete",),
                  pod_end_ends=True, no_pod_note=lambda _o: "none", name_the_node=False, eviction_retries=1)
    _obj, _wl, pods, verdict = wait(watch, None, time.perf_counter(), timeout_s=60, pending_timeout_s=60,
                                    poll_s=1.0, sleep=lambda _s: None)
    assert verdict is None and pods[0].metadata.uid == "new"
    assert [a["pod_uid"] for a in watch.history] == ["old"] and watch.history[0]["measured"] is False


def test_a_preemption_seen_with_the_first_pod_still_running_ends_that_pod() -> None:
    # the eviction and the pod are seen in the same, first read, before the Job was suspended:
    # the pod is not yet being deleted, but the Workload is still evicted, so it is the ended attempt
    running = _job_pod("old", "Running", created=100.0)
    killed = _job_pod("old", "Failed", created=100.0, deleting=True)
    fresh = _job_pod("new", "Succeeded", created=200.0)
    evicted_now = {"metadata": {"resourceVersion": "w2"}, "status": {"conditions": [
        {"type": "Evicted", "status": "True", "reason": "Preempted", "message": "m",
         "lastTransitionTime": "2026-12-01T00:00:05Z"}]}}
    listed = iter([[running], [killed], [fresh, killed]])
    evicted: list[str] = []

    def read(_obj):
        pods = next(listed)
        done = pods[0].metadata.uid == "new"
        obj = {"metadata": {"resourceVersion": f"j{len(evicted)}{done}"}, "status": {"conditions": [
            {"type": "Complete", "status": "True", "lastTransitionTime": "2026-12-01T00:00:09Z"}] if done else []}}
        client = SimpleNamespace(get_pods_in_job=lambda _n, _ns: pods)
        return obj, evicted_now, {0: _newest_pod(client, "ns", "job", exclude=evicted)}

    watch = Watch(kind="Job", name="job", read=read, nodes=1, ended_by=("Complete",), pod_end_ends=True,
                  no_pod_note=lambda _o: "none", name_the_node=False, eviction_retries=1, evicted=evicted)
    _obj, _wl, pods, verdict = wait(watch, None, time.perf_counter(), timeout_s=60, pending_timeout_s=60,
                                    poll_s=1.0, sleep=lambda _s: None)
    assert verdict is None and pods[0].metadata.uid == "new"
    assert [a["pod_uid"] for a in watch.history] == ["old"]
