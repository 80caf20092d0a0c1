"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does:
one operator replica holds the Lease and renews it; the others wait until it expires.

Every write carries the Lease's ``resourceVersion`` (a PUT of the object as read), so of two
replicas that saw the same expired Lease only one takes it: the other gets 409 Conflict.

Expiry is judged on this replica's own monotonic clock, never by comparing the holder's
``renewTime`` with the local wall clock (a replica whose clock ran 16 s ahead took over a live
Lease): the Lease's record (holder, ``renewTime``, transitions) is remembered with the monotonic
time it was first seen, and another holder's Lease is expired only when that record has not
changed for its ``leaseDurationSeconds``, as client-go's ``observedRecord``/``observedTime`` do.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

log = logging.getLogger(__name__)
# (connect, read) seconds for each Lease call, kept well under a Lease's duration: a renewal that
# hangs on a half-open connection must fail (and the replica stop acting) rather than block.
REQUEST_TIMEOUT: tuple[float, float] = (3.0, 5.0)


def _now() -> dt.datetime:
    """The time written into the Lease (acquireTime, renewTime); never compared across replicas."""
    return dt.datetime.now(dt.timezone.utc)


def micro_time(value: Any) -> Any:
    """A Lease time as the API server reads it: MicroTime, RFC 3339 with exactly six fractional
    digits (Go's layout ``2006-01-02T15:04:05.000000Z07:00``). The client would send a datetime's
    ``isoformat()``, which drops the fraction when the microseconds are 0: that write is a 400,
    about once in a million renewals (found in review). A string or None is left as it is."""
    if not isinstance(value, dt.datetime):
        return value
    if value.tzinfo is not None:
        value = value.astimezone(dt.timezone.utc)
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _stamped(spec: Any) -> Any:
    """``spec`` (a V1LeaseSpec) with its times as :func:`micro_time` text, for a write: a time read
    back from the server is a datetime again, and a renewal writes it back."""
    spec.acquire_time, spec.renew_time = micro_time(spec.acquire_time), micro_time(spec.renew_time)
    return spec


def _monotonic() -> float:
    return time.monotonic()


class LeaseElector:
    """Try to hold Lease ``namespace/name`` as ``identity`` for ``duration_s`` at a time."""

    def __init__(self, api_client: Any, namespace: str, name: str, identity: str, duration_s: int = 15) -> None:
        from kubernetes import client

        self.api = client.CoordinationV1Api(api_client)
        self.namespace, self.name, self.identity, self.duration_s = namespace, name, identity, duration_s
        self.leader = False
        self._observed: tuple[Any, ...] | None = None  # the other holder's record as last read...
        self._observed_at = 0.0  # ...and when (this replica's monotonic clock) it was first seen so

    def _expired(self, spec: Any) -> bool:
        """Whether another holder's Lease has gone unrenewed for its duration, measured here."""
        record = (spec.holder_identity, spec.renew_time, spec.acquire_time, spec.lease_transitions,
                  spec.lease_duration_seconds)
        now = _monotonic()
        if record != self._observed:
            self._observed, self._observed_at = record, now
        return now - self._observed_at >= (spec.lease_duration_seconds or self.duration_s)

    def try_acquire(self) -> bool:
        """Take or renew the Lease; True while this replica leads."""
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        now = _now()
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = client.V1Lease(metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                                  spec=_stamped(client.V1LeaseSpec(
                                      holder_identity=self.identity, acquire_time=now, renew_time=now,
                                      lease_duration_seconds=self.duration_s, lease_transitions=0)))
            try:
                self.api.create_namespaced_lease(self.namespace, body, _request_timeout=REQUEST_TIMEOUT)
            except ApiException as exc2:
                if exc2.status != 409:
                    raise
                return self._set(False)  # another replica created it first
            return self._set(True)
        spec = lease.spec or client.V1LeaseSpec()
        held_by_other = spec.holder_identity not in (None, "", self.identity)
        if held_by_other and not self._expired(spec):
            return self._set(False)
        if spec.holder_identity != self.identity:
            spec.acquire_time = now
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.holder_identity, spec.renew_time, spec.lease_duration_seconds = self.identity, now, self.duration_s
        lease.spec = _stamped(spec)
        try:
            # carries resourceVersion
            self.api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status != 409:
                raise
            return self._set(False)
        return self._set(True)

    def release(self) -> None:
        """Give the Lease up (on a clean shutdown) so another replica takes over at once."""
        from kubernetes.client.exceptions import ApiException

        if not self.leader:
            return
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace, _request_timeout=REQUEST_TIMEOUT)
            if lease.spec and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                lease.spec.renew_time = None
                _stamped(lease.spec)
                self.api.replace_namespaced_lease(self.name, self.namespace, lease, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            log.warning("could not release Lease %s/%s: %s", self.namespace, self.name, exc.status)
        except Exception as exc:  # noqa: BLE001 - a timeout on the way out: the Lease expires on its own
            log.warning("could not release Lease %s/%s: %r", self.namespace, self.name, exc)
        self.leader = False

    def _set(self, leader: bool) -> bool:
        if leader != self.leader:
            log.info("Lease %s/%s: %s", self.namespace, self.name, "leading" if leader else "not leading")
        self.leader = leader
        return leader
