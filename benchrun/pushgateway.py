"""The Pushgateway's HTTP side: where a request goes, with which credentials, and its errors.

A gateway behind basic auth (its ``--web.config.file``) gets the credentials from the URL's
``user:password@`` (percent-encoded; the URL may leave out ``http://``, as prometheus_client
allows) or from ``$BENCHRUN_PUSHGATEWAY_USERNAME`` and ``_PASSWORD``; the URL shown in records,
logs and errors never carries them. A URL whose password cannot be told from its host (an
unencoded ``/``, ``?`` or ``#`` before the ``@``) is refused without being shown, and every
error a request can meet is a :class:`BenchrunError` (the run's hot metrics are then not
pushed, said in a condition, never the run's failure).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.exposition import basic_auth_handler, default_handler

from benchrun.errors import BenchrunError
from benchrun.urlsafe import redact, split

PUSHGATEWAY_ENV = "BENCHRUN_PUSHGATEWAY_URL"
PUSHGATEWAY_USER_ENV = "BENCHRUN_PUSHGATEWAY_USERNAME"
PUSHGATEWAY_PASSWORD_ENV = "BENCHRUN_PUSHGATEWAY_PASSWORD"


@dataclass(frozen=True)
class Gateway:
    """Where to send a request (the URL without user:password) and how (basic auth or none)."""

    url: str
    credentials: tuple[str, str] | None

    def handler(self) -> Any:
        if self.credentials is None:
            return default_handler
        user, password = self.credentials

        def with_auth(url: str, method: str, timeout: float | None, headers: list, data: bytes) -> Any:
            return basic_auth_handler(url, method, timeout, headers, data, user, password)
        return with_auth

    def get(self, path: str, timeout: float) -> bytes:
        req = urllib.request.Request(self.url.rstrip("/") + path)
        if self.credentials is not None:
            token = base64.b64encode(":".join(self.credentials).encode("utf-8")).decode("ascii")
            req.add_header("Authorization", f"Basic {token}")
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.read()


def gateway(url: str) -> Gateway:
    """The URL parsed once: its user:password@ (percent-decoded), else $BENCHRUN_PUSHGATEWAY_USERNAME
    and _PASSWORD, and the URL without them (``http://`` added where it has no http(s) scheme, as
    prometheus_client does). BenchrunError, never naming the URL, when it cannot be used."""
    parts = split(url.strip())
    if parts is None:
        raise BenchrunError(
            f"{PUSHGATEWAY_ENV} (or the gateway URL given) has an '@' after a '/', '?' or '#', so its "
            "user:password@ cannot be told from its host: percent-encode the password (# as %23, / as %2F, "
            f"? as %3F, @ as %40) or put the credentials in {PUSHGATEWAY_USER_ENV} and {PUSHGATEWAY_PASSWORD_ENV}")
    scheme, userinfo, hostport, rest = parts
    if scheme.lower() not in ("http", "https"):
        if scheme:
            raise BenchrunError(f"{PUSHGATEWAY_ENV} (or the gateway URL given) is a {scheme}:// URL; "
                                "give http(s)://host:port (or host:port)")
        scheme = "http"
    shown = f"{scheme}://{hostport}{rest}"
    try:
        parsed = urllib.parse.urlsplit(shown)
        parsed.port  # noqa: B018  (a port that is not a number raises here)
        host = parsed.hostname
    except ValueError:
        host = None
    if not host:
        raise BenchrunError(f"{PUSHGATEWAY_ENV} (or the gateway URL given) has no usable host[:port]; "
                            "give http(s)://host:port")
    if userinfo:
        user, _, password = userinfo.partition(":")
        creds: tuple[str, str] | None = (urllib.parse.unquote(user), urllib.parse.unquote(password))
    elif os.environ.get(PUSHGATEWAY_USER_ENV):
        creds = (os.environ[PUSHGATEWAY_USER_ENV], os.environ.get(PUSHGATEWAY_PASSWORD_ENV, ""))
    else:
        creds = None
    return Gateway(shown, creds)


def gateway_error(url: str, exc: BaseException) -> BenchrunError:
    if isinstance(exc, urllib.error.HTTPError):
        try:
            body = exc.read().decode("utf-8", "replace").strip()
        except Exception:  # the body is only for the message
            body = ""
        hint = (f" (a gateway behind basic auth: set {PUSHGATEWAY_USER_ENV} and {PUSHGATEWAY_PASSWORD_ENV})"
                if exc.code in (401, 403) else "")
        return BenchrunError(f"Pushgateway {shown_url(url)} refused the request: HTTP {exc.code} "
                             f"{body or exc.reason}{hint}")
    reason = getattr(exc, "reason", exc)
    return BenchrunError(
        f"Pushgateway {shown_url(url)} is unreachable ({reason}); check {PUSHGATEWAY_ENV} or unset it to "
        "write the textfile only"
    )


def shown_url(url: str) -> str:
    """The gateway's URL as records, logs and errors show it: :func:`gateway`'s, without credentials
    (the fail-closed :func:`redact` of it where it cannot be used)."""
    try:
        return gateway(url).url
    except BenchrunError:
        return redact(url)


# What a request to the gateway may raise: urllib's errors, sockets', and http.client's own
# (InvalidURL for a host or port it cannot use, BadStatusLine, ...), none of them the run's failure.
GATEWAY_ERRORS = (urllib.error.URLError, OSError, ValueError, http.client.HTTPException)


def gateway_groups(url: str, timeout: float) -> list[dict[str, Any]]:
    """The groups the Pushgateway holds (its ``/api/v1/metrics``)."""
    gw = gateway(url)
    try:
        doc = json.loads(gw.get("/api/v1/metrics", timeout).decode("utf-8"))
    except GATEWAY_ERRORS as exc:
        raise gateway_error(url, exc) from exc
    return [g for g in doc.get("data") or [] if isinstance(g, dict)]


def push_time(group: dict[str, Any]) -> float | None:
    """When the group was last pushed (the gateway's own ``push_time_seconds``), epoch seconds."""
    try:
        return float(group["push_time_seconds"]["metrics"][0]["value"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def expire_groups(url: str, job: str, older_than_s: float, now_s: float, *, keep_run_id: str,
                  timeout: float = 10.0) -> list[str]:
    """Delete ``job``'s groups last pushed more than ``older_than_s`` before ``now_s`` (the spec's
    ``hotMetrics.retentionDays``), never ``keep_run_id``'s; the run ids of the groups deleted.

    A group is never deleted by the gateway itself: before, every run's group stayed until
    ``benchrun delete``, counted against every later run's ``maxActiveSeries``, and once they filled
    the budget a new run published nothing."""
    gw = gateway(url)
    gone = []
    for group in gateway_groups(url, timeout):
        labels = group.get("labels") or {}
        when = push_time(group)
        if labels.get("job") != job or labels.get("run_id") in (None, keep_run_id) or when is None:
            continue
        if now_s - when <= older_than_s:
            continue
        delete_group(gw, url, job, labels, timeout)
        gone.append(str(labels["run_id"]))
    return gone


def delete_group(gw: Gateway, url: str, job: str, labels: dict[str, Any], timeout: float) -> dict[str, str]:
    """Delete the group ``labels`` names (its grouping key: every label but ``job``); the key."""
    from prometheus_client.exposition import delete_from_gateway

    key = {k: str(v) for k, v in labels.items() if k != "job"}
    try:
        delete_from_gateway(gw.url, job=job, grouping_key=key, timeout=timeout, handler=gw.handler())
    except GATEWAY_ERRORS as exc:
        raise gateway_error(url, exc) from exc
    return key


def expire_textfiles(directory: Path, older_than_s: float, *, keep: Path) -> list[str]:
    """Remove the ``*.prom`` files of ``directory`` not written for ``older_than_s`` (but ``keep``);
    the run ids removed. A node exporter serves every file there: old runs' series never aged out."""
    import time

    gone = []
    now = time.time()
    for p in sorted(directory.glob("*.prom")) if directory.is_dir() else []:
        try:
            if p != keep and now - p.stat().st_mtime > older_than_s:
                p.unlink()
                gone.append(p.stem)
        except FileNotFoundError:
            continue
    return gone
