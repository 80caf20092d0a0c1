"""A URL as it may be shown: its ``user:password@`` removed (for records, logs and errors)."""

from __future__ import annotations

from urllib.parse import urlparse


def redact(url: str) -> str:
    """``url`` without user:password, for records and logs (the host, port and path stay)."""
    p = urlparse(url)
    if "@" not in p.netloc:
        return url
    return p._replace(netloc=p.netloc.rsplit("@", 1)[1]).geturl()
