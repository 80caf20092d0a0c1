"""kmock's in-memory API server, completed where a real client needs more than it gives.

kmock 0.8's ``KubernetesEmulator`` stores objects, serves get/list/watch/create/patch/delete
and streams watch events. What it leaves out, and a real API server does, is added here
(hand-written because no library offers it over kmock; each piece is small):

- ``metadata.uid``, ``creationTimestamp``, ``resourceVersion``, ``generation`` and the
  namespace on create; ``generateName`` honoured; a fresh ``resourceVersion`` on every write;
- ``labelSelector`` and ``fieldSelector`` on list, watch and delete-collection;
- ``timeoutSeconds`` on watch (kmock streams forever);
- ``PUT`` (replace) and ``DELETE`` on a collection; ``propagationPolicy`` on delete (a Job's
  default over the API is ``Orphan``: its pods stay, without their ownerReference);
- RBAC: every request recorded as an ``rbac.Call`` (user from the bearer token) and, with a
  ``policy``, refused with the API server's 403 when the Roles do not allow it;
- ``GET .../pods/NAME/log`` with ``container``, ``follow``, ``timestamps``, ``sinceSeconds``
  and ``tailLines``, served by a callback the kubelet provides;
- a create hook (``on_create``) so the fixture can play admission webhooks (Kueue suspends
  the Jobs it manages);
- API-server concurrency semantics (``apisemantics.py``): 409 Conflict on a PATCH/PUT whose
  ``metadata.resourceVersion`` precondition is stale, ``generation`` bumped on a spec change,
  429 Too Many Requests above a configurable rate (``throttle``), paginated lists
  (``limit``/``continue``), watches that resume from a ``resourceVersion`` and answer 410
  Gone (an ERROR event) for one older than the retained event window.

Controllers in the same event loop change objects through ``put_object``/``patch_object``/
``remove_object``, which emit the same watch events an HTTP write does.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import itertools
import re
import secrets
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import enums, rendering

# kmock keeps every request it served and dispatches each new one by scanning that log for it
# (``request in view``: every earlier request through each reaction's filter), so a request costs
# time in proportion to all before it. Profiled in benchmarks/controller_scale.py at 400 objects: the
# harness thread took 61 % of the process, 5,700 of its 6,300 samples in that scan, and shared the
# GIL with the operator it was timing. The harness keeps its own record of calls (``calls``); kmock's
# log is cut to its newest entries and the requests still being handled, so a request is among them
# when it is dispatched, however long it waited first (a write behind the precondition lock). At 256
# the scan still took 749 of 7,239 samples of the stock canary's test (2026-12-07, py-spy); at 32, 6.
REQUEST_LOG_KEEP = 32
LOG_PATH = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log$")


def now_iso() -> str:
    """The API server's timestamp format: RFC 3339, whole seconds, UTC."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _split_selector(text: str) -> list[str]:
    """Split a selector on the commas that are not inside ``in (a,b)`` parentheses."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


_SET_EXPR = re.compile(r"^(?P<key>[^\s!=]+)\s+(?P<op>in|notin)\s+\((?P<values>[^)]*)\)$")


def label_selector_matches(selector: str | None, labels: dict[str, str] | None) -> bool:
    """Whether ``labels`` satisfy a label selector string (equality- and set-based)."""
    if not selector:
        return True
    labels = labels or {}
    for term in _split_selector(selector):
        m = _SET_EXPR.match(term)
        if m:
            values = {v.strip() for v in m["values"].split(",")}
            present = m["key"] in labels and labels[m["key"]] in values
            if (m["op"] == "in") != present:
                return False
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


def _dig(obj: dict[str, Any], dotted: str) -> Any:
    cur: Any = obj
    for part in dotted.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def field_selector_matches(selector: str | None, obj: dict[str, Any]) -> bool:
    """Whether ``obj`` satisfies a field selector (``a.b=v``, ``a.b!=v``, comma-joined)."""
    if not selector:
        return True
    for term in _split_selector(selector):
        negate = "!=" in term
        key, value = (s.strip() for s in term.replace("==", "=").replace("!=", "=").split("=", 1))
        actual = _dig(obj, key)
        actual_s = "" if actual is None else str(actual)
        if (actual_s == value) == negate:
            return False
    return True


def selects(params: dict[str, str], obj: dict[str, Any]) -> bool:
    meta = obj.get("metadata") or {}
    return label_selector_matches(params.get("labelSelector"), meta.get("labels")) and field_selector_matches(
        params.get("fieldSelector"), obj
    )


LogSource = Callable[[str, str, dict[str, str]], Any]


@attrs.define(kw_only=True)
class HarnessEmulator(kmock.KubernetesEmulator):
    """``KubernetesEmulator`` plus what the ``kubernetes`` client and dagster-k8s rely on."""

    log_source: LogSource | None = attrs.field(default=None)
    on_create: Callable[[kmock.resource, dict[str, Any]], None] | None = attrs.field(default=None)
    # RBAC: every request as a ``rbac.Call``; ``policy`` (a ``rbac.Policy``), when set, refuses
    # what it does not allow with the API server's 403.
    calls: list[Any] = attrs.field(factory=list)
    policy: Any = attrs.field(default=None)
    _rv_counter: Any = attrs.field(factory=lambda: itertools.count(1), init=False)
    # 429 above this rate (an ``apisemantics.Throttle``), None: never.
    throttle: Any = attrs.field(default=None)
    # Watch events kept per resource for resume by resourceVersion (older ones: 410 Gone).
    watch_window: int = attrs.field(default=20000)
    events: Any = attrs.field(default=None, init=False)
    _precondition_lock: Any = attrs.field(factory=asyncio.Lock, init=False)
    _in_flight: set[int] = attrs.field(factory=set, init=False)  # id() of each request being handled

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        from .apisemantics import EventLog, recording_buses

        self.events = EventLog(self.watch_window)
        self._buses = recording_buses(self)
        self["get", LOG_PATH] << self._serve_log

    # -- helpers shared by HTTP writes and in-loop controllers -------------------------------

    def next_rv(self) -> str:
        return str(next(self._rv_counter))

    def stamp_new(self, resource: kmock.resource, namespace: str | None, data: dict[str, Any]) -> None:
        meta = data.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        if namespace and not meta.get("namespace"):
            meta["namespace"] = namespace
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_iso()
        meta["resourceVersion"] = self.next_rv()
        meta["generation"] = 1
        if resource in self._resources and "status" in self._resources[resource].subresources:
            data.setdefault("status", {})  # as the API server returns it: present, empty
        if self.on_create is not None:
            self.on_create(resource, data)

    def live(self, resource: kmock.resource, namespace: str | None = None) -> list[tuple[Any, dict[str, Any]]]:
        """Keys and raw objects (not copies: treat as read-only) of one resource."""
        out = []
        for key, obj in list(self._objects.items()):
            res, ns, _name = key
            if res == resource and not obj.deleted and (namespace is None or ns == namespace):
                out.append((key, obj.raw))
        return out

    async def put_object(self, resource: kmock.resource, namespace: str | None, data: dict[str, Any]) -> dict[str, Any]:
        """Create (a controller's create): same stamping and events as an HTTP POST."""
        async with self._lock:
            self.stamp_new(resource, namespace, data)
            key = (resource, namespace, data["metadata"]["name"])
            if key in self._objects and not self._objects[key].deleted:
                raise kmock.KubernetesError(status=409, reason="AlreadyExists", message=f"{key[2]} exists")
            if key in self._objects:
                self._objects[key].create(data)
            else:
                self._objects[key] = data
            raw = self._objects[key].raw
            await self._buses[resource].put({"type": "ADDED", "object": raw})
            return copy.deepcopy(raw)

    async def replace_object(self, key: Any, data: dict[str, Any]) -> None:
        """Replace a whole object (status and all) if it still exists, and is the same object (uid);
        bumps resourceVersion."""
        async with self._lock:
            if key not in self._objects or self._objects[key].deleted:
                return
            uid = (data.get("metadata") or {}).get("uid")
            if uid is not None and uid != self._objects[key].raw["metadata"].get("uid"):
                return  # written from a copy of an object deleted and made anew since: a conflict on a cluster
            data.setdefault("metadata", {})["resourceVersion"] = self.next_rv()
            self._objects[key].create(data)
            await self._buses[key[0]].put({"type": "MODIFIED", "object": self._objects[key].raw})

    async def remove_object(self, key: Any) -> None:
        async with self._lock:
            if key not in self._objects or self._objects[key].deleted:
                return
            raw = self._objects[key].raw
            self._objects[key].delete()
            await self._buses[key[0]].put({"type": "DELETED", "object": raw})

    # -- request handling ---------------------------------------------------------------------

    def _call_of(self, request: rendering.Request) -> Any:
        from .rbac import Call, user_of_token, verb_of

        if request.resource is None:
            return None
        name = request.name
        if request.subresource == "log" and name is None:
            m = LOG_PATH.match(request.url.path)
            name = m["name"] if m else None
        headers = {k.lower(): v for k, v in dict(request.headers).items()}
        return Call(user=user_of_token(headers.get("authorization")),
                    verb=verb_of(str(request.method.value if hasattr(request.method, "value") else request.method),
                                 name, dict(request.params)),
                    group=request.resource.group or "", resource=request.resource.plural or "",
                    subresource=request.subresource, namespace=request.namespace, name=name)

    async def _serve_access_review(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        """``SubjectAccessReview`` / ``SelfSubjectAccessReview``: the policy's answer (no policy: allowed)."""
        from .rbac import Call, user_of_token

        review = request.data if isinstance(request.data, dict) else {}
        spec = review.get("spec") or {}
        attrs_ = spec.get("resourceAttributes") or {}
        if request.url.path.endswith("/selfsubjectaccessreviews"):
            headers = {k.lower(): v for k, v in dict(request.headers).items()}
            user = user_of_token(headers.get("authorization"))
        else:
            user = spec.get("user") or ""
        call = Call(user=user, verb=attrs_.get("verb", ""), group=attrs_.get("group", ""),
                    resource=attrs_.get("resource", ""), subresource=attrs_.get("subresource") or None,
                    namespace=attrs_.get("namespace") or None, name=attrs_.get("name") or None)
        allowed = self.policy is None or self.policy.allows(call)
        out = dict(review, status={"allowed": allowed, **({} if allowed else {"reason": call.forbidden_message()})})
        return aiohttp.web.json_response(out, status=201)

    def _trim_request_log(self) -> None:
        """Cut kmock's log to its newest entries, keeping every request still being handled."""
        if len(self._requests) > 2 * REQUEST_LOG_KEEP:
            cut = len(self._requests) - REQUEST_LOG_KEEP
            self._requests[:] = [r for r in self._requests[:cut] if id(r) in self._in_flight] + self._requests[cut:]

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        self._in_flight.add(id(request))
        try:
            self._trim_request_log()
            return await self._handle_admitted(request)
        finally:
            self._in_flight.discard(id(request))

    async def _handle_admitted(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        if request.method == enums.method.POST and request.url.path.startswith("/apis/authorization.k8s.io/v1/") and \
                request.url.path.endswith("accessreviews"):
            return await self._serve_access_review(request)
        from . import apisemantics

        call = self._call_of(request)
        if call is not None:
            self.calls.append(call)
            if self.policy is not None and not self.policy.allows(call):
                return await self._render_error(
                    kmock.KubernetesError(status=403, reason="Forbidden", message=call.forbidden_message()))
            if self.throttle is not None and not self.throttle.admit(call.user):
                return apisemantics.too_many_requests(self.throttle)
        if request.resource is not None and request.method in (enums.method.POST, enums.method.PATCH, enums.method.PUT):
            refused = apisemantics.bad_micro_time(request)
            if refused is not None:
                return await self._render_error(refused)
        if request.resource is not None and request.subresource != "log" and request.name and \
                request.method in (enums.method.PATCH, enums.method.PUT) and isinstance(request.data, dict):
            async with self._precondition_lock:  # check and write as one step for precondition writers
                refused = apisemantics.check_write(self, request)
                if refused is not None:
                    return await self._render_error(refused)
                return await self._handle_checked(request)
        return await self._handle_checked(request)

    async def _handle_checked(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        # The Python client sends booleans as "True"; kmock only treats watch=true as a watch.
        if request.method == enums.method.GET and str(request.params.get("watch", "")).lower() in ("true", "1"):
            fixed = attrs.evolve(request, action=enums.action.WATCH)
            # kmock matches reactions against its request log by identity: swap the entry.
            for i in range(len(self._requests) - 1, -1, -1):
                if self._requests[i] is request:
                    self._requests[i] = fixed
                    break
            self._in_flight.add(id(fixed))  # the watch is handled until its stream ends
            try:
                return await self._dispatch(fixed)
            finally:
                self._in_flight.discard(id(fixed))
        return await self._dispatch(request)

    async def _dispatch(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        if request.resource is not None and request.subresource != "log":
            if request.action == enums.action.CREATE and isinstance(request.data, dict):
                ns = request.namespace or (request.data.get("metadata") or {}).get("namespace")
                self.stamp_new(request.resource, ns, request.data)
            elif request.action == enums.action.UPDATE and isinstance(request.data, dict):
                request.data.setdefault("metadata", {})["resourceVersion"] = self.next_rv()
            elif request.method == enums.method.PUT and request.name and isinstance(request.data, dict):
                return await self._serve_replace(request)
            elif request.method == enums.method.DELETE and request.name is None:
                return await self._serve_delete_collection(request)
            elif request.method == enums.method.DELETE:
                await self._orphan_dependents(request)
        return await super()._handle(request)

    async def _orphan_dependents(self, request: rendering.Request) -> None:
        """``propagationPolicy: Orphan`` (batch/v1 Jobs' default over the API, which is why
        dagster-k8s deletes a Job's pods itself): the dependents lose their ownerReference
        and stay. Background/Foreground leave them to the garbage collector."""
        body = request.data if isinstance(request.data, dict) else {}
        policy = body.get("propagationPolicy") or request.params.get("propagationPolicy")
        if policy is None and body.get("orphanDependents") is not None:
            policy = "Orphan" if body["orphanDependents"] else "Background"
        is_job = request.resource.group == "batch" and request.resource.plural == "jobs"
        if policy is None:
            policy = "Orphan" if is_job else "Background"
        if policy != "Orphan":
            return
        key = (request.resource, request.namespace, request.name)
        if key not in self._objects or self._objects[key].deleted:
            return
        uid = self._objects[key].raw["metadata"].get("uid")
        for dkey, raw in list(self.live(kmock.resource("", "v1", "pods"), request.namespace)):
            refs = raw["metadata"].get("ownerReferences") or []
            if any(r.get("uid") == uid for r in refs):
                new = copy.deepcopy(raw)
                new["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                await self.replace_object(dkey, new)

    async def _serve_replace(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        key = (request.resource, request.namespace, request.name)
        async with self._lock:
            if key not in self._objects or self._objects[key].deleted:
                return await self._render_error(kmock.KubernetesObjectNotFoundError())
            old = self._objects[key].raw
            data = copy.deepcopy(request.data)
            meta = data.setdefault("metadata", {})
            for field in ("uid", "creationTimestamp", "namespace", "name"):
                if field in old.get("metadata", {}):
                    meta[field] = old["metadata"][field]
            if request.subresource == "status":  # only status changes through /status
                data = dict(copy.deepcopy(old), status=data.get("status"))
            elif "status" in old and "status" not in data:
                data["status"] = old["status"]
            data["metadata"]["resourceVersion"] = self.next_rv()
            self._objects[key].create(data)
            raw = self._objects[key].raw
            await self._buses[request.resource].put({"type": "MODIFIED", "object": raw})
        return aiohttp.web.json_response(raw)

    async def _serve_delete_collection(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        params = dict(request.params)
        gone = []
        for key, raw in self.live(request.resource, request.namespace):
            if selects(params, raw):
                gone.append(raw)
                await self.remove_object(key)
        return aiohttp.web.json_response({"kind": "List", "apiVersion": "v1", "metadata": {}, "items": gone})

    async def _serve_list(self, request: rendering.Request) -> rendering.Payload:
        from .apisemantics import paginate

        result = await super()._serve_list(request)
        params = dict(request.params)
        assert isinstance(result, dict)
        result["items"] = [obj for obj in result["items"] if selects(params, obj)]
        result["metadata"] = {"resourceVersion": self.next_rv()}
        return paginate(result, params)

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[rendering.Payload]:
        from .apisemantics import watch_from

        params = dict(request.params)
        timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
        since = str(params.get("resourceVersion") or "")
        if since and since != "0":
            stream = watch_from(self, request, int(since))
        else:
            stream = super()._serve_watch(request)
        try:
            async with asyncio.timeout(timeout):
                async for event in stream:
                    if isinstance(event, dict) and event.get("type") != "ERROR" and \
                            not selects(params, event.get("object") or {}):
                        continue
                    yield event
        except TimeoutError:
            return
        finally:
            await stream.aclose()

    async def _serve_log(self, request: rendering.Request) -> rendering.Payload:
        m = LOG_PATH.match(request.url.path)
        assert m is not None
        if self.log_source is None:
            raise kmock.KubernetesError(status=400, reason="BadRequest", message="no kubelet in this harness")
        return await self.log_source(m["ns"], m["name"], dict(request.params))
