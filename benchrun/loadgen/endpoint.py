"""Where requests go and what they carry: the endpoint URL, the request body and the HTTP head."""

from __future__ import annotations

import json
import os
import urllib.parse
from dataclasses import dataclass
from typing import Any

from benchrun.urlsafe import has_credentials, redact

USER_AGENT = "benchrun-loadgen/1"
APIS = ("completions", "chat")


class EndpointError(ValueError):
    """A URL the client cannot use; the message names it and the fix."""


@dataclass(frozen=True)
class Endpoint:
    """Where requests go: scheme, host, port and the POST path for the chosen API."""

    scheme: str
    host: str
    port: int
    path: str
    api: str
    base_path: str

    @classmethod
    def from_url(cls, url: str, api: str | None = None) -> "Endpoint":
        """``http://host:port[/prefix]``; ``/v1/completions`` or ``/v1/chat/completions`` appended
        for ``api`` (None: completions) unless the URL already ends with one, which then decides
        the API; an ``api`` given that the URL's path contradicts is refused (it was overridden
        silently)."""
        if has_credentials(url):
            # credentials in a URL would be sent nowhere and stored in every result's context; checked
            # first, before anything echoes the URL (an '@' after a '/', '?' or '#' hides the host, so
            # then the message shows none of it)
            raise EndpointError(
                f"URL {redact(url)!r} carries credentials (user:password@, or an '@' that may be part of "
                "them); remove them and put the API key in BENCHRUN_API_KEY (or OPENAI_API_KEY)"
            )
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise EndpointError(f"URL {url!r} is not http(s)://host[:port][/path]; give e.g. http://127.0.0.1:8000")
        if u.query or u.fragment:
            # requests go to the path alone; a query would be dropped silently (and kept in results)
            raise EndpointError(
                f"URL for host {u.hostname!r} has a query or fragment, which the load generator does not "
                "send; give scheme://host[:port][/path] (an API key goes in BENCHRUN_API_KEY)"
            )
        try:
            port = u.port or (443 if u.scheme == "https" else 80)
        except ValueError:
            raise EndpointError(f"URL {url!r} has an invalid port") from None
        path = u.path.rstrip("/")
        if api is not None and api not in APIS:
            raise EndpointError(f"api {api!r} is not one of {APIS}")
        named = "chat" if path.endswith("/chat/completions") else "completions" if path.endswith("/completions") else None
        if named is not None and api is not None and api != named:
            raise EndpointError(f"--api {api} conflicts with --url {url!r}, whose path names the {named} API; give the "
                                f"server's base URL (e.g. {u.scheme}://{u.netloc}) with --api {api}, or leave --api out "
                                "(in a suite: the parameters api and endpoint)")
        if named == "chat":
            api, full = "chat", path
            base = path[: -len("/chat/completions")]
        elif named == "completions":
            api, full = "completions", path
            base = path[: -len("/completions")]
        else:
            api = api or "completions"
            base = path if path.endswith("/v1") else path + "/v1"
            full = base + ("/chat/completions" if api == "chat" else "/completions")
        return cls(u.scheme, u.hostname, port, full, api, base)

    @property
    def models_path(self) -> str:
        """The ``/v1/models`` path next to the completions path."""
        return self.base_path + "/models"

    @property
    def authority(self) -> str:
        """``host:port`` as the Host header and URLs spell it (an IPv6 literal in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def display(self) -> str:
        """``scheme://host:port/path`` for logs (URLs with credentials are refused, so none here)."""
        return f"{self.scheme}://{self.authority}{self.path}"


def _api_key() -> str | None:
    # Secrets only from the environment, never logged.
    return os.environ.get("BENCHRUN_API_KEY") or os.environ.get("OPENAI_API_KEY") or None


def build_body(
    endpoint: Endpoint,
    model: str,
    prompt: str,
    max_tokens: int,
    *,
    ignore_eos: bool = True,
    include_usage: bool = True,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """The JSON body of one streaming request (vLLM-style ``ignore_eos`` when asked)."""
    body: dict[str, Any] = {"model": model, "max_tokens": int(max_tokens), "stream": True, "temperature": 0.0}
    if endpoint.api == "chat":
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    if ignore_eos:
        body["ignore_eos"] = True
    if extra:
        body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode()


def build_head(endpoint: Endpoint, method: str, path: str, body_len: int, headers: dict[str, str]) -> bytes:
    """An HTTP/1.1 request head (keep-alive) with ``headers`` added."""
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {endpoint.authority}",
        f"User-Agent: {USER_AGENT}",
        "Accept: text/event-stream",
        "Connection: keep-alive",
    ]
    if method == "POST":
        lines += ["Content-Type: application/json", f"Content-Length: {body_len}"]
    key = _api_key()
    if key:
        lines.append(f"Authorization: Bearer {key}")
    for k, v in headers.items():
        if "\r" in k or "\n" in k or "\r" in v or "\n" in v:
            raise ValueError(f"header {k!r} contains a line break")
        lines.append(f"{k}: {v}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

