"""What a real API server does under concurrency and load, added to the harness emulator.

- **Preconditions** (``check_write``): a PATCH or PUT whose body carries
  ``metadata.resourceVersion`` is refused with 409 Conflict unless it equals the stored one
  (optimistic concurrency: the second of two writers that read the same version loses);
  ``metadata.generation`` is the server's: bumped when ``spec`` changes, never the client's.
- **Throttling** (``Throttle``): above ``qps`` (a token bucket of ``burst``) a request is
  answered 429 Too Many Requests with ``Retry-After``, per user, as API Priority and Fairness
  does to a flow that exceeds its share.
- **Pagination** (``paginate``): ``limit`` cuts a list in name order and returns
  ``metadata.continue`` (and ``remainingItemCount``); the next page starts after the last
  name. Pages are read from the live store, not a snapshot: an object created meanwhile may
  appear on a later page (a real server serves every page from the first page's revision);
  a client that watches from the list's ``resourceVersion`` sees it either way.
- **Watch resume** (``EventLog``, ``watch_from``): every event is kept (the last
  ``watch_window`` per resource) with a resourceVersion of its own (deletions get a fresh
  one, as in etcd); a watch with ``resourceVersion=N`` replays the events after N, then
  streams live ones; one older than the window gets the API server's 410 Gone ERROR event
  ("too old resource version"), and the client must list again. ``compact(resource)``
  forgets the window, as etcd compaction does.
"""

from __future__ import annotations

import base64
import collections
import copy
import json
import re
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp.web
import kmock
from kmock._internal import aiobus


def conflict(resource: Any, name: str) -> kmock.KubernetesError:
    what = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
    return kmock.KubernetesError(
        status=409, reason="Conflict",
        message=f'Operation cannot be fulfilled on {what} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again")


def check_write(api: Any, request: Any) -> kmock.KubernetesError | None:
    """The 409 for a stale ``resourceVersion`` precondition; also sets the server's generation."""
    key = (request.resource, request.namespace, request.name)
    stored = api._objects[key] if key in api._objects and not api._objects[key].deleted else None
    if stored is None:
        return None  # the emulator answers 404
    old = stored.raw
    meta = request.data.get("metadata")
    wanted = (meta or {}).get("resourceVersion") if isinstance(meta, dict) else None
    if wanted is not None and str(wanted) != str(old["metadata"].get("resourceVersion")):
        return conflict(request.resource, request.name)
    if request.subresource is None and "spec" in request.data:
        merged = request.data["spec"] if str(getattr(request.method, "value", request.method)).upper() == "PUT" else _merged(old.get("spec"), request.data["spec"])
        generation = int(old["metadata"].get("generation") or 1)
        if merged != old.get("spec"):
            generation += 1
        request.data.setdefault("metadata", {})["generation"] = generation
    elif isinstance(meta, dict) and "generation" in meta:
        meta["generation"] = old["metadata"].get("generation")
    return None


# metav1.MicroTime fields: the API server decodes them with Go's layout RFC3339Micro
# ("2006-01-02T15:04:05.000000Z07:00"), which needs exactly six fractional digits. Python's
# ``isoformat()`` (the client's serialization of a datetime) leaves the fraction out when the
# microseconds are 0: such a write is a 400 there, once in a million renewals (review 2026-12-07).
MICRO_TIME_FIELDS = {("coordination.k8s.io", "leases"): ("Lease", ("acquireTime", "renewTime"))}
_RFC3339_MICRO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})")


def bad_micro_time(request: Any) -> kmock.KubernetesError | None:
    """The 400 for a create, PUT or PATCH whose MicroTime field (in ``spec``) is not RFC3339Micro."""
    resource = request.resource
    kind, fields = MICRO_TIME_FIELDS.get((getattr(resource, "group", None), getattr(resource, "plural", None)),
                                         ("", ()))
    spec = request.data.get("spec") if isinstance(request.data, dict) else None
    for field in fields if isinstance(spec, dict) else ():
        value = spec.get(field)
        if value is not None and not (isinstance(value, str) and _RFC3339_MICRO.fullmatch(value)):
            return kmock.KubernetesError(
                status=400, reason="BadRequest",
                message=f'{kind} in version "{resource.version}" cannot be handled as a {kind}: spec.{field}: '
                        f'parsing time {json.dumps(value)} as "2006-01-02T15:04:05.000000Z07:00"')
    return None


