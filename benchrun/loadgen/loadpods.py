"""Load spread over the pods of one Kubernetes load Job, meeting in the artifact store.

A serving suite with ``load_pods: N`` runs on the Kubernetes launcher as ONE Indexed Job
(``benchrun.launch.loadjob``): N pods, pod *k* with completion index *k*. Every pod runs the same
sweep (same points, same seed) and sends its share of each point: the load is split over all
``N x workers`` worker processes of the Job as :mod:`benchrun.loadgen.runner` splits it over
the processes of one host (global worker ``k * workers + w``; concurrency and request counts
split as evenly as integers allow; each worker a Poisson process of ``rate / (N x workers)``).

The pods meet in the artifact store (``BENCHRUN_LOAD_STORE``, the launcher's ``outputs_uri``),
under ``<prefix>loadjobs/<run_id>/<job uid>/`` (the Job's uid: a re-created Job never reads an
earlier one's objects):

- **Start barrier, per point.** After its warm-up and with every stream's connection open, pod
  *k* writes ``p<i>/ready/<k>/<wall_ns>`` (its wall-clock time in the key, so one LIST reads
  every pod's: no GET per pod, which at 64 pods would outlast the margin), then lists
  ``p<i>/ready/`` until all N are there. The go time is the latest ready time plus the margin
  (:func:`go_margin_s`, :data:`GO_MARGIN_S` unless ``BENCHRUN_LOAD_GO_MARGIN_S`` says): every pod computes
  it from the same N objects (S3 reads after writes are consistent), so they agree on it with no
  leader and no message. It is a wall-clock instant, converted once to this pod's monotonic
  clock; pods on different nodes start together as far as their clocks agree (NTP/chrony: well
  under a millisecond on a synchronised cluster; not measured here). A pod that saw the last
  ready object only after the go time had passed starts late by that much; it is recorded
  (``go_late_ms``) and makes the point invalid, naming the pod.
  Why not a go time handed out by the orchestrator once every pod is Running: pods become Running
  before their image's imports, warm-up and connections are done (seconds apart), and a sweep has
  a barrier per point; agreeing in the store needs nothing beyond what the pods already use.
- **Records.** Pod *k* > 0 uploads each point's raw request rows and worker figures (CPU,
  event-loop lag, go lateness) as ``p<i>/records/<k>.json.gz`` (JSON, never pickle: the
  orchestrator side reads it) with its go time on its own monotonic clock. Pod 0 waits for every
  index's records, moves their monotonic stamps onto its own clock (aligned at the agreed go
  time), merges them with its own and summarises the point once over the merged rows, so one
  saturated worker on any pod makes the point invalid with that worker and pod named.
- **Stopping.** A sweep to saturation that pod 0 stops (goodput fell) writes ``stop``; the other
  pods see it at their next barrier and end.

Pod 0 writes the replicate's result document (merged rows, figures, metrics); pod *k* > 0 writes
its own in ``raw/`` (``BENCHRUN_NODE_RANK`` = *k*, as a gang's node does). boto3 (the image has it
for ``benchrun.launch.podout``) is imported only here, only in a load Job's pods.
"""

from __future__ import annotations

import gzip
import json
import os
import time
import urllib.parse
from typing import Any, Callable

from benchrun.errors import BenchrunError
from benchrun.urlsafe import has_credentials, redact

CLOCK = time.perf_counter_ns
GO_MARGIN_S = 0.5  # the go time after the last pod's ready time: covers a poll, a list and a clock read
ENV_MARGIN = "BENCHRUN_LOAD_GO_MARGIN_S"


def go_margin_s(env: dict[str, str] | None = None) -> float:
    """The barrier's margin: ``BENCHRUN_LOAD_GO_MARGIN_S`` (0.05-60 s; a slow store, a starved
    node) or :data:`GO_MARGIN_S`."""
    raw = (os.environ if env is None else env).get(ENV_MARGIN)
    if raw in (None, ""):
        return GO_MARGIN_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.05 <= value <= 60:
        raise BenchrunError(f"{ENV_MARGIN}={raw!r}: seconds from 0.05 to 60")
    return value
