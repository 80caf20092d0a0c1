"""The launcher's wait loop backs off while nothing changes and looks again at once after a change."""

from __future__ import annotations

import time
from types import SimpleNamespace

from benchrun.launch.k8s_wait import Watch, wait


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
