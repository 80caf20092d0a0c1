"""The Pushgateway's HTTP side: where a request goes, with which credentials, and its errors.

A gateway behind basic auth (its ``--web.config.file``) gets the credentials from the URL's
``user:password@`` (percent-encoded) or from ``$BENCHRUN_PUSHGATEWAY_USERNAME`` and
``_PASSWORD``; the URL shown in records, logs and errors never carries them.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from prometheus_client.exposition import basic_auth_handler, default_handler

from benchrun.errors import BenchrunError
from benchrun.urlsafe import redact

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
    """The URL's user:password@ (percent-decoded), else $BENCHRUN_PUSHGATEWAY_USERNAME and _PASSWORD."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.username is not None:
        creds = (urllib.parse.unquote(parsed.username), urllib.parse.unquote(parsed.password or ""))
    elif os.environ.get(PUSHGATEWAY_USER_ENV):
        creds = (os.environ[PUSHGATEWAY_USER_ENV], os.environ.get(PUSHGATEWAY_PASSWORD_ENV, ""))
    else:
        creds = None
    return Gateway(redact(url), creds)


def gateway_error(url: str, exc: BaseException) -> BenchrunError:
    if isinstance(exc, urllib.error.HTTPError):
        try:
            body = exc.read().decode("utf-8", "replace").strip()
        except Exception:  # the body is only for the message
            body = ""
        hint = (f" (a gateway behind basic auth: set {PUSHGATEWAY_USER_ENV} and {PUSHGATEWAY_PASSWORD_ENV})"
                if exc.code in (401, 403) else "")
        return BenchrunError(f"Pushgateway {redact(url)} refused the request: HTTP {exc.code} "
                             f"{body or exc.reason}{hint}")
    reason = getattr(exc, "reason", exc)
    return BenchrunError(
        f"Pushgateway {redact(url)} is unreachable ({reason}); check {PUSHGATEWAY_ENV} or unset it to "
        "write the textfile only"
    )


def gateway_groups(url: str, timeout: float) -> list[dict[str, Any]]:
    """The groups the Pushgateway holds (its ``/api/v1/metrics``)."""
    try:
        doc = json.loads(gateway(url).get("/api/v1/metrics", timeout).decode("utf-8"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise gateway_error(url, exc) from exc
    return [g for g in doc.get("data") or [] if isinstance(g, dict)]
