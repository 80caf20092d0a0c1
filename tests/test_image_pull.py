"""A suite pod whose image does not pull: a final answer from the registry (not found, access
denied) fails the replicate at once, quoting it; anything else (a 429 rate limit, a network blip)
is what the kubelet retries, and the launcher waits for it up to ``pull_allowance_s``. Before, the
first ImagePullBackOff failed the replicate whatever the cause."""

from __future__ import annotations

import time

import pytest

from benchrun.launch.k8s_failures import permanent_pull_error
from test_launch_kubernetes_harness import RUN_ID, home, launcher_for, make_inv  # noqa: F401 - home is a fixture

RATE_LIMIT = ('rpc error: code = Unknown desc = failed to pull and unpack image "docker.io/library/python:3.11": '
              "failed to copy: httpReadSeeker: failed open: unexpected status code https://registry-1.docker.io/v2/"
              "library/python/manifests/sha256:0: 429 Too Many Requests - Server message: toomanyrequests: You have "
              "reached your pull rate limit")


@pytest.mark.parametrize("message, final", [
    ('rpc error: code = NotFound desc = failed to pull and unpack image "r.example/b:1": failed to resolve reference '
     '"r.example/b:1": r.example/b:1: not found', True),
    ("Error response from daemon: pull access denied for bench, repository does not exist or may require "
     "'docker login': denied: requested access to the resource is denied", True),
    ('failed to resolve reference "123.dkr.ecr.us-east-1.amazonaws.com/b:1": unexpected status from HEAD request: '
     "401 Unauthorized", True),
    ("rpc error: code = Unknown desc = Error reading manifest 1 in quay.io/x/b: manifest unknown", True),
    ('couldn\'t parse image reference "Bad:Name": invalid reference format', True),
    (RATE_LIMIT, False),
    ('rpc error: code = Unknown desc = failed to pull and unpack image "r.example/b:1": failed to do request: Head '
     '"https://r.example/v2/b/manifests/1": dial tcp 10.0.0.1:443: i/o timeout', False),
    ('rpc error: code = Canceled desc = failed to pull and unpack image "r.example/b:1": context canceled', False),
    ('Back-off pulling image "r.example/b:1"', False),
    (None, False),
])
def test_which_pull_failures_are_final(message, final):
    assert permanent_pull_error(message) is final


def test_a_registry_rate_limit_is_waited_out(kcluster, home):
    run_dir = home / "runs" / RUN_ID
    kcluster.make_flaky("python:3.11", 2.0)  # the image make_inv runs
    res = launcher_for(kcluster).launch(make_inv(run_dir), run_dir)
    assert res.status == "ok", res.reason


def test_a_rate_limit_past_the_pull_allowance_fails_and_says_why(kcluster, home):
    run_dir = home / "runs" / RUN_ID
    kcluster.make_flaky("python:3.11", 600.0)
    t0 = time.monotonic()
    res = launcher_for(kcluster, pull_allowance_s=2.0).launch(make_inv(run_dir), run_dir)
    assert res.status == "failed" and time.monotonic() - t0 < 20
    assert res.reason.startswith("image pull failed: ImagePullBackOff for "), res.reason
    assert "beyond pull_allowance_s=2 (the kubelet kept retrying)" in res.reason
    assert "429 Too Many Requests" in res.reason  # the runtime's answer, from the pod's Failed event
    kcluster.wait_for(lambda: not kcluster.list("jobs"), what="the Job deleted")


def test_an_image_that_is_not_there_fails_at_once_quoting_the_registry(kcluster, home):
    run_dir = home / "runs" / RUN_ID
    t0 = time.monotonic()
    res = launcher_for(kcluster, pull_allowance_s=600.0).launch(make_inv(run_dir, image="registry.invalid/nope:1"), run_dir)
    assert res.status == "failed" and time.monotonic() - t0 < 20
    assert res.reason.startswith("image pull failed: "), res.reason
    assert 'registry.invalid/nope:1: not found' in res.reason
