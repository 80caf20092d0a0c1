"""Storage failures (full disk, read-only file system, S3 unreachable) as benchrun's own one-line
message: what failed, where, and that nothing was half-written (every file benchrun writes goes
to a temporary name first and is renamed; every stored object is written once, whole)."""

from __future__ import annotations

import errno
from typing import Any

_ERRNO_TEXT = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EIO: "an I/O error",
}
NOTHING_HALF_WRITTEN = ("nothing was half-written (files are written to a temporary name and renamed, "
                        "stored objects written once and whole)")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def describe_storage_error(exc: BaseException, what: str = "writing benchrun's state") -> str | None:
    """benchrun's message for a storage failure anywhere in ``exc``'s chain, or None."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in _ERRNO_TEXT:
            where = f" at {e.filename}" if getattr(e, "filename", None) else ""
            return (f"{what} failed: {_ERRNO_TEXT[e.errno]}{where}; {NOTHING_HALF_WRITTEN}; "
                    "free space or fix the permissions, then run again")
        name = type(e).__name__
        text = str(e).lower()
        if name == "OperationalError" and ("disk is full" in text or "readonly" in text or "disk i/o" in text):
            kind = "the disk is full" if "full" in text else "the file system is read-only or failing"
            return (f"{what} failed: the Dagster instance database could not be written ({kind}); "
                    f"{NOTHING_HALF_WRITTEN}; free space, then run again")
        module = type(e).__module__ or ""
        if module.startswith(("botocore", "urllib3")) or name in ("EndpointConnectionError", "ConnectTimeoutError",
                                                                    "ReadTimeoutError"):
            return (f"{what} failed: the S3 artifact store is unreachable or refused the write ({name}: "
                    f"{str(e).splitlines()[0] if str(e) else name}); {NOTHING_HALF_WRITTEN}; "
                    "check the endpoint and credentials, then run again")
    return None


_ERRNO_IN_TEXT = __import__("re").compile(r"\[Errno (\d+)\][^:]*(?::\s*'([^']*)')?")


def describe_storage_text(cls_name: str, message: str, what: str = "writing benchrun's state") -> str | None:
    """The same message from an error known only by class name and text (a failed Dagster step's
    serialized error), e.g. ``OSError: [Errno 28] No space left on device: '/h/runs/x'``."""
    m = _ERRNO_IN_TEXT.search(message)
    if m and int(m.group(1)) in _ERRNO_TEXT:
        where = f" at {m.group(2)}" if m.group(2) else ""
        return (f"{what} failed: {_ERRNO_TEXT[int(m.group(1))]}{where}; {NOTHING_HALF_WRITTEN}; "
                "free space or fix the permissions, then run again")
    text = message.lower()
    if cls_name == "OperationalError" and ("disk is full" in text or "readonly" in text):
        kind = "the disk is full" if "full" in text else "the file system is read-only"
        return f"{what} failed: the Dagster instance database could not be written ({kind}); {NOTHING_HALF_WRITTEN}"
    return None


def storage_error(exc: BaseException, what: str) -> Any:
    """A BenchrunError for a storage failure (raise it ``from exc``), or None when it is not one."""
    from benchrun.errors import BenchrunError

    message = describe_storage_error(exc, what)
    return None if message is None else BenchrunError(message)
