"""A URL as it may be shown: its ``user:password@`` removed (for records, logs and errors).

Fail closed: a URL whose credentials cannot be told apart from the rest (an ``@`` after an
unencoded ``/``, ``?`` or ``#``, which ends the host part before the credentials do) shows as
``scheme://<redacted>``, never as what a parser happened to make of it. A URL without a scheme
(``user:password@host:port``, the form prometheus_client accepts) is read as if it had one.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


def split(url: str) -> tuple[str, str, str, str] | None:
    """``(scheme, userinfo, host[:port], rest)`` of ``url`` (scheme "" when it has none, userinfo
    "" when it carries none, rest the path, query and fragment), or None when an ``@`` stands
    after the host part: a password's unencoded ``/``, ``?`` or ``#`` (or an ``@`` in the path),
    where no reading can be sure which part is the password."""
    text = str(url)
    m = _SCHEME.match(text)
    scheme, body = (m.group(1), text[m.end():]) if m else ("", text)
    end = min((i for i in (body.find(c) for c in "/?#") if i >= 0), default=len(body))
    netloc, rest = body[:end], body[end:]
    if "@" in rest:
        return None
    userinfo, at, hostport = netloc.rpartition("@")
    return scheme, userinfo if at else "", hostport, rest


def has_credentials(url: str) -> bool:
    """Whether ``url`` carries a ``user:password@``, or an ``@`` that may be one (fail closed:
    an ``@`` is either in the host part, ending credentials, or after it, where it cannot be
    told from a password's)."""
    return "@" in str(url)


def redact(url: str) -> str:
    """``url`` without user:password, for records and logs (the host, port and path stay); when
    the credentials cannot be isolated, ``scheme://<redacted>`` (or ``<redacted>``)."""
    text = str(url)
    if "@" not in text:
        return text
    parts = split(text)
    if parts is None:
        m = _SCHEME.match(text)
        return f"{m.group(1)}://{REDACTED}" if m else REDACTED
    scheme, _userinfo, hostport, rest = parts
    return (f"{scheme}://" if scheme else "") + hostport + rest


def redact_in(text: str, *urls: str | None) -> str:
    """``text`` (another library's error message) with each of ``urls`` that carries credentials replaced
    by its :func:`redact` form, and any ``scheme://user:password@`` left in it shown as ``scheme://<redacted>@``
    (a client echoes the endpoint it could not reach, credentials and all)."""
    out = str(text)
    for url in urls:
        if url and has_credentials(url):
            out = out.replace(str(url), redact(str(url)))
    return re.sub(r"([A-Za-z][A-Za-z0-9+.\-]*://)[^\s/'\"]*@", rf"\1{REDACTED}@", out)