POLL_S = 0.05
# the monotonic stamps of a request row (moved onto pod 0's clock when merged)
MONO_FIELDS = ("scheduled_mono_ns", "send_mono_ns", "write_mono_ns", "first_token_mono_ns", "last_token_mono_ns",
               "end_mono_ns")
ENV_PODS, ENV_INDEX, ENV_STORE, ENV_JOB_UID, ENV_TIMEOUT = (
    "BENCHRUN_LOAD_PODS", "BENCHRUN_LOAD_INDEX", "BENCHRUN_LOAD_STORE", "BENCHRUN_LOAD_JOB_UID",
    "BENCHRUN_LOAD_TIMEOUT_S")


class Stopped(Exception):
    """Pod 0 stopped the sweep (a sweep to saturation whose goodput fell)."""


class LoadPods:
    """This pod's place in a load Job (``index`` of ``count``) and the store the pods meet in."""

    def __init__(self, index: int, count: int, uri: str, run_id: str, job_uid: str, timeout_s: float,
                 client: Any = None, sleep: Callable[[float], None] = time.sleep) -> None:
        parsed = urllib.parse.urlparse(uri or "")
        if parsed.scheme != "s3" or not parsed.netloc or has_credentials(uri or ""):
            raise BenchrunError(f"{ENV_STORE} {redact(uri or '')!r}: use s3://bucket/prefix (the launcher's outputs_uri; "
                                "no user:password@, the S3 credentials come from the environment)")
        if not 0 <= index < count:
            raise BenchrunError(f"{ENV_INDEX}={index} is not an index of {count} load pods")
        if not job_uid or not run_id:
            raise BenchrunError(f"{ENV_JOB_UID} and BENCHRUN_RUN_ID must be set in a load Job's pod")
        prefix = parsed.path.strip("/")
        self.bucket = parsed.netloc
        self.base = f"{prefix + '/' if prefix else ''}loadjobs/{run_id}/{job_uid}/"
        self.index, self.count, self.timeout_s = index, count, timeout_s
        self._client, self._sleep = client, sleep
        self.margin_s = go_margin_s()
        self.points: dict[int, dict[str, Any]] = {}  # point index -> go time, lateness, who waited how long

    @classmethod
    def from_env(cls, requested: int, env: dict[str, str] | None = None) -> "LoadPods | None":
        """The load pods this suite runs in: None for ``load_pods: 1``; a clear error when more are
        asked for outside a load Job (the local launcher, a plain pod)."""
        env = dict(os.environ if env is None else env)
        if requested <= 1:
            return None
        if env.get(ENV_PODS) is None or env.get(ENV_INDEX) in (None, ""):
            raise BenchrunError(
                f"parameter load_pods={requested}: load pods run as one Indexed Job on the Kubernetes launcher "
                "(with outputs_uri); here there is none. On one host spread the load with workers instead")
        if int(env[ENV_PODS]) != requested:
            raise BenchrunError(f"parameter load_pods={requested} but the load Job has {env[ENV_PODS]} pods")
        return cls(int(env[ENV_INDEX]), requested, env.get(ENV_STORE, ""), env.get("BENCHRUN_RUN_ID", ""),
                   env.get(ENV_JOB_UID, ""), float(env.get(ENV_TIMEOUT) or 900.0))

    # -- the store ------------------------------------------------------------------
    @property
    def client(self) -> Any:
        if self._client is None:
            import boto3

            endpoint = os.environ.get("BENCHRUN_S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL") or None
            self._client = boto3.client("s3", endpoint_url=endpoint)
        return self._client

    def _put(self, key: str, doc: Any) -> None:
        body = gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), 3)
        self.client.put_object(Bucket=self.bucket, Key=self.base + key, Body=body)

    def _get(self, key: str) -> Any | None:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.base + key)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None
        return json.loads(gzip.decompress(body))

    def _keys(self, sub: str) -> list[str]:
        out = self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.base + sub)
        return [o["Key"][len(self.base):] for o in out.get("Contents") or []]

    def _wait(self, what: str, ready: Callable[[], Any]) -> Any:
        t0 = time.monotonic()
        while True:
            got = ready()
            if got is not None:
                return got
            if time.monotonic() - t0 > self.timeout_s:
                raise BenchrunError(f"load pod {self.index}: {what} not there after {self.timeout_s:g} s "
                                    f"(s3://{self.bucket}/{self.base}); did another pod of the load Job fail?")
            self._sleep(POLL_S)

    # -- the protocol ---------------------------------------------------------------
    def barrier(self, point_index: int) -> int:
        """Wait for every pod's ready object of this point; the agreed go time on this pod's
        monotonic clock. Raises :class:`Stopped` when pod 0 has stopped the sweep."""
        arrived_wall = time.time_ns()
        self._put(f"p{point_index}/ready/{self.index}/{arrived_wall}", {"index": self.index, "wall_ns": arrived_wall})

        def all_ready() -> list[str] | None:
            if self.index and self._get("stop") is not None:
                raise Stopped(f"pod 0 stopped the sweep before point {point_index}")
            ready: dict[str, int] = {}  # pod index -> its ready time, from the keys alone
            for key in self._keys(f"p{point_index}/ready/"):
                pod, wall = key.rsplit("/", 2)[1:]
                ready[pod] = max(ready.get(pod, 0), int(wall))
            return list(ready.values()) if len(ready) >= self.count else None

        walls = self._wait(f"the ready objects of point {point_index} from all {self.count} pods", all_ready)
        go_wall = max(walls) + int(self.margin_s * 1e9)
        now_mono, now_wall = CLOCK(), time.time_ns()
        go_mono = now_mono + (go_wall - now_wall)
        self.points[point_index] = {"go_wall_ns": go_wall, "go_mono_ns": go_mono, "waited_ms": (now_wall - arrived_wall) / 1e6,
                                    "go_late_ms": max(0.0, (now_wall - go_wall) / 1e6)}
        return go_mono

    def publish(self, point_index: int, results: list[dict[str, Any]]) -> None:
        """Pod k > 0: this point's worker results (rows included) for pod 0."""
        self._put(f"p{point_index}/records/{self.index}", {"index": self.index, "barrier": self.points.get(point_index),
                                                           "results": results})

    def gather(self, point_index: int) -> list[dict[str, Any]]:
        """Pod 0: every other pod's worker results of this point, their monotonic stamps moved onto
        this pod's clock (aligned at the agreed go time), each result marked with its pod."""
        mine = self.points.get(point_index) or {}
        out: list[dict[str, Any]] = []
        for k in range(1, self.count):
            doc = self._wait(f"the records of point {point_index} from load pod {k}",
                             lambda k=k: self._get(f"p{point_index}/records/{k}"))
            theirs = doc.get("barrier") or {}
            shift = int(mine.get("go_mono_ns", 0)) - int(theirs.get("go_mono_ns", 0)) if mine and theirs else 0
            for res in doc["results"]:
                res["pod"] = k
                res["go_late_ms"] = theirs.get("go_late_ms")
                for row in res["rows"]:
                    for f in MONO_FIELDS:
                        if row.get(f) is not None:
                            row[f] = int(row[f]) + shift
                out.append(res)
        return out

    def stop(self, point_index: int, reason: str) -> None:
        """Pod 0: the sweep ends after this point; the other pods see it at their next barrier."""
        self._put("stop", {"after_point": point_index, "reason": reason})

    def info(self) -> dict[str, Any]:
        """What the result's context says of the load pods."""
        return {"load_pods": self.count, "index": self.index, "store": f"s3://{self.bucket}/{self.base}",
                "go_margin_s": self.margin_s, "barrier": "the latest ready time of all pods + go_margin_s, "
                "agreed through the artifact store", "points": {str(k): v for k, v in sorted(self.points.items())}}