def _merged(old: Any, patch: Any) -> Any:
    """A JSON merge patch (RFC 7386) applied to ``old``."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(old) if isinstance(old, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merged(out.get(k), v)
    return out


class Throttle:
    """A token bucket per user: ``qps`` sustained, ``burst`` at once; counts what it refused."""

    def __init__(self, qps: float, burst: int | None = None, users: set[str] | None = None) -> None:
        self.qps = float(qps)
        self.burst = int(burst if burst is not None else max(1, qps))
        self.users = users  # None: every user
        self.refused = 0
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def admit(self, user: str) -> bool:
        if self.users is not None and user not in self.users:
            return True
        with self._lock:
            now = time.monotonic()
            tokens, last = self._buckets.get(user, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.qps)
            if tokens < 1.0:
                self._buckets[user] = (tokens, now)
                self.refused += 1
                return False
            self._buckets[user] = (tokens - 1.0, now)
            return True

    def retry_after_s(self) -> int:
        return max(1, int(round(1.0 / self.qps))) if self.qps > 0 else 1


def too_many_requests(throttle: Throttle) -> aiohttp.web.StreamResponse:
    retry = throttle.retry_after_s()
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Too many requests, please try again later.", "reason": "TooManyRequests",
            "details": {"retryAfterSeconds": retry}, "code": 429}
    return aiohttp.web.json_response(body, status=429, headers={"Retry-After": str(retry)})


# -- pagination ---------------------------------------------------------------------------------

def _token(rv: str, after: tuple[str, str]) -> str:
    raw = json.dumps({"rv": rv, "after": list(after)}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode()


def _untoken(text: str) -> tuple[str, tuple[str, str]]:
    try:
        data = json.loads(base64.urlsafe_b64decode(text.encode()))
        return str(data["rv"]), (str(data["after"][0]), str(data["after"][1]))
    except (ValueError, KeyError, IndexError, TypeError):
        raise kmock.KubernetesError(status=400, reason="BadRequest",
                                    message=f"continue {text!r}: not a continue token of this server") from None


def _order(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def paginate(result: dict[str, Any], params: dict[str, str]) -> dict[str, Any]:
    """Cut a list response to ``limit`` items after ``continue``'s position."""
    items = sorted(result["items"], key=_order)
    token = params.get("continue")
    if token:
        rv, after = _untoken(token)
        result["metadata"]["resourceVersion"] = rv  # a continued list keeps the first page's version
        items = [o for o in items if _order(o) > after]
    limit = int(params.get("limit") or 0)
    if limit > 0 and len(items) > limit:
        page = items[:limit]
        result["metadata"]["continue"] = _token(result["metadata"]["resourceVersion"], _order(page[-1]))
        result["metadata"]["remainingItemCount"] = len(items) - limit
        items = page
    result["items"] = items
    return result


# -- watch resume ------------------------------------------------------------------------------

class EventLog:
    """The last ``window`` events of each resource, as (resourceVersion, event) in order."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.kept: dict[Any, collections.deque[tuple[int, dict[str, Any]]]] = collections.defaultdict(collections.deque)
        self.compacted: dict[Any, int] = collections.defaultdict(int)  # newest resourceVersion forgotten

    def add(self, resource: Any, rv: int, event: dict[str, Any]) -> None:
        kept = self.kept[resource]
        kept.append((rv, event))
        while len(kept) > self.window:
            old_rv, _ = kept.popleft()
            self.compacted[resource] = max(self.compacted[resource], old_rv)

    def compact(self, resource: Any) -> None:
        kept = self.kept[resource]
        if kept:
            self.compacted[resource] = max(self.compacted[resource], kept[-1][0])
        kept.clear()


class _RecordingBus(aiobus.Bus):  # type: ignore[type-arg]
    """A watch bus that also logs each event, giving it a resourceVersion of its own."""

    emulator: Any = None
    resource: Any = None

    async def put(self, *items: Any) -> None:  # type: ignore[override]
        for item in items:
            self._log(item)
        await super().put(*items)

    def _log(self, item: Any) -> None:
        if isinstance(item, dict) and isinstance(item.get("object"), dict):
            meta = item["object"].setdefault("metadata", {})
            rv = int(meta.get("resourceVersion") or 0)
            last = self.emulator.events.kept[self.resource]
            if item.get("type") == "DELETED" or (last and rv <= last[-1][0]):
                # etcd gives every write a revision: a deletion (or a write that reused the
                # version, as kmock's deletionTimestamp patch does) gets its own.
                rv = int(self.emulator.next_rv())
                meta["resourceVersion"] = str(rv)
            self.emulator.events.add(self.resource, rv, {"type": item["type"], "object": copy.deepcopy(item["object"])})


def recording_buses(emulator: Any) -> Any:
    def make(resource: Any) -> _RecordingBus:
        bus = _RecordingBus()
        bus.emulator, bus.resource = emulator, resource
        return bus

    class Buses(dict):  # type: ignore[type-arg]
        def __missing__(self, key: Any) -> _RecordingBus:
            self[key] = make(key)
            return self[key]

    return Buses()


def gone(since: int, oldest: int) -> dict[str, Any]:
    return {"type": "ERROR", "object": {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f"too old resource version: {since} ({oldest})", "reason": "Expired", "code": 410}}


async def watch_from(api: Any, request: Any, since: int) -> AsyncIterator[Any]:
    """The events after ``since``, then the live ones; 410 Gone when ``since`` was compacted."""
    yield b""  # the headers go out now (kmock streams from the first item)
    resource = request.resource
    bus = api._buses[resource]
    async with api._lock:  # writers put under this lock: the replay and the mark agree
        if since < api.events.compacted[resource]:
            yield gone(since, api.events.compacted[resource] + 1)
            return
        backlog = [e for rv, e in api.events.kept[resource] if rv > since]
        mark = await bus.mark()
    try:
        last = since
        for event in backlog:
            if _in_scope(request, event):
                last = int(event["object"]["metadata"]["resourceVersion"])
                yield event
        async for event in bus.stream(since=mark):
            if not isinstance(event, dict) or not _in_scope(request, event):
                continue
            if int((event.get("object") or {}).get("metadata", {}).get("resourceVersion") or 0) <= last:
                continue  # already replayed
            yield event
    finally:
        await bus.unmark(mark)


def _in_scope(request: Any, event: dict[str, Any]) -> bool:
    meta = (event.get("object") or {}).get("metadata") or {}
    return (request.namespace is None or meta.get("namespace") == request.namespace) and \
        (request.name is None or meta.get("name") == request.name)
